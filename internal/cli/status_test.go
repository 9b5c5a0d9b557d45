package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
)

const statusJSON = `{
  "version": "1.2.3",
  "ready": true,
  "started": "2026-11-29T09:00:00Z",
  "time": "2026-11-29T12:00:00Z",
  "queue_depth": 12,
  "last_delivery": "2026-11-29T11:59:57Z",
  "deadletters": 0,
  "lag_seconds": 1.5,
  "tasks": [{"name": "hooksock", "state": "ready"}, {"name": "http", "state": "ready"}],
  "uptime_seconds": 10800
}
`

// statusServer serves /status as a running agent would.
func statusServer(t *testing.T, body string, code int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" || r.Method != "GET" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestStatus(t *testing.T) {
	srv := statusServer(t, statusJSON, 200)
	out, stderr, code := run(t, "status", "--url", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `agent          ready (version 1.2.3, up 3h0m0s)
queue depth    12
last delivery  2026-11-29T11:59:57Z (3s ago)
dead letters   0
lag            1.5s
parts          hooksock ready, http ready
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// --json is the agent's answer as it is; host:port works as --url.
	out, _, code = run(t, "status", "--json", "--url", strings.TrimPrefix(srv.URL, "http://"))
	if code != 0 || out != statusJSON {
		t.Errorf("exit %d, --json output:\n%s", code, out)
	}
}

// TestStatusAttention: status exits 3 when the agent's answer holds
// something the operator must act on, naming it on stderr, with --json
// too; 0 when nothing (a cold review: it exited 0 whatever the answer).
func TestStatusAttention(t *testing.T) {
	healthy := `"version":"1.2.3","ready":true,"started":"2026-11-29T09:00:00Z","time":"2026-11-29T12:00:00Z","queue_depth":0,"last_delivery":null,"lag_seconds":0,"tasks":[],"uptime_seconds":10800`
	for _, tc := range []struct{ name, extra, want string }{
		{"healthy", `"deadletters":0,"region":{"state":"ok"},"held":{"events":0},"leases_file":{"path":"/l","missing_since":null},"unhealthy":""`, ""},
		{"region unknown yet", `"deadletters":0,"region":{"state":"unknown"}`, ""},
		{"dead letters", `"deadletters":3`, "3 dead letters"},
		{"region outage", `"deadletters":0,"region":{"state":"outage"}`, "region outage"},
		{"region config", `"deadletters":0,"region":{"state":"config"}`, "region configuration error"},
		{"region failing", `"deadletters":0,"region":{"state":"failing"}`, "region failing every event"},
		{"region waiting", `"deadletters":0,"region":{"state":"waiting"}`, "region waiting for its credential files"},
		{"region in a newer agent's state", `"deadletters":0,"region":{"state":"pondering"}`, "region pondering"},
		{"held", `"deadletters":0,"held":{"events":7,"since":"2026-11-29T11:59:00Z"}`, "7 events held"},
		{"leases file missing", `"deadletters":0,"leases_file":{"path":"/l","missing_since":"2026-11-29T11:55:00Z"}`, "the leases file does not exist"},
		{"leases file unreadable", `"deadletters":0,"leases_file":{"path":"/l","missing_since":null,"unreadable_since":"2026-11-29T11:55:00Z","read_error":"denied"}`, "the leases file cannot be read"},
		{"unhealthy", `"deadletters":0,"unhealthy":"the reconciler made no progress for 2m0s"`, "unhealthy: the reconciler made no progress"},
	} {
		srv := statusServer(t, "{"+healthy+","+tc.extra+"}", 200)
		for _, args := range [][]string{{"status", "--url", srv.URL}, {"status", "--json", "--url", srv.URL}} {
			_, stderr, code := run(t, args...)
			want := 0
			if tc.want != "" {
				want = ExitAttention
			}
			if code != want || !strings.Contains(stderr, tc.want) || (tc.want == "") != (stderr == "") {
				t.Errorf("%s: %q: exit %d, stderr %q; want %d and %q", tc.name, args, code, stderr, want, tc.want)
			}
		}
	}
}

// TestStatusRegionProblem: a configuration error is shown with what to
// change (agent/deliver words it), how long it has lasted and the last
// error.
func TestStatusRegionProblem(t *testing.T) {
	srv := statusServer(t, `{"version":"1.2.3","ready":true,"started":"2026-11-29T09:00:00Z","time":"2026-11-29T12:00:00Z",
		"queue_depth":40,"last_delivery":null,"deadletters":0,"lag_seconds":120,"tasks":[],"uptime_seconds":10800,
		"region":{"state":"config","error":"HTTP 403: {\"detail\":\"Client certificate required.\"}",
		"hint":"the region wants a client certificate: set region.cert_file and region.key_file","since":"2026-11-29T11:58:00Z","failed_attempts":9}}`, 200)
	out, _, code := run(t, "status", "--url", srv.URL)
	want := `agent          ready (version 1.2.3, up 3h0m0s)
region         CONFIGURATION ERROR for 2m0s (9 attempts): retrying, nothing is dead-lettered
               the region wants a client certificate: set region.cert_file and region.key_file
               last error: HTTP 403: {"detail":"Client certificate required."}
queue depth    40
last delivery  never
dead letters   0
lag            2m0s
`
	if diff := cmp.Diff(want, out); code != ExitAttention || diff != "" {
		t.Errorf("exit %d (-want +got):\n%s", code, diff)
	}
}

// TestStatusRegionWaiting: a request the region has not answered for a
// while shows under an "ok" region (its last answer's state).
func TestStatusRegionWaiting(t *testing.T) {
	srv := statusServer(t, `{"version":"1.2.3","ready":true,"started":"2026-11-29T09:00:00Z","time":"2026-11-29T12:00:00Z",
		"queue_depth":17,"last_delivery":"2026-11-29T11:58:51Z","deadletters":0,"lag_seconds":69,"tasks":[],"uptime_seconds":10800,
		"region":{"state":"ok","waiting":{"since":"2026-11-29T11:58:51Z","events":17}}}`, 200)
	out, _, code := run(t, "status", "--url", srv.URL)
	want := `agent          ready (version 1.2.3, up 3h0m0s)
region         ok
               no answer yet to a request of 17 events sent 1m9s ago: the region is slow or stuck applying it; waiting, not sending it again before the answer timeout (5m)
queue depth    17
last delivery  2026-11-29T11:58:51Z (1m9s ago)
dead letters   0
lag            1m9s
`
	if diff := cmp.Diff(want, out); code != 0 || diff != "" {
		t.Errorf("exit %d (-want +got):\n%s", code, diff)
	}
}

// TestStatusRegionController: with several region controllers
// (region.other_urls), the one in use.
func TestStatusRegionController(t *testing.T) {
	srv := statusServer(t, `{"version":"1.2.3","ready":true,"started":"2026-11-29T09:00:00Z","time":"2026-11-29T12:00:00Z",
		"queue_depth":0,"last_delivery":"2026-11-29T11:59:59Z","deadletters":0,"lag_seconds":0,"tasks":[],"uptime_seconds":10800,
		"region":{"state":"ok","controller":"https://region2:5242/MAAS/a/v3internal/leases"}}`, 200)
	out, _, code := run(t, "status", "--url", srv.URL)
	want := "region         ok\n               controller in use: https://region2:5242/MAAS/a/v3internal/leases\nqueue depth"
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, output lacks %q:\n%s", code, want, out)
	}
}

// quietHead is status's first lines for an agent that is ready with
// nothing queued, as the tests below answer.
const quietHead = `agent          ready (version 1.2.3, up 3h0m0s)
queue depth    0
last delivery  never
dead letters   0
lag            0s
`

// TestStatusLeasesFile: the leases file followed, and a missing or
// unreadable one with how long it has been so and what to check.
func TestStatusLeasesFile(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
		code             int
	}{
		{"exists", `{"path":"/var/lib/dhcp/dhcpd.leases","missing_since":null}`,
			"leases file    /var/lib/dhcp/dhcpd.leases\n", 0},
		{"missing", `{"path":"/var/lib/dhcp/dhcpd.leases","missing_since":"2026-11-29T11:55:00Z"}`,
			"leases file    /var/lib/dhcp/dhcpd.leases does not exist (for 5m0s): dhcpd has not written it, or dhcpd.leases in the configuration names a file dhcpd does not write\n", ExitAttention},
		{"unreadable", `{"path":"/var/lib/dhcp/dhcpd.leases","missing_since":null,"unreadable_since":"2026-11-29T11:58:00Z","read_error":"open /var/lib/dhcp/dhcpd.leases: permission denied"}`,
			"leases file    /var/lib/dhcp/dhcpd.leases cannot be read (for 2m0s): open /var/lib/dhcp/dhcpd.leases: permission denied; synthesised events are held until it reads (the agent's user must be able to read it)\n", ExitAttention},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := statusServer(t, `{"version":"1.2.3","ready":true,"started":"2026-11-29T09:00:00Z","time":"2026-11-29T12:00:00Z",
				"queue_depth":0,"last_delivery":null,"deadletters":0,"lag_seconds":0,"tasks":[],"uptime_seconds":10800,
				"leases_file":`+tc.file+`}`, 200)
			out, _, code := run(t, "status", "--url", srv.URL)
			want := quietHead + tc.want
			if diff := cmp.Diff(want, out); code != tc.code || diff != "" {
				t.Errorf("exit %d (-want +got):\n%s", code, diff)
			}
		})
	}
}

// TestStatusLeasesFile6: an agent following dhcpd.leases6 too shows that
// file and its reconciler's mode after dhcpd.leases's, and a missing one
// needs attention as dhcpd.leases's does.
func TestStatusLeasesFile6(t *testing.T) {
	srv := statusServer(t, `{"version":"1.2.3","ready":true,"started":"2026-11-29T09:00:00Z","time":"2026-11-29T12:00:00Z",
		"queue_depth":0,"last_delivery":null,"deadletters":0,"lag_seconds":0,"tasks":[],"uptime_seconds":10800,
		"leases_file":{"path":"/var/lib/maas/dhcp/dhcpd.leases","missing_since":null},
		"mode":{"mode":"replacement","detected":"replacement","forced":false,"unsure":false,"why":"dhcpd.conf runs leasekeeper-hook","kept_back":0},
		"leases_file6":{"path":"/var/lib/maas/dhcp/dhcpd6.leases","missing_since":"2026-11-29T11:59:00Z"},
		"mode6":{"mode":"hookless","detected":"hookless","forced":false,"unsure":false,"why":"dhcpd6.conf runs no hook","kept_back":2}}`, 200)
	out, stderr, code := run(t, "status", "--url", srv.URL)
	want := quietHead + `leases file    /var/lib/maas/dhcp/dhcpd.leases
mode           replacement
               dhcpd.conf runs leasekeeper-hook
leases file6   /var/lib/maas/dhcp/dhcpd6.leases does not exist (for 1m0s): dhcpd has not written it, or dhcpd.leases6 in the configuration names a file dhcpd does not write
mode6          hookless
               dhcpd6.conf runs no hook
kept back6     2 events with no MAC the region can take (DHCPv6 DUIDs without one; see the log)
`
	if diff := cmp.Diff(want, out); code != ExitAttention || diff != "" {
		t.Errorf("exit %d (-want +got):\n%s", code, diff)
	}
	if !strings.Contains(stderr, "the DHCPv6 leases file does not exist") {
		t.Errorf("stderr %q does not name the DHCPv6 leases file", stderr)
	}
}

// TestStatusModeLine: the mode line says whether the mode was forced, taken
// for lack of a readable dhcpd.conf (complement), or kept from an earlier
// sure detection while dhcpd.conf is unreadable (not "the safe side").
func TestStatusModeLine(t *testing.T) {
	for _, tc := range []struct{ name, mode, want string }{
		{"detected", `{"mode":"replacement","detected":"replacement","forced":false,"unsure":false,"why":"dhcpd.conf runs maas-dhcp-helper","kept_back":0}`,
			"mode           replacement\n               dhcpd.conf runs maas-dhcp-helper\n"},
		{"forced", `{"mode":"hookless","detected":"replacement","forced":true,"unsure":false,"why":"reconcile.mode","kept_back":0}`,
			"mode           hookless (forced by reconcile.mode; detected replacement)\n               reconcile.mode\n"},
		{"unsure", `{"mode":"complement","detected":"complement","forced":false,"unsure":true,"why":"cannot read dhcpd.conf","kept_back":0}`,
			"mode           complement (unsure: the safe side)\n               cannot read dhcpd.conf\n"},
		{"kept", `{"mode":"replacement","detected":"replacement","forced":false,"unsure":true,"kept":true,"why":"cannot read dhcpd.conf; keeping the mode last detected for sure, replacement","kept_back":0}`,
			"mode           replacement (unsure now: dhcpd.conf unreadable; kept, the mode last detected for sure)\n               cannot read dhcpd.conf; keeping the mode last detected for sure, replacement\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := statusServer(t, `{"version":"1.2.3","ready":true,"started":"2026-11-29T09:00:00Z","time":"2026-11-29T12:00:00Z",
				"queue_depth":0,"last_delivery":null,"deadletters":0,"lag_seconds":0,"tasks":[],"uptime_seconds":10800,
				"mode":`+tc.mode+`}`, 200)
			out, _, code := run(t, "status", "--url", srv.URL)
			want := quietHead + tc.want
			if diff := cmp.Diff(want, out); code != 0 || diff != "" {
				t.Errorf("exit %d (-want +got):\n%s", code, diff)
			}
		})
	}
}

func TestStatusUnknowns(t *testing.T) {
	srv := statusServer(t, `{"version":"dev","ready":false,"started":"2026-11-29T12:00:00Z","time":"2026-11-29T12:00:00.2Z",
		"queue_depth":null,"last_delivery":null,"deadletters":null,"lag_seconds":null,"tasks":[{"name":"outbox","state":"starting"}],"uptime_seconds":0.2}`, 200)
	out, _, code := run(t, "status", "--url", srv.URL)
	want := `agent          starting (version dev, up 200ms)
queue depth    unknown
last delivery  unknown
dead letters   unknown
lag            unknown
parts          outbox starting
`
	if diff := cmp.Diff(want, out); code != ExitAttention || diff != "" {
		t.Errorf("exit %d (-want +got):\n%s", code, diff)
	}
}

func TestStatusFromConfig(t *testing.T) {
	srv := statusServer(t, statusJSON, 200)
	listen := strings.TrimPrefix(srv.URL, "http://")
	path := writeFile(t, "lk.toml", fmt.Sprintf("[metrics]\nlisten = %q\n", listen))
	// The file lacks [region]: status does not need it.
	if _, stderr, code := run(t, "status", "--config", path); code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}

	off := writeFile(t, "lk.toml", "[metrics]\nlisten = \"\"\n")
	_, stderr, code := run(t, "status", "--config", off)
	if code != 1 || !strings.Contains(stderr, "metrics.listen is empty in "+off) {
		t.Errorf("exit %d: %s", code, stderr)
	}
	// A file the agent would refuse (an edit its reload refused: it runs
	// on, on the file it read before) still leads status to it, with a
	// warning; it used to stop there (a cold review).
	broken := writeFile(t, "lk.toml", fmt.Sprintf("[metrics]\nlisten = %q\n[reconcile]\npoll_intervall = \"5s\"\n", listen))
	_, stderr, code = run(t, "status", "--config", broken)
	if code != 0 || !strings.Contains(stderr, "reconcile.poll_intervall: unknown key") || strings.Count(stderr, "the agent refuses this file") != 1 {
		t.Errorf("exit %d (want 0 and the warning once): %s", code, stderr)
	}
	// A metrics.listen the agent refuses is not where it listens: status
	// goes by the default, not by the bad value (it dialled port 80).
	badListen := writeFile(t, "lk.toml", "[metrics]\nlisten = \"127.0.0.1\"\n")
	_, stderr, _ = run(t, "status", "--config", badListen)
	if strings.Contains(stderr, "127.0.0.1:80") || !strings.Contains(stderr, "metrics.listen") {
		t.Errorf("status with metrics.listen = \"127.0.0.1\": %s", stderr)
	}
	// One that is not TOML at all (an edit the agent's reload refused,
	// so it runs on): status warns and asks where the defaults say the
	// agent listens. It used to stop at the file, and exit 1 told a
	// health check that the running agent was down (a cold review).
	garbage := writeFile(t, "lk.toml", "[metrics]\nlisten = \"127.0.0.1:9\"\n[metrics]\n")
	_, stderr, _ = run(t, "status", "--config", garbage)
	def := config.Default()
	if !strings.Contains(stderr, "warning: config "+garbage+":3:") || !strings.Contains(stderr, "where the defaults say it listens") ||
		strings.Contains(stderr, "127.0.0.1:9/") || !strings.Contains(stderr, def.Metrics.Listen) && !strings.Contains(stderr, def.Control.Socket) {
		t.Errorf("status with a file that is not TOML: %s", stderr)
	}
}

func TestStatusNotRunning(t *testing.T) {
	addr := closedAddr(t)
	_, stderr, code := run(t, "status", "--url", "http://"+addr)
	want := "leasekeeper: cannot reach the agent at " + addr + ": is it running, and listening there (metrics.listen in the config, or --url)? dial tcp " + addr + ": connect: connection refused\n"
	if code != 1 || stderr != want {
		t.Errorf("exit %d, stderr:\n%q\nwant\n%q", code, stderr, want)
	}
}

func TestStatusBadAnswer(t *testing.T) {
	srv := statusServer(t, "internal trouble\n", 500)
	_, stderr, code := run(t, "status", "--url", srv.URL)
	if code != 1 || !strings.Contains(stderr, "GET "+srv.URL+"/status: internal trouble") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	srv = statusServer(t, "<html>", 200)
	_, stderr, code = run(t, "status", "--url", srv.URL)
	if code != 1 || !strings.Contains(stderr, "/status: unexpected answer") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// deadLetterAgent serves /deadletters the way agent.Agent does, from a
// list it edits.
type deadLetterAgent struct {
	mu      sync.Mutex
	letters []agent.DeadLetterReport
	calls   []string
}

func (d *deadLetterAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, r.Method+" "+r.URL.Path)
	if r.Method != "GET" && r.Header.Get(agent.ClientHeader) == "" {
		http.Error(w, "no header", http.StatusForbidden)
		return
	}
	if r.Method == "GET" && r.URL.Path == "/deadletters" {
		json.NewEncoder(w).Encode(d.letters)
		return
	}
	seqStr := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/deadletters/"), "/retry")
	for i, l := range d.letters {
		if fmt.Sprint(l.Seq) == seqStr {
			d.letters = append(d.letters[:i], d.letters[i+1:]...)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	http.Error(w, "no dead letter "+seqStr, 404)
}

var clock = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func sampleLetters() []outbox.DeadLetter {
	ip := netip.MustParseAddr("203.0.113.7")
	return []outbox.DeadLetter{
		{Seq: 41, Reason: "422 Unprocessable Entity: {\"hostname\": [\"not a valid\n hostname\"]}", Time: clock.Add(-time.Hour),
			Event: event.Event{Action: event.Commit, Family: event.IPv4, MAC: "02:00:00:0a:0b:0c", IP: ip,
				Hostname: "bad_name" /* listed as sent: bad-name */, Timestamp: 1700000000, LeaseTime: 600, Source: event.SourceHook}},
		{Seq: 42, Reason: "404 Not Found", Time: clock, Event: event.Event{Action: event.Expiry, Family: event.IPv4,
			MAC: "02:00:00:0a:0b:0c", IP: ip, Timestamp: 1700000600, Source: event.SourceFile}},
	}
}

const lettersTable = `SEQ  DEAD-LETTERED         ACTION  IP           MAC                HOSTNAME  REASON
41   2026-11-29T11:00:00Z  commit  203.0.113.7  02:00:00:0a:0b:0c  bad-name  422 Unprocessable Entity: {"hostname": ["not a valid hostname"]}
42   2026-11-29T12:00:00Z  expiry  203.0.113.7  02:00:00:0a:0b:0c  -         404 Not Found
`

// unixServer serves h on a unix socket, as the agent's control socket.
func unixServer(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return sock
}

func TestDeadLetterViaAgent(t *testing.T) {
	fake := &deadLetterAgent{letters: agent.DeadLetterReports(sampleLetters())}
	sock := unixServer(t, fake)

	out, stderr, code := run(t, "deadletter", "list", "--socket", sock)
	if diff := cmp.Diff(lettersTable, out); code != 0 || diff != "" {
		t.Errorf("exit %d %s (-want +got):\n%s", code, stderr, diff)
	}
	out, _, _ = run(t, "deadletter", "list", "--json", "--socket", sock)
	var got []agent.DeadLetterReport
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 2 || got[0].Event.Hostname != "bad-name" || got[1].Source != "file" {
		t.Errorf("--json: %v\n%s", err, out)
	}
	for _, key := range []string{`"seq": 41`, `"time": "2026-11-29T11:00:00Z"`, `"reason": `, `"source": "hook"`, `"event": {`, `"ip_family": "ipv4"`, `"lease_time": 600`} {
		if !strings.Contains(out, key) {
			t.Errorf("--json lacks %s", key)
		}
	}

	out, stderr, code = run(t, "deadletter", "retry", "41", "--socket", sock)
	if code != 0 || out != "retried 41\n" {
		t.Errorf("retry: exit %d %q %s", code, out, stderr)
	}
	out, stderr, code = run(t, "deadletter", "drop", "42", "41", "--socket", sock)
	if code != 1 || out != "dropped 42\n" || !strings.Contains(stderr, "no dead letter 41") {
		t.Errorf("drop: exit %d %q %s", code, out, stderr)
	}
	out, _, _ = run(t, "deadletter", "list", "--socket", sock)
	if out != "no dead letters\n" {
		t.Errorf("list after: %q", out)
	}
	want := []string{"GET /deadletters", "GET /deadletters", "POST /deadletters/41/retry",
		"DELETE /deadletters/42", "DELETE /deadletters/41", "GET /deadletters"}
	if diff := cmp.Diff(want, fake.calls); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// seedOutbox makes a real outbox in a state directory with the sample
// dead letters.
func seedOutbox(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{Logger: zerolog.Nop(), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range sampleLetters() {
		seq, err := s.AppendSeq(context.Background(), d.Event)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeadLetter(event.Queued{Seq: seq, Event: d.Event}, d.Reason); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDeadLetterViaFile(t *testing.T) {
	dir := seedOutbox(t)
	out, stderr, code := run(t, "deadletter", "list", "--state-dir", dir)
	if code != 0 || !strings.Contains(out, "commit  203.0.113.7") || !strings.Contains(out, "expiry  203.0.113.7") {
		t.Fatalf("exit %d %s\n%s", code, stderr, out)
	}
	var ds []agent.DeadLetterReport
	out, _, _ = run(t, "deadletter", "list", "--json", "--state-dir", dir)
	if err := json.Unmarshal([]byte(out), &ds); err != nil || len(ds) != 2 {
		t.Fatalf("%v %s", err, out)
	}
	first := ds[0].Seq

	// The agent is not running: with --config, the commands fall back to
	// the outbox in state.dir.
	cfg := writeFile(t, "lk.toml", fmt.Sprintf("[metrics]\nlisten = %q\n[control]\nsocket = %q\n[state]\ndir = %q\n",
		closedAddr(t), filepath.Join(t.TempDir(), "control.sock"), dir))
	out, stderr, code = run(t, "deadletter", "retry", fmt.Sprint(first), "--config", cfg)
	if code != 0 || out != fmt.Sprintf("retried %d\n", first) {
		t.Errorf("retry: exit %d %q %s", code, out, stderr)
	}
	_, stderr, code = run(t, "deadletter", "drop", fmt.Sprint(first), "--config", cfg)
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("no dead letter %d", first)) {
		t.Errorf("drop retried: exit %d %s", code, stderr)
	}
	out, _, code = run(t, "deadletter", "list", "--config", cfg)
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "expiry") {
		t.Errorf("list after retry: exit %d\n%s", code, out)
	}

	// A running agent holds the file: the command says so.
	s, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, stderr, code = run(t, "deadletter", "list", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "cannot reach the agent on its control socket") || !strings.Contains(stderr, "the outbox is locked, so an agent is running: is control.socket the same") {
		t.Errorf("locked: exit %d %s", code, stderr)
	}
	_, stderr, code = run(t, "deadletter", "list", "--state-dir", dir)
	if code != 1 || !strings.Contains(stderr, "stop the agent, or drop --state-dir") {
		t.Errorf("locked --state-dir: exit %d %s", code, stderr)
	}
}

func TestDeadLetterNoOutbox(t *testing.T) {
	dir := t.TempDir()
	out, stderr, code := run(t, "deadletter", "list", "--state-dir", dir)
	if code != 0 || out != "no dead letters\n" {
		t.Errorf("exit %d %q %s", code, out, stderr)
	}
	_, stderr, code = run(t, "deadletter", "retry", "5", "--state-dir", dir)
	if code != 1 || !strings.Contains(stderr, "no dead letter 5") {
		t.Errorf("exit %d %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "outbox.db")); !os.IsNotExist(err) {
		t.Errorf("list created the outbox: %v", err)
	}
}

func TestDeadLetterUsage(t *testing.T) {
	for _, args := range [][]string{
		{"deadletter"},
		{"deadletter", "resend"},
		{"deadletter", "retry"},
		{"deadletter", "drop", "x"},
		{"deadletter", "list", "extra"},
	} {
		if _, stderr, code := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, stderr)
		}
	}
	out, _, code := run(t, "deadletter", "--help")
	if code != 0 || !strings.Contains(out, "one\nprocess at a time") && !strings.Contains(out, "one process at a time") {
		t.Errorf("--help:\n%s", out)
	}
}

// TestAgentEndToEnd runs the real agent's HTTP listener and control
// socket with a real outbox and drives them with status and deadletter.
func TestAgentEndToEnd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	dir := seedOutbox(t)
	store, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sock := filepath.Join(t.TempDir(), "control.sock")
	cfg := writeFile(t, "lk.toml", fmt.Sprintf("[region]\nurl = \"http://127.0.0.1:1/x\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n[control]\nsocket = %q\n[state]\ndir = %q\n", sock, dir))
	env := &Env{Version: "e2e", Root: t.TempDir()}
	env.defaults()
	c, _, err := (&configSource{env: env, path: cfg}).read()
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(c, zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Version = "e2e"
	a.SetDeadLetters(store)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	addr, err := a.MetricsAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-a.Ready()
	url := "http://" + addr.String()

	out, stderr, code := run(t, "status", "--url", url)
	if code != 0 || !strings.Contains(out, "ready (version e2e") {
		t.Errorf("status: exit %d %s\n%s", code, stderr, out)
	}
	// Without --url, status asks on the control socket.
	out, stderr, code = run(t, "status", "--config", cfg)
	if code != 0 || !strings.Contains(out, "ready (version e2e") {
		t.Errorf("status via the control socket: exit %d %s\n%s", code, stderr, out)
	}
	// Dead letters are not on the TCP listener.
	if resp, err := http.Get(url + "/deadletters"); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /deadletters over TCP: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ds, _ := store.DeadLetters()
	out, stderr, code = run(t, "deadletter", "list", "--config", cfg)
	if code != 0 || strings.Count(out, "\n") != 3 {
		t.Errorf("list: exit %d %s\n%s", code, stderr, out)
	}
	out, stderr, code = run(t, "deadletter", "retry", fmt.Sprint(ds[0].Seq), "--socket", sock)
	if code != 0 || out != fmt.Sprintf("retried %d\n", ds[0].Seq) {
		t.Errorf("retry: exit %d %q %s", code, out, stderr)
	}
	out, stderr, code = run(t, "deadletter", "drop", fmt.Sprint(ds[1].Seq), fmt.Sprint(ds[0].Seq), "--socket", sock)
	if code != 1 || out != fmt.Sprintf("dropped %d\n", ds[1].Seq) || !strings.Contains(stderr, fmt.Sprintf("no dead letter %d", ds[0].Seq)) {
		t.Errorf("drop: exit %d %q %s", code, out, stderr)
	}
	if n := store.DeadLetterCount(); n != 0 || store.Depth() != 1 {
		t.Errorf("after: %d dead letters, depth %d; want 0, 1", n, store.Depth())
	}
}

// TestStatusPair: dhcpd's failover pair and the pair channel in
// leasekeeper status.
func TestStatusPair(t *testing.T) {
	for _, tc := range []struct {
		name, pair string
		want       []string
	}{{
		name: "normal, the peer agent answering",
		pair: `{"peer": "failover-partner", "role": "secondary", "my_state": "normal", "partner_state": "normal",
		         "speaks": "for the leases its dhcpd handles",
		         "channel": {"peer": "198.51.100.2:5740", "alone": false, "heard": "2026-11-29T11:59:58Z", "waiting": null}}`,
		want: []string{
			"failover       secondary of \"failover-partner\": normal, partner normal\n               speaks for the leases its dhcpd handles\n",
			"pair channel   peer agent 198.51.100.2:5740, last heard 2s ago\n",
		},
	}, {
		name: "partner down, the peer agent silent",
		pair: `{"peer": "failover-partner", "role": "primary", "my_state": "partner-down", "partner_state": "communications-interrupted",
		         "speaks": "for the pair: its partner is down",
		         "channel": {"peer": "198.51.100.3:5740", "alone": true, "heard": null, "waiting": "2026-11-29T11:59:30Z"}}`,
		want: []string{
			"primary of \"failover-partner\": partner-down, partner communications-interrupted\n",
			"peer agent 198.51.100.3:5740, never heard since start\n",
			"ALONE: the peer agent was silent for hold_max",
			"waiting for 30s: every due event is held back",
		},
	}, {
		name: "a channel, but no failover peer in dhcpd.conf",
		pair: `{"peer": "", "role": "", "my_state": "", "partner_state": "",
		         "speaks": "for its dhcpd alone: [pair] is set, but dhcpd.conf has no failover peer that a pool uses",
		         "channel": {"peer": "198.51.100.2:5740", "alone": true, "heard": null, "waiting": null}}`,
		want: []string{
			"failover       none in dhcpd.conf\n               speaks for its dhcpd alone: [pair] is set",
		},
	}, {
		// MAAS: one failover peer per HA VLAN, each with its own role.
		name: "several failover peers",
		pair: `{"peer": "failover-vlan-5001", "role": "secondary", "my_state": "normal", "partner_state": "normal",
		         "speaks": "for the leases its dhcpd handles", "channel": null,
		         "others": [{"peer": "failover-vlan-5002", "role": "primary", "my_state": "partner-down", "partner_state": "communications-interrupted",
		                     "speaks": "for the pair: its partner is down", "channel": null}]}`,
		want: []string{
			"failover       secondary of \"failover-vlan-5001\": normal, partner normal\n               speaks for the leases its dhcpd handles\n" +
				"               primary of \"failover-vlan-5002\": partner-down, partner communications-interrupted\n               speaks for the pair: its partner is down\n",
		},
	}, {
		// pair.partners: a channel to each partner rack's agent, shown
		// once, with the failover peers it orders.
		name: "several partner racks",
		pair: `{"peer": "failover-vlan-5001", "role": "secondary", "my_state": "normal", "partner_state": "normal",
		         "speaks": "for the leases its dhcpd handles",
		         "channel": {"peer": "198.51.100.2:5740", "alone": false, "heard": "2026-11-29T11:59:58Z", "waiting": null},
		         "others": [{"peer": "failover-vlan-5002", "role": "primary", "my_state": "normal", "partner_state": "normal",
		                     "speaks": "for the leases its dhcpd handles",
		                     "channel": {"peer": "198.51.100.3:5741", "alone": true, "heard": null, "waiting": null}},
		                    {"peer": "failover-vlan-5003", "role": "secondary", "my_state": "normal", "partner_state": "normal",
		                     "speaks": "for the leases its dhcpd handles",
		                     "channel": {"peer": "198.51.100.2:5740", "alone": false, "heard": "2026-11-29T11:59:58Z", "waiting": null}}]}`,
		want: []string{
			"pair channel   peer agent 198.51.100.2:5740 (for failover-vlan-5001, failover-vlan-5003), last heard 2s ago\n" +
				"pair channel   peer agent 198.51.100.3:5741 (for failover-vlan-5002), never heard since start\n" +
				"               ALONE: the peer agent was silent for hold_max",
		},
	}, {
		name: "no channel",
		pair: `{"peer": "failover-partner", "role": "primary", "my_state": "", "partner_state": "", "speaks": "unknown", "channel": null}`,
		want: []string{
			"primary of \"failover-partner\": unknown, partner unknown\n",
			"pair channel   none ([pair] unset)",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(statusJSON, `"uptime_seconds": 10800`, `"uptime_seconds": 10800, "pair": `+tc.pair, 1)
			srv := statusServer(t, body, 200)
			out, stderr, code := run(t, "status", "--url", srv.URL)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
	// Outside a pair: no failover lines.
	srv := statusServer(t, statusJSON, 200)
	out, _, _ := run(t, "status", "--url", srv.URL)
	if strings.Contains(out, "failover") || strings.Contains(out, "pair channel") {
		t.Errorf("failover lines outside a pair:\n%s", out)
	}
}
