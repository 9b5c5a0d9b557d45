package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/release/rack"
)

// TestServeRelease goes through the agent's real handler and
// rack.Release up to its checks: every case here is answered
// before an interface is chosen or a packet sent (the release itself is
// proven with the real dhcpd in release/rack's lab tests).
func TestServeRelease(t *testing.T) {
	leases := filepath.Join(t.TempDir(), "dhcpd.leases")
	ends := time.Now().Add(time.Hour).UTC().Format("2006/01/02 15:04:05")
	if err := os.WriteFile(leases, []byte("lease 203.0.113.100 {\n  ends 0 "+ends+";\n  binding state active;\n  hardware ethernet 02:00:00:00:00:01;\n  client-hostname \"c1\";\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.DHCPD.Leases = leases
	cfg.Release.TokenFile = tokenFile(t, testToken+"\n")
	h := newAgent(t, cfg).handler()

	for _, tc := range []struct {
		name, method, path, body string
		remote                   string
		noHeader                 bool
		auth                     string // Authorization; "" = the right token
		code                     int
		want                     *ReleaseReport
	}{
		{name: "other MAC", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:99"}`, code: 409,
			want: &ReleaseReport{IP: "203.0.113.100", MAC: "02:00:00:00:00:99", Refused: true, Reason: "mac_mismatch",
				Error: "refusing to release 203.0.113.100 for 02:00:00:00:00:99: the lease belongs to another MAC (its lease is held by 02:00:00:00:00:01); nothing sent"}},
		{name: "no lease, unpadded MAC", method: "POST", path: "/leases/203.0.113.7/release", body: `{"mac":"2:0:0:0:0:1"}`, code: 409,
			want: &ReleaseReport{IP: "203.0.113.7", MAC: "02:00:00:00:00:01", Refused: true, Reason: "no_lease",
				Error: "refusing to release 203.0.113.7 for 02:00:00:00:00:01: no lease for this address in dhcpd's leases file (" + leases + "); nothing sent"}},
		{name: "no lease, MAC with dashes (as the CLI takes it)", method: "POST", path: "/leases/203.0.113.7/release", body: `{"mac":"02-00-00-00-00-01"}`, code: 409,
			want: &ReleaseReport{IP: "203.0.113.7", MAC: "02:00:00:00:00:01", Refused: true, Reason: "no_lease",
				Error: "refusing to release 203.0.113.7 for 02:00:00:00:00:01: no lease for this address in dhcpd's leases file (" + leases + "); nothing sent"}},
		{name: "no header", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, noHeader: true, code: 403},
		{name: "remote client", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, remote: "203.0.113.9:4000", code: 403},
		{name: "IPv6", method: "POST", path: "/leases/2001:db8::1/release", body: `{"mac":"02:00:00:00:00:01"}`, code: 400},
		{name: "bad MAC", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00"}`, code: 400},
		{name: "unknown key", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01","force":true}`, code: 400},
		{name: "bad server", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01","server":"x"}`, code: 400},
		{name: "GET", method: "GET", path: "/leases/203.0.113.100/release", code: 405},
		{name: "no token", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, auth: "-", code: 401},
		{name: "wrong token", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, auth: "Bearer " + testToken[:len(testToken)-1], code: 401},
		{name: "token longer", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, auth: "Bearer " + testToken + "2", code: 401},
		{name: "not bearer", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, auth: "Basic " + testToken, code: 401},
		{name: "bearer, no token", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, auth: "Bearer ", code: 401},
		{name: "remote client with token", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, remote: "203.0.113.9:4000", code: 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			r.RemoteAddr = "127.0.0.1:4000"
			r.Host = "127.0.0.1:9742" // httptest says example.com, which hostGuard refuses
			if tc.remote != "" {
				r.RemoteAddr = tc.remote
			}
			if !tc.noHeader {
				r.Header.Set(ClientHeader, "test")
			}
			switch tc.auth {
			case "":
				r.Header.Set("Authorization", "Bearer "+testToken)
			case "-":
			default:
				r.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tc.code)
			}
			if tc.want == nil {
				return
			}
			var got ReleaseReport
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, w.Body)
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("report (-want +got)\n%s", diff)
			}
		})
	}
}

// Release tokens, of release.token_file's length at least
// (config.MinReleaseToken).
const (
	testToken = "s3cret-s3cret-s3cret-s3cret-s3cret"
	oldToken  = "old-old-old-old-old-old-old-old-old"
	newToken  = "new-new-new-new-new-new-new-new-new"
)

// tokenFile writes a release.token_file, mode 0600.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "release.token")
	if err := os.WriteFile(p, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// postRelease sends a release request with a bearer token ("" = none)
// from loopback.
func postRelease(h http.Handler, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/leases/203.0.113.7/release", strings.NewReader(`{"mac":"02:00:00:00:00:01"}`))
	r.RemoteAddr = "127.0.0.1:4000"
	r.Host = "127.0.0.1:9742" // httptest says example.com, which hostGuard refuses
	r.Header.Set(ClientHeader, "test")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestServeReleaseDisabled: without release.token_file the endpoint
// frees nothing for anyone, and says which key turns it on.
func TestServeReleaseDisabled(t *testing.T) {
	h := newAgent(t, testConfig()).handler()
	for _, token := range []string{"", testToken} {
		w := postRelease(h, token)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "disabled: set release.token_file") {
			t.Errorf("token %q: %d %s, want 403 naming release.token_file", token, w.Code, w.Body)
		}
	}
}

// TestServeReleaseTokenReload: the token is read again when a reload
// puts a new configuration in force (the file's content alone changes
// nothing until then); a token file that cannot be read refuses all.
func TestServeReleaseTokenReload(t *testing.T) {
	leases := filepath.Join(t.TempDir(), "dhcpd.leases")
	if err := os.WriteFile(leases, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.DHCPD.Leases = leases
	cfg.Release.TokenFile = tokenFile(t, oldToken)
	a := newAgent(t, cfg)
	h := a.handler()
	if w := postRelease(h, oldToken); w.Code != http.StatusConflict { // through to the check: no lease
		t.Fatalf("old token: %d %s, want 409", w.Code, w.Body)
	}
	if err := os.WriteFile(cfg.Release.TokenFile, []byte(newToken), 0o600); err != nil {
		t.Fatal(err)
	}
	if w := postRelease(h, newToken); w.Code != http.StatusUnauthorized {
		t.Errorf("new token before the reload: %d %s, want 401", w.Code, w.Body)
	}

	next := *cfg
	if err := a.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if w := postRelease(h, oldToken); w.Code != http.StatusUnauthorized {
		t.Errorf("old token after the reload: %d %s, want 401", w.Code, w.Body)
	}
	if w := postRelease(h, newToken); w.Code != http.StatusConflict {
		t.Errorf("new token after the reload: %d %s, want 409", w.Code, w.Body)
	}

	gone := next
	gone.Release.TokenFile = filepath.Join(t.TempDir(), "none")
	if err := a.Reload(&gone); err != nil {
		t.Fatal(err)
	}
	if w := postRelease(h, newToken); w.Code != http.StatusInternalServerError {
		t.Errorf("unreadable token file: %d %s, want 500", w.Code, w.Body)
	}
}

// TestWrongTokensLoggedRarely: a caller guessing tokens gets 401 every
// time, and the log gets one line for the burst, not one per guess.
func TestWrongTokensLoggedRarely(t *testing.T) {
	cfg := testConfig()
	cfg.Release.TokenFile = tokenFile(t, testToken+"\n")
	var logs strings.Builder
	a, err := New(cfg, zerolog.New(&logs), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := a.handler()
	for i := range 200 {
		if w := postRelease(h, fmt.Sprintf("guess%d", i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %s", i, w.Code, w.Body)
		}
	}
	if n := strings.Count(logs.String(), "wrong bearer token"); n != 1 {
		t.Errorf("%d log lines for 200 wrong tokens in a burst, want 1:\n%s", n, logs.String())
	}
}

// TestServeReleaseGuards: a request a proxy relayed is refused before
// the token is weighed (MAAS's squid on a region+rack host connects from
// loopback for any client on a MAAS subnet, adding Via:
// src/provisioningserver/templates/proxy/maas-proxy.conf.template);
// a second release while one is in flight is told to retry (503,
// Retry-After), not queued behind it; and what is freed names who asked.
func TestServeReleaseGuards(t *testing.T) {
	leases := filepath.Join(t.TempDir(), "dhcpd.leases")
	if err := os.WriteFile(leases, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.DHCPD.Leases = leases
	cfg.Release.TokenFile = tokenFile(t, testToken+"\n")
	var logs strings.Builder
	a, err := New(cfg, zerolog.New(&logs), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := newReleaseGate(a.Config)
	h := a.releaseAuth(g, a.serveRelease)
	post := func(hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/leases/203.0.113.7/release", strings.NewReader(`{"mac":"02:00:00:00:00:01"}`))
		r.SetPathValue("ip", "203.0.113.7")
		r.RemoteAddr = "127.0.0.1:4000"
		r.Header.Set(ClientHeader, "orchestrator-7")
		r.Header.Set("Authorization", "Bearer "+testToken)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h(w, r)
		return w
	}
	for _, hd := range []string{"Via", "Forwarded", "X-Forwarded-For"} {
		if w := post(hd, "1.1 squid"); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "through a proxy") {
			t.Errorf("%s: %d %s, want 403 saying the proxy is refused", hd, w.Code, w.Body)
		}
	}
	g.busy <- struct{}{} // a release in flight
	if w := post(); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("while another runs: %d %s (Retry-After %q), want 503 with Retry-After", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	<-g.busy
	if w := post(); w.Code != http.StatusConflict { // through to the check: no lease
		t.Fatalf("alone: %d %s, want 409", w.Code, w.Body)
	}
	if len(g.busy) != 0 {
		t.Error("the release left the gate busy")
	}
	if !strings.Contains(logs.String(), `"client":"orchestrator-7"`) || !strings.Contains(logs.String(), `"remote":"127.0.0.1:4000"`) {
		t.Errorf("the release's log names neither the client nor the remote:\n%s", logs.String())
	}
}

// TestReleaseOutcome: the status and reason a caller acts on, for each
// outcome of rack.Release: a refusal for want of a lease of that MAC is
// final (409), a file dhcpd is still writing is not (503), a choice of
// interface is the caller's to make (422).
func TestReleaseOutcome(t *testing.T) {
	refused := func(why error) error { return &rack.RefusedError{Reason: why} }
	for _, tc := range []struct {
		err     error
		code    int
		reason  string
		refused bool
	}{
		{nil, 200, "", false},
		{refused(rack.ErrNoLease), 409, "no_lease", true},
		{refused(rack.ErrNotActive), 409, "not_active", true},
		{refused(rack.ErrMACMismatch), 409, "mac_mismatch", true},
		{refused(rack.ErrUnreadable), 503, "unreadable", true},
		{refused(rack.ErrInUse), 409, "in_use", true},
		{fmt.Errorf("release: %w", &rack.InterfaceError{}), 422, "interface", false},
		{fmt.Errorf("release: %w", rack.ErrUnconfirmed), 504, "unconfirmed", false},
		{errors.New("socket: operation not permitted"), 500, "failed", false},
	} {
		code, reason, ref := releaseOutcome(tc.err)
		if code != tc.code || reason != tc.reason || ref != tc.refused {
			t.Errorf("%v: %d %q %t, want %d %q %t", tc.err, code, reason, ref, tc.code, tc.reason, tc.refused)
		}
	}
}
