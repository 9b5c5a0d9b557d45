package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// pairConf is a dhcpd.conf of one side of a failover pair, as MAAS
// writes it (a failover peer per VLAN, a pool naming it): the agent
// reads its role from it. No dhcpd runs here: the hooks are exec'd by
// the test.
func pairConf(role string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "failover peer \"fo-vlan1\" {\n  %s;\n  address 203.0.113.1;\n  peer address 203.0.113.2;\n  max-response-delay 60;\n  max-unacked-updates 10;\n  load balance max seconds 3;\n", role)
	if role == "primary" {
		b.WriteString("  mclt 3600;\n  split 255;\n")
	}
	b.WriteString("}\nsubnet 203.0.113.0 netmask 255.255.255.0 {\n  pool {\n    failover peer \"fo-vlan1\";\n    range 203.0.113.100 203.0.113.199;\n  }\n}\n")
	return b.String()
}

// TestPairChannelOrder: two real agents of a failover pair (each its own
// hook socket, spool, state and dhcpd.conf role), one region stub over
// mTLS, and the [pair] channel between them over UDP on loopback. While
// the region is down, the hooks of both racks report the lives of the
// same addresses in turn: a commit on one rack, its release on the
// other, the next commit on the first… When the region returns, both
// flush at once; per address the region must get exactly the order the
// hooks ran in, across the racks. (Without the channel each rack flushes
// its own queue, and the region sees one rack's news and then the
// other's: make chaos PAIR=1 -pair-alone.) Why arrival order is what
// counts: MAAS's internal POST /leases
// (maasapiserver/v3/api/internal/handlers/leases.py) applies the items
// in the order received, each by maasservicelayer/services/leases.py
// store_lease_info, which never compares timestamps; the stub mirrors it.
func TestPairChannelOrder(t *testing.T) {
	a, b, pa, pb := startPair(t)

	a.region.stop()
	// Each address: commit on a, its release on b, a new client's commit
	// for a second and its expiry on b, a third client's commit and
	// release on a — each
	// hook run after the one before it finished, as the clients' packets
	// would come, the end told by the server that acked the lease last.
	type step struct {
		e *env
		h hookEvent
	}
	var steps []step
	ips := []string{"203.0.113.100", "203.0.113.101", "203.0.113.102", "203.0.113.103"}
	// (An expiry seconds into a lease of 600 s the same server acked
	// is a partner's stale binding update, which the agent holds to the
	// lease's end: reconcile.HoldCut.)
	rounds := []struct {
		e      *env
		action string
		client int
		lease  int
	}{{a, event.Commit, 0, 0}, {b, event.Release, 0, 0}, {b, event.Commit, 1, 1}, {b, event.Expiry, 1, 0}, {a, event.Commit, 2, 0}, {a, event.Release, 2, 0}}
	for _, r := range rounds {
		for i, ip := range ips {
			steps = append(steps, step{r.e, hookEvent{action: r.action, ip: ip, client: 10*i + r.client + 1, host: "n", lease: r.lease}})
		}
	}
	perAgent := map[*env]int{}
	for _, s := range steps {
		perAgent[s.e]++
	}
	want := map[string][]string{}
	for _, s := range steps {
		if err := s.e.hook(s.h); err != nil {
			t.Fatal(err)
		}
		want[s.h.ip] = append(want[s.h.ip], s.h.action+" "+padMAC(s.h.mac()))
		time.Sleep(5 * time.Millisecond)
	}
	if !waitFor(30*time.Second, func() bool { return pa.depth() == perAgent[a] && pb.depth() == perAgent[b] }) {
		t.Fatalf("queued: a %d, b %d; want %d and %d\na: %s\nb: %s", pa.depth(), pb.depth(), perAgent[a], perAgent[b], pa.logTail(5), pb.logTail(5))
	}
	a.region.start()
	if !waitFor(60*time.Second, func() bool { return pa.depth() == 0 && pb.depth() == 0 }) {
		t.Fatalf("not delivered: a %d, b %d queued\na: %s\nb: %s", pa.depth(), pb.depth(), pa.logTail(20), pb.logTail(20))
	}
	got := map[string][]string{}
	for _, it := range a.region.items() {
		got[it.IP] = append(got[it.IP], it.Action+" "+it.MAC)
	}
	for _, ip := range ips {
		w := strings.Join(want[ip], ", ")
		g := strings.Join(got[ip], ", ")
		if w != g {
			t.Errorf("%s: the region got\n  %s\nthe hooks ran\n  %s", ip, g, w)
		}
	}
	// Each agent's status shows its side and the channel: the peer
	// heard, not delivering alone.
	for _, s := range []struct {
		p    *agentProc
		role string
	}{{pa, "primary"}, {pb, "secondary"}} {
		rep, err := s.p.status()
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.Pair; p == nil || p.Role != s.role || p.Channel == nil || p.Channel.Heard == nil || p.Channel.Alone {
			t.Errorf("%s: status pair %+v, want its role, the peer heard, not alone", s.role, p)
		}
	}
}

// padMAC zero-pads a MAC as dhcpd passes it (2:0:0:0:0:a), as the
// region gets it (02:00:00:00:00:0a).
func padMAC(m string) string {
	parts := strings.Split(m, ":")
	for i, p := range parts {
		if len(p) == 1 {
			parts[i] = "0" + p
		}
	}
	return strings.Join(parts, ":")
}

// startPair starts the two agents of a failover pair (a the primary, b
// the secondary), each with its own hook socket, spool, state and
// dhcpd.conf role, one region stub over mTLS for both, and the [pair]
// channel between them over UDP on loopback.
func startPair(t *testing.T) (a, b *env, pa, pb *agentProc) {
	t.Helper()
	a = newEnv(t)
	b = newEnv(t)
	b.region = a.region // one region for the pair
	b.region.tb = t

	pc, err := lab.NewPairChannel(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	ports, key := pc.Listen, pc.KeyFile
	start := func(e *env, role string, i int) *agentProc {
		conf := filepath.Join(e.dir, "dhcpd.conf")
		if err := os.WriteFile(conf, []byte(pairConf(role)), 0o644); err != nil {
			t.Fatal(err)
		}
		return e.startAgent(agentOptions{dhcpdConf: conf, extra: fmt.Sprintf(
			"\n[reconcile]\nmode = \"replacement\"\n\n[pair]\nlisten = %q\npeer = %q\nkey_file = %q\nhold_max = \"60s\"\n", ports[i], ports[1-i], key)})
	}
	return a, b, start(a, "primary", 0), start(b, "secondary", 1)
}

// TestPairCopyOfOneAck: both servers of a pair ack one broadcast
// REQUEST (load balancing splits DISCOVERs only; MAAS's dhcpd.conf,
// src/maasserver/templates/dhcp/dhcpd.conf.template, sets no
// server-id-check, which dhcpd leaves off: server/dhcp.c) and both run
// on commit, milliseconds apart;
// the secondary's server then takes the client's release. With the
// region down both agents queue their hooks' news; when it returns the
// primary's commit, the older, goes first, and the secondary's agent
// takes its own commit for the copy it is (the answer names the news
// the primary delivered by its action and MAC) and drops it: the region
// gets the commit once, then the release. Held as news, the copy held
// the agent's later news of its MAC back with it, and the peer's later
// news of the address waited on it (make chaos PAIR=1 TIMERS=maas seed
// 118, until hold_max; agent/pair CopyOf).
func TestPairCopyOfOneAck(t *testing.T) {
	a, b, pa, pb := startPair(t)
	a.region.stop()
	const ip = "203.0.113.120"
	ack := hookEvent{action: event.Commit, ip: ip, client: 7, host: "n7"}
	for _, s := range []struct {
		e *env
		h hookEvent
	}{{a, ack}, {b, ack}, {b, hookEvent{action: event.Release, ip: ip, client: 7}}} {
		if err := s.e.hook(s.h); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(30*time.Second, func() bool { return pa.depth() == 1 && pb.depth() == 2 }) {
		t.Fatalf("queued: a %d, b %d; want 1 and 2\na: %s\nb: %s", pa.depth(), pb.depth(), pa.logTail(5), pb.logTail(5))
	}
	a.region.start()
	if !waitFor(60*time.Second, func() bool { return pa.depth() == 0 && pb.depth() == 0 }) {
		t.Fatalf("not delivered: a %d, b %d queued\na: %s\nb: %s", pa.depth(), pb.depth(), pa.logTail(20), pb.logTail(20))
	}
	var got []string
	for _, it := range a.region.items() {
		if it.IP == ip {
			got = append(got, it.Action+" "+it.MAC)
		}
	}
	want := []string{"commit " + padMAC(ack.mac()), "release " + padMAC(ack.mac())}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("the region got\n  %s\nwant\n  %s\nb: %s", strings.Join(got, ", "), strings.Join(want, ", "), pb.logTail(10))
	}
}

// vlanConf is a dhcpd.conf of a rack serving several HA VLANs, as MAAS
// writes it: one failover peer per VLAN, named after it, with this
// rack's role on that VLAN and the VLAN's other rack as its peer
// (src/maasserver/dhcp.py, make_failover_peer_config), and a subnet per
// VLAN whose pool names its peer. No dhcpd runs: the agent reads its
// roles and each address's peer from it.
func vlanConf(vlans ...vlan) string {
	var b strings.Builder
	for _, v := range vlans {
		fmt.Fprintf(&b, "failover peer %q {\n  %s;\n  address %s;\n  peer address %s;\n  max-response-delay 60;\n  max-unacked-updates 10;\n  load balance max seconds 3;\n", v.peer, v.role, v.addr, v.peerAddr)
		if v.role == "primary" {
			b.WriteString("  mclt 3600;\n  split 255;\n")
		}
		b.WriteString("}\n")
	}
	for _, v := range vlans {
		fmt.Fprintf(&b, "subnet %s netmask 255.255.255.0 {\n  pool {\n    failover peer %q;\n    range %s %s;\n  }\n}\n", v.subnet, v.peer, v.first, v.last)
	}
	return b.String()
}

// vlan is one HA VLAN of vlanConf, as one rack sees it.
type vlan struct {
	peer, role, addr, peerAddr, subnet, first, last string
}

// TestPairPartners: a rack whose two HA VLANs have different partner
// racks (MAAS sets a primary and a secondary rack per VLAN): rack a is
// the primary of VLAN 1 with rack b, and the secondary of VLAN 2 with
// rack c. a's [pair] reaches b's agent, and pair.partners c's, for
// VLAN 2's failover peer. While the region is down, the hooks of each
// VLAN's two racks report the lives of its addresses in turn; when it
// returns, all three agents flush at once, and per address the region
// must get the order the hooks ran in, on both VLANs. (With one channel,
// a's, VLAN 2's news went as without a channel, and a took its role on
// VLAN 1, primary, for its role towards c, which is primary there too:
// c refused its answers.)
func TestPairPartners(t *testing.T) {
	r := startPartners(t)
	a, b, c, pa, pb, pc := r.a, r.b, r.c, r.pa, r.pb, r.pc
	a.region.stop()
	type step struct {
		e *env
		h hookEvent
	}
	var steps []step
	vlans := []struct {
		partner *env
		ips     []string
	}{{b, []string{"203.0.113.100", "203.0.113.101", "203.0.113.102"}}, {c, []string{"198.51.100.100", "198.51.100.101", "198.51.100.102"}}}
	for vi, v := range vlans {
		// As TestPairChannelOrder: a commit on a, its release on the
		// partner, a second client's commit and expiry on the partner,
		// a third's commit and release on a.
		rounds := []struct {
			e      *env
			action string
			client int
			lease  int
		}{{a, event.Commit, 0, 0}, {v.partner, event.Release, 0, 0}, {v.partner, event.Commit, 1, 1}, {v.partner, event.Expiry, 1, 0}, {a, event.Commit, 2, 0}, {a, event.Release, 2, 0}}
		for _, r := range rounds {
			for i, ip := range v.ips {
				steps = append(steps, step{r.e, hookEvent{action: r.action, ip: ip, client: 100*vi + 10*i + r.client + 1, host: "n", lease: r.lease}})
			}
		}
	}
	perAgent := map[*env]int{}
	want := map[string][]string{}
	for _, s := range steps {
		if err := s.e.hook(s.h); err != nil {
			t.Fatal(err)
		}
		perAgent[s.e]++
		want[s.h.ip] = append(want[s.h.ip], s.h.action+" "+padMAC(s.h.mac()))
		time.Sleep(5 * time.Millisecond)
	}
	procs := []struct {
		name string
		e    *env
		p    *agentProc
	}{{"a", a, pa}, {"b", b, pb}, {"c", c, pc}}
	queued := func(want func(e *env) int) bool {
		for _, x := range procs {
			if x.p.depth() != want(x.e) {
				return false
			}
		}
		return true
	}
	tails := func() string {
		var s strings.Builder
		for _, x := range procs {
			fmt.Fprintf(&s, "\n%s (%d queued): %s", x.name, x.p.depth(), x.p.logTail(15))
		}
		return s.String()
	}
	if !waitFor(30*time.Second, func() bool { return queued(func(e *env) int { return perAgent[e] }) }) {
		t.Fatalf("not all queued%s", tails())
	}
	a.region.start()
	if !waitFor(60*time.Second, func() bool { return queued(func(*env) int { return 0 }) }) {
		t.Fatalf("not delivered%s", tails())
	}
	got := map[string][]string{}
	for _, it := range a.region.items() {
		got[it.IP] = append(got[it.IP], it.Action+" "+it.MAC)
	}
	for _, v := range vlans {
		for _, ip := range v.ips {
			if w, g := strings.Join(want[ip], ", "), strings.Join(got[ip], ", "); w != g {
				t.Errorf("%s: the region got\n  %s\nthe hooks ran\n  %s", ip, g, w)
			}
		}
	}
	// a's status shows each VLAN's channel: b's agent for VLAN 1, c's
	// for VLAN 2, each heard, neither alone.
	rep, err := pa.status()
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Pair
	if p == nil || len(p.Others) != 1 {
		t.Fatalf("a's status pair %+v, want two failover peers", p)
	}
	for _, s := range []struct {
		r          statusPair
		role, peer string
	}{{*p, "primary", r.ab.Listen[1]}, {p.Others[0], "secondary", r.ac.Listen[1]}} {
		if ch := s.r.Channel; s.r.Role != s.role || ch == nil || ch.Peer != s.peer || ch.Heard == nil || ch.Alone {
			t.Errorf("a's status for %s: role %s, channel %+v; want %s, the channel to %s heard, not alone", s.r.Peer, s.r.Role, ch, s.role, s.peer)
		}
	}
}

// partners is TestPairPartners's three racks: a, the primary of VLAN
// 5001 with b and the secondary of VLAN 5002 with c, each with its
// agent, one region stub for all.
type partners struct {
	a, b, c    *env
	pa, pb, pc *agentProc
	ab, ac     lab.PairChannel // the ports of a's channels to b and to c
	opts       [3]agentOptions // each agent's, to start it again
}

// startPartners starts the three racks' agents (hold_max 60 s).
func startPartners(t *testing.T) *partners {
	t.Helper()
	r := &partners{a: newEnv(t), b: newEnv(t), c: newEnv(t)}
	r.b.region, r.c.region = r.a.region, r.a.region
	r.b.region.tb = t
	var err error
	if r.ab, err = lab.NewPairChannel(r.a.dir); err != nil {
		t.Fatal(err)
	}
	if r.ac, err = lab.NewPairChannel(r.c.dir); err != nil {
		t.Fatal(err)
	}
	key := r.ab.KeyFile // one key for every channel
	v1 := vlan{peer: "failover-vlan-5001", subnet: "203.0.113.0", first: "203.0.113.100", last: "203.0.113.199"}
	v2 := vlan{peer: "failover-vlan-5002", subnet: "198.51.100.0", first: "198.51.100.100", last: "198.51.100.199"}
	side := func(v vlan, role, addr, peerAddr string) vlan {
		v.role, v.addr, v.peerAddr = role, addr, peerAddr
		return v
	}
	start := func(i int, e *env, conf, pairTOML string) *agentProc {
		path := filepath.Join(e.dir, "dhcpd.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		r.opts[i] = agentOptions{dhcpdConf: path, extra: "\n[reconcile]\nmode = \"replacement\"\n\n[pair]\n" + pairTOML + fmt.Sprintf("key_file = %q\nhold_max = \"60s\"\n", key)}
		return e.startAgent(r.opts[i])
	}
	r.pa = start(0, r.a, vlanConf(side(v1, "primary", "203.0.113.1", "203.0.113.2"), side(v2, "secondary", "198.51.100.1", "198.51.100.3")),
		fmt.Sprintf("listen = %q\npeer = %q\npartners = [\"%s %s %s\"]\n", r.ab.Listen[0], r.ab.Listen[1], v2.peer, r.ac.Listen[0], r.ac.Listen[1]))
	r.pb = start(1, r.b, vlanConf(side(v1, "secondary", "203.0.113.2", "203.0.113.1")),
		fmt.Sprintf("listen = %q\npeer = %q\n", r.ab.Listen[1], r.ab.Listen[0]))
	r.pc = start(2, r.c, vlanConf(side(v2, "primary", "198.51.100.3", "198.51.100.1")),
		fmt.Sprintf("listen = %q\npeer = %q\n", r.ac.Listen[1], r.ac.Listen[0]))
	return r
}

// TestPairPartnerSilent: rack c's agent is down, so a's channel to c
// is silent while b's answers. a's news of VLAN 5002 waits for c's agent
// (up to hold_max, 60 s here) and goes once c's agent is back and
// answers; its news of VLAN 5001, hooked after it, reaches the region
// meanwhile. Before, the deliverer judged the batch it had peeked, 5002's
// news alone, until hold_max, and 5001's waited behind it. (The gate's
// handling of a batch with both, a silent partner holding back its own
// addresses' news alone: TestPairLinksSilentPartner.)
func TestPairPartnerSilent(t *testing.T) {
	r := startPartners(t)
	r.pc.stop()
	x := hookEvent{action: event.Commit, ip: "203.0.113.110", client: 1, host: "x"}
	y := hookEvent{action: event.Commit, ip: "198.51.100.110", client: 2, host: "y"}
	if err := r.a.hook(y); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return r.pa.depth() == 1 }) {
		t.Fatalf("VLAN 5002's commit not queued\na: %s", r.pa.logTail(15))
	}
	time.Sleep(500 * time.Millisecond) // the deliverer peeks it alone and holds it
	if err := r.a.hook(x); err != nil {
		t.Fatal(err)
	}
	delivered := func(ip string) bool {
		for _, it := range r.a.region.items() {
			if it.IP == ip {
				return true
			}
		}
		return false
	}
	if !waitFor(20*time.Second, func() bool { return delivered(x.ip) }) {
		t.Fatalf("VLAN 5001's commit not delivered while c's agent is down\na: %s", r.pa.logTail(15))
	}
	if delivered(y.ip) {
		t.Fatalf("VLAN 5002's commit delivered without c's agent's answer, before hold_max\na: %s", r.pa.logTail(15))
	}
	rep, err := r.pa.status()
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Pair; p == nil || len(p.Others) != 1 || p.Others[0].Channel == nil || p.Others[0].Channel.Heard != nil || p.Channel == nil || p.Channel.Heard == nil {
		t.Errorf("a's status pair %+v: want b's agent heard, c's not", p)
	}
	r.pc = r.c.startAgent(r.opts[2])
	if !waitFor(30*time.Second, func() bool { return delivered(y.ip) && r.pa.depth() == 0 }) {
		t.Fatalf("VLAN 5002's commit not delivered once c's agent is back\na: %s\nc: %s", r.pa.logTail(15), r.pc.logTail(10))
	}
}
