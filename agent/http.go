package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/deliver"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
)

// StatusReport is the JSON of GET /status, which `leasekeeper status`
// prints. Keys are a contract; pointers are null when unknown (no status
// source wired, never delivered, no lag information).
type StatusReport struct {
	Version       string       `json:"version"`
	Ready         bool         `json:"ready"`
	Started       time.Time    `json:"started"`
	Time          time.Time    `json:"time"` // the agent's clock when it answered
	QueueDepth    *int         `json:"queue_depth"`
	LastDelivery  *time.Time   `json:"last_delivery"`
	DeadLetters   *int         `json:"deadletters"`
	LagSeconds    *float64     `json:"lag_seconds"`
	Tasks         []TaskReport `json:"tasks"`
	UptimeSeconds float64      `json:"uptime_seconds"`
	Mode          *ModeReport  `json:"mode"` // null before the reconciler has run
	// LeasesFile is the dhcpd.leases followed; null when no reconciler
	// is wired.
	LeasesFile *LeasesFileReport `json:"leases_file"`
	// LeasesFile6 and Mode6 are dhcpd.leases6's, followed by a second
	// reconciler; omitted when dhcpd.leases6 is not set.
	LeasesFile6 *LeasesFileReport `json:"leases_file6,omitempty"`
	Mode6       *ModeReport       `json:"mode6,omitempty"`
	Region      *RegionReport     `json:"region"` // null when no deliverer is wired
	// Held are events read from the hook socket or spool that wait, in
	// memory, for the outbox to store them (a full disk); their datagrams
	// stay in the socket. Null when no part can hold events.
	Held *HeldReport `json:"held"`
	// Unhealthy is why /healthz answers 503 ("" when it answers 200).
	Unhealthy string `json:"unhealthy"`
	// Orphans are the addresses whose lease a dhcpd reload dropped out of
	// every range, which the region still holds as observed, and why each
	// is not freed yet (agent/orphans). Null when no part frees them.
	Orphans []OrphanReport `json:"orphans"`
	// Pair is dhcpd's failover pair and the channel to the other
	// agent; null outside a pair.
	Pair *PairReport `json:"pair"`
	// MAASRack is the MAAS rack installed on this host whose values the
	// configuration's unset keys took (config.ParseOn); omitted when
	// there is none.
	MAASRack *RackReport `json:"maas_rack,omitempty"`
	// RestartPending are the keys a reload (SIGHUP, or a file the
	// configuration is built from that changed: MAAS enabling DHCPv6
	// makes dhcpd -6's files) gave values that take effect at a restart
	// only (RestartPending); omitted when none.
	RestartPending []string `json:"restart_pending,omitempty"`
}

// RackReport is the MAAS rack in StatusReport: its kind (deb, snap), the
// rackd.conf read, the keys whose values it gave and a sentence saying
// so.
type RackReport struct {
	Kind      string   `json:"kind"`
	RackdConf string   `json:"rackd_conf"`
	Keys      []string `json:"keys"`
	Summary   string   `json:"summary"`
}

// PairReport is StatusReport.Pair. States are dhcpd's failover states as
// its leases file last recorded them ("" before it wrote one); speaks
// says whose news this side's agent tells.
type PairReport struct {
	Peer         string `json:"peer"` // the failover peer declaration's name
	Role         string `json:"role"` // primary or secondary
	MyState      string `json:"my_state"`
	PartnerState string `json:"partner_state"`
	Speaks       string `json:"speaks"`
	// Channel is the channel to the agent of this peer's partner rack:
	// null without [pair] (each agent delivers alone), and in Others
	// without pair.partners (the one channel, pair.peer's, is the first
	// peer's).
	Channel *PairChannelReport `json:"channel"`
	// Others are the other failover peers dhcpd.conf's pools use (MAAS:
	// one per HA VLAN), each followed by its subnets' addresses.
	Others []PairReport `json:"others,omitempty"`
}

// PairChannelReport is the channel to the other agent of the pair
// (agent/pair): alone when that agent was silent for hold_max and this
// one delivers without waiting; heard when its last datagram came (null:
// none since start); waiting since when every due event has been held
// back for the peer's older news (null: none is).
type PairChannelReport struct {
	Peer    string     `json:"peer"`
	Alone   bool       `json:"alone"`
	Heard   *time.Time `json:"heard"`
	Waiting *time.Time `json:"waiting"`
}

// Pairer is optionally implemented by a Status: the failover pair.
type Pairer interface {
	PairReport() *PairReport
}

// OrphanReport is one address in StatusReport.Orphans (no MAC: /status
// discloses states only).
type OrphanReport struct {
	IP       string     `json:"ip"`
	State    string     `json:"state"` // waiting, unconfigured, retrying, busy, blocked, refused
	Reason   string     `json:"reason,omitempty"`
	Ends     time.Time  `json:"ends"` // the lease's end
	Attempts int        `json:"attempts"`
	Next     *time.Time `json:"next"` // null: at once, or (unconfigured) never
}

// Orphaner is optionally implemented by a Status: the orphaned addresses.
type Orphaner interface {
	OrphanReports() []OrphanReport
}

// HeldReport is StatusReport.Held: how many events wait and since when
// (null when none wait).
type HeldReport struct {
	Events int        `json:"events"`
	Since  *time.Time `json:"since"`
}

// Holder is a task that can hold events outside the outbox (the hook
// socket, while the outbox cannot store them).
type Holder interface {
	Held() (int, time.Time)
}

// RegionReport is how delivery to the region is going, in StatusReport
// (agent/deliver, Health): state is unknown (nothing sent yet), ok,
// outage (no answer: waiting, nothing lost), config (the agent's settings
// are wrong: wrong port, path or certificates; retried, never
// dead-lettered), failing (the region fails every event with 500) or
// waiting (the region's credential files are not there yet: nothing is
// sent). While there is a problem, error is what the agent saw, hint what
// to change, since when it began. Words says the state to an operator.
type RegionReport struct {
	State          string     `json:"state"`
	Error          string     `json:"error,omitempty"`
	Hint           string     `json:"hint,omitempty"`
	Since          *time.Time `json:"since,omitempty"`
	FailedAttempts int        `json:"failed_attempts,omitempty"`
	// Controller is the region controller in use, where region.other_urls
	// names others ("" where there is one).
	Controller string `json:"controller,omitempty"`
	// Waiting is the request awaiting the region's answer, once it has
	// waited a few seconds (a region slow or stuck applying it); null
	// otherwise.
	Waiting *RegionWaitReport `json:"waiting,omitempty"`
}

// RegionWords says a region state to an operator, the same wherever it
// is said.
type RegionWords struct {
	// Label starts status's region line; a problem's is in capitals.
	Label string
	// Summary is the state in a phrase: status's attention.
	Summary string
	// Detail follows the label: what the agent does meanwhile.
	Detail string
}

// regionWords says each of agent/deliver's states.
var regionWords = map[string]RegionWords{
	deliver.StateUnknown: {"nothing sent yet", "nothing sent yet", ""},
	deliver.StateOK:      {"ok", "ok", ""},
	deliver.StateOutage:  {"OUTAGE", "outage", "no answer, retrying (nothing is lost)"},
	deliver.StateConfig:  {"CONFIGURATION ERROR", "configuration error", "retrying, nothing is dead-lettered"},
	deliver.StateFailing: {"FAILING", "failing every event", "the region fails or refuses every event it was sent (one alone, on a quiet rack, until another gets through), retrying (nothing is dead-lettered)"},
	deliver.StateWaiting: {"WAITING", "waiting for its credential files", "the credential files are not there yet; nothing is sent (nothing is lost)"},
}

// Words says the state; one this build does not know (a newer agent's,
// read by an older status) as it is.
func (r *RegionReport) Words() RegionWords {
	if w, ok := regionWords[r.State]; ok {
		return w
	}
	return RegionWords{Label: r.State, Summary: r.State}
}

// Trouble reports whether the state needs the operator: any but ok and
// nothing sent yet.
func (r *RegionReport) Trouble() bool {
	return r.State != deliver.StateOK && r.State != deliver.StateUnknown
}

// RegionWaitReport is RegionReport.Waiting.
type RegionWaitReport struct {
	Since  time.Time `json:"since"`  // when it was sent
	Events int       `json:"events"` // how many it holds
}

// Regioner is optionally implemented by a Status: the delivery's health.
type Regioner interface {
	RegionReport() *RegionReport
}

// LeasesFileReport is StatusReport.LeasesFile: its path; while it does
// not exist, since when (null when it exists or was not looked for yet);
// while reading it fails, since when and the last error (null and
// omitted while it reads).
type LeasesFileReport struct {
	Path            string     `json:"path"`
	MissingSince    *time.Time `json:"missing_since"`
	UnreadableSince *time.Time `json:"unreadable_since"`
	ReadError       string     `json:"read_error,omitempty"`
}

// LeasesFiler is optionally implemented by a Status: the leases file.
type LeasesFiler interface {
	LeasesFileReport() *LeasesFileReport
}

// ModeReport is the reconciler's mode in StatusReport (see
// agent/reconcile, "Modes").
type ModeReport struct {
	Mode     string `json:"mode"`     // replacement, complement or hookless: in force
	Detected string `json:"detected"` // what dhcpd.conf says (differs when forced)
	Forced   bool   `json:"forced"`   // reconcile.mode set it
	Unsure   bool   `json:"unsure"`   // detection could not tell: complement, or Kept
	// Kept: dhcpd.conf could not be read now, and Mode is the mode last
	// detected for sure, not complement.
	Kept bool   `json:"kept,omitempty"`
	Why  string `json:"why"`
	// KeptBack counts events not sent because the region cannot take
	// them (no six-octet MAC: DHCPv6 clients whose DUID holds none).
	KeptBack int64 `json:"kept_back"`
}

// Moder is optionally implemented by a Status: the reconciler's mode.
type Moder interface {
	ModeReport() *ModeReport
}

// Follower6 is optionally implemented by a Status: dhcpd.leases6's
// reconciler, nil reports when there is none.
type Follower6 interface {
	LeasesFile6Report() *LeasesFileReport
	Mode6Report() *ModeReport
}

// TaskReport is one task in StatusReport: state is starting, ready or
// finished.
type TaskReport struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// DeadLetterReport is one element of GET /deadletters.
type DeadLetterReport struct {
	Seq    uint64           `json:"seq"`
	Time   time.Time        `json:"time"`   // when it was dead-lettered
	Reason string           `json:"reason"` // the region's answer
	Source string           `json:"source"` // hook, spool or file
	Event  event.RegionItem `json:"event"`  // what the region refused
}

// DeadLetterReports converts the store's dead letters to their JSON form.
func DeadLetterReports(ds []outbox.DeadLetter) []DeadLetterReport {
	out := make([]DeadLetterReport, 0, len(ds))
	for _, d := range ds {
		out = append(out, DeadLetterReport{Seq: d.Seq, Time: d.Time.UTC(), Reason: d.Reason,
			Source: d.Event.Source.String(), Event: d.Event.Item()})
	}
	return out
}

// ClientHeader must be present on POST /leases/{ip}/release: a web page
// cannot set it on a cross-origin request without a CORS preflight, which
// the agent never answers.
const ClientHeader = "X-Leasekeeper-Client"

// handler serves the TCP listener (metrics.listen), which anyone who can
// reach the port may use; it discloses counts and states only:
//
//	GET    /metrics                  Prometheus, from the injected registry
//	GET    /healthz                  200 "ok" once ready and no task is wedged, else 503
//	GET    /status                   StatusReport
//	POST   /leases/{ip}/release      release on behalf (release.go) (loopback, ClientHeader,
//	                                 bearer token of release.token_file; off when unset)
//
// /status and the release must name this machine in their Host header
// (hostGuard); /metrics and /healthz, which a remote Prometheus may scrape
// by any of the rack's names, need not.
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	names := localNames()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	mux.HandleFunc("GET /healthz", a.serveHealthz)
	mux.Handle("GET /status", hostGuard(http.HandlerFunc(a.serveStatus), names))
	mux.HandleFunc("/deadletters", a.deadLettersMoved)
	mux.HandleFunc("/deadletters/", a.deadLettersMoved)
	mux.Handle("POST /leases/{ip}/release", hostGuard(a.loopbackOnly(a.releaseAuth(newReleaseGate(a.Config), a.serveRelease)), names))
	return mux
}

// controlHandler serves the control socket (control.go), whose callers
// the kernel has checked:
//
//	GET    /healthz, /status         as on the TCP listener
//	GET    /deadletters              []DeadLetterReport
//	POST   /deadletters/{seq}/retry  requeue one; 204, 404
//	DELETE /deadletters/{seq}        drop one; 204, 404
//	GET    /orphans                  []OrphanItem (orphanctl.go)
//	POST   /orphans/{ip}/release     the checked release, now; OrphanRelease, 404
func (a *Agent) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.serveHealthz)
	mux.HandleFunc("GET /status", a.serveStatus)
	mux.HandleFunc("GET /deadletters", a.serveDeadLetters)
	mux.HandleFunc("POST /deadletters/{seq}/retry", a.changeDeadLetter(func(d DeadLetters, seq uint64) error {
		return d.RetryDeadLetter(seq)
	}))
	mux.HandleFunc("DELETE /deadletters/{seq}", a.changeDeadLetter(func(d DeadLetters, seq uint64) error {
		return d.DropDeadLetter(seq)
	}))
	mux.HandleFunc("GET /orphans", a.serveOrphans)
	mux.HandleFunc("POST /orphans/{ip}/release", a.releaseOrphan)
	return mux
}

// deadLettersMoved answers the dead-letter paths on the TCP listener,
// where they are no longer served: they disclose MACs and hostnames and
// change what reaches the region, so only the control socket's callers,
// whom the kernel knows, may use them.
func (a *Agent) deadLettersMoved(w http.ResponseWriter, _ *http.Request) {
	where := "the control socket (control.socket)"
	if p := a.Config().Control.Socket; p != "" {
		where = "the control socket " + p
	}
	http.Error(w, "dead letters are served on "+where+" only: use `leasekeeper deadletter`", http.StatusForbidden)
}

func (a *Agent) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !a.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "starting")
		return
	}
	// The same limit the watchdog uses would need its interval; a task
	// silent for a minute is wedged by any measure.
	if err := a.healthy(time.Minute); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Report builds what GET /status answers.
func (a *Agent) Report() StatusReport {
	now := a.now()
	started := time.Unix(0, a.started.Load())
	r := StatusReport{
		Version:       a.Version,
		Ready:         a.ready.Load(),
		Started:       started.UTC(),
		Time:          now.UTC(),
		UptimeSeconds: now.Sub(started).Seconds(),
		Tasks:         a.taskReport(),
	}
	r.RestartPending = a.RestartPending()
	if c := a.Config(); c.Rack != nil && len(c.RackKeys) > 0 {
		r.MAASRack = &RackReport{Kind: c.Rack.Kind, RackdConf: c.Rack.RackdConf, Keys: slices.Clone(c.RackKeys), Summary: c.Rack.Describe(c.RackKeys)}
	}
	for _, ts := range a.tasks {
		if h, ok := ts.task.(Holder); ok {
			if r.Held == nil {
				r.Held = &HeldReport{}
			}
			n, since := h.Held()
			r.Held.Events += n
			if !since.IsZero() && (r.Held.Since == nil || since.Before(*r.Held.Since)) {
				s := since.UTC()
				r.Held.Since = &s
			}
		}
	}
	if !r.Ready {
		r.Unhealthy = "starting"
	} else if err := a.healthy(time.Minute); err != nil {
		r.Unhealthy = err.Error()
	}
	if s := a.status; s != nil {
		depth, dead := s.Depth(), s.DeadLetterCount()
		r.QueueDepth, r.DeadLetters = &depth, &dead
		if t := s.LastDelivery(); !t.IsZero() {
			t = t.UTC()
			r.LastDelivery = &t
		}
		if g, ok := s.(Regioner); ok {
			r.Region = g.RegionReport()
		}
		if m, ok := s.(Moder); ok {
			r.Mode = m.ModeReport()
		}
		if l, ok := s.(LeasesFiler); ok {
			r.LeasesFile = l.LeasesFileReport()
		}
		if f, ok := s.(Follower6); ok {
			r.LeasesFile6, r.Mode6 = f.LeasesFile6Report(), f.Mode6Report()
		}
		if p, ok := s.(Pairer); ok {
			r.Pair = p.PairReport()
		}
		if o, ok := s.(Orphaner); ok {
			r.Orphans = o.OrphanReports()
		}
		if l, ok := s.(Lagger); ok {
			lag := 0.0
			if t := l.OldestPending(); !t.IsZero() {
				lag = max(now.Sub(t).Seconds(), 0)
			}
			r.LagSeconds = &lag
		}
	}
	return r
}

func (a *Agent) serveStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.Report())
}

func (a *Agent) serveDeadLetters(w http.ResponseWriter, _ *http.Request) {
	if a.dead == nil {
		http.Error(w, "dead letters are not available in this agent", http.StatusServiceUnavailable)
		return
	}
	ds, err := a.dead.DeadLetters()
	if err != nil {
		a.log.Error().Err(err).Msg("listing dead letters")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, DeadLetterReports(ds))
}

func (a *Agent) changeDeadLetter(op func(DeadLetters, uint64) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.dead == nil {
			http.Error(w, "dead letters are not available in this agent", http.StatusServiceUnavailable)
			return
		}
		seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("%q is not a dead letter's seq", r.PathValue("seq")), http.StatusBadRequest)
			return
		}
		switch err := op(a.dead, seq); {
		case errors.Is(err, outbox.ErrNotFound):
			http.Error(w, fmt.Sprintf("no dead letter %d", seq), http.StatusNotFound)
		case err != nil:
			a.log.Error().Err(err).Uint64("seq", seq).Str("op", r.Method).Msg("dead letter change failed")
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			ev := a.log.Info().Uint64("seq", seq).Str("op", opName(r.Method))
			if p, ok := peerOf(r); ok {
				ev = ev.Uint32("caller_uid", p.UID).Int32("caller_pid", p.PID)
			}
			ev.Msg("dead letter changed by operator")
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

func opName(method string) string {
	if method == http.MethodDelete {
		return "drop"
	}
	return "retry"
}

// loopbackOnly refuses clients that are not on this machine: the
// listener may be bound to every address for a remote Prometheus.
func (a *Agent) loopbackOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		ip, perr := netip.ParseAddr(host)
		if err != nil || perr != nil || !ip.Unmap().IsLoopback() {
			http.Error(w, "served to loopback clients only", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// hostGuard refuses a request whose Host header names anything but this
// machine: an IP address, "localhost" or a name under it, or this host's
// name as the system has it. A web page on another site that resolves its
// own name to 127.0.0.1 (DNS rebinding) sends its own name and is refused.
func hostGuard(h http.Handler, names []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !localHost(r.Host, names) {
			http.Error(w, "Host header does not name this machine", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// localNames are this machine's names for hostGuard.
func localNames() []string {
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, strings.ToLower(h))
	}
	return names
}

func localHost(hostport string, names []string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	for _, n := range names {
		if host == n || strings.HasSuffix(host, ".localhost") {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// newStdLog routes net/http's own error log to zerolog.
func newStdLog(log zerolog.Logger) *stdlog.Logger {
	return stdlog.New(log.With().Str("level", "warn").Logger(), "", 0)
}
