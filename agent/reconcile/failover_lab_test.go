package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/prometheus/client_golang/prometheus"
)

// pairConf is dhcpd.conf for one side of a failover pair shaped as MAAS
// generates it (primary with mclt and split 255, pools naming the peer,
// default ports), with lab timers: a short mclt, max-response-delay and
// auto-partner-down, so that partner-down comes within seconds.
func pairConf(t *testing.T, w *world, role, me, peer string) string {
	return pairConfRange(t, w, role, me, peer, 100, 150)
}

// pairConfRange is pairConf with the pool's range 203.0.113.lo-hi.
func pairConfRange(t *testing.T, w *world, role, me, peer string, lo, hi int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ping-check false;\nauthoritative;\nddns-update-style none;\ndefault-lease-time %d;\nmax-lease-time %d;\nmin-lease-time %d;\n",
		w.lease, w.lease, w.lease)
	b.WriteString(lab.HookSnippet(t, w.hook, filepath.Join(w.dir, "hook.sock"), filepath.Join(w.dir, "spool")))
	mrd, mclt, apd := 5, 10, "  auto-partner-down 1;\n"
	if w.maasTimers {
		// As MAAS writes them (src/maasserver/templates/dhcp/
		// dhcpd.conf.template): a survivor stays
		// communications-interrupted until its partner returns.
		mrd, mclt, apd = 60, 3600, ""
	}
	fmt.Fprintf(&b, "failover peer \"fo-vlan1\" {\n  %s;\n  address %s;\n  peer address %s;\n  max-response-delay %d;\n  max-unacked-updates 10;\n  load balance max seconds 3;\n%s", role, me, peer, mrd, apd)
	if role == "primary" {
		fmt.Fprintf(&b, "  mclt %d;\n  split 255;\n", mclt)
	}
	b.WriteString("}\n")
	b.WriteString(w.lab.SubnetConf(fmt.Sprintf("  pool {\n    failover peer \"fo-vlan1\";\n    range 203.0.113.%d 203.0.113.%d;\n  }", lo, hi)))
	return b.String()
}

// myState is the last "my state" dhcpd recorded in its leases file.
func myState(t *testing.T, d *lab.Dhcpd) string {
	t.Helper()
	b, err := os.ReadFile(d.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := parser.ParseLeases(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range ls.Table.Failover() {
		return fs.MyState
	}
	return ""
}

// recovered reports whether d's file shows it recovered: a record of
// its own state recover (or recover-wait, recover-done), then normal.
// (The first records after a restart repeat the state dhcpd had before
// it: normal, before dhcpd learns its partner's partner-down.)
func recovered(t *testing.T, d *lab.Dhcpd) bool {
	t.Helper()
	ls, err := parser.ParseLeases(strings.NewReader(readFile(t, d.LeasesPath())))
	if err != nil {
		t.Fatal(err)
	}
	recovering := false
	for _, fs := range ls.Table.FailoverLog() {
		switch {
		case strings.HasPrefix(fs.MyState, "recover"):
			recovering = true
		case recovering && fs.MyState == "normal":
			return true
		}
	}
	return false
}

func waitState(t *testing.T, d *lab.Dhcpd, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for myState(t, d) != state {
		if time.Now().After(deadline) {
			t.Fatalf("dhcpd (%s) not in failover state %s after %s (last %q); its log:\n%s", d.Dir, state, within, myState(t, d), d.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// truth is the pair's truth: the active leases (IP → MAC) of a file.
func truth(t *testing.T, d *lab.Dhcpd) map[string]string {
	t.Helper()
	b, err := os.ReadFile(d.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := parser.ParseLeases(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	now := parser.Time(time.Now().Unix())
	ls.Table.Each(func(l *parser.Lease) {
		if l.Binding(now) == parser.StateActive {
			out[l.IP.String()] = parser.HexString(l.HardwareAddr)
		}
	})
	return out
}

func regionView(stub *regionstub.Server) map[string]string {
	out := map[string]string{}
	for ip, l := range stub.Leases() {
		out[ip] = l.MAC
	}
	return out
}

// checkOrder checks, per address, that the region never got an event
// older than one it had (it applies in arrival order, comparing no
// timestamps) and never the same event twice.
func checkOrder(t *testing.T, as []arrival) {
	t.Helper()
	last := map[string]arrival{}
	for _, a := range as {
		if p, ok := last[a.IP]; ok {
			if a.Timestamp < p.Timestamp {
				t.Errorf("%s: older state after a newer one: %s after %s", a.IP, a, p)
			}
			if a.Action == p.Action && a.MAC == p.MAC && (a.Action != event.Commit || a.Timestamp == p.Timestamp) {
				t.Errorf("%s: duplicate: %s after %s", a.IP, a, p)
			}
		}
		last[a.IP] = a
	}
}

// TestLabFailoverPair runs two real dhcpd in failover, MAAS-shaped
// (primary, split 255), each with leasekeeper-hook and its own agent
// following its own file, and one region stub. Clients lease from the
// primary; the primary rack dies (dhcpd and agent); the secondary goes
// partner-down and serves; leases expire there; the primary returns and
// the pair is normal again. The region's view equals the pair's truth
// throughout, no synthesised event repeats a hooked one, and per address
// no older state follows a newer one.
func TestLabFailoverPair(t *testing.T) {
	lab.Require(t, "dhcpd", "dhclient")
	t.Parallel()
	w1, w2 := startPair(t, 20)

	// Normal: the primary serves (split 255), its hooks report; the
	// secondary's file gets the binding updates and its agent is quiet.
	c1, c2 := w1.lab.AddClient("c1"), w1.lab.AddClient("c2")
	ip1, ip2 := w1.dhclient(c1), w1.dhclient(c2)
	w1.waitArrival(ip1, event.Commit, mac(c1), 5*time.Second)
	w1.waitArrival(ip2, event.Commit, mac(c2), 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w1.waitArrival(ip1, event.Release, mac(c1), 5*time.Second)
	time.Sleep(w2.grace + 1500*time.Millisecond) // anything the secondary would synthesise comes now
	if got := synthesised(t, w2.agent.reg); len(got) != 0 {
		t.Fatalf("the secondary's agent synthesised %v for the primary's leases", got)
	}
	if got, want := regionView(w1.stub), truth(t, w2.d); !equalMaps(got, want) {
		t.Fatalf("region %v, the secondary's file %v", got, want)
	}

	// The primary rack dies: dhcpd and agent.
	w1.stopAgent()
	if err := w1.d.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, w2.d, "partner-down", 30*time.Second)
	// c2 stops renewing (its dhclient gone): its lease runs out on the
	// survivor, whose dhcpd writes it expired and runs no hook yet.
	if err := c2.Kill(); err != nil {
		t.Fatal(err)
	}
	// A new client leases from the survivor; its hook reports.
	c3 := w1.lab.AddClient("c3")
	ip3 := w2.dhclient(c3)
	// The survivor's news waits for the dead partner's agent (the pair
	// channel) up to hold_max, then goes on alone.
	w2.waitArrival(ip3, event.Commit, mac(c3), labHoldMax+5*time.Second)
	w2.waitArrival(ip2, event.Expiry, mac(c2), 40*time.Second)
	if err := c3.Kill(); err != nil {
		t.Fatal(err)
	}
	w2.waitArrival(ip3, event.Expiry, mac(c3), 60*time.Second)

	if got := synthesised(t, w2.agent.reg); got["missed-expiry"]+got["ends-passed"] == 0 {
		t.Errorf("the survivor synthesised %v, want the expiry its hooks never report", got)
	}
	if !strings.Contains(w2.agent.logs.String(), "taking over") {
		t.Errorf("the survivor's agent did not log taking over:\n%s", w2.agent.logs)
	}

	// The primary rack returns on its own files: recover, then normal.
	// Its file learns from the survivor what happened; no stale event
	// reaches the region, and the survivor steps back.
	before := len(w1.arrivals(netip.Addr{}))
	w1.startAgent() // the rack's agent is up before its dhcpd (see docs/failover.md, Limits: spooled replays)
	if err := w1.d.Restart(""); err != nil {
		t.Fatal(err)
	}
	waitState(t, w1.d, "normal", 60*time.Second)
	waitState(t, w2.d, "normal", 60*time.Second)
	time.Sleep(w1.grace + 1500*time.Millisecond)
	if after := w1.arrivals(netip.Addr{}); len(after) != before {
		t.Errorf("the region got events on the primary's return:\n%s", describeArrivals(after[before:]))
	}
	if !strings.Contains(w2.agent.logs.String(), "stepping back") {
		t.Errorf("the survivor's agent did not step back:\n%s", w2.agent.logs)
	}
	// Normal again: the primary serves and its hook reports, once.
	c4 := w1.lab.AddClient("c4")
	ip4 := w1.dhclient(c4)
	w1.waitArrival(ip4, event.Commit, mac(c4), 5*time.Second)
	time.Sleep(w2.grace + 1500*time.Millisecond)
	w1.stopAgent()
	w2.stopAgent()
	if got := w1.lastSynth; len(got) != 0 {
		t.Errorf("the returned primary's agent synthesised %v", got)
	}
	all := w1.arrivals(netip.Addr{})
	t.Logf("the region got:\n%s", describeArrivals(all))
	checkOrder(t, all)
	if got, want := regionView(w1.stub), truth(t, w1.d); !equalMaps(got, want) {
		t.Errorf("region %v, the pair's truth (primary's file) %v", got, want)
	}
	if a, b := truth(t, w1.d), truth(t, w2.d); !equalMaps(a, b) {
		t.Errorf("the peers disagree: primary %v, secondary %v", a, b)
	}
}

// startPair starts one lab, one stub and two racks, with leases of lease
// seconds: w1 (the primary, in the lab's server namespace on the bridge,
// 203.0.113.1) and w2 (the secondary, a second server namespace on the
// bridge, 203.0.113.2), each dhcpd with leasekeeper-hook and its agent,
// once the pair is normal.
func startPair(t *testing.T, lease int) (w1, w2 *world) {
	t.Helper()
	return startPairTimers(t, lease, false)
}

// startPairMAAS is startPair with MAAS's failover timers (no
// auto-partner-down).
func startPairMAAS(t *testing.T, lease int) (w1, w2 *world) {
	t.Helper()
	return startPairTimers(t, lease, true)
}

func startPairTimers(t *testing.T, lease int, maasTimers bool) (w1, w2 *world) {
	t.Helper()
	w1 = newWorld(t, hooksOK, lease)
	w2 = &world{t: t, lab: w1.lab, stub: w1.stub, files: w1.files, dir: t.TempDir(), hooks: hooksOK, hook: w1.hook, lease: lease, grace: 2 * time.Second, maasTimers: maasTimers}
	w1.grace, w1.maasTimers = 2*time.Second, maasTimers
	sec := w1.lab.AddServer("sec", netip.MustParseAddr("203.0.113.2"))
	conf1 := pairConf(t, w1, "primary", "203.0.113.1", "203.0.113.2")
	conf2 := pairConf(t, w2, "secondary", "203.0.113.2", "203.0.113.1")
	w1.d = w1.lab.StartDhcpd(t, lab.DhcpdConfig{Conf: conf1})
	w2.d = w1.lab.StartDhcpd(t, lab.DhcpdConfig{Conf: conf2, NS: sec.NS})
	waitState(t, w1.d, "normal", 30*time.Second)
	waitState(t, w2.d, "normal", 30*time.Second)
	pairChannel(t, w1, w2)
	w1.startAgent()
	w2.startAgent()
	for _, w := range []*world{w1, w2} {
		if !strings.Contains(w.agent.logs.String(), `"peer":"fo-vlan1"`) {
			t.Fatalf("agent did not see the failover pair:\n%s", w.agent.logs)
		}
	}
	return w1, w2
}

// labHoldMax is the labs' pair.hold_max: a survivor's news waits this
// long for its dead partner's agent before going on alone.
const labHoldMax = 8 * time.Second

// pairChannel gives the two racks' agents the pair channel (agent/pair),
// as the README recommends for a pair: one key, a UDP port each on
// loopback (the agents run in the test's own namespace).
func pairChannel(t *testing.T, w1, w2 *world) {
	t.Helper()
	pc, err := lab.NewPairChannel(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w1.pair = config.Pair{Listen: pc.Listen[0], Peer: pc.Listen[1], KeyFile: pc.KeyFile, HoldMax: labHoldMax}
	w2.pair = config.Pair{Listen: pc.Listen[1], Peer: pc.Listen[0], KeyFile: pc.KeyFile, HoldMax: labHoldMax}
}

// TestLabFailoverShrink is the range shrink MAAS applies to both racks
// of a pair: both dhcpd get the smaller range and restart together, and
// both drop the lease of a client that left (no hook runs for it). The
// region gets exactly one expiry for it, from the primary's agent, not
// before the lease's own end; the secondary's agent sends nothing; per
// address no duplicate and no older state after a newer one. Then a
// lease ends in normal state: its hook's expiry reaches the region once.
func TestLabFailoverShrink(t *testing.T) {
	lab.Require(t, "dhcpd", "dhclient")
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w1, w2 := startPair(t, 20)
	c1, c2 := w1.lab.AddClient("c1"), w1.lab.AddClient("c2")
	ip1, ip2 := w1.dhclient(c1), w1.dhclient(c2)
	w1.waitArrival(ip1, event.Commit, mac(c1), 5*time.Second)
	w1.waitArrival(ip2, event.Commit, mac(c2), 5*time.Second)
	if err := c1.Kill(); err != nil { // no renewal: the lease runs out
		t.Fatal(err)
	}
	ends := w1.leaseEnds(ip1)

	// MAAS writes both racks' dhcpd.conf and restarts both. Together:
	// one peer down for longer than max-response-delay would let the
	// other declare partner-down (the lab sets auto-partner-down).
	lo, hi := shrinkAway(ip1, ip2)
	confs := []string{
		pairConfRange(t, w1, "primary", "203.0.113.1", "203.0.113.2", lo, hi),
		pairConfRange(t, w2, "secondary", "203.0.113.2", "203.0.113.1", lo, hi),
	}
	errs := make(chan error, 2)
	for i, w := range []*world{w1, w2} {
		go func() { errs <- w.d.Restart(confs[i]) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("dhcpd restart: %v", err)
		}
	}
	for _, w := range []*world{w1, w2} {
		if strings.Contains(readFile(t, w.d.LeasesPath()), "lease "+ip1.String()+" ") {
			t.Fatalf("dhcpd (%s) kept %s after the shrink; the test premise is gone", w.d.Dir, ip1)
		}
	}
	for _, w := range []*world{w1, w2} {
		if s := myState(t, w.d); s == reconcile.StatePartnerDown {
			t.Fatalf("dhcpd (%s) went partner-down during the restart; the test premise is gone", w.d.Dir)
		}
	}
	// The primary waits up to 20 s after the rewrite for its dhcpd to
	// learn the partner's state (pairSettle) before it expires the lease.
	w1.waitArrival(ip1, event.Expiry, mac(c1), max(time.Until(time.Unix(ends, 0)), 20*time.Second)+15*time.Second)
	waitState(t, w1.d, "normal", 30*time.Second)
	waitState(t, w2.d, "normal", 30*time.Second)

	// An expiry in normal state: the primary writes the lease expired,
	// and runs on expiry only once the secondary's ack frees it. Its
	// agent has read the expired block by then (recorded, not told):
	// the hook's expiry is the news and must reach the region, once.
	c3 := w1.lab.AddClient("c3")
	ip3 := w1.dhclient(c3)
	w1.waitArrival(ip3, event.Commit, mac(c3), 5*time.Second)
	if err := c3.Kill(); err != nil {
		t.Fatal(err)
	}
	ends3 := w1.leaseEnds(ip3)
	w1.waitArrival(ip3, event.Expiry, mac(c3), time.Until(time.Unix(ends3, 0))+15*time.Second)
	time.Sleep(w2.grace + 1500*time.Millisecond) // anything else would come now
	w1.stopAgent()
	w2.stopAgent()

	all := w1.arrivals(netip.Addr{})
	t.Logf("the region got:\n%s", describeArrivals(all))
	frees := endsOf(all)
	if len(frees) != 2 || frees[0].IP != ip1.String() || frees[0].MAC != mac(c1) || frees[0].Action != event.Expiry ||
		frees[1].IP != ip3.String() || frees[1].MAC != mac(c3) || frees[1].Action != event.Expiry {
		t.Fatalf("want exactly one expiry for %s %s (dropped by the shrink), then one for %s %s (its hook)", ip1, mac(c1), ip3, mac(c3))
	}
	if at := frees[0].at.Unix(); at < ends {
		t.Errorf("expiry arrived at %d, before the lease's end %d", at, ends)
	}
	if at := frees[1].at.Unix(); at < ends3 {
		t.Errorf("expiry arrived at %d, before the lease's end %d", at, ends3)
	}
	if got := w1.lastSynth; len(got) != 1 || got["vanished"] != 1 {
		t.Errorf("the primary's agent synthesised %v, want vanished=1 only", got)
	}
	if got := w2.lastSynth; len(got) != 0 {
		t.Errorf("the secondary's agent synthesised %v, want nothing", got)
	}
	checkOrder(t, all)
	if got, want := regionView(w1.stub), truth(t, w1.d); !equalMaps(got, want) {
		t.Errorf("region %v, the pair's truth (primary's file) %v", got, want)
	}
	if a, b := truth(t, w1.d), truth(t, w2.d); !equalMaps(a, b) {
		t.Errorf("the peers disagree: primary %v, secondary %v", a, b)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestLabFailoverShrinkPrimaryDown is the range shrink MAAS applies while
// the primary rack is down: the survivor (partner-down) restarts with the
// smaller range, drops the lease of a client that left and speaks for it;
// later the primary returns with the same smaller range, drops the same
// lease from its own file and recovers (its partner was partner-down).
// The region gets exactly one expiry for the lease: the survivor's, not
// before the lease's end; none from the returning primary (whose file
// last showed the lease active, and who speaks for a shrink in normal
// state: TestLabFailoverShrink). The primary's agent returns before its
// dhcpd, and reads its records as dhcpd appends them; or after dhcpd has
// recovered and gone back to normal, and reads them in one whole read
// (a CI run's agent read that late under load, and took the last record
// alone, normal, for the pair's state: two expiries).
func TestLabFailoverShrinkPrimaryDown(t *testing.T) {
	lab.Require(t, "dhcpd", "dhclient")
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	for _, agentFirst := range []bool{true, false} {
		name := "dhcpd first"
		if agentFirst {
			name = "agent first"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			shrinkPrimaryDown(t, agentFirst)
		})
	}
}

func shrinkPrimaryDown(t *testing.T, agentFirst bool) {
	w1, w2 := startPair(t, 20)
	// One client, which leaves: a second one renewing through the
	// primary's death would add acks from both servers in one second
	// (its unicast retry to the returning primary, its broadcast to the
	// survivor), which is not this test's matter.
	c1, ip1, ends := w1.leaseAndLeave("c1")
	ip2 := ip1.Next() // an address the smaller range keeps

	// The primary rack dies; the secondary takes over.
	w1.stopAgent()
	if err := w1.d.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, w2.d, reconcile.StatePartnerDown, 30*time.Second)

	// MAAS shrinks the range: the survivor restarts with it now, the
	// primary's rack gets it when it returns.
	lo, hi := shrinkAway(ip1, ip2)
	if err := w2.d.Restart(pairConfRange(t, w2, "secondary", "203.0.113.2", "203.0.113.1", lo, hi)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(readFile(t, w2.d.LeasesPath()), "lease "+ip1.String()+" ") {
		t.Fatalf("the survivor kept %s after the shrink; the test premise is gone", ip1)
	}
	waitState(t, w2.d, reconcile.StatePartnerDown, 30*time.Second)
	first := w2.waitArrival(ip1, event.Expiry, mac(c1), time.Until(time.Unix(ends, 0))+15*time.Second)
	if at := first.at.Unix(); at < ends {
		t.Errorf("expiry arrived at %d, before the lease's end %d", at, ends)
	}

	// The primary returns with the smaller range: its file drops the
	// lease too, and it recovers from its partner's partner-down.
	if agentFirst {
		w1.startAgent()
	}
	if err := w1.d.Restart(pairConfRange(t, w1, "primary", "203.0.113.1", "203.0.113.2", lo, hi)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(readFile(t, w1.d.LeasesPath()), "lease "+ip1.String()+" ") {
		t.Fatalf("the primary kept %s after the shrink; the test premise is gone", ip1)
	}
	for deadline := time.Now().Add(60 * time.Second); !recovered(t, w1.d); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the primary did not recover from its partner's partner-down within 60s; its log:\n%s", w1.d.Logs())
		}
	}
	waitState(t, w2.d, "normal", 60*time.Second)
	if !agentFirst {
		w1.startAgent()
	}
	all := settlePair(t, w1, w2)
	got := endsOf(w1.arrivals(ip1))
	if len(got) != 1 {
		t.Errorf("want exactly one expiry for %s %s (dropped by the shrink on both peers), got %d:\n%s", ip1, mac(c1), len(got), describeArrivals(got))
	}
	if got := w2.lastSynth; got["vanished"] != 1 {
		t.Errorf("the survivor's agent synthesised %v, want vanished=1", got)
	}
	if got := w1.lastSynth; got["vanished"] != 0 {
		t.Errorf("the returning primary's agent synthesised %v, want no vanished", got)
	}
	checkOrder(t, all)
	if got, want := regionView(w1.stub), truth(t, w1.d); !equalMaps(got, want) {
		t.Errorf("region %v, the pair's truth (primary's file) %v", got, want)
	}
	if a, b := truth(t, w1.d), truth(t, w2.d); !equalMaps(a, b) {
		t.Errorf("the peers disagree: primary %v, secondary %v", a, b)
	}
	logPair(t, "the returning primary", w1, w1, w2)
}

// settlePair waits until anything else would have come, and whatever
// either agent still holds for later has been sent (or dropped):
// nothing pending, the outboxes empty; then stops both agents and
// returns (and logs) what the region got.
func settlePair(t *testing.T, w1, w2 *world) []arrival {
	t.Helper()
	time.Sleep(w1.grace + 1500*time.Millisecond)
	w1.waitQuiet(60 * time.Second)
	w2.waitQuiet(60 * time.Second)
	w1.stopAgent()
	w2.stopAgent()
	all := w1.arrivals(netip.Addr{})
	t.Logf("the region got:\n%s", describeArrivals(all))
	return all
}

// endsOf is the ends (expiries and releases) among as.
func endsOf(as []arrival) []arrival {
	var out []arrival
	for _, a := range as {
		if a.Action != event.Commit {
			out = append(out, a)
		}
	}
	return out
}

// logPair logs, when t failed, the reconciler's lines of the agent
// that (w) last stopped and each file's failover records.
func logPair(t *testing.T, who string, w *world, ws ...*world) {
	t.Helper()
	if !t.Failed() {
		return
	}
	t.Logf("%s's reconciler (debug lines left out; whole logs below):\n%s", who, reconcileLines(w.lastLogs.String()))
	for _, w := range ws {
		t.Logf("%s failover records:\n%s", w.d.Dir, failoverRecords(readFile(t, w.d.LeasesPath())))
	}
}

// failoverRecords is the failover state records of a leases file's text,
// with the line each starts on, and between them the lease blocks, a
// line per run of them (for the test's log: short enough that the agent
// logs after it survive a CI log's truncation).
func failoverRecords(text string) string {
	var b strings.Builder
	var run []string // the addresses of the lease blocks since the last record
	runAt := 0
	endRun := func() {
		if len(run) > 0 {
			fmt.Fprintf(&b, "%5d: %d lease blocks: %s\n", runAt, len(run), strings.Join(run, " "))
			run = nil
		}
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "failover peer ") || strings.HasPrefix(l, "server-duid") {
			endRun()
			fmt.Fprintf(&b, "%5d: %s", i+1, l)
			for j := i + 1; j < len(lines) && j < i+4 && strings.HasPrefix(lines[j], "  "); j++ {
				b.WriteString(" |" + strings.TrimSpace(lines[j]))
			}
			b.WriteString("\n")
		}
		if ip, ok := strings.CutPrefix(l, "lease "); ok {
			if len(run) == 0 {
				runAt = i + 1
			}
			ip, _, _ = strings.Cut(ip, " ")
			run = append(run, strings.TrimPrefix(ip, "203.0.113."))
		}
	}
	endRun()
	return b.String()
}

// reconcileLines is an agent log's lines from its reconciler, but debug.
func reconcileLines(log string) string {
	var b strings.Builder
	for l := range strings.Lines(log) {
		if strings.Contains(l, `"component":"reconcile"`) && !strings.Contains(l, `"level":"debug"`) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// waitQuiet waits until the running agent holds nothing for later: no
// synthesised event pending (leasekeeper_reconcile_pending) and its
// outbox delivered (leasekeeper_outbox_depth).
func (w *world) waitQuiet(within time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for {
		g := gauges(w.t, w.agent.reg, "leasekeeper_reconcile_pending", "leasekeeper_outbox_depth")
		if g["leasekeeper_reconcile_pending"] == 0 && g["leasekeeper_outbox_depth"] == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("agent (%s) not quiet after %s: %v", w.d.Dir, within, g)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gauges reads the named gauges (summed over their labels).
func gauges(t *testing.T, reg *prometheus.Registry, names ...string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] += m.GetGauge().GetValue()
		}
	}
	return out
}

// leaseState is the binding state dhcpd's file shows for ip now (the
// zero State when it shows none).
func leaseState(t *testing.T, d *lab.Dhcpd, ip netip.Addr) parser.State {
	t.Helper()
	ls, err := parser.ParseLeases(strings.NewReader(readFile(t, d.LeasesPath())))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := ls.Lookup(netip.PrefixFrom(ip, 32))
	if !ok {
		return 0
	}
	return l.Binding(parser.Time(time.Now().Unix()))
}

// waitFree waits until dhcpd's file shows ip free: by then dhcpd has run
// any on expiry the lease carried (it runs it in the transition to free,
// before it writes the block).
func waitFree(t *testing.T, d *lab.Dhcpd, ip netip.Addr, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for leaseState(t, d, ip) != parser.StateFree {
		if time.Now().After(deadline) {
			t.Fatalf("dhcpd (%s): %s not free after %s (%q)", d.Dir, ip, within, leaseState(t, d, ip))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLabFailoverStaleOnExpiry is what happens after recovery has ended:
// each dhcpd keeps the on expiry of a lease it once acked, and runs it
// whenever the lease goes free, even after its partner acked it last.
// A client leases from the primary; the primary rack dies; the client
// renews through the survivor (partner-down); the primary returns and
// recovers; both are normal; the client leaves and its lease expires.
// The primary expires it (in normal state only the primary expires
// leases) and runs its old on expiry, the secondary runs its own when
// the primary's update frees it: two hooks for one expiry, both after
// recovery. The region must get it once.
func TestLabFailoverStaleOnExpiry(t *testing.T) {
	lab.Require(t, "dhcpd", "dhclient")
	if testing.Short() {
		t.Skip("waits for leases to end (-short)")
	}
	t.Parallel()
	w1, w2 := startPair(t, 20)
	c1 := w1.lab.AddClient("c1")
	ip1 := w1.dhclient(c1)
	first := w1.waitArrival(ip1, event.Commit, mac(c1), 5*time.Second)

	w1.stopAgent()
	if err := w1.d.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, w2.d, reconcile.StatePartnerDown, 30*time.Second)
	// The client's renewal to the dead primary goes unanswered; it
	// rebinds, and the survivor acks it.
	deadline := time.Now().Add(40 * time.Second)
	for {
		var renewed bool
		for _, a := range w2.arrivals(ip1) {
			renewed = renewed || (a.Action == event.Commit && a.Timestamp > first.Timestamp)
		}
		if renewed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor did not renew %s; the stub has:\n%s", ip1, describeArrivals(w1.arrivals(netip.Addr{})))
		}
		time.Sleep(100 * time.Millisecond)
	}

	w1.startAgent()
	if err := w1.d.Restart(""); err != nil {
		t.Fatal(err)
	}
	waitState(t, w1.d, "normal", 60*time.Second)
	waitState(t, w2.d, "normal", 60*time.Second)
	if err := c1.Kill(); err != nil {
		t.Fatal(err)
	}
	ends := w2.leaseEnds(ip1)
	w1.waitArrival(ip1, event.Expiry, mac(c1), time.Until(time.Unix(ends, 0))+30*time.Second)
	waitFree(t, w1.d, ip1, 30*time.Second)
	waitFree(t, w2.d, ip1, 30*time.Second)
	all := settlePair(t, w1, w2) // a second hook's event would come meanwhile
	// The last life's end, once. (On a loaded machine the client can
	// rebind only after its first lease has ended: the survivor's file
	// shows that end, and the region gets it before the new commit —
	// an earlier life's end, followed by a commit, not counted here.)
	var frees []arrival
	for _, a := range w1.arrivals(ip1) {
		if a.Action == event.Commit {
			frees = nil
		} else {
			frees = append(frees, a)
		}
	}
	if len(frees) != 1 {
		t.Errorf("want exactly one expiry for %s %s after its last commit, got %d:\n%s", ip1, mac(c1), len(frees), describeArrivals(frees))
	}
	checkOrder(t, all)
	if got, want := regionView(w1.stub), truth(t, w1.d); !equalMaps(got, want) {
		t.Errorf("region %v, the pair's truth (primary's file) %v", got, want)
	}
	// Both dhcpd ran on expiry; the primary's was its old ack's.
	for _, w := range []*world{w1, w2} {
		if n := strings.Count(w.d.Logs(), "argv[7] = expiry"); n != 1 {
			t.Errorf("dhcpd (%s) ran on expiry %d times, want once (the test's premise)", w.d.Dir, n)
		}
	}
	if !strings.Contains(w1.lastLogs.String(), `"message":"dropped a hook event`) || !strings.Contains(w1.lastLogs.String(), `"ip":"`+ip1.String()+`"`) {
		t.Errorf("the primary's agent did not drop its hook's expiry (the survivor acked the lease last):\n%s", w1.lastLogs)
	}
}

// TestLabFailoverInterruptedShrink: with MAAS's failover timers a rack's
// death leaves its partner communications-interrupted, never
// partner-down. A lease the secondary acked ends while the primary is
// out of touch with it: the primary's file records the end, and no hook
// runs (dhcpd runs on expiry when the lease goes free, which needs the
// partner's ack). MAAS then shrinks the range past the address: the
// primary restarts without the lease, so no hook ever will, and the
// secondary, back on the smaller range, drops its copy (still active:
// it died before the end), which the primary alone reports (rule 2).
// The primary's agent sends that end, once (make chaos PAIR=1
// TIMERS=maas seed 118: 203.0.113.176 never ended in the region).
func TestLabFailoverInterruptedShrink(t *testing.T) {
	lab.Require(t, "dhcpd", "dhclient")
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w1, w2 := startPairMAAS(t, 20)
	c0 := w1.lab.AddClient("c0")
	ip0 := w1.dhclient(c0) // an address the smaller range keeps
	w1.waitArrival(ip0, event.Commit, mac(c0), 5*time.Second)
	// The region's answer acknowledged: an agent stopped with its request
	// unanswered sends it again and holds its next news back for it (by
	// design, and not this test's subject; a CI run under -race stopped
	// it so, and the re-sent commit and the region's restatements were
	// judged out of order).
	w1.waitQuiet(10 * time.Second)

	// The primary rack dies: the secondary serves, out of touch.
	w1.stopAgent()
	if err := w1.d.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, w2.d, reconcile.StateCommInterrupted, 30*time.Second)
	c1 := w1.lab.AddClient("c1")
	ip1 := w2.dhclient(c1)
	// (Held for labHoldMax: the primary's agent does not answer.)
	w2.waitArrival(ip1, event.Commit, mac(c1), labHoldMax+10*time.Second)
	if err := c1.Kill(); err != nil { // no renewal: the lease runs out
		t.Fatal(err)
	}
	ends := w2.leaseEnds(ip1)

	// The primary returns, learns the secondary's lease; then the
	// secondary's rack dies before the lease ends.
	w1.startAgent()
	if err := w1.d.Restart(pairConf(t, w1, "primary", "203.0.113.1", "203.0.113.2")); err != nil {
		t.Fatal(err)
	}
	waitState(t, w1.d, "normal", 60*time.Second)
	waitState(t, w2.d, "normal", 60*time.Second)
	if got := truth(t, w1.d)[ip1.String()]; got != mac(c1) {
		t.Fatalf("the primary's file shows %s as %q after the pair is normal again, want %s's lease; its failover records:\n%s", ip1, got, mac(c1), failoverRecords(readFile(t, w1.d.LeasesPath())))
	}
	secondaryDiesBeforeEnd(t, w1, w2, ip1, ends)
	time.Sleep(w1.grace + 1500*time.Millisecond)
	for _, a := range endsOf(w1.arrivals(ip1)) {
		t.Logf("the region heard the end before the shrink (a hook ran): %s", a)
	}
	if text := readFile(t, w1.d.LeasesPath()); strings.Contains(text, "lease "+ip1.String()+" ") {
		t.Logf("the primary's last block of %s before the shrink:\n%s", ip1, text[strings.LastIndex(text, "lease "+ip1.String()+" "):])
	}

	// MAAS shrinks the range: the primary restarts with it now, the
	// secondary's rack gets it when it returns.
	lo, hi := shrinkAway(ip1, ip0)
	if err := w1.d.Restart(pairConfRange(t, w1, "primary", "203.0.113.1", "203.0.113.2", lo, hi)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(readFile(t, w1.d.LeasesPath()), "lease "+ip1.String()+" ") {
		t.Fatalf("the primary kept %s after the shrink; the test premise is gone", ip1)
	}
	w1.waitArrival(ip1, event.Expiry, mac(c1), 30*time.Second)

	w2.startAgent()
	if err := w2.d.Restart(pairConfRange(t, w2, "secondary", "203.0.113.2", "203.0.113.1", lo, hi)); err != nil {
		t.Fatal(err)
	}
	waitState(t, w1.d, "normal", 60*time.Second)
	waitState(t, w2.d, "normal", 60*time.Second)
	all := settlePair(t, w1, w2)
	got := endsOf(w1.arrivals(ip1))
	if len(got) != 1 {
		t.Errorf("want exactly one end of %s %s, got %d:\n%s", ip1, mac(c1), len(got), describeArrivals(got))
	} else if at := got[0].Timestamp; at < ends {
		t.Errorf("the end is dated %d, before the lease's end %d", at, ends)
	}
	checkOrder(t, all)
	if got, want := regionView(w1.stub), truth(t, w1.d); !equalMaps(got, want) {
		t.Errorf("region %v, the pair's truth (primary's file) %v", got, want)
	}
	logPair(t, "the primary", w1, w1, w2)
}

// TestLabHAFirstShrink is MAAS turning DHCP HA on for a VLAN a rack
// served alone, with a smaller range in the same change: the rack's
// dhcpd restarts as the primary of a newly declared failover peer and
// drops the lease of a client that left; the new secondary rack's
// dhcpd starts with an empty file. dhcpd starts a newly declared peer
// in recover (ISC dhcp server/confpars.c, parse_failover_peer, "Set the
// initial state"), which elsewhere means the partner spoke for the pair
// while this side was away; here the partner never held the lease. The
// region gets exactly one expiry of it, from the primary's agent, not
// before the lease's end; the secondary's agent sends no end. Twice:
// with the primary's agent running through the change (it reads the
// rewrite before the new dhcpd.conf), and down during it (back, it
// reads the new dhcpd.conf first, then the rewrite with its recover).
func TestLabHAFirstShrink(t *testing.T) { runningAndDown(t, haFirstShrink) }

// runningAndDown runs a course through a change MAAS makes twice, in
// parallel: with the agent running through it, and down during it.
func runningAndDown(t *testing.T, course func(t *testing.T, agentDown bool)) {
	lab.Require(t, "dhcpd", "dhclient")
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	t.Run("agent running", func(t *testing.T) { t.Parallel(); course(t, false) })
	t.Run("agent down", func(t *testing.T) { t.Parallel(); course(t, true) })
}

func haFirstShrink(t *testing.T, agentDown bool) {
	w1 := newWorld(t, hooksOK, 20)
	w1.grace = 2 * time.Second
	w1.startDhcpd(100, 150)
	w1.startAgent()
	c2 := w1.lab.AddClient("c2")
	ip2 := w1.dhclient(c2) // an address the smaller range keeps
	w1.waitArrival(ip2, event.Commit, mac(c2), 5*time.Second)
	c1, ip1, ends := w1.leaseAndLeave("c1")
	if agentDown {
		w1.stopAgent()
	}

	// MAAS writes both racks' dhcpd.conf: HA on, the range shrunk.
	w2 := &world{t: t, lab: w1.lab, stub: w1.stub, files: w1.files, dir: t.TempDir(), hooks: hooksOK, hook: w1.hook, lease: w1.lease, grace: w1.grace}
	sec := w1.lab.AddServer("sec", netip.MustParseAddr("203.0.113.2"))
	lo, hi := shrinkAway(ip1, ip2)
	if err := w1.d.Restart(pairConfRange(t, w1, "primary", "203.0.113.1", "203.0.113.2", lo, hi)); err != nil {
		t.Fatalf("dhcpd restart: %v", err)
	}
	w2.d = w1.lab.StartDhcpd(t, lab.DhcpdConfig{Conf: pairConfRange(t, w2, "secondary", "203.0.113.2", "203.0.113.1", lo, hi), NS: sec.NS})
	w2.startAgent()
	if strings.Contains(readFile(t, w1.d.LeasesPath()), "lease "+ip1.String()+" ") {
		t.Fatalf("dhcpd kept %s after the shrink; the test premise is gone", ip1)
	}
	if agentDown {
		w1.startAgent()
	}
	w1.waitArrival(ip1, event.Expiry, mac(c1), max(time.Until(time.Unix(ends, 0)), 20*time.Second)+15*time.Second)
	time.Sleep(w1.grace + 3*time.Second) // anything else would come now
	// (A running agent reads the rewrite first, and dhcpd.conf's new
	// peer may find the pair in normal already: not new then.)
	if agentDown && !strings.Contains(w1.agent.logs.String(), "failover peer new in dhcpd.conf") {
		t.Errorf("the primary's agent did not say the peer is new:\n%s", reconcileLines(w1.agent.logs.String()))
	}
	w1.checkOnlyExpiry(ip1, mac(c1), ends)
	w1.stopAgent()
	w2.stopAgent()
	if got := w1.lastSynth; len(got) != 1 || got["vanished"] != 1 {
		t.Errorf("the primary's agent synthesised %v, want vanished=1 only", got)
	}
	if got := w2.lastSynth; len(got) != 0 {
		t.Errorf("the secondary's agent synthesised %v, want nothing", got)
	}
}

// TestLabHAOffInterrupted is MAAS turning DHCP HA off for a VLAN whose
// secondary rack died: the primary, out of touch with it
// (communications-interrupted: MAAS sets no auto-partner-down), records
// the end of a lease acked in normal as expired and runs no hook (going
// free needs the partner's ack: ISC dhcp server/mdb.c,
// make_binding_state_transition, pool_timer). Restarted alone, dhcpd
// frees the lease as it reads the file, again without a hook. The
// region hears the end once, from the agent: running through the change
// (it reads the rewrite, then the new dhcpd.conf), or down during it
// (back, it reads the new dhcpd.conf first).
func TestLabHAOffInterrupted(t *testing.T) { runningAndDown(t, haOffInterrupted) }

func haOffInterrupted(t *testing.T, agentDown bool) {
	w1, w2 := startPairMAAS(t, 20)
	c1, ip1, ends := w1.leaseAndLeave("c1")
	secondaryDiesBeforeEnd(t, w1, w2, ip1, ends)
	if st := leaseState(t, w1.d, ip1); st != parser.StateExpired {
		t.Fatalf("the primary's file shows %s %s after its end, want expired; the test premise is gone", ip1, st)
	}
	time.Sleep(w1.grace + 1500*time.Millisecond)
	if got := endsOf(w1.arrivals(ip1)); len(got) != 0 {
		t.Fatalf("the region heard the end before HA went off; the test premise is gone:\n%s", describeArrivals(got))
	}

	// HA off: the primary's dhcpd restarts alone.
	if agentDown {
		w1.stopAgent()
	}
	if err := w1.d.Restart(w1.conf(100, 150)); err != nil {
		t.Fatal(err)
	}
	if agentDown {
		w1.startAgent()
	}
	w1.waitArrival(ip1, event.Expiry, mac(c1), 30*time.Second)
	time.Sleep(w1.grace + 3*time.Second) // anything else would come now
	w1.checkOnlyExpiry(ip1, mac(c1), ends)
	if got, want := regionView(w1.stub), truth(t, w1.d); !equalMaps(got, want) {
		t.Errorf("region %v, the primary's file %v", got, want)
	}
}

// secondaryDiesBeforeEnd stops the secondary's rack (agent and dhcpd),
// waits for the primary to be out of touch with it
// (communications-interrupted), and then for the end of ip's lease
// (ends) to pass on the primary: recorded, no hook.
func secondaryDiesBeforeEnd(t *testing.T, w1, w2 *world, ip netip.Addr, ends int64) {
	t.Helper()
	w2.stopAgent()
	if err := w2.d.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, w1.d, reconcile.StateCommInterrupted, 30*time.Second)
	for deadline := time.Unix(ends, 0).Add(10 * time.Second); truth(t, w1.d)[ip.String()] != ""; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the primary's file still shows %s active 10 s after its end", ip)
		}
	}
}

// leaseAndLeave has a new client take a lease, waits for its commit in
// the region, and kills it: no renewal, the lease runs out at ends.
func (w *world) leaseAndLeave(name string) (c *lab.Client, ip netip.Addr, ends int64) {
	w.t.Helper()
	c = w.lab.AddClient(name)
	ip = w.dhclient(c)
	w.waitArrival(ip, event.Commit, mac(c), 5*time.Second)
	if err := c.Kill(); err != nil {
		w.t.Fatal(err)
	}
	return c, ip, w.leaseEnds(ip)
}
