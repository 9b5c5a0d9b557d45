package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/internal/lktest/testlog"
)

// notifySocket points NOTIFY_SOCKET at a real unixgram socket and returns
// the datagrams systemd would have received.
func notifySocket(t *testing.T) <-chan string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "")
	ch := make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return ch
}

// expect waits for a datagram with the given prefix, failing on another
// state that is in forbid first.
func expect(t *testing.T, ch <-chan string, prefix string, forbid ...string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-ch:
			if strings.HasPrefix(s, prefix) {
				return s
			}
			for _, f := range forbid {
				if strings.HasPrefix(s, f) {
					t.Fatalf("got %q before %q", s, prefix)
				}
			}
		case <-timeout:
			t.Fatalf("no %q datagram", prefix)
			return ""
		}
	}
}

func testConfig() *config.Config {
	c := config.Default()
	c.Region.URL = "http://127.0.0.1:1/leases"
	c.Metrics.Listen = "127.0.0.1:0"
	c.Control.Socket = "" // TestControlSocket and TestHTTP set one of their own
	return c
}

func newAgent(t *testing.T, cfg *config.Config) *Agent {
	t.Helper()
	a, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Version = "test"
	return a
}

// gate is a fake task that calls ready when told to and stops on ctx.
type gate struct {
	release chan struct{}
	stopped atomic.Bool
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) Run(ctx context.Context, ready func()) error {
	defer g.stopped.Store(true)
	select {
	case <-g.release:
		ready()
	case <-ctx.Done():
		return ctx.Err()
	}
	<-ctx.Done()
	return nil
}

// running is an Agent.Run in progress.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// start runs a; the test's cleanup stops it.
func start(t *testing.T, a *Agent) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() { r.err = a.Run(ctx); close(r.done) }()
	t.Cleanup(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	return r
}

// wait returns Run's result.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestReadyOnlyWhenEveryTaskIs(t *testing.T) {
	notes := notifySocket(t)
	a := newAgent(t, testConfig())
	g1, g2 := newGate(), newGate()
	a.Add("one", g1)
	a.Add("two", g2)
	a.StatusEvery = 20 * time.Millisecond
	r := start(t, a)

	// While "two" starts, STATUS= says so and READY=1 never comes.
	close(g1.release)
	s := expect(t, notes, "STATUS=starting:", "READY=1")
	if s != "STATUS=starting: waiting for two" {
		// The http task may not have been ready at the first tick yet.
		expect(t, notes, "STATUS=starting: waiting for two", "READY=1")
	}
	select {
	case <-a.Ready():
		t.Fatal("ready before every task was")
	default:
	}
	close(g2.release)
	expect(t, notes, "READY=1")
	<-a.Ready()
	expect(t, notes, "STATUS=running")

	r.cancel()
	if err := r.wait(t); err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
	expect(t, notes, "STOPPING=1")
	if !g1.stopped.Load() || !g2.stopped.Load() {
		t.Error("a task still runs after Run returned")
	}
}

func TestFailingTaskStopsTheOthers(t *testing.T) {
	notes := notifySocket(t)
	a := newAgent(t, testConfig())
	g := newGate()
	boom := errors.New("disk on fire")
	fail := make(chan struct{})
	a.Add("steady", g)
	a.Add("flaky", TaskFunc(func(ctx context.Context, ready func()) error {
		ready()
		select {
		case <-fail:
			return boom
		case <-ctx.Done():
			return nil
		}
	}))
	r := start(t, a)
	close(g.release)
	expect(t, notes, "READY=1")
	close(fail)
	err := r.wait(t)
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "flaky: ") {
		t.Errorf("Run = %v, want flaky: %v", err, boom)
	}
	if !g.stopped.Load() {
		t.Error("steady task not stopped")
	}
	expect(t, notes, "STOPPING=1")
}

func TestFailureBeforeReady(t *testing.T) {
	notes := notifySocket(t)
	cfg := testConfig()
	a := newAgent(t, cfg)
	a.Add("never", newGate())
	a.Add("broken", TaskFunc(func(context.Context, func()) error { return errors.New("cannot open") }))
	r := start(t, a)
	if err := r.wait(t); err == nil || err.Error() != "broken: cannot open" {
		t.Errorf("Run = %v", err)
	}
	expect(t, notes, "STOPPING=1", "READY=1")
}

func TestFinishedTaskCountsAsReady(t *testing.T) {
	notes := notifySocket(t)
	a := newAgent(t, testConfig())
	a.Add("oneshot", TaskFunc(func(context.Context, func()) error { return nil }))
	r := start(t, a)
	expect(t, notes, "READY=1")
	r.cancel()
	if err := r.wait(t); err != nil {
		t.Error(err)
	}
}

func TestStopTimeout(t *testing.T) {
	notifySocket(t)
	a := newAgent(t, testConfig())
	a.StopTimeout = 50 * time.Millisecond
	release := make(chan struct{})
	defer close(release)
	a.Add("stubborn", TaskFunc(func(ctx context.Context, ready func()) error {
		ready()
		<-release // ignores ctx
		return nil
	}))
	r := start(t, a)
	<-a.Ready()
	r.cancel()
	err := r.wait(t)
	if err == nil || !strings.Contains(err.Error(), "stubborn still running 50ms after stop was asked") {
		t.Errorf("Run = %v", err)
	}
}

func TestMetricsListenError(t *testing.T) {
	notifySocket(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig()
	cfg.Metrics.Listen = ln.Addr().String()
	r := start(t, newAgent(t, cfg))
	if err := r.wait(t); err == nil || !strings.HasPrefix(err.Error(), "http: metrics.listen: ") {
		t.Errorf("Run = %v", err)
	}
}

func TestNoListener(t *testing.T) {
	notes := notifySocket(t)
	cfg := testConfig()
	cfg.Metrics.Listen = ""
	a := newAgent(t, cfg)
	r := start(t, a)
	expect(t, notes, "READY=1")
	if addr, err := a.MetricsAddr(context.Background()); addr != nil || err != nil {
		t.Errorf("MetricsAddr = %v, %v", addr, err)
	}
	r.cancel()
	if err := r.wait(t); err != nil {
		t.Error(err)
	}
}

// fakeStatus is a Status and a Lagger.
type fakeStatus struct {
	depth, dead int
	last, old   time.Time
}

func (f fakeStatus) Depth() int               { return f.depth }
func (f fakeStatus) DeadLetterCount() int     { return f.dead }
func (f fakeStatus) LastDelivery() time.Time  { return f.last }
func (f fakeStatus) OldestPending() time.Time { return f.old }

// fakeDead is an in-memory DeadLetters.
type fakeDead struct {
	mu      sync.Mutex
	letters []outbox.DeadLetter
	retried []uint64
}

func (f *fakeDead) DeadLetters() ([]outbox.DeadLetter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]outbox.DeadLetter(nil), f.letters...), nil
}

func (f *fakeDead) take(seq uint64) error {
	for i, d := range f.letters {
		if d.Seq == seq {
			f.letters = append(f.letters[:i], f.letters[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("outbox: dead letter %d: %w", seq, outbox.ErrNotFound)
}

func (f *fakeDead) RetryDeadLetter(seq uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(seq); err != nil {
		return err
	}
	f.retried = append(f.retried, seq)
	return nil
}

func (f *fakeDead) DropDeadLetter(seq uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.take(seq)
}

func get(t *testing.T, method, url string, header bool) (int, string) {
	t.Helper()
	return do(t, http.DefaultClient, method, url, header)
}

// unixClient talks HTTP over the unix socket at path (URLs "http://control/…").
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

func do(t *testing.T, c *http.Client, method, url string, header bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if header {
		req.Header.Set(ClientHeader, "test")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTP(t *testing.T) {
	notifySocket(t)
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cfg := testConfig()
	cfg.Control.Socket = filepath.Join(t.TempDir(), "control.sock")
	a, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)), nil, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	a.Version = "1.2.3"
	a.SetStatus(fakeStatus{depth: 12, dead: 1, last: clock.Add(-3 * time.Second), old: clock.Add(-1500 * time.Millisecond)})
	ip := netip.MustParseAddr("203.0.113.7")
	dead := &fakeDead{letters: []outbox.DeadLetter{
		{Seq: 41, Reason: "422: bad hostname", Time: clock.Add(-time.Hour),
			Event: event.Event{Action: event.Commit, Family: event.IPv4, MAC: "02:00:00:0a:0b:0c", IP: ip,
				Hostname: "x", Timestamp: 1700000000, LeaseTime: 600, Source: event.SourceHook}},
		{Seq: 42, Reason: "404", Time: clock, Event: event.Event{Action: event.Expiry, Family: event.IPv4,
			MAC: "02:00:00:0a:0b:0c", IP: ip, Timestamp: 1700000600, Source: event.SourceFile}},
	}}
	a.SetDeadLetters(dead)
	a.Add("steady", TaskFunc(func(ctx context.Context, ready func()) error { ready(); <-ctx.Done(); return nil }))

	start(t, a)
	addr, err := a.MetricsAddr(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-a.Ready()
	base := "http://" + addr.String()

	code, body := get(t, "GET", base+"/status", false)
	if code != 200 {
		t.Fatalf("/status: %d %s", code, body)
	}
	var rep StatusReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	depth, dl, lag, last := 12, 1, 1.5, clock.Add(-3*time.Second)
	want := StatusReport{Version: "1.2.3", Ready: true, Started: clock, Time: clock, QueueDepth: &depth,
		LastDelivery: &last, DeadLetters: &dl, LagSeconds: &lag,
		Tasks: []TaskReport{{"steady", "ready"}, {"http", "ready"}, {"control", "ready"}}}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("/status (-want +got):\n%s", diff)
	}
	for _, key := range []string{`"queue_depth": 12`, `"last_delivery": "2026-11-29T11:59:57Z"`, `"deadletters": 1`, `"lag_seconds": 1.5`, `"version": "1.2.3"`} {
		if !strings.Contains(body, key) {
			t.Errorf("/status lacks %s:\n%s", key, body)
		}
	}

	if code, body := get(t, "GET", base+"/healthz", false); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body = get(t, "GET", base+"/metrics", false)
	if code != 200 || !strings.Contains(body, `leasekeeper_build_info{goversion=`) || !strings.Contains(body, "leasekeeper_ready 1") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}

	// Dead letters are not served over TCP, to anyone.
	for _, path := range []string{"/deadletters", "/deadletters/41/retry"} {
		if code, body := get(t, "GET", base+path, true); code != 403 || !strings.Contains(body, "control socket") {
			t.Errorf("TCP %s: %d %s", path, code, body)
		}
	}
	if fi, err := os.Stat(cfg.Control.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket: %v, %v; want mode 0600", fi, err)
	}
	ctl, cbase := unixClient(cfg.Control.Socket), "http://control"
	code, body = do(t, ctl, "GET", cbase+"/deadletters", false)
	var ds []DeadLetterReport
	if err := json.Unmarshal([]byte(body), &ds); code != 200 || err != nil {
		t.Fatalf("/deadletters: %d %v %s", code, err, body)
	}
	wantDS := []DeadLetterReport{
		{Seq: 41, Time: clock.Add(-time.Hour), Reason: "422: bad hostname", Source: "hook", Event: event.RegionItem{
			Action: "commit", Family: "ipv4", Hostname: "x", MAC: "02:00:00:0a:0b:0c", IP: "203.0.113.7", Timestamp: 1700000000, LeaseTime: 600}},
		{Seq: 42, Time: clock, Reason: "404", Source: "file", Event: event.RegionItem{
			Action: "expiry", Family: "ipv4", MAC: "02:00:00:0a:0b:0c", IP: "203.0.113.7", Timestamp: 1700000600}},
	}
	if diff := cmp.Diff(wantDS, ds); diff != "" {
		t.Errorf("/deadletters (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		method, path string
		header       bool
		code         int
	}{
		{"POST", "/deadletters/41/retry", false, 204},
		{"POST", "/deadletters/41/retry", true, 404},
		{"DELETE", "/deadletters/42", true, 204},
		{"DELETE", "/deadletters/42", true, 404},
		{"DELETE", "/deadletters/x", true, 400},
		{"GET", "/deadletters/42", true, 405},
	} {
		if code, body := do(t, ctl, tc.method, cbase+tc.path, tc.header); code != tc.code {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, code, body, tc.code)
		}
	}
	if diff := cmp.Diff([]uint64{41}, dead.retried); diff != "" {
		t.Errorf("retried (-want +got):\n%s", diff)
	}
}

func TestLoopbackOnly(t *testing.T) {
	a := newAgent(t, testConfig())
	h := a.loopbackOnly(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	for addr, want := range map[string]int{
		"127.0.0.1:5000":        204,
		"[::1]:5000":            204,
		"[::ffff:127.0.0.1]:50": 204,
		"203.0.113.9:5000":      403,
		"[2001:db8::1]:5000":    403,
		"garbage":               403,
	} {
		r, _ := http.NewRequest("GET", "/deadletters", nil)
		r.RemoteAddr = addr
		w := &recorder{header: http.Header{}}
		h(w, r)
		if w.code != want {
			t.Errorf("%s: %d, want %d", addr, w.code, want)
		}
	}
}

type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// Progress is a Prober the tests move by hand: Beat records progress.
type Progress struct{ ns atomic.Int64 }

// Beat records progress at t.
func (p *Progress) Beat(t time.Time) { p.ns.Store(t.UnixNano()) }

// LastProgress is the time of the last Beat, zero if none.
func (p *Progress) LastProgress() time.Time {
	ns := p.ns.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// prober is a task with a Progress the test moves.
type prober struct {
	Progress
}

func (p *prober) Run(ctx context.Context, ready func()) error { ready(); <-ctx.Done(); return nil }

func TestWatchdogFollowsProgress(t *testing.T) {
	notes := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "200000") // 200ms: pings every 100ms
	t.Setenv("WATCHDOG_PID", "")
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	a, err := New(testConfig(), zerolog.New(zerolog.NewTestWriter(t)), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	p := &prober{}
	p.Beat(now())
	a.Add("loop", p)
	start(t, a)
	expect(t, notes, "WATCHDOG=1")

	// The loop stops going round: one second passes on the agent's clock.
	clock.Add(int64(time.Second))
	// Drain what was in flight, then nothing for a few intervals.
	deadline := time.After(300 * time.Millisecond)
drain:
	for {
		select {
		case <-notes:
		case <-deadline:
			break drain
		}
	}
	quiet := time.After(500 * time.Millisecond)
	for {
		select {
		case s := <-notes:
			if s == "WATCHDOG=1" {
				t.Fatal("pinged while the loop was wedged")
			}
			continue
		case <-quiet:
		}
		break
	}
	p.Beat(now())
	expect(t, notes, "WATCHDOG=1")
}

// reloader is a task that records reloads.
type reloader struct {
	gate
	got    atomic.Pointer[config.Config]
	refuse bool
}

func (r *reloader) Reload(c *config.Config) (func(), error) {
	if r.refuse {
		return nil, errors.New("cannot take it")
	}
	return func() { r.got.Store(c) }, nil
}

// TestReload: a configuration every part can take is applied to all of
// them and to Config; one a part refuses is applied to none, and Config
// stays (a cold review: the log said "configuration reloaded" while the
// deliverer kept the old region settings, and the next reload's diff
// named the wrong keys).
func TestReload(t *testing.T) {
	notes := notifySocket(t)
	a := newAgent(t, testConfig())
	r := &reloader{gate: gate{release: make(chan struct{})}}
	no := &reloader{gate: gate{release: make(chan struct{})}}
	a.Add("r", r)
	a.Add("no", no)
	start(t, a)
	close(r.release)
	close(no.release)
	expect(t, notes, "READY=1")

	c := testConfig()
	c.Log.Level = "debug"
	if err := a.Reload(c); err != nil {
		t.Errorf("Reload = %v", err)
	}
	if r.got.Load() != c || no.got.Load() != c || a.Config() != c {
		t.Error("new config not handed over")
	}
	s := expect(t, notes, "RELOADING=1")
	if !strings.Contains(s, "\nMONOTONIC_USEC=") {
		t.Errorf("reloading: %q", s)
	}
	expect(t, notes, "READY=1")

	no.refuse = true
	d := testConfig()
	d.Log.Level = "warn"
	if err := a.Reload(d); err == nil || err.Error() != "no: cannot take it" {
		t.Errorf("Reload = %v, want the refusal", err)
	}
	if r.got.Load() != c || a.Config() != c {
		t.Error("a refused configuration was applied")
	}
	expect(t, notes, "RELOADING=1")
	expect(t, notes, "READY=1")
}

func TestRunTwice(t *testing.T) {
	notifySocket(t)
	cfg := testConfig()
	cfg.Metrics.Listen = ""
	a := newAgent(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Run(ctx); err == nil {
		t.Error("second Run accepted")
	}
}

func TestMetricsCollision(t *testing.T) {
	notifySocket(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "leasekeeper_ready", Help: "x"}))
	a, err := New(testConfig(), zerolog.Nop(), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "agent: metrics:") {
		t.Errorf("Run = %v", err)
	}
}

// TestConfig6Alone: dhcpd.config6 alone is read only for the mode of a
// dhcpd.leases6 that is not set; that is said at start, at warning
// level, not accepted in silence. dhcpd.leases6 set (followed:
// TestLabBothFamilies) says nothing of the kind.
func TestConfig6Alone(t *testing.T) {
	for _, set := range []func(*config.Config){
		func(c *config.Config) {},
		func(c *config.Config) { c.DHCPD.Config6 = "/etc/dhcp/dhcpd6.conf" },
		func(c *config.Config) {
			c.DHCPD.Leases6, c.DHCPD.Config6 = "/var/lib/dhcp/dhcpd6.leases", "/etc/dhcp/dhcpd6.conf"
		},
	} {
		notes := notifySocket(t)
		cfg := testConfig()
		set(cfg)
		var log testlog.Buffer
		a, err := New(cfg, zerolog.New(&log), prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, a)
		expect(t, notes, "READY=1")
		r.cancel()
		if err := r.wait(t); err != nil {
			t.Error(err)
		}
		said := strings.Contains(log.String(), `"level":"warn","component":"agent","dhcpd.config6"`) && strings.Contains(log.String(), "DHCPv6 leases are not followed")
		if want := cfg.DHCPD.Leases6 == "" && cfg.DHCPD.Config6 != ""; said != want {
			t.Errorf("leases6 %q config6 %q: warned %v, want %v; log:\n%s", cfg.DHCPD.Leases6, cfg.DHCPD.Config6, said, want, log.String())
		}
	}
}

// TestReportMAASRack: /status names the MAAS rack whose values the
// configuration took, and only when it took some.
func TestReportMAASRack(t *testing.T) {
	rack := &config.MAASRack{Kind: "snap", RackdConf: "/var/snap/maas/current/rackd.conf", RegionURLs: []string{"https://r:5242/MAAS/a/v3internal/leases"}}
	for _, tc := range []struct {
		name string
		rack *config.MAASRack
		keys []string
		want bool
	}{
		{"no rack", nil, nil, false},
		{"a rack the file overrides in full", rack, nil, false},
		{"a rack that gave the region", rack, []string{"region.url", "region.other_urls"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Rack, cfg.RackKeys = tc.rack, tc.keys
			r := newAgent(t, cfg).Report()
			if (r.MAASRack != nil) != tc.want {
				t.Fatalf("maas_rack %+v, want present %t", r.MAASRack, tc.want)
			}
			if tc.want && (r.MAASRack.Kind != "snap" || r.MAASRack.RackdConf != rack.RackdConf || len(r.MAASRack.Keys) != 2 ||
				!strings.Contains(r.MAASRack.Summary, "the region from its maas_url (https://r:5242/MAAS/a/v3internal/leases)")) {
				t.Errorf("maas_rack %+v", r.MAASRack)
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `"maas_rack"`) != tc.want {
				t.Errorf("JSON %s", b)
			}
		})
	}
}

// TestNewNilRegistry: a nil registry, untyped or a nil
// *prometheus.Registry in the Registry interface, gets a new one.
func TestNewNilRegistry(t *testing.T) {
	var typed *prometheus.Registry
	for _, reg := range []Registry{nil, typed} {
		a, err := New(testConfig(), zerolog.Nop(), reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := a.reg.(*prometheus.Registry); a.reg == nil || ok && r == nil {
			t.Errorf("New(%#v) kept a nil registry", reg)
		}
		if err := a.registerMetrics(); err != nil {
			t.Error(err)
		}
	}
}
