package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/rackrelease"
)

// ReleaseRequest is the body of POST /leases/{ip}/release: release the
// lease of {ip} for a client that is gone, as `leasekeeper release --for
// IP --mac MAC` does. Interface and Server default as there.
type ReleaseRequest struct {
	MAC       string `json:"mac"`
	Interface string `json:"interface,omitempty"`
	Server    string `json:"server,omitempty"`
	DryRun    bool   `json:"dry_run,omitempty"`
}

// ReleaseReport answers POST /leases/{ip}/release. Status: 200 released
// (or checked, for a dry run), 400 bad request, 409 refused (the lease is
// not active or not that MAC's: nothing sent), 504 sent but dhcpd did not
// record the release in time, 500 anything else.
type ReleaseReport struct {
	IP        string `json:"ip"`
	MAC       string `json:"mac"`
	Hostname  string `json:"hostname"`
	Interface string `json:"interface"`
	Server    string `json:"server"`
	Sent      bool   `json:"sent"`
	Verified  bool   `json:"verified"`
	State     string `json:"state"` // binding state dhcpd wrote, when verified
	Refused   bool   `json:"refused"`
	Error     string `json:"error,omitempty"`
}

// serveRelease is POST /leases/{ip}/release (loopback clients with
// ClientHeader only: it makes dhcpd free a lease).
func (a *Agent) serveRelease(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(ClientHeader) == "" {
		http.Error(w, "missing "+ClientHeader+" header", http.StatusForbidden)
		return
	}
	ip, err := netip.ParseAddr(r.PathValue("ip"))
	if err != nil || !ip.Is4() {
		http.Error(w, fmt.Sprintf("%q is not an IPv4 address", r.PathValue("ip")), http.StatusBadRequest)
		return
	}
	var req ReleaseRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	opts := rackrelease.Options{IP: ip, Interface: req.Interface, DryRun: req.DryRun,
		LeasesPath: a.Config().DHCPD.Leases, Now: a.now}
	norm, err := event.NormalizeMAC(req.MAC)
	if err == nil {
		opts.MAC, err = net.ParseMAC(norm)
	}
	if err != nil || len(opts.MAC) != 6 {
		http.Error(w, fmt.Sprintf("mac %q is not a 6-octet Ethernet address", req.MAC), http.StatusBadRequest)
		return
	}
	if req.Server != "" {
		if opts.Server, err = netip.ParseAddr(req.Server); err != nil || !opts.Server.Is4() {
			http.Error(w, fmt.Sprintf("server %q is not an IPv4 address", req.Server), http.StatusBadRequest)
			return
		}
	}

	res, err := rackrelease.Release(r.Context(), opts)
	rep := ReleaseReport{IP: ip.String(), MAC: opts.MAC.String(), Hostname: res.Hostname, Interface: res.Interface,
		Sent: res.Sent, Verified: res.Verified}
	if res.Server.IsValid() {
		rep.Server = res.Server.String()
	}
	if res.Verified {
		rep.State = res.State.String()
	}
	code := http.StatusOK
	var refused *rackrelease.RefusedError
	switch {
	case err == nil:
	case errors.As(err, &refused):
		code, rep.Refused = http.StatusConflict, true
	case errors.Is(err, rackrelease.ErrUnconfirmed):
		code = http.StatusGatewayTimeout
	default:
		code = http.StatusInternalServerError
	}
	if err != nil {
		rep.Error = err.Error()
	}
	ev := a.log.Info()
	if err != nil && !rep.Refused {
		ev = a.log.Warn().Err(err)
	}
	ev.Str("ip", rep.IP).Str("mac", rep.MAC).Str("interface", rep.Interface).Bool("sent", rep.Sent).
		Bool("verified", rep.Verified).Bool("refused", rep.Refused).Str("reason", rep.Error).Msg("release on behalf requested")
	writeJSON(w, code, rep)
}
