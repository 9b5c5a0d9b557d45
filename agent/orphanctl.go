package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/orphans"
)

// Orphans is what the control socket needs of the task freeing orphaned
// addresses (*orphans.Releaser).
type Orphans interface {
	Jobs() []orphans.Job
	ReleaseNow(ctx context.Context, ip netip.Addr) (orphans.Outcome, error)
}

// SetOrphans sets what serves /orphans on the control socket. Call
// before Run.
func (a *Agent) SetOrphans(o Orphans) { a.orphans = o }

// OrphanItem is one element of GET /orphans on the control socket (and
// of `leasekeeper orphans --json`): an address whose lease a dhcpd reload
// dropped out of every range, which the region still holds. Unlike
// /status it names the lease's MAC.
type OrphanItem struct {
	IP       string     `json:"ip"`
	MAC      string     `json:"mac"`
	Ends     time.Time  `json:"ends"`
	State    string     `json:"state"`
	Reason   string     `json:"reason,omitempty"`
	Attempts int        `json:"attempts"`
	Next     *time.Time `json:"next"`
}

// OrphanRelease is the answer of POST /orphans/{ip}/release: how the
// checked release went (result freed, gone, other-mac, not-discovered,
// or the state the address stays in: busy, blocked, refused, retrying,
// unconfigured, unreleasable, unconfirmed, misdirected).
type OrphanRelease struct {
	IP     string `json:"ip"`
	Done   bool   `json:"done"`
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
}

func (a *Agent) serveOrphans(w http.ResponseWriter, _ *http.Request) {
	if a.orphans == nil {
		http.Error(w, "no orphaned addresses are tracked by this agent", http.StatusServiceUnavailable)
		return
	}
	out := []OrphanItem{}
	for _, j := range a.orphans.Jobs() {
		it := OrphanItem{IP: j.IP.String(), MAC: j.MAC, Ends: time.Unix(j.Ends, 0).UTC(), State: j.State,
			Reason: j.Reason, Attempts: j.Attempts}
		if !j.Next.IsZero() {
			t := j.Next.UTC()
			it.Next = &t
		}
		out = append(out, it)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) releaseOrphan(w http.ResponseWriter, r *http.Request) {
	if a.orphans == nil {
		http.Error(w, "no orphaned addresses are tracked by this agent", http.StatusServiceUnavailable)
		return
	}
	ip, err := netip.ParseAddr(r.PathValue("ip"))
	if err != nil {
		http.Error(w, fmt.Sprintf("%q is not an IP address", r.PathValue("ip")), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	out, err := a.orphans.ReleaseNow(ctx, ip)
	if err != nil {
		code := http.StatusInternalServerError
		if strings.HasPrefix(err.Error(), "no orphaned address") || errors.Is(err, context.Canceled) {
			code = http.StatusNotFound
		}
		http.Error(w, err.Error(), code)
		return
	}
	ev := a.log.Info().Str("ip", ip.String()).Str("result", out.Result).Str("reason", out.Reason)
	if p, ok := peerOf(r); ok {
		ev = ev.Uint32("caller_uid", p.UID).Int32("caller_pid", p.PID)
	}
	ev.Msg("orphaned address: release asked by an operator")
	writeJSON(w, http.StatusOK, OrphanRelease{IP: ip.String(), Done: out.Done, Result: out.Result, Reason: out.Reason})
}
