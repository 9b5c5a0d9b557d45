package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/deliver"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// waitDelivered waits until the region has every event of evs and the
// agent's queue is empty.
func (e *env) waitDelivered(a *agentProc, evs []hookEvent, timeout time.Duration) {
	e.tb.Helper()
	e.waitRegionHas(a, evs, timeout, true)
}

// waitRegionHas waits until the region has every event of evs and, with
// empty, the agent's queue is empty.
func (e *env) waitRegionHas(a *agentProc, evs []hookEvent, timeout time.Duration, empty bool) {
	e.tb.Helper()
	want := make(map[string]bool, len(evs))
	for _, h := range evs {
		want[h.key()] = true
	}
	have := 0
	ok := waitFor(timeout, func() bool {
		have = 0
		got := map[string]bool{}
		for _, it := range e.region.items() {
			if k := itemKey(it); want[k] && !got[k] {
				got[k] = true
				have++
			}
		}
		return have == len(want) && (!empty || a.depth() == 0)
	})
	if !ok {
		e.tb.Fatalf("after %s the region has %d of %d events; agent queue depth %d", timeout, have, len(want), a.depth())
	}
}

// TestOrderPerIPUnderRandomFailures: a few thousand hook execs over 100
// addresses, commits, expiries and releases interleaved, while 30 % of the
// region's answers fail at random (503, resets, and answers lost after the
// batch was accepted). Per address the region must see exactly the exec
// order; the only duplicates allowed are whole batches sent again after a
// lost answer.
func TestOrderPerIPUnderRandomFailures(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 1000
	}
	e := newEnv(t)
	// Small batches: more requests, so more of them fail.
	a := e.startAgent(agentOptions{batchMax: 25})
	e.region.stub().SetFlaky(0.3, 42)
	evs := newGen(1).events(n, 0, 100)
	start := time.Now()
	if err := e.runHooks(evs, 4, nil); err != nil {
		t.Fatal(err)
	}
	execs := time.Since(start)
	e.waitDelivered(a, evs, 90*time.Second)
	took := time.Since(start)

	d := checkDelivered(t, evs, e.region.items())
	resends := checkResends(t, e.region.batches(), e.region.requests())
	faults := 0
	for _, r := range e.region.requests() {
		if r.Fault != "" {
			faults++
		}
	}
	t.Logf("%d hook execs in %s (%.0f/s); all delivered after %s; %d requests, %d failed on purpose, %d batches, %d duplicate items in %d resent batches",
		n, execs.Round(time.Millisecond), float64(n)/execs.Seconds(), took.Round(time.Millisecond),
		len(e.region.requests()), faults, len(e.region.batches()), d.dups, resends)
	if faults == 0 {
		t.Error("the stub injected no faults")
	}
	a.stop()
}

// TestRegionOutage: the region goes away (first its port refuses
// connections, then it answers 503 with Retry-After) while hooks go on;
// `leasekeeper status` shows the queue meanwhile; when the region is back
// everything arrives, in order, exactly once.
func TestRegionOutage(t *testing.T) {
	outage, n := 20*time.Second, 1000
	if testing.Short() {
		outage, n = 3*time.Second, 200
	}
	e := newEnv(t)
	a := e.startAgent(agentOptions{})
	g := newGen(2)
	before := g.events(100, 0, 50)
	if err := e.runHooks(before, 4, nil); err != nil {
		t.Fatal(err)
	}
	e.waitDelivered(a, before, 30*time.Second)

	down := time.Now()
	e.region.stop()
	during := g.events(n, 0, 50)
	if err := e.runHooks(during, 4, nil); err != nil {
		t.Fatal(err)
	}
	// Everything the hooks handed over is queued, and status says so.
	if !waitFor(30*time.Second, func() bool { return a.depth() == n }) {
		t.Fatalf("queue depth %d during the outage, want %d", a.depth(), n)
	}
	checkStatus := func(when string) {
		t.Helper()
		var rep statusReport
		if err := json.Unmarshal([]byte(cli(t, "status", "--json", "--url", a.base)), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.QueueDepth == nil || *rep.QueueDepth != n || rep.LastDelivery == nil || rep.LagSeconds == nil || *rep.LagSeconds <= 0 {
			t.Errorf("%s: leasekeeper status --json: %+v, want queue_depth %d, a last delivery and a lag", when, rep, n)
		}
		text := cli(t, "status", "--url", a.base)
		if !regexp.MustCompile(`(?m)^queue depth +` + strconv.Itoa(n) + `$`).MatchString(text) {
			t.Errorf("%s: leasekeeper status does not show the queue depth %d:\n%s", when, n, text)
		}
		t.Logf("%s, %s after the region went away:\n%s", when, time.Since(down).Round(time.Millisecond), text)
	}
	checkStatus("refusing connections")

	// Second half: the region is up but answers 503, Retry-After: 1.
	// (The first half lasts longer if the hooks took longer.)
	time.Sleep(time.Until(down.Add(outage / 2)))
	e.region.start(func(s *regionstub.Server) { s.Unavailable(outage/2, "1") })
	half := time.Now()
	checkStatus("answering 503")
	time.Sleep(time.Until(half.Add(outage / 2)))
	back := time.Now()

	after := g.events(100, 0, 50)
	if err := e.runHooks(after, 4, nil); err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(before, during, after)
	e.waitDelivered(a, all, 60*time.Second)
	t.Logf("outage %s; %d events queued meanwhile; all delivered %s after the region was back",
		back.Sub(down).Round(time.Millisecond), n, time.Since(back).Round(time.Millisecond))
	if d := checkDelivered(t, all, e.region.items()); d.dups != 0 {
		t.Errorf("%d duplicates, though no answer was lost", d.dups)
	}
	a.stop()
}

// activatedSocket creates the hook socket the way systemd's
// leasekeeper.socket does (ListenDatagram=, SocketMode=0622,
// PassCredentials=yes), in the test process, so that it outlives every
// agent started on it.
//
// PassCredentials=yes matters: the kernel attaches the sender's
// credentials to a datagram only if the receiving socket has SO_PASSCRED
// when the datagram is sent. Without it, the datagrams queued while no
// agent runs arrive with uid 65534 (overflowuid, pid 0), and the agent
// rightly rejects them as sent by a disallowed uid: they would be lost.
//
// Its queue holds net.unix.max_dgram_qlen=10 datagrams, the kernel's
// default, whatever the host is set to (512 where the package is
// installed), so that what the tests see of queueing and spooling does
// not depend on the machine (lab.UnixgramQlen). Without the privilege to
// make a network namespace, the host's setting applies.
func (e *env) activatedSocket() *os.File {
	e.tb.Helper()
	if f, err := lab.UnixgramQlen(e.socket, 10); err == nil {
		e.tb.Cleanup(func() { f.Close() })
		return f
	} else {
		e.tb.Logf("hook socket with the host's net.unix.max_dgram_qlen: %v", err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "unixgram", e.socket)
	if err != nil {
		e.tb.Fatal(err)
	}
	conn := pc.(*net.UnixConn)
	e.tb.Cleanup(func() { conn.Close() })
	if err := os.Chmod(e.socket, 0o622); err != nil {
		e.tb.Fatal(err)
	}
	f, err := conn.File()
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(func() { f.Close() })
	return f
}

// TestKill9Restart: 10 000 hook execs while the agent, on a socket passed
// by (emulated) systemd socket activation, is killed with SIGKILL at
// random moments and started again. Hooks that run while no agent does
// queue in the socket until it is full and then spool. Every event must
// reach the region, per address in exec order with the last event last;
// what comes twice is a replay of what a killed agent had taken but not
// finished with, which comes back after the kill, never before it.
func TestKill9Restart(t *testing.T) {
	n, kills := 10000, 6
	if testing.Short() {
		n, kills = 2000, 3
	}
	e := newEnv(t)
	sock := e.activatedSocket()
	evs := newGen(3).events(n, 0, 100)
	rng := rand.New(rand.NewPCG(3, 4))

	var execd atomic.Int64
	hooksDone := make(chan error, 1)
	start := time.Now()
	go func() { hooksDone <- e.runHooks(evs, 4, &execd) }()
	// The first agent starts late: the first hooks find the socket (it is
	// activated) with nobody reading, fill its queue and then spool.
	waitFor(30*time.Second, func() bool { return execd.Load() >= 300 })

	// A kill is the span from sending SIGKILL to the process being gone:
	// the agent may still deliver a batch within it.
	type kill struct{ from, to time.Time }
	var killTimes []kill
	var a *agentProc
	var hookErr error
	running := true
	for i := 0; ; i++ {
		a = e.startAgent(agentOptions{activated: sock})
		if i == kills {
			break
		}
		select {
		case hookErr = <-hooksDone:
			running = false
		case <-time.After(time.Duration(150+rng.IntN(900)) * time.Millisecond):
		}
		k := kill{from: time.Now()}
		a.kill()
		k.to = time.Now()
		killTimes = append(killTimes, k)
		time.Sleep(time.Duration(20+rng.IntN(600)) * time.Millisecond)
	}
	if running {
		hookErr = <-hooksDone
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	execs := time.Since(start)
	e.waitDelivered(a, evs, 90*time.Second)

	items := e.region.items()
	d := checkDelivered(t, evs, items)
	// A kill leaves three kinds of events whose fate the next agent does
	// not know, and sends again: the batch delivered but not acked, the
	// datagrams stored but not yet taken off the socket, the spool lines
	// stored before the spool file was removed. So per address at most
	// three replays per kill, and none before the first kill.
	if d.maxReplays > 3*len(killTimes) {
		t.Errorf("an address had its events replayed %d times, with %d kills", d.maxReplays, len(killTimes))
	}
	seen := map[string]bool{}
	for _, b := range e.region.batches() {
		for _, it := range b.Items {
			if seen[itemKey(it)] && b.At.Before(killTimes[0].from) {
				t.Errorf("%s %s delivered twice before the first kill", it.IP, itemKey(it))
			}
			seen[itemKey(it)] = true
		}
	}
	spooled, activated := 0, 0
	for i := 1; i <= e.agents; i++ {
		log, _ := os.ReadFile(filepath.Join(e.dir, "agent-"+strconv.Itoa(i)+".log"))
		for _, line := range strings.Split(string(log), "\n") {
			var l struct {
				Msg       string `json:"message"`
				Events    int    `json:"events"`
				Activated bool   `json:"activated"`
			}
			if json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			switch {
			case l.Msg == "drained the hook spool":
				spooled += l.Events
			case l.Msg == "hook socket listening" && l.Activated:
				activated++
			}
		}
	}
	if activated != e.agents {
		t.Errorf("%d of %d agents took the activated socket", activated, e.agents)
	}
	if spooled == 0 {
		t.Error("no hook spooled: the test did not exercise the spool path")
	}
	t.Logf("%d hook execs in %s with %d SIGKILLs; %d spool lines drained; %d items for %d events: %d duplicates in %d replays (at most %d for one address)",
		n, execs.Round(time.Millisecond), len(killTimes), spooled, d.items, d.unique, d.dups, d.replays, d.maxReplays)
	if t.Failed() {
		for _, k := range killTimes {
			t.Logf("kill from %s to %s", k.from.Format(time.StampMicro), k.to.Format(time.StampMicro))
		}
		for i, r := range e.region.requests() {
			if i == 300 {
				t.Log("…")
				break
			}
			t.Logf("request at %s: status %d, %d items, accepted %v, fault %q, key %s", r.At.Format(time.StampMicro), r.Status, r.Items, r.Accepted, r.Fault, r.IdempotencyKey)
		}
	}
	a.stop()
}

// TestPoisonItem (issue 11, must show): one event's address is in no
// subnet of the region, so MAAS fails every batch holding it with 500,
// while 1 000 other events flow. The others arrive within seconds, in
// order, the neighbours going past it while it is judged; the poisoned
// event is dead-lettered with the region's words once it failed alone
// right after a neighbour was accepted and kept failing for
// deliver.DefaultPoisonSpan (30 s), listed by
// `leasekeeper deadletter list`, and delivered by `leasekeeper deadletter
// retry` once the region has the subnet.
func TestPoisonItem(t *testing.T) {
	e := newEnv(t)
	a := e.startAgent(agentOptions{})
	g := newGen(4)
	poisonIP := ipOf(500) // 198.18.2.1; the others are in 198.18.0.0/24
	e.region.stub().SetSubnets([]regionstub.Subnet{regionstub.WholeSubnet("198.18.0.0/23")})
	others := g.events(1000, 0, 100)
	poison := g.event(500)
	evs := slices.Concat(others[:500], []hookEvent{poison}, others[500:])
	if err := e.runHooks(evs, 4, nil); err != nil {
		t.Fatal(err)
	}
	execd := time.Now()
	e.waitRegionHas(a, others, 30*time.Second, false) // the poison is judged meanwhile
	took := time.Since(execd)
	// Had they waited for the poison's judgment, they would have taken
	// its span at least; half of it leaves a loaded machine room.
	if took > deliver.DefaultPoisonSpan/2 {
		t.Errorf("the 1 000 good events took %s after the last hook to arrive", took)
	}
	if !waitFor(deliver.DefaultPoisonSpan+30*time.Second, func() bool { rep, err := a.status(); return err == nil && *rep.DeadLetters == 1 }) {
		t.Fatal("no dead letter")
	}
	if d := checkDelivered(t, others, e.region.items()); d.dups != 0 {
		t.Errorf("%d duplicates", d.dups)
	}

	var dls []deadLetter
	if err := json.Unmarshal([]byte(cli(t, "deadletter", "list", "--json", "--socket", e.control())), &dls); err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Event.IP != poisonIP || !strings.HasPrefix(dls[0].Reason, "HTTP 500: ") ||
		!strings.Contains(dls[0].Reason, regionstub.MsgInternalError) {
		t.Fatalf("deadletter list --json: %+v, want the event for %s with the region's 500", dls, poisonIP)
	}
	if itemKey(dls[0].Event) != poison.key() {
		t.Errorf("dead letter %+v is not the poisoned event (%s)", dls[0].Event, poison.key())
	}
	list := cli(t, "deadletter", "list", "--socket", e.control())
	if !strings.Contains(list, poisonIP) {
		t.Errorf("deadletter list does not show %s:\n%s", poisonIP, list)
	}
	t.Logf("1 000 good events delivered %s after the last hook; dead letters:\n%s", took.Round(time.Millisecond), list)

	e.region.stub().AddSubnet(regionstub.WholeSubnet("198.18.2.0/24"))
	cli(t, "deadletter", "retry", strconv.FormatUint(dls[0].Seq, 10), "--socket", e.control())
	e.waitDelivered(a, []hookEvent{poison}, 10*time.Second)
	if got := e.region.stub().ItemsFor(poisonIP); len(got) != 1 || got[0].Hostname != poison.host && poison.action == event.Commit {
		t.Errorf("region items for %s after the retry: %+v", poisonIP, got)
	}
	if left := strings.TrimSpace(cli(t, "deadletter", "list", "--json", "--socket", e.control())); left != "[]" {
		t.Errorf("dead letters after the retry: %s", left)
	}
	a.stop()
}

// TestSpoolWhileAgentDown: hooks run before the agent ever started (no
// socket at all) and spool; then the agent starts while more hooks run.
// The spooled events arrive, in order, before the later ones.
func TestSpoolWhileAgentDown(t *testing.T) {
	e := newEnv(t)
	g := newGen(5)
	early := g.events(300, 0, 30)
	if err := e.runHooks(early, 4, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.socket); err == nil {
		t.Fatal("a socket exists before the agent started")
	}
	b, err := os.ReadFile(filepath.Join(e.spool, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines != len(early) {
		t.Fatalf("spool holds %d lines, want %d", lines, len(early))
	}
	later := g.events(300, 0, 30)
	a := e.startAgent(agentOptions{noWait: true})
	if err := e.runHooks(later, 4, nil); err != nil {
		t.Fatal(err)
	}
	a.waitReady(30 * time.Second)
	all := slices.Concat(early, later)
	e.waitDelivered(a, all, 30*time.Second)
	if d := checkDelivered(t, all, e.region.items()); d.dups != 0 {
		t.Errorf("%d duplicates", d.dups)
	}
	spool := a.metric(`leasekeeper_events_received_total{source="spool"}`)
	hook := a.metric(`leasekeeper_events_received_total{source="hook"}`)
	if spool < float64(len(early)) || spool+hook != float64(len(all)) {
		t.Errorf("received: %v from the spool, %v from the socket; want at least %d from the spool, %d in all", spool, hook, len(early), len(all))
	}
	if ents, _ := os.ReadDir(e.spool); len(ents) != 0 {
		t.Errorf("spool not empty after the drain: %v", ents)
	}
	t.Logf("%d events spooled before the agent started, %d more while it started (%v of them spooled too): all in order", len(early), len(later), spool-float64(len(early)))
	a.stop()
}
