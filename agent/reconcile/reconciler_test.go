package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
)

// harness runs the task against a fake dhcpd in a temporary directory,
// with a real outbox and real inotify.
type harness struct {
	t     *testing.T
	dir   string
	d     *fakeDhcpd
	conf  string
	pid   string
	store *outbox.Store
	r     *Reconciler
	stop  func()
	logs  *strings.Builder
	// beforeRun, when set, runs between New and Run in start.
	beforeRun func(*Reconciler)
	// storeReg, when set, gets the outbox's metrics.
	storeReg prometheus.Registerer
}

func newHarness(t *testing.T) *harness {
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, d: newFakeDhcpd(t, dir), conf: filepath.Join(dir, "dhcpd.conf"),
		pid: filepath.Join(dir, "dhcpd.pid"), logs: &strings.Builder{}}
	h.hookless()
	return h
}

// hookless writes a dhcpd.conf with no hook.
func (h *harness) hookless() {
	h.t.Helper()
	if err := os.WriteFile(h.conf, []byte("subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.50; }\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// hooked writes a dhcpd.conf running an executable leasekeeper-hook.
func (h *harness) hooked() {
	h.t.Helper()
	hook := filepath.Join(h.dir, "leasekeeper-hook")
	if err := os.WriteFile(hook, []byte("#!/bin/true\n"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	conf := fmt.Sprintf("on commit { execute(%q, \"notify\"); }\nsubnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.50; }\n", hook)
	if err := os.WriteFile(h.conf, []byte(conf), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// start runs a new reconciler (on the same state as any before it).
func (h *harness) start(grace time.Duration) {
	h.t.Helper()
	h.store = openStoreReg(h.t, h.dir, h.storeReg)
	log := zerolog.New(syncWriter{h.logs}).With().Timestamp().Logger()
	// The fake hook hooked() writes is leasekeeper-hook as far as mode
	// detection is concerned.
	detect := DetectEnv{OurHooks: []string{filepath.Join(h.dir, "leasekeeper-hook")}}
	r, err := New(Config{Leases: h.d.path, DhcpdConf: h.conf, PIDFile: h.pid, Grace: grace, Poll: 200 * time.Millisecond, Detect: &detect},
		h.store, log, prometheus.NewRegistry(), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	r.classifyWait = 300 * time.Millisecond
	h.r = r
	if h.beforeRun != nil {
		h.beforeRun(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- r.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		h.t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		h.t.Fatal("not ready after 10s")
	}
	stopped := false
	h.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Run: %v", err)
		}
		r.Close()
		if err := h.store.Close(); err != nil {
			h.t.Error(err)
		}
	}
	h.t.Cleanup(h.stop)
}

// syncWriter lets the task log into a Builder read by the test.
type syncWriter struct{ b *strings.Builder }

var logMu = make(chan struct{}, 1)

func (w syncWriter) Write(p []byte) (int, error) {
	logMu <- struct{}{}
	defer func() { <-logMu }()
	return w.b.Write(p)
}

func (h *harness) logText() string {
	logMu <- struct{}{}
	defer func() { <-logMu }()
	return h.logs.String()
}

// queued returns the events in the outbox as "action ip mac reason".
func (h *harness) queued() []string {
	h.t.Helper()
	qs, err := h.store.Peek(10000)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, q := range qs {
		out = append(out, fmt.Sprintf("%s %s %s %s", q.Event.Action, q.Event.IP, q.Event.MAC, q.Event.Reason))
	}
	return out
}

// waitQueued waits until the outbox holds n events and returns them
// with how long that took.
func (h *harness) waitQueued(n int, within time.Duration) ([]string, time.Duration) {
	h.t.Helper()
	start := time.Now()
	for {
		got := h.queued()
		if len(got) >= n {
			return got, time.Since(start)
		}
		if time.Since(start) > within {
			h.t.Fatalf("outbox holds %d events after %s, want %d: %q\nlog:\n%s", len(got), within, n, got, h.logText())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLog waits until the log holds want; a read, its count and its line
// are not one instant after a write, least of all under the race detector.
func (h *harness) waitLog(want string, within time.Duration) {
	h.t.Helper()
	for deadline := time.Now().Add(within); !strings.Contains(h.logText(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("no %q logged within %s:\n%s", want, within, h.logText())
		}
	}
}

func (h *harness) synthesised(reason string) float64 {
	return testutil.ToFloat64(h.r.met.synthesised.WithLabelValues(reason))
}

func nowBlock(ip, state, mac string, startsIn, endsIn time.Duration) string {
	now := time.Now()
	return block(ip, state, mac, now.Add(startsIn).Unix(), now.Add(endsIn).Unix())
}

// TestTaskHookless: no hook in dhcpd.conf, so every block dhcpd appends
// is an event at once, in file order.
func TestTaskHookless(t *testing.T) {
	h := newHarness(t)
	h.d.rewrite("", true)
	h.start(30 * time.Second)
	if !h.r.hookless || h.r.st.Grace != 0 {
		t.Fatalf("hookless=%t grace=%d; want hookless with grace 0", h.r.hookless, h.r.st.Grace)
	}
	h.d.append(nowBlock(ip1, "active", macA, 0, time.Hour))
	// Queued at all is the check (waitQueued fails the test otherwise);
	// how fast is for the benchmarks (make bench: bench-reconcile).
	_, took := h.waitQueued(1, 2*time.Second)
	t.Logf("commit queued %s after the append", took)
	h.d.append(nowBlock(ip1, "released", macA, -time.Minute, 0))
	now := time.Now().Unix()
	h.d.append(block(ip2, "active", macB, now-10, now))
	h.d.append(block(ip2, "free", macB, now-10, now)) // at its own end: an expiry
	got, _ := h.waitQueued(4, 2*time.Second)
	want := []string{
		"commit 203.0.113.10 00:16:3e:00:00:0a missed-commit",
		"release 203.0.113.10 00:16:3e:00:00:0a missed-release",
		"commit 203.0.113.11 00:16:3e:00:00:0b missed-commit",
		"expiry 203.0.113.11 00:16:3e:00:00:0b missed-expiry",
	}
	// With no grace, rule 3 may expire the lease at its end a moment
	// before dhcpd's free block is read: the same expiry, another reason.
	if len(got) == 4 && got[3] == "expiry 203.0.113.11 00:16:3e:00:00:0b ends-passed" {
		got[3] = want[3]
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queued:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := h.synthesised(ReasonMissedCommit); n != 2 {
		t.Errorf("synthesised{missed-commit} = %v, want 2", n)
	}
	if !strings.Contains(h.logText(), `"mode":"hookless"`) {
		t.Errorf("mode not logged:\n%s", h.logText())
	}
}

// TestTaskHooked: with a hook, a block the hook reported is not sent
// again; one it did not is, after the grace.
func TestTaskHooked(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(2 * time.Second)
	if h.r.hookless || h.r.st.Grace != 2 {
		t.Fatalf("hookless=%t grace=%d; want hooks with grace 2", h.r.hookless, h.r.st.Grace)
	}
	now := time.Now().Unix()
	if err := h.r.Accept(context.Background(), []event.Event{hook(event.Commit, ip1, macA, now)}); err != nil {
		t.Fatal(err)
	}
	h.d.append(block(ip1, "active", macA, now, now+3600))
	h.d.append(block(ip2, "active", macB, now, now+3600)) // its hook failed
	got, took := h.waitQueued(2, 5*time.Second)
	// Times are whole seconds: a grace of 2 s is between 1 and 2 s.
	if took < time.Second {
		t.Errorf("synthesised after %s, before the grace", took)
	}
	want := "commit 203.0.113.10 00:16:3e:00:00:0a |commit 203.0.113.11 00:16:3e:00:00:0b missed-commit"
	if strings.Join(got, "|") != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	time.Sleep(1500 * time.Millisecond)
	if got := h.queued(); len(got) != 2 {
		t.Fatalf("queued later: %q", got)
	}
}

// TestTaskAgentDownThroughRestart is test (d) on a fake dhcpd: the agent
// stops, dhcpd restarts with a smaller range (the rewrite drops an active
// lease), the agent starts and sends the expiry at the lease's end.
func TestTaskAgentDownThroughRestart(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	ends := time.Now().Add(2 * time.Second).Unix()
	keep := nowBlock(ip2, "active", macB, -time.Minute, time.Hour)
	h.d.rewrite(block(ip1, "active", macA, ends-60, ends)+keep, true)
	h.start(30 * time.Second)
	h.stop()

	h.d.rewrite(keep, true)
	// A lease found vanished at or after its end waits the grace for a
	// renewal's hook still on its way (core.go, Snapshot): 1 s here.
	h.start(time.Second)
	got, _ := h.waitQueued(1, 5*time.Second)
	if at := time.Now().Unix(); at < ends {
		t.Fatalf("expiry queued at %d, before the lease's end %d", at, ends)
	}
	if want := "expiry 203.0.113.10 00:16:3e:00:00:0a vanished"; len(got) != 1 || got[0] != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	time.Sleep(300 * time.Millisecond)
	if got := h.queued(); len(got) != 1 {
		t.Fatalf("queued later: %q", got)
	}
}

// TestTaskResumeReadsTail: a restarted agent on an unchanged file reads
// only what was appended meanwhile, and decides on it.
func TestTaskResumeReadsTail(t *testing.T) {
	h := newHarness(t)
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), true)
	h.start(time.Second)
	h.stop()
	h.d.append(nowBlock(ip1, "released", macA, -time.Minute, 0))
	h.start(time.Second)
	got, _ := h.waitQueued(1, 2*time.Second)
	if want := "release 203.0.113.10 00:16:3e:00:00:0a missed-release"; got[0] != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(h.r.met.snapshots.WithLabelValues("complete")); n != 0 {
		t.Errorf("the restarted agent read the file whole %v times, want 0 (tail only)", n)
	}
	if !h.r.met.consistent.Load() {
		t.Error("leasekeeper_reconcile_file_consistent is 0 after a clean restart on a file that read whole")
	}
}

// TestTaskHoldsOnGarbage: a rewrite that does not parse decides nothing
// (the lease it seems to drop gets no expiry) until a clean one comes.
func TestTaskHoldsOnGarbage(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, -time.Second)+nowBlock(ip2, "active", macB, -time.Minute, time.Hour), true)
	h.start(30 * time.Second)
	h.d.rewrite("lease 203.0.113.10 {\n  starts 9 garbage;\n}\n"+nowBlock(ip2, "active", macB, -time.Minute, time.Hour), true)
	h.waitLog("holding every decision", 5*time.Second)
	time.Sleep(500 * time.Millisecond) // rounds in which an expiry could wrongly go out
	if got := h.queued(); len(got) != 0 {
		t.Fatalf("queued %q from a file that did not parse", got)
	}
	if testutil.ToFloat64(h.r.met.problems.WithLabelValues(problemSyntax)) == 0 {
		t.Error("no syntax problem counted")
	}
	if h.r.met.consistent.Load() {
		t.Error("file_consistent still 1")
	}
	// A restarted agent reads the held file whole again (its stored
	// position stayed on the last file that read whole).
	h.stop()
	h.start(time.Second) // the vanished lease has ended: it waits the grace
	if n := testutil.ToFloat64(h.r.met.snapshots.WithLabelValues("held")); n < 1 {
		t.Errorf("restarted agent did not read the bad file whole again (held=%v)", n)
	}
	// The restarted agent's first read of it is the error again, not
	// "still" at warn (it said so when the metric started at 0).
	h.waitLog("holding every decision", time.Second)
	if n := strings.Count(h.logText(), "holding every decision"); n != 2 {
		t.Errorf("%d error lines for the bad file, want 2 (one per agent run):\n%s", n, h.logText())
	}
	h.d.rewrite(nowBlock(ip2, "active", macB, -time.Minute, time.Hour), true)
	got, _ := h.waitQueued(1, 3*time.Second)
	if want := "expiry 203.0.113.10 00:16:3e:00:00:0a vanished"; got[0] != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	if !h.r.met.consistent.Load() {
		t.Error("file_consistent not back to 1")
	}
	// "Again" once, after the bad file; not at the first start's first
	// read (every start said it).
	if n := strings.Count(h.logText(), "reads whole again"); n != 1 {
		t.Errorf("%d \"reads whole again\" lines, want 1:\n%s", n, h.logText())
	}
}

// TestTaskSupersededHook: a hook's expiry for MAC A that arrives after
// the address was committed to MAC B is not queued.
func TestTaskSupersededHook(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(30 * time.Second)
	now := time.Now().Unix()
	ctx := context.Background()
	if err := h.r.Accept(ctx, []event.Event{hook(event.Commit, ip1, macB, now)}); err != nil {
		t.Fatal(err)
	}
	if err := h.r.Accept(ctx, []event.Event{hook(event.Expiry, ip1, macA, now-5), hook(event.Commit, ip2, macA, now)}); err != nil {
		t.Fatal(err)
	}
	got := h.queued()
	if want := "commit 203.0.113.10 00:16:3e:00:00:0b |commit 203.0.113.11 00:16:3e:00:00:0a "; strings.Join(got, "|") != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(h.r.met.superseded); n != 1 {
		t.Errorf("superseded = %v", n)
	}
}

// TestTaskSameSecondReplay: a client commits and releases in one second;
// the agent restarts and the commit comes again (a datagram read but not
// consumed when it was killed, a spool drained twice). The fine time of
// the release survives the restart and the replayed commit is not queued:
// queued, the region would end on the commit (make chaos, seed 42).
func TestTaskSameSecondReplay(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(30 * time.Second)
	now := time.Now().Unix()
	commit := hook(event.Commit, ip1, macA, now)
	commit.TimestampNS = now*1e9 + 100_000_000
	release := hook(event.Release, ip1, macA, now)
	release.TimestampNS = now*1e9 + 600_000_000
	if err := h.r.Accept(context.Background(), []event.Event{commit, release}); err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.start(30 * time.Second)
	replay := commit
	replay.Source = event.SourceSpool
	if err := h.r.Accept(context.Background(), []event.Event{replay}); err != nil {
		t.Fatal(err)
	}
	got := h.queued()
	if want := "commit 203.0.113.10 00:16:3e:00:00:0a |release 203.0.113.10 00:16:3e:00:00:0a "; strings.Join(got, "|") != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(h.r.met.superseded); n != 1 {
		t.Errorf("superseded = %v, want 1", n)
	}
}

// TestTaskModeKeptWhileConfUnreadable: the agent restarts while
// dhcpd.conf cannot be read (permissions being changed). The mode it last
// detected for sure, persisted, stays: replacement, not complement's safe
// side, which would have expired at once a dropped lease whose renewal's
// hook was on its way. Without a mode ever detected, complement it is.
func TestTaskModeKeptWhileConfUnreadable(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(30 * time.Second)
	if d := h.r.Mode(); d.Mode != ModeReplacement || d.Unsure {
		t.Fatalf("mode %+v, want replacement for sure", d)
	}
	h.stop()
	unreadable := func() {
		t.Helper()
		// As root no permission bit stops a read: a directory does.
		if err := os.Remove(h.conf); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(h.conf, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	unreadable()
	h.start(30 * time.Second)
	if d := h.r.Mode(); d.Mode != ModeReplacement || !d.Kept || !d.Unsure {
		t.Errorf("mode with dhcpd.conf unreadable after a restart = %+v, want replacement kept (and flagged unsure)", d)
	}
	h.stop()

	fresh := newHarness(t)
	fresh.d.rewrite("", true)
	if err := os.Remove(fresh.conf); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(fresh.conf, 0o755); err != nil {
		t.Fatal(err)
	}
	fresh.start(30 * time.Second)
	if d := fresh.r.Mode(); d.Mode != ModeComplement || d.Kept {
		t.Errorf("mode with dhcpd.conf never read = %+v, want complement, the safe side", d)
	}
}

// TestTaskToldPersisted: what hooks reported survives a restart, so the
// restarted agent does not send it again from the file.
func TestTaskToldPersisted(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(time.Second)
	now := time.Now().Unix()
	if err := h.r.Accept(context.Background(), []event.Event{hook(event.Commit, ip1, macA, now)}); err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.d.append(block(ip1, "active", macA, now, now+3600))
	h.start(time.Second)
	time.Sleep(1500 * time.Millisecond)
	if got := h.queued(); len(got) != 1 {
		t.Fatalf("queued %q, want only the hook's commit", got)
	}
	if _, _, told, ok := h.r.st.Lookup(netip.MustParseAddr(ip1)); !ok || told.MAC != macA {
		t.Fatalf("told %+v, %t", told, ok)
	}
}

// TestTaskRewriteKinds: a rewrite followed by server-duid is a restart,
// one without is hourly.
func TestTaskRewriteKinds(t *testing.T) {
	h := newHarness(t)
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), true)
	h.start(30 * time.Second)
	waitKinds := func(restart, hourly float64) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for {
			r := testutil.ToFloat64(h.r.met.rewrites.WithLabelValues("restart"))
			hr := testutil.ToFloat64(h.r.met.rewrites.WithLabelValues("hourly"))
			if r == restart && hr == hourly {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("restart %v hourly %v, want %v and %v\n%s", r, hr, restart, hourly, h.logText())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), true)
	waitKinds(1, 0)
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), false)
	waitKinds(1, 1)
	// A restart told by the pid file alone.
	if err := os.WriteFile(h.pid, []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), false)
	waitKinds(2, 1)
	if got := h.queued(); len(got) != 0 {
		t.Fatalf("restarts that kept the lease queued %q", got)
	}
}

// waitUntil waits up to 10 s for ok, failing the test with the log.
func (h *harness) waitUntil(what string, ok func() bool) {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("gave up waiting for %s\nlog:\n%s", what, h.logText())
		}
	}
}

// gauge is the reconciler's gauge called name.
func (h *harness) gauge(name string) float64 {
	h.t.Helper()
	for _, c := range h.r.met.collectors {
		ch := make(chan *prometheus.Desc, 4)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			if strings.Contains(d.String(), `"`+name+`"`) {
				return testutil.ToFloat64(c)
			}
		}
	}
	h.t.Fatalf("no gauge %s", name)
	return 0
}

// TestTaskLeasesFileUnreadable: a leases file the agent cannot read (a
// FIFO at its path here, which dhcpd's rewrite replaces at once;
// permissions on a rack, which root's test would not see) is told to the
// operator — one error line, not one a poll, the gauge, LeasesFile for
// /status with the error — and its recovery too; what dhcpd then writes
// is followed as usual.
func TestTaskLeasesFileUnreadable(t *testing.T) {
	h := newHarness(t)
	if err := syscall.Mkfifo(h.d.path, 0o644); err != nil {
		t.Fatal(err)
	}
	h.start(30 * time.Second)
	gauge := func() float64 { return h.gauge("leasekeeper_reconcile_leases_file_unreadable") }
	// Three failed reads (polls 200 ms apart), told once.
	h.waitUntil("three failed reads", func() bool { return testutil.ToFloat64(h.r.met.problems.WithLabelValues(problemRead)) >= 3 })
	fh := h.r.LeasesFile()
	if fh.UnreadableSince.IsZero() || fh.ReadError == "" || !fh.AbsentSince.IsZero() {
		t.Errorf("LeasesFile %+v, want unreadable since a time, with the error, not absent", fh)
	}
	if g := gauge(); g != 1 {
		t.Errorf("leasekeeper_reconcile_leases_file_unreadable %v while reading fails, want 1", g)
	}
	if n := strings.Count(h.logText(), "reading the leases file failed"); n != 1 {
		t.Errorf("the error logged %d times over three failed reads, want once\nlog:\n%s", n, h.logText())
	}

	h.d.rewrite("", true)
	h.waitUntil("the file's recovery reported", func() bool { return h.r.LeasesFile().UnreadableSince.IsZero() })
	if fh := h.r.LeasesFile(); fh.ReadError != "" {
		t.Errorf("LeasesFile %+v once it reads, want no error", fh)
	}
	h.d.append(nowBlock(ip1, "active", macA, 0, time.Hour))
	h.waitQueued(1, 5*time.Second)
	if g := gauge(); g != 0 {
		t.Errorf("leasekeeper_reconcile_leases_file_unreadable %v once it reads, want 0", g)
	}
	if !strings.Contains(h.logText(), "the leases file reads again") {
		t.Errorf("no log of the recovery\nlog:\n%s", h.logText())
	}
}

// TestTaskLeasesFileMissingThenUnreadable: a missing file that appears
// unreadable is reported unreadable, no longer missing; one that then
// goes again is missing, not "reads again" (a cold review: the first was
// still shown as missing, the second logged as read).
func TestTaskLeasesFileMissingThenUnreadable(t *testing.T) {
	h := newHarness(t)
	h.start(30 * time.Second)
	h.waitUntil("the missing file reported", func() bool { return !h.r.LeasesFile().AbsentSince.IsZero() })
	if err := os.Mkdir(h.d.path, 0o755); err != nil {
		t.Fatal(err)
	}
	h.waitUntil("the unreadable file reported", func() bool { return !h.r.LeasesFile().UnreadableSince.IsZero() })
	if fh := h.r.LeasesFile(); !fh.AbsentSince.IsZero() || h.gauge("leasekeeper_reconcile_leases_file_missing") != 0 {
		t.Errorf("LeasesFile %+v and the missing gauge %v once the path names a directory; want it not missing",
			fh, h.gauge("leasekeeper_reconcile_leases_file_missing"))
	}
	if err := os.Remove(h.d.path); err != nil {
		t.Fatal(err)
	}
	h.waitUntil("the missing file reported again", func() bool { return !h.r.LeasesFile().AbsentSince.IsZero() })
	if fh := h.r.LeasesFile(); !fh.UnreadableSince.IsZero() || h.gauge("leasekeeper_reconcile_leases_file_unreadable") != 0 {
		t.Errorf("LeasesFile %+v once the directory went; want missing, not unreadable", fh)
	}
	if strings.Contains(h.logText(), "the leases file reads again") {
		t.Errorf("a file gone logged as read again\nlog:\n%s", h.logText())
	}
	// What then appears is news, as any file that appears.
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Second, time.Hour), true)
	got, _ := h.waitQueued(1, 5*time.Second)
	if !strings.Contains(got[0], ip1) || !strings.Contains(got[0], "commit") {
		t.Errorf("queued %v, want the commit of %s", got, ip1)
	}
}

// TestTaskLeasesFIFO: a FIFO where dhcpd.leases should be neither blocks
// the task nor keeps it from being ready: the read fails, is counted and
// logged, and once dhcpd puts a real file there its events come.
func TestTaskLeasesFIFO(t *testing.T) {
	h := newHarness(t)
	if err := syscall.Mkfifo(h.d.path, 0o644); err != nil {
		t.Fatal(err)
	}
	h.start(30 * time.Second) // fails the test if not ready within 10 s
	if n := testutil.ToFloat64(h.r.met.problems.WithLabelValues(problemRead)); n < 1 {
		t.Errorf("no read problem counted for a FIFO (%v)", n)
	}
	if !strings.Contains(h.logText(), "not a regular file") {
		t.Errorf("the log does not say what is wrong:\n%s", h.logText())
	}
	os.Remove(h.d.path)
	h.d.rewrite("", true) // the first whole read is the baseline
	h.waitLog("leases file read whole", 5*time.Second)
	h.d.append(nowBlock(ip1, "active", macA, -time.Minute, time.Hour))
	got, _ := h.waitQueued(1, 5*time.Second)
	if !strings.HasPrefix(got[0], "commit "+ip1) {
		t.Errorf("queued %q", got)
	}
	h.stop()
}

// TestTaskRefusedAppend: a block dhcpd would refuse on its next start,
// appended to the file, is skipped as dhcpd skips it, with a warning and a
// count; the address keeps its earlier block, so nothing is decided.
func TestTaskRefusedAppend(t *testing.T) {
	h := newHarness(t)
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), true)
	h.start(30 * time.Second)
	h.d.append("lease " + ip1 + " {\n  starts 3 2026/01/07 10:00:00;\n  binding state free;\n  frobnicate;\n}\n")
	// Counted and logged; both are waited for, as neither is an
	// instant after the append (CI once read the log between the two).
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(h.r.met.problems.WithLabelValues(problemRefused)) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no refused block counted:\n%s", h.logText())
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.waitLog("a block dhcpd will refuse", 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	if got := h.queued(); len(got) != 0 {
		t.Errorf("queued %q from a refused block", got)
	}
	h.stop()
}

// TestTaskUnknownAppend: an appended statement dhcpd does not read in a
// leases file (dhcpd.conf's text, say) is skipped as dhcpd skips it,
// and told: logged and counted; the lease after it is followed.
func TestTaskUnknownAppend(t *testing.T) {
	h := newHarness(t)
	h.d.rewrite("", true)
	h.start(30 * time.Second)
	h.d.append("subnet 203.0.113.0 netmask 255.255.255.0 {\n  range 203.0.113.10 203.0.113.50;\n}\n" + nowBlock(ip1, "active", macA, 0, time.Hour))
	got, _ := h.waitQueued(1, 5*time.Second)
	if !strings.Contains(got[0], "commit "+ip1) {
		t.Errorf("queued %q, want the commit after the unknown statement", got)
	}
	h.waitLog("a statement dhcpd does not read", 5*time.Second)
	h.waitUntil("the unknown statement counted", func() bool { return testutil.ToFloat64(h.r.met.problems.WithLabelValues(problemUnknown)) == 1 })
	if !strings.Contains(h.logText(), `"statement":"line `) || !strings.Contains(h.logText(), `subnet`) {
		t.Errorf("the log does not name the statement:\n%s", h.logText())
	}
}

// TestTaskWholeProblems: what a whole read skips as dhcpd does is told
// as an appended statement is: a refused block and statements dhcpd does
// not read, each kind in one line naming the first, counted one by one.
// A file of such statements and no lease is most likely not dhcpd's
// leases file (dhcpd.conf named by mistake), and the log says so.
func TestTaskWholeProblems(t *testing.T) {
	t.Run("some", func(t *testing.T) {
		h := newHarness(t)
		// (The statements come first, and no server-duid follows, as
		// dhcpd's recovery from a refused block skips the statement
		// after it: that would count as a second.)
		h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour)+
			"option domain-name \"example.org\";\nauthoritative;\n"+
			"lease "+ip1+" {\n  starts 3 2026/01/07 10:00:00;\n  binding state free;\n  frobnicate;\n}\n", false)
		h.start(30 * time.Second)
		h.waitLog("blocks dhcpd will refuse", 5*time.Second)
		h.waitLog("statements dhcpd does not read", 5*time.Second)
		if n := testutil.ToFloat64(h.r.met.problems.WithLabelValues(problemRefused)); n != 1 {
			t.Errorf("refused counted %v, want 1", n)
		}
		if n := testutil.ToFloat64(h.r.met.problems.WithLabelValues(problemUnknown)); n != 2 {
			t.Errorf("unknown counted %v, want 2", n)
		}
		log := h.logText()
		if !strings.Contains(log, `"statements":2`) || !strings.Contains(log, `: option"`) {
			t.Errorf("the log does not count the statements or name the first:\n%s", log)
		}
		if strings.Contains(log, "holds no lease") {
			t.Errorf("a leases file with a lease called not one:\n%s", log)
		}
		h.stop()
	})
	t.Run("fatal", func(t *testing.T) {
		h := newHarness(t)
		// (dhcpd's recovery from the first refused block skips the
		// statement after it: a lease of another address goes there.)
		h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour)+
			"lease "+ip1+" {\n  starts 3 2026/01/07 10:00:00;\n  binding state free;\n  frobnicate;\n}\n"+
			nowBlock(ip2, "active", macB, -time.Minute, time.Hour)+
			"lease "+ip1+" {\n  starts 3 2026/01/07 10:00:00;\n  timestamp 3 2026/01/07 10:00:00;\n  binding state free;\n}\n", false)
		h.start(30 * time.Second)
		// The block dhcpd cannot start on is the one named, at error
		// level, though another comes first.
		h.waitLog("a block dhcpd cannot start on", 5*time.Second)
		if log := h.logText(); !strings.Contains(log, `"level":"error"`) || !strings.Contains(log, "does not start on this file") {
			t.Errorf("the fatal block is not the one named, at error level:\n%s", log)
		}
		h.stop()
	})
	// Not dhcpd's file: the agent knew a lease; the file named now holds
	// none (dhcpd.conf), and the lease's end passes. Taken for the
	// truth, it would vanish and its expiry go to the region while dhcpd
	// (writing its real file) may have renewed it: every decision is
	// held instead, as for a read that is not whole.
	t.Run("conf", func(t *testing.T) {
		h := newHarness(t)
		h.hooked()
		h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, 2*time.Second), true)
		h.start(time.Second)
		// Renamed into place whole (written in place, the agent could
		// read it empty first), with no header: no dhcpd wrote it.
		tmp := h.d.path + ".conf"
		if err := os.WriteFile(tmp, []byte("option domain-name \"example.org\";\nsubnet 203.0.113.0 netmask 255.255.255.0 {\n  range 203.0.113.10 203.0.113.50;\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, h.d.path); err != nil {
			t.Fatal(err)
		}
		h.waitLog("holds no lease, only statements dhcpd does not read", 5*time.Second)
		if !strings.Contains(h.logText(), `"level":"error"`) {
			t.Errorf("not an error:\n%s", h.logText())
		}
		time.Sleep(4 * time.Second) // past the lease's end and the grace
		if got := h.queued(); len(got) != 0 {
			t.Errorf("queued %q from a file that is not a leases file", got)
		}
		if h.gauge("leasekeeper_reconcile_file_consistent") != 0 {
			t.Error("the file counted consistent")
		}
		h.stop()
	})
}

// TestTaskUnreadableHoldsSynthesis: while the leases file cannot be read,
// what the agent last read may be out of date (dhcpd may have renewed a
// lease it still shows ending), so nothing is synthesised from it: a
// lease whose end passes meanwhile gets no expiry, and once the file reads
// again and shows the lease renewed, none ever comes. (Found by make
// chaos with the leases directory made unreadable.)
func TestTaskUnreadableHoldsSynthesis(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, 2*time.Second), true)
	h.start(time.Second)
	// The file becomes unreadable: something that is not a regular file
	// takes its place (the agent runs as root in tests, so a mode would
	// not stop it).
	os.Remove(h.d.path)
	if err := syscall.Mkfifo(h.d.path, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // past the lease's end and the grace
	if got := h.queued(); len(got) != 0 {
		t.Fatalf("queued %q while the file could not be read", got)
	}
	if !strings.Contains(h.logText(), "every synthesised event is held") {
		t.Errorf("the log does not say decisions are held:\n%s", h.logText())
	}
	// dhcpd had renewed it. Its rewrite renames the new file over the
	// path, as dhcpd does: removing the FIFO first left the path missing
	// for a moment, and a read then found no file, which counts as read
	// (CI, under the race detector: the ended lease's expiry went out).
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), false)
	time.Sleep(2 * time.Second)
	// No hook reported the renewal here, so its commit is synthesised
	// (rule 1); what must never come is an expiry.
	for _, q := range h.queued() {
		if strings.HasPrefix(q, "expiry ") {
			t.Errorf("queued %q for a lease dhcpd renewed", q)
		}
	}
	h.stop()
}

// TestTaskBusyWatchPaused: after a read that found blocks the
// inotify watch is off until the next read (reconciler.go, busyRound);
// it must be on again after it, so a lone block dhcpd appends once the
// burst is over is read at once. The poll is an hour here: only the watch
// can find it.
func TestTaskBusyWatchPaused(t *testing.T) {
	h := newHarness(t)
	h.d.rewrite("", true)
	h.beforeRun = func(r *Reconciler) { r.cfg.Poll = time.Hour }
	h.start(30 * time.Second)
	ip := func(i int) string { return fmt.Sprintf("203.0.113.%d", 10+i) }
	mac := func(i int) string { return fmt.Sprintf("00:16:3e:00:01:%02x", i) }
	var burst strings.Builder
	const n = 20
	for i := range n {
		burst.WriteString(nowBlock(ip(i), "active", mac(i), 0, time.Hour))
	}
	h.d.append(burst.String())
	h.waitQueued(n, 5*time.Second)
	for i := n; i < n+3; i++ {
		h.d.append(nowBlock(ip(i), "active", mac(i), 0, time.Hour))
		got, _ := h.waitQueued(i+1, 5*time.Second)
		if want := "commit " + ip(i) + " " + mac(i); !strings.HasPrefix(got[i], want) {
			t.Fatalf("event %d is %q, want %q…", i, got[i], want)
		}
	}
}

// TestTaskBusyRounds: leases dhcpd appends one by one, at a rate where
// each read would find only one (a block every 10 ms, 2 ms of settling),
// are read a busyRound apart once a read has found one: rounds, and so
// outbox commits, are bounded by time, not by leases (each costs an
// outbox commit, a request and its acknowledgement). Until issue 16's
// last change only a read that found 16 blocks made a round busy, and
// this wrote 60 commits for 60 leases.
func TestTaskBusyRounds(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	h.storeReg = reg
	h.d.rewrite("", true)
	h.beforeRun = func(r *Reconciler) { r.cfg.Poll = time.Hour }
	h.start(30 * time.Second)
	commits := func() uint64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "leasekeeper_outbox_commit_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		t.Fatal("no leasekeeper_outbox_commit_seconds")
		return 0
	}
	const n = 60
	c0, start := commits(), time.Now()
	for i := range n {
		h.d.append(nowBlock(fmt.Sprintf("203.0.113.%d", 10+i), "active", fmt.Sprintf("00:16:3e:00:02:%02x", i), 0, time.Hour))
		time.Sleep(10 * time.Millisecond)
	}
	h.waitQueued(n, 10*time.Second)
	elapsed := time.Since(start)
	// One round a busyRound, the first read, and flushes (flushDelay).
	limit := uint64(elapsed/busyRound) + 2 + uint64(elapsed/flushDelay) + 1
	if got := commits() - c0; got > limit {
		t.Errorf("%d outbox commits for %d leases appended over %s, want at most %d (one a busyRound)", got, n, elapsed.Round(time.Millisecond), limit)
	}
}

// TestTaskAwaitsBacklog: what the file asks to send waits for the hooks'
// backlog (AwaitBacklog): it goes once the backlog is taken, or, if it
// never is, after backlogMax, with a warning.
func TestTaskAwaitsBacklog(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taken bool // the backlog is taken (closed) after a while; else never
	}{{"taken", true}, {"never taken", false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.d.rewrite("", true)
			backlog := make(chan struct{})
			h.beforeRun = func(r *Reconciler) {
				r.AwaitBacklog(backlog)
				r.backlogMax = 5 * time.Second
			}
			h.start(30 * time.Second) // hookless: a commit is due at once
			h.d.append(nowBlock(ip1, "active", macA, 0, time.Hour))
			time.Sleep(500 * time.Millisecond) // many rounds and ticks
			if got := h.queued(); len(got) != 0 {
				t.Fatalf("queued before the backlog was taken: %q", got)
			}
			if tc.taken {
				close(backlog)
			}
			got, _ := h.waitQueued(1, 10*time.Second)
			if want := "commit 203.0.113.10 00:16:3e:00:00:0a missed-commit"; len(got) != 1 || got[0] != want {
				t.Fatalf("queued %q, want %q", got, want)
			}
			if warned := strings.Contains(h.logText(), "backlog"); warned == tc.taken {
				t.Errorf("warned of a backlog not taken: %t, want %t; log:\n%s", warned, !tc.taken, h.logText())
			}
		})
	}
}

// TestTaskLeasesFileAppearsWithLeases: a leases file missing when the
// agent first looked (dhcpd had written nothing) that appears holding a
// lease, dhcpd's first start having written it in one rewrite, is news,
// not a baseline the region is assumed to know: hookless, no hook told
// anyone of that lease (a cold review found it never sent).
func TestTaskLeasesFileAppearsWithLeases(t *testing.T) {
	h := newHarness(t)
	h.start(30 * time.Second)
	h.waitUntil("the missing file reported", func() bool { return !h.r.LeasesFile().AbsentSince.IsZero() })
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Second, time.Hour), true)
	got, _ := h.waitQueued(1, 5*time.Second)
	if !strings.Contains(got[0], ip1) || !strings.Contains(got[0], "commit") {
		t.Errorf("queued %v, want the commit of %s", got, ip1)
	}
}

// TestTaskLeasesFileMissing: a leases file that does not exist (dhcpd
// never ran, or dhcpd.leases names a file dhcpd does not write) is told
// to the operator — a warning, the gauge, LeasesFile for /status — and
// its appearance too; what dhcpd then writes is followed as usual.
func TestTaskLeasesFileMissing(t *testing.T) {
	h := newHarness(t)
	h.start(30 * time.Second)
	gauge := func() float64 { return h.gauge("leasekeeper_reconcile_leases_file_missing") }
	h.waitUntil("the missing file reported", func() bool { return !h.r.LeasesFile().AbsentSince.IsZero() })
	if path := h.r.LeasesFile().Path; path != h.d.path {
		t.Errorf("LeasesFile path %q, want %q", path, h.d.path)
	}
	if g := gauge(); g != 1 {
		t.Errorf("leasekeeper_reconcile_leases_file_missing %v while the file is missing, want 1", g)
	}
	if n := strings.Count(h.logText(), "the leases file does not exist"); n != 1 {
		t.Errorf("the warning logged %d times, want once\nlog:\n%s", n, h.logText())
	}

	h.d.rewrite("", true)
	h.waitUntil("the file's appearance reported", func() bool { return h.r.LeasesFile().AbsentSince.IsZero() })
	// What dhcpd appends is news.
	h.d.append(nowBlock(ip1, "active", macA, 0, time.Hour))
	h.waitQueued(1, 5*time.Second)
	if g := gauge(); g != 0 {
		t.Errorf("leasekeeper_reconcile_leases_file_missing %v once the file exists, want 0", g)
	}
	if !strings.Contains(h.logText(), "the leases file appeared") {
		t.Errorf("no log of the file's appearance\nlog:\n%s", h.logText())
	}
}

// TestTaskLeasesFileGone: a leases file moved away while the agent reads
// it is told as missing (a cold review: status said nothing, as the
// agent reads on in the file it holds, which dhcpd writes on), and its
// return too; what dhcpd appends meanwhile is still followed. dhcpd's
// own rewrite, which leaves the path empty for a moment, is not.
func TestTaskLeasesFileGone(t *testing.T) {
	h := newHarness(t)
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), true)
	h.start(30 * time.Second)
	h.d.rewrite(nowBlock(ip1, "active", macA, -time.Minute, time.Hour), true) // a rewrite: not gone
	time.Sleep(time.Second)                                                   // five polls
	if !h.r.LeasesFile().AbsentSince.IsZero() || strings.Contains(h.logText(), "gone from its path") {
		t.Fatalf("a rewrite reported as the file gone\nlog:\n%s", h.logText())
	}
	moved := h.d.path + ".moved"
	if err := os.Rename(h.d.path, moved); err != nil {
		t.Fatal(err)
	}
	h.waitUntil("the file's absence reported", func() bool { return !h.r.LeasesFile().AbsentSince.IsZero() })
	if g := h.gauge("leasekeeper_reconcile_leases_file_missing"); g != 1 || !strings.Contains(h.logText(), "gone from its path") {
		t.Errorf("gauge %v, want 1; log:\n%s", g, h.logText())
	}
	// dhcpd writes on to the file it has open.
	f, err := os.OpenFile(moved, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(nowBlock(ip2, "active", macB, 0, time.Hour)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, _ := h.waitQueued(1, 5*time.Second); !strings.HasPrefix(got[0], "commit 203.0.113.11") {
		t.Errorf("queued %q, want the commit dhcpd appended to the file held", got)
	}
	if err := os.Rename(moved, h.d.path); err != nil {
		t.Fatal(err)
	}
	h.waitUntil("the file's return reported", func() bool { return h.r.LeasesFile().AbsentSince.IsZero() })
	if !strings.Contains(h.logText(), "the leases file appeared") {
		t.Errorf("no log of the file's return\nlog:\n%s", h.logText())
	}
}

// TestHoldsToldCommit: an address dhcpd gives out again is held from the
// hook's commit on, before the leases file shows it: the orphans'
// releaser asks Holds just before it frees an address in the region,
// and the hook's commit may have reached the region already: MAAS's
// forced release of the discovered record takes it whatever MAC it is
// linked to (src/maasserver/api/ip_addresses.py, release: filtered by
// ip and alloc_type alone). A commit older than the orphaned lease's end
// is not a new lease.
func TestHoldsToldCommit(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(30 * time.Second)
	now := time.Now().Unix()
	ends := now - 60 // the orphaned lease's end
	if held, known := h.r.Holds(netip.MustParseAddr(ip1), ends); held || !known {
		t.Fatalf("before any news: held %t, known %t; want false, true", held, known)
	}
	if err := h.r.Accept(context.Background(), []event.Event{hook(event.Commit, ip1, macA, now)}); err != nil {
		t.Fatal(err)
	}
	if held, _ := h.r.Holds(netip.MustParseAddr(ip1), ends); !held {
		t.Error("a hook's commit since the lease's end, the file not showing it yet: not held")
	}
	if held, _ := h.r.Holds(netip.MustParseAddr(ip1), now+1); held {
		t.Error("a commit before the lease's end taken for a new lease")
	}
	if held, _ := h.r.Holds(netip.MustParseAddr(ip2), ends); held {
		t.Error("another address held")
	}
}
