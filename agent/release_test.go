package agent

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestServeRelease goes through the agent's real handler and
// rackrelease.Release up to its checks: every case here is answered
// before an interface is chosen or a packet sent (the release itself is
// proven with the real dhcpd in internal/rackrelease's lab tests).
func TestServeRelease(t *testing.T) {
	leases := filepath.Join(t.TempDir(), "dhcpd.leases")
	ends := time.Now().Add(time.Hour).UTC().Format("2006/01/02 15:04:05")
	if err := os.WriteFile(leases, []byte("lease 203.0.113.100 {\n  ends 0 "+ends+";\n  binding state active;\n  hardware ethernet 02:00:00:00:00:01;\n  client-hostname \"c1\";\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.DHCPD.Leases = leases
	h := newAgent(t, cfg).handler()

	for _, tc := range []struct {
		name, method, path, body string
		remote                   string
		noHeader                 bool
		code                     int
		want                     *ReleaseReport
	}{
		{name: "other MAC", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:99"}`, code: 409,
			want: &ReleaseReport{IP: "203.0.113.100", MAC: "02:00:00:00:00:99", Refused: true,
				Error: "refusing to release 203.0.113.100 for 02:00:00:00:00:99: the lease belongs to another MAC (its lease is held by 02:00:00:00:00:01); nothing sent"}},
		{name: "no lease, unpadded MAC", method: "POST", path: "/leases/203.0.113.7/release", body: `{"mac":"2:0:0:0:0:1"}`, code: 409,
			want: &ReleaseReport{IP: "203.0.113.7", MAC: "02:00:00:00:00:01", Refused: true,
				Error: "refusing to release 203.0.113.7 for 02:00:00:00:00:01: no lease for this address in dhcpd's leases file; nothing sent"}},
		{name: "no header", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, noHeader: true, code: 403},
		{name: "remote client", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01"}`, remote: "203.0.113.9:4000", code: 403},
		{name: "IPv6", method: "POST", path: "/leases/2001:db8::1/release", body: `{"mac":"02:00:00:00:00:01"}`, code: 400},
		{name: "bad MAC", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00"}`, code: 400},
		{name: "unknown key", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01","force":true}`, code: 400},
		{name: "bad server", method: "POST", path: "/leases/203.0.113.100/release", body: `{"mac":"02:00:00:00:00:01","server":"x"}`, code: 400},
		{name: "GET", method: "GET", path: "/leases/203.0.113.100/release", code: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			r.RemoteAddr = "127.0.0.1:4000"
			if tc.remote != "" {
				r.RemoteAddr = tc.remote
			}
			if !tc.noHeader {
				r.Header.Set(ClientHeader, "test")
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
