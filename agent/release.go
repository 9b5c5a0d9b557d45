package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/internal/lograte"
	"github.com/leasekeeper/leasekeeper/release/rack"
)

// ReleaseRequest is the body of POST /leases/{ip}/release: release the
// lease of {ip} for a client that is gone, as `leasekeeper release --for
// IP --mac MAC` does. Interface and Server default as there.
type ReleaseRequest struct {
	MAC       string `json:"mac"`
	Interface string `json:"interface,omitempty"`
	Server    string `json:"server,omitempty"`
	DryRun    bool   `json:"dry_run,omitempty"`
	// NoProbe skips the ARP probe that refuses (in_use) an address a
	// host still answers for (rack.Options.NoProbe).
	NoProbe bool `json:"no_probe,omitempty"`
}

// ReleaseReport answers POST /leases/{ip}/release. Status: 200 released
// (or checked, for a dry run), 400 bad request, 409 refused (the lease is
// not active or not that MAC's, or something answers ARP for the
// address: nothing sent), 503 the leases file cannot be read now, 504 sent
// but dhcpd did not record the release in time, 500 anything else.
// Before the request is looked at (plain text, no report): 403 when
// release.token_file is not set (the endpoint is off) or the client is not
// on loopback, 401 without the right "Authorization: Bearer" token.
type ReleaseReport struct {
	IP        string `json:"ip"`
	MAC       string `json:"mac"`
	Hostname  string `json:"hostname"`
	Interface string `json:"interface"`
	Server    string `json:"server"`
	Sent      bool   `json:"sent"`
	Verified  bool   `json:"verified"`
	State     string `json:"state"`           // binding state dhcpd wrote, when verified
	Probe     string `json:"probe,omitempty"` // what the ARP probe before the release found
	Refused   bool   `json:"refused"`
	// Reason names the outcome for a program to act on (releaseOutcome):
	// "" released, or no_lease, not_active, mac_mismatch (refused:
	// nothing to release for that MAC), in_use (refused: a host answers
	// ARP for the address, the client's own MAC or another; the report's
	// error says which), unreadable (refused for now:
	// retry), interface (name the interface and server), unconfirmed
	// (sent, dhcpd did not record it in time), failed.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

// releaseOutcome is the HTTP status, ReleaseReport.Reason and whether
// the release was refused (nothing sent) for rack.Release's error.
func releaseOutcome(err error) (code int, reason string, refused bool) {
	var ref *rack.RefusedError
	var ifc *rack.InterfaceError
	switch {
	case err == nil:
		return http.StatusOK, "", false
	case errors.As(err, &ref):
		switch ref.Reason {
		case rack.ErrUnreadable:
			// A file dhcpd is still writing, most often: transient.
			return http.StatusServiceUnavailable, "unreadable", true
		case rack.ErrNoLease:
			return http.StatusConflict, "no_lease", true
		case rack.ErrNotActive:
			return http.StatusConflict, "not_active", true
		case rack.ErrMACMismatch:
			return http.StatusConflict, "mac_mismatch", true
		case rack.ErrInUse:
			return http.StatusConflict, "in_use", true
		}
		return http.StatusConflict, "refused", true
	case errors.As(err, &ifc):
		return http.StatusUnprocessableEntity, "interface", false
	case errors.Is(err, rack.ErrUnconfirmed):
		return http.StatusGatewayTimeout, "unconfirmed", false
	}
	return http.StatusInternalServerError, "failed", false
}

// releaseGate lets through requests to POST /leases/{ip}/release only
// with the bearer token in release.token_file: the endpoint makes dhcpd
// free any lease, the agent holds CAP_NET_RAW, and dhcpd.leases (which
// tells IPs and MACs) is world-readable, so being on loopback is no
// credential. An unset token_file disables the endpoint. The token is
// read once per configuration in force: when the handler is built (the
// listener's start) and at the first request after a reload (SIGHUP, or
// the token file changed: the agent follows it), which config.Parse has
// already checked.
type releaseGate struct {
	config func() *config.Config

	logs *lograte.Limiter // refusals are logged at most every 10s
	// busy holds the release in flight: each reads dhcpd's whole leases
	// file and may wait seconds for dhcpd's answer; a second one at
	// the same time is told to retry (503), not queued.
	busy chan struct{}

	mu  sync.Mutex
	cfg *config.Config // the configuration sum was read for
	sum [sha256.Size]byte
	err error
}

func newReleaseGate(cfg func() *config.Config) *releaseGate {
	g := &releaseGate{config: cfg, logs: lograte.New(10*time.Second, nil), busy: make(chan struct{}, 1)}
	g.token()
	return g
}

// token returns the configured token's SHA-256, or ok false when the
// endpoint is off.
func (g *releaseGate) token() (sum [sha256.Size]byte, path string, ok bool, err error) {
	cfg := g.config()
	path = cfg.Release.TokenFile
	if path == "" {
		return sum, "", false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg != cfg {
		tok, err := config.ReadReleaseToken(path)
		g.cfg, g.sum, g.err = cfg, sha256.Sum256([]byte(tok)), err
	}
	return g.sum, path, true, g.err
}

// releaseAuth wraps h with releaseGate's checks.
func (a *Agent) releaseAuth(g *releaseGate, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		want, path, on, err := g.token()
		switch {
		case !on:
			http.Error(w, "release on behalf is disabled: set release.token_file in the agent's configuration (a file, mode 0600, holding the bearer token requests must carry)", http.StatusForbidden)
			return
		case err != nil:
			if ok, left := g.logs.Allow("token-unreadable"); ok {
				a.log.Error().Err(err).Str("token_file", path).Int("not_logged_since_last", left).
					Msg("release on behalf refused: cannot read release.token_file")
			}
			http.Error(w, "release.token_file: cannot read the token; see the agent's log", http.StatusInternalServerError)
			return
		}
		// A request a proxy relayed is not a local caller's: MAAS's squid
		// on a region+rack host lets any client of a MAAS subnet reach
		// ports 1025-65535 and connects from loopback
		// (src/provisioningserver/templates/proxy/maas-proxy.conf.template:
		// "http_access allow localnet", no deny of localhost as a
		// destination); it strips X-Forwarded-For ("forwarded_for
		// delete") but adds Via, squid's default.
		for _, hd := range []string{"Via", "Forwarded", "X-Forwarded-For"} {
			if r.Header.Get(hd) != "" {
				if ok, left := g.logs.Allow("proxied"); ok {
					a.log.Warn().Str("remote", r.RemoteAddr).Str("header", hd).Str("value", r.Header.Get(hd)).Int("not_logged_since_last", left).
						Msg("release on behalf refused: the request came through a proxy")
				}
				http.Error(w, "release on behalf is refused through a proxy ("+hd+" header): ask the agent directly, from the rack itself", http.StatusForbidden)
				return
			}
		}
		scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " ")
		if !found || !strings.EqualFold(scheme, "Bearer") || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="leasekeeper"`)
			http.Error(w, "missing Authorization: Bearer <the token in release.token_file>", http.StatusUnauthorized)
			return
		}
		// Hashing first makes the comparison constant-time in the
		// token's length too.
		got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			if ok, left := g.logs.Allow("wrong-token"); ok {
				a.log.Warn().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Int("not_logged_since_last", left).
					Msg("release on behalf refused: wrong bearer token (logged at most every 10s; the others are counted in not_logged_since_last)")
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="leasekeeper", error="invalid_token"`)
			http.Error(w, "wrong bearer token", http.StatusUnauthorized)
			return
		}
		select {
		case g.busy <- struct{}{}:
			defer func() { <-g.busy }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "another release is in progress: retry in a second", http.StatusServiceUnavailable)
			return
		}
		h(w, r)
	}
}

// serveRelease is POST /leases/{ip}/release (loopback clients with
// ClientHeader and the bearer token only, see releaseGate: it makes
// dhcpd free a lease).
func (a *Agent) serveRelease(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(ClientHeader) == "" {
		http.Error(w, "missing "+ClientHeader+" header", http.StatusForbidden)
		return
	}
	var req ReleaseRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	bodyErr := dec.Decode(&req)
	opts, err := rack.Request{IP: r.PathValue("ip"), MAC: req.MAC, Server: req.Server, Interface: req.Interface}.Options()
	var bad *rack.RequestError
	switch {
	case errors.As(err, &bad) && bad.Field == "ip":
		http.Error(w, fmt.Sprintf("%q is not an IPv4 address", bad.Value), http.StatusBadRequest)
		return
	case bodyErr != nil:
		http.Error(w, "body: "+bodyErr.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	opts.DryRun, opts.NoProbe, opts.LeasesPath, opts.Now = req.DryRun, req.NoProbe, a.Config().DHCPD.Leases, a.now

	res, err := rack.Release(r.Context(), opts)
	rep := ReleaseReport{IP: opts.IP.String(), MAC: opts.MAC.String(), Hostname: res.Hostname, Interface: res.Interface,
		Probe: res.Probe, Sent: res.Sent, Verified: res.Verified}
	if res.Server.IsValid() {
		rep.Server = res.Server.String()
	}
	if res.Verified {
		rep.State = res.State.String()
	}
	code, reason, refused := releaseOutcome(err)
	rep.Reason, rep.Refused = reason, refused
	if err != nil {
		rep.Error = err.Error()
	}
	switch code {
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	case http.StatusUnprocessableEntity:
		rep.Error += ` (in the request's body: "interface", and "server" for dhcpd's address on it)`
	}
	ev := a.log.Info()
	if err != nil && !rep.Refused {
		ev = a.log.Warn().Err(err)
	}
	ev.Str("remote", r.RemoteAddr).Str("client", r.Header.Get(ClientHeader)).Bool("dry_run", req.DryRun).Str("probe", res.Probe).
		Str("ip", rep.IP).Str("mac", rep.MAC).Str("interface", rep.Interface).Bool("sent", rep.Sent).
		Bool("verified", rep.Verified).Bool("refused", rep.Refused).Str("reason", rep.Error).Msg("release on behalf requested")
	writeJSON(w, code, rep)
}
