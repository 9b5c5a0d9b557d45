package hooksock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// sink records what the listener stores; fail makes Accept fail.
type sink struct {
	mu   sync.Mutex
	evs  []event.Event
	fail error
	got  chan struct{}
}

func newSink() *sink { return &sink{got: make(chan struct{}, 1)} }

func (s *sink) Accept(_ context.Context, evs []event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.evs = append(s.evs, evs...)
	select {
	case s.got <- struct{}{}:
	default:
	}
	return nil
}

func (s *sink) events() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.evs...)
}

func (s *sink) waitFor(t *testing.T, n int) []event.Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if evs := s.events(); len(evs) >= n {
			return evs
		}
		select {
		case <-s.got:
		case <-deadline:
			t.Fatalf("sink has %d events, want %d", len(s.events()), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func start(t *testing.T, cfg Config, s Sink) (*Listener, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	l, err := New(cfg, s, zerolog.Nop(), reg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	stop := listen(t, l)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return l, reg
}

// listen runs l until it listens; stop ends it and returns Run's error.
func listen(t *testing.T, l *Listener) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	}
	return func() error {
		cancel()
		return <-done
	}
}

func send(t *testing.T, path string, b []byte) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func datagram(i int, hostname string) []byte {
	return []byte(fmt.Sprintf(`{"action":"commit","mac":"2:0:0:0:%x:%x","ip_family":"ipv4","ip":"198.18.%d.%d","timestamp":%d,"lease_time":600,"hostname":%q}`,
		i>>8&0xff, i&0xff, i>>8&0xff, i&0xff, 1795000000+i, hostname))
}

func TestReceive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	s := newSink()
	_, reg := start(t, Config{Path: path}, s)

	send(t, path, datagram(1, "node-1"))
	send(t, path, []byte("garbage {"))                                       // malformed
	send(t, path, []byte(`{"action":"renew","mac":"0:1:2:3:4:5","ip":"x"}`)) // invalid
	long := strings.Repeat("h", 60<<10)
	send(t, path, datagram(2, long)) // a 60 KiB hostname still fits
	// Invalid UTF-8 inside the JSON string: replaced, not fatal.
	send(t, path, []byte(strings.Replace(string(datagram(3, "bad@utf")), "@", "\xff", 1)))
	big := make([]byte, MaxDatagram+10)
	copy(big, datagram(4, ""))
	send(t, path, big) // truncated: refused whole
	send(t, path, datagram(5, "(none)"))

	evs := s.waitFor(t, 4)
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %s %d", e.IP, e.MAC, len(e.Hostname)))
	}
	want := []string{"198.18.0.1 02:00:00:00:00:01 6", fmt.Sprintf("198.18.0.2 02:00:00:00:00:02 %d", event.MaxHostname), "198.18.0.3 02:00:00:00:00:03 9", "198.18.0.5 02:00:00:00:00:05 0"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	time.Sleep(50 * time.Millisecond)
	for reason, n := range map[string]float64{"malformed": 2, "truncated": 1} {
		if got := testutil.ToFloat64(mustVec(t, reg, "leasekeeper_rejected_datagrams_total", reason)); got != n {
			t.Errorf("rejected{%s} = %v, want %v", reason, got, n)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket file: %v %v", fi, err)
	}
}

// mustVec finds one counter of a vector by its single label value.
func mustVec(t *testing.T, reg *prometheus.Registry, name, label string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
}

func TestOrderAndVolume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	s := newSink()
	start(t, Config{Path: path, Batch: 64}, s)
	const n = 3000
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		if _, err := c.Write(datagram(i, "n")); err != nil {
			t.Fatal(err)
		}
	}
	evs := s.waitFor(t, n)
	for i, e := range evs {
		if e.Timestamp != int64(1795000000+i) {
			t.Fatalf("event %d has timestamp %d: out of order", i, e.Timestamp)
		}
	}
}

// TestSenderUID sends from a child process running as nobody: refused
// unless its uid is allowed.
func TestSenderUID(t *testing.T) {
	if os.Getenv("HOOKSOCK_SEND") != "" {
		c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: os.Getenv("HOOKSOCK_SEND"), Net: "unixgram"})
		if err == nil {
			_, err = c.Write(datagram(7, "from-nobody"))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to send as another user")
	}
	const nobody = 65534
	for _, tc := range []struct {
		name    string
		allowed []uint32
		want    int
	}{
		{"disallowed", []uint32{0}, 0},
		{"allowed", []uint32{0, nobody}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Chmod(dir, 0o755)
			os.Chmod(filepath.Dir(dir), 0o755)
			path := filepath.Join(dir, "hook.sock")
			s := newSink()
			_, reg := start(t, Config{Path: path, AllowedUIDs: tc.allowed}, s)
			// The test binary's own directory is private: run a copy.
			bin := filepath.Join(dir, "sender")
			data, err := os.ReadFile(os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, data, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-test.run=^TestSenderUID$")
			cmd.Env = append(os.Environ(), "HOOKSOCK_SEND="+path)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("sender: %v: %s", err, out)
			}
			send(t, path, datagram(8, "from-root")) // root is always allowed here
			evs := s.waitFor(t, 1+tc.want)
			if tc.want == 0 && len(evs) != 1 {
				t.Errorf("events %v: the nobody datagram got through", evs)
			}
			if tc.want == 0 {
				if got := testutil.ToFloat64(mustVec(t, reg, "leasekeeper_rejected_datagrams_total", "uid")); got != 1 {
					t.Errorf("rejected{uid} = %v, want 1", got)
				}
			}
		})
	}
}

func TestRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Path: path}, newSink(), zerolog.Nop(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Run(context.Background(), func() {})
	if err == nil || !strings.Contains(err.Error(), "hook.socket: "+path+" exists and is not a socket") {
		t.Fatalf("Run = %v, want a refusal naming hook.socket", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Error("the file was replaced")
	}
}

// TestOpenErrorsNameKey: a hook socket that cannot be made says which
// key to change, hook.socket, as control.socket's error does.
func TestOpenErrorsNameKey(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, path string
		want       string
	}{
		// Longer than a unix socket path can be (config refuses it; a
		// bind error all the same).
		{"bind fails", filepath.Join(dir, strings.Repeat("s", 120)), "hook.socket: listen unixgram " + dir},
		{"no directory", filepath.Join(dir, "missing", "hook.sock"), "hook.socket: open " + dir + "/missing: no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(Config{Path: tc.path}, newSink(), zerolog.Nop(), nil, time.Now)
			if err != nil {
				t.Fatal(err)
			}
			err = l.Run(context.Background(), func() { t.Error("listening") })
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error starting %q", err, tc.want)
			}
		})
	}
}

// TestSinkFailure: a failing sink (full disk) holds the events and
// retries; nothing is lost once it recovers.
func TestSinkFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	s := newSink()
	s.fail = syscall.ENOSPC
	start(t, Config{Path: path}, s)
	for i := 0; i < 10; i++ {
		send(t, path, datagram(i, "x"))
	}
	time.Sleep(300 * time.Millisecond)
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	if evs := s.waitFor(t, 10); len(evs) != 10 {
		t.Fatalf("got %d events", len(evs))
	}
}

// router hands even addresses' events to one sink, odd ones' to the
// other.
type router struct{ even, odd *sink }

func (r router) Sinks() []Sink { return []Sink{r.even, r.odd} }
func (r router) Part(ev event.Event) int {
	return int(ev.IP.As4()[3] & 1)
}
func (r router) Accept(context.Context, []event.Event) error {
	return errors.New("the listener calls a Router's sinks, not its Accept")
}

// TestRouterPartFailure: with a Router, each sink gets its part of a
// batch in the order read; one failing (its disk full) is retried alone,
// and the other's part, stored already, is not handed again.
func TestRouterPartFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	r := router{newSink(), newSink()}
	r.odd.fail = syscall.ENOSPC
	start(t, Config{Path: path}, r)
	for i := 0; i < 10; i++ {
		send(t, path, datagram(i, "x"))
	}
	// The first batch's even part is stored while its odd part fails
	// and is retried (its backoff: 100 ms, then 200); the listener reads
	// no further meanwhile, so the rest of the datagrams, if the first
	// batch did not take them all, wait in the socket.
	r.even.waitFor(t, 1)
	time.Sleep(400 * time.Millisecond)
	r.odd.mu.Lock()
	r.odd.fail = nil
	r.odd.mu.Unlock()
	even, odd := r.even.waitFor(t, 5), r.odd.waitFor(t, 5)
	time.Sleep(100 * time.Millisecond)
	for name, evs := range map[string][]event.Event{"even": r.even.events(), "odd": r.odd.events()} {
		if len(evs) != 5 {
			t.Errorf("%s sink got %d events, want 5 (each once): %v", name, len(evs), evs)
		}
	}
	for i, ev := range append(even[:5:5], odd[:5]...) {
		want := 2*i%10 + i/5
		if got := int(ev.IP.As4()[3]); got != want {
			t.Errorf("event %d is of .%d, want .%d (each sink's in the order read)", i, got, want)
		}
	}
}

// TestAcceptAll: a Router's Accept outside the listener hands each sink
// its part in Sinks order, and stops at the first that fails, the parts
// before it stored.
func TestAcceptAll(t *testing.T) {
	r := router{newSink(), newSink()}
	var evs []event.Event
	for i := range 4 {
		ev, err := event.ParseDatagram(datagram(i, "x"), event.SourceHook)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if err := AcceptAll(context.Background(), r, evs); err != nil || len(r.even.events()) != 2 || len(r.odd.events()) != 2 {
		t.Fatalf("AcceptAll = %v; even got %d, odd %d, want 2 each", err, len(r.even.events()), len(r.odd.events()))
	}
	r.odd.fail = syscall.ENOSPC
	if err := AcceptAll(context.Background(), r, evs); !errors.Is(err, syscall.ENOSPC) || len(r.even.events()) != 4 || len(r.odd.events()) != 2 {
		t.Errorf("odd failing: AcceptAll = %v; even got %d, odd %d, want ENOSPC, 4 and 2", err, len(r.even.events()), len(r.odd.events()))
	}
}

// clockSink fails its first fails calls, each taking step on the clock
// (the retry's backoff, 5 s once it has grown).
type clockSink struct {
	mu    sync.Mutex
	now   time.Time
	step  time.Duration
	fails int
	calls int
}

func (s *clockSink) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *clockSink) Accept(context.Context, []event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls > s.fails {
		return nil
	}
	s.now = s.now.Add(s.step)
	return fmt.Errorf("outbox /state/outbox.db: commit: disk full: %w", syscall.ENOSPC)
}

// TestSinkFailureLogged: a sink failing for as long as the disk is full
// is logged when it begins, then at most every storeFailLogEvery, and
// its end once — not at every retry.
func TestSinkFailureLogged(t *testing.T) {
	s := &clockSink{now: time.Unix(1_800_000_000, 0), step: 10 * time.Second, fails: 4}
	logs := &strings.Builder{}
	l, err := New(Config{Path: "/unused"}, s, zerolog.New(logs), nil, s.clock)
	if err != nil {
		t.Fatal(err)
	}
	evs := []event.Event{{Action: event.Commit}}
	if err := l.store(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	// Failures at 10 s, 20 s, 30 s and 40 s: logged at 10 s and 40 s.
	var failed, stored []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		switch {
		case strings.Contains(line, "cannot store hook events"):
			failed = append(failed, line)
		case strings.Contains(line, "hook events stored again"):
			stored = append(stored, line)
		}
	}
	if len(failed) != 2 || !strings.Contains(failed[0], "disk full") || !strings.Contains(failed[1], `"not_logged_since_last":2`) {
		t.Errorf("%d failure lines, want 2, the second counting 2 left out:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if len(stored) != 1 || !strings.Contains(stored[0], `"failures":4`) {
		t.Errorf("end lines:\n%s\nwant one, after 4 failures", strings.Join(stored, "\n"))
	}
}

// TestRefusesListenedSocket: a second agent given the same hook.socket
// refuses, and leaves the first one's socket where the hooks find it.
func TestRefusesListenedSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	s := newSink()
	start(t, Config{Path: path}, s)
	first, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}

	l, err := New(Config{Path: path}, newSink(), zerolog.Nop(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	// Were it to listen, it stops at once, as an agent failing later in
	// its start would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = l.Run(ctx, cancel)
	if err == nil || !strings.Contains(err.Error(), "another process listens") || !strings.Contains(err.Error(), path) {
		t.Errorf("Run = %v, want a refusal naming %s", err, path)
	}
	if fi, err := os.Lstat(path); err != nil || !os.SameFile(fi, first) {
		t.Errorf("the first listener's socket was replaced or removed: %v", err)
	}
	send(t, path, datagram(1, "still-heard"))
	if evs := s.waitFor(t, 1); evs[0].Hostname != "still-heard" {
		t.Errorf("first listener got %v", evs)
	}
}

// TestReplacesStaleSocket: a socket file nobody is bound to (a previous
// run that was killed) is replaced.
func TestReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // a datagram socket's file outlives it
	stale, err := os.Lstat(path)
	if err != nil || stale.Mode().Type() != os.ModeSocket {
		t.Fatalf("no stale socket file: %v %v", stale, err)
	}
	s := newSink()
	start(t, Config{Path: path}, s)
	// (The new file may get the freed inode's number: sending tells.)
	send(t, path, datagram(1, "fresh"))
	s.waitFor(t, 1)
}

// TestSimultaneousStarts: agents started at the same instant on one
// path with a stale socket file (each finds it stale before any binds)
// end with exactly one listening, and it is the one the path reaches:
// without the directory lock, a later start's unlink left an earlier
// one bound to a name no hook reaches, and both ran.
func TestSimultaneousStarts(t *testing.T) {
	const rounds, agents = 30, 4
	for round := range rounds {
		path := filepath.Join(t.TempDir(), "hook.sock")
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		c.Close() // the stale file of a killed run
		ctx, cancel := context.WithCancel(context.Background())
		sinks := make([]*sink, agents)
		ready := make(chan int, agents)
		done := make(chan error, agents)
		gate := make(chan struct{})
		for i := range agents {
			sinks[i] = newSink()
			l, err := New(Config{Path: path}, sinks[i], zerolog.Nop(), nil, time.Now)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				<-gate
				done <- l.Run(ctx, func() { ready <- i })
			}()
		}
		close(gate)
		// Each either listens or refuses.
		var listening []int
		refused := 0
		for len(listening)+refused < agents {
			select {
			case i := <-ready:
				listening = append(listening, i)
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "another process listens") {
					t.Errorf("round %d: Run = %v, want a refusal", round, err)
				}
				refused++
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: %d listening, %d refused after 10 s", round, len(listening), refused)
			}
		}
		if len(listening) != 1 {
			t.Errorf("round %d: %d agents listening, want 1", round, len(listening))
		} else {
			send(t, path, datagram(round, "heard"))
			sinks[listening[0]].waitFor(t, 1)
		}
		cancel()
		for range listening {
			if err := <-done; err != nil {
				t.Errorf("round %d: Run: %v", round, err)
			}
		}
		if t.Failed() {
			return
		}
	}
}

// TestLeavesForeignSocketOnExit: an agent removes on exit only the
// socket file it bound, not one put in its place since.
func TestLeavesForeignSocketOnExit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	l, err := New(Config{Path: path}, newSink(), zerolog.Nop(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	stop := listen(t, l)
	if err := os.Remove(path); err != nil {
		stop()
		t.Fatal(err)
	}
	other, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	defer other.Close()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the other socket was removed: %v", err)
	}
	send(t, path, []byte("x"))
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := other.Read(make([]byte, 8)); err != nil {
		t.Fatalf("the other socket no longer receives: %v", err)
	}
}
