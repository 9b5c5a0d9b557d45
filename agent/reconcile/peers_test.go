package reconcile

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// fostateOf writes the failover state record of the peer named, the way
// dhcpd does (fostate is peer "fo"'s).
func fostateOf(peer, my, partner string) string {
	return strings.Replace(fostate(my, partner), `"fo"`, `"`+peer+`"`, 1)
}

// vlanPeer is dhcpd.conf's failover peer and subnet for one HA VLAN, as
// MAAS writes them (src/maasserver/dhcp.py, make_failover_peer_config:
// one peer per VLAN, named after it, with this rack's role on it;
// templates/dhcp/dhcpd.conf.template: the pool names the peer).
func vlanPeer(name, role, net string) string {
	return `failover peer "` + name + `" { ` + role + `; address ` + net + `.1; peer address ` + net + `.2; max-response-delay 60; max-unacked-updates 10; load balance max seconds 3; mclt 3600; split 255; }` + "\n" +
		"subnet " + net + ".0 netmask 255.255.255.0 { pool { failover peer \"" + name + "\"; range " + net + ".10 " + net + ".50; } }\n"
}

// vlanAlone is a VLAN this rack serves without HA: no failover peer.
func vlanAlone(net string) string {
	return "subnet " + net + ".0 netmask 255.255.255.0 { pool { range " + net + ".10 " + net + ".50; } }\n"
}

// threeVLANs: this rack is the secondary on VLAN 5001 (203.0.113.0/24),
// the primary on VLAN 5002 (198.51.100.0/24), and alone on a third
// (198.18.0.0/24): one dhcpd, three rule sets.
var threeVLANs = vlanPeer("failover-vlan-5001", "secondary", "203.0.113") +
	vlanPeer("failover-vlan-5002", "primary", "198.51.100") + vlanAlone("198.18.0")

func peersOf(t *testing.T, conf string) Peers {
	t.Helper()
	cfg, err := dhcpdconf.Parse(strings.NewReader(conf), dhcpdconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return PeersOf(cfg)
}

func TestPeersOf(t *testing.T) {
	pfx := netip.MustParsePrefix
	v5001 := Pair{Peer: "failover-vlan-5001", Role: RoleSecondary}
	v5002 := Pair{Peer: "failover-vlan-5002", Role: RolePrimary}
	for _, tc := range []struct {
		name, conf string
		want       Peers
	}{
		{"alone", vlanAlone("203.0.113"), Peers{Subnets: []SubnetPeer{{pfx("203.0.113.0/24"), ""}}}},
		{"one HA VLAN", vlanPeer("failover-vlan-5001", "secondary", "203.0.113"), Peers{Lead: v5001, Subnets: []SubnetPeer{{pfx("203.0.113.0/24"), "failover-vlan-5001"}}}},
		{"two HA VLANs, one peer each", vlanPeer("failover-vlan-5001", "secondary", "203.0.113") + vlanPeer("failover-vlan-5002", "primary", "198.51.100"),
			Peers{Lead: v5001, Others: []Pair{v5002}, Subnets: []SubnetPeer{
				{pfx("203.0.113.0/24"), "failover-vlan-5001"}, {pfx("198.51.100.0/24"), "failover-vlan-5002"}}}},
		{"an HA VLAN and one alone", vlanAlone("198.18.0") + vlanPeer("failover-vlan-5001", "secondary", "203.0.113"),
			Peers{Lead: v5001, Subnets: []SubnetPeer{{pfx("198.18.0.0/24"), ""}, {pfx("203.0.113.0/24"), "failover-vlan-5001"}}}},
		{"three VLANs", threeVLANs, Peers{Lead: v5001, Others: []Pair{v5002}, Subnets: []SubnetPeer{
			{pfx("203.0.113.0/24"), "failover-vlan-5001"}, {pfx("198.51.100.0/24"), "failover-vlan-5002"}, {pfx("198.18.0.0/24"), ""}}}},
		{"a pool in a shared network, outside its subnets", vlanPeer("failover-vlan-5001", "secondary", "203.0.113") +
			`failover peer "failover-vlan-5002" { primary; address 198.51.100.1; peer address 198.51.100.2; mclt 3600; split 255; }` + "\n" +
			"shared-network vlan-5002 { subnet 198.51.100.0 netmask 255.255.255.128 { } subnet 198.51.100.128 netmask 255.255.255.128 { }\n" +
			`  pool { failover peer "failover-vlan-5002"; range 198.51.100.10 198.51.100.50; range 198.51.100.130 198.51.100.150; } }` + "\n",
			Peers{Lead: v5001, Others: []Pair{v5002}, Subnets: []SubnetPeer{{pfx("203.0.113.0/24"), "failover-vlan-5001"},
				{pfx("198.51.100.0/25"), "failover-vlan-5002"}, {pfx("198.51.100.128/25"), "failover-vlan-5002"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, peersOf(t, tc.conf), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSeveralPeersRules: one dhcpd, three VLANs (threeVLANs), a range
// shrink on each, then a partner-down on one. Each address follows its
// own VLAN's rules: the primary's rule-2 expiry is sent, the secondary's
// waits in standby, the lone VLAN's leases are told from the file (rule
// 3 too); a partner-down on VLAN 5001 makes this side the survivor there
// alone. (Following the first peer for every address, as the agent did
// before, this side was the secondary everywhere: the expiries of VLANs
// 5002 and 198.18.0.0/24 reached the region from no rack.)
func TestSeveralPeersRules(t *testing.T) {
	const macC = "00:16:3e:00:00:0c"
	const (
		a1, a2, a3 = "203.0.113.10", "203.0.113.11", "203.0.113.12" // VLAN 5001: secondary
		b1, b2     = "198.51.100.10", "198.51.100.11"               // VLAN 5002: primary
		c1, c2     = "198.18.0.10", "198.18.0.11"                   // alone
	)
	normal := fostateOf("failover-vlan-5001", "normal", "normal") + fostateOf("failover-vlan-5002", "normal", "normal")
	kept := block(a2, "active", macB, t0-100, t0+5000) + block(a3, "active", macC, t0-100, t0+300) +
		block(b2, "active", macB, t0-100, t0+5000) + block(c2, "active", macB, t0-100, t0+5000)
	base := normal + block(a1, "active", macA, t0-100, t0+500) + block(b1, "active", macA, t0-100, t0+500) +
		block(c1, "active", macA, t0-100, t0+500) + kept
	shrunk := normal + kept
	line := func(action, ip, mac string, at int64, reason string) string {
		return fmt.Sprintf("%s %s %s %+d %s", action, ip, mac, at, reason)
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		name: "a range shrink on each VLAN",
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: shrunk},
			{at: 500 + grace - 1},
			// VLAN 5002's primary and the lone VLAN expire their
			// dropped leases; VLAN 5001's is its primary's.
			{at: 500 + grace, want: []string{line("expiry", c1, macA, 500, "vanished"), line("expiry", b1, macA, 500, "vanished")}},
			// Rule 3 on the lone VLAN alone: a2, a3 and b2 are the
			// pairs' (their hooks tell, or the partner's).
			{at: 10000, want: []string{line("expiry", c2, macB, 5000, "ends-passed")}},
		},
	}, {
		name: "a partner-down on VLAN 5001 alone",
		steps: []step{
			{at: 0, snapshot: base},
			{at: 600, snapshot: shrunk},
			{at: 601, appended: normal},
			// a3's end passes while VLAN 5001's partner tells it; the
			// rule-3 heap passes it by.
			{at: 300 + grace},
			{at: 610, appended: fostateOf("failover-vlan-5001", "communications-interrupted", "normal")},
			// The takeover on VLAN 5001: its standby expiry, and a3's
			// end, are this side's now; VLAN 5002's and the lone
			// VLAN's go at their time.
			{at: 611, appended: fostateOf("failover-vlan-5001", "partner-down", "normal"), want: []string{
				line("expiry", a1, macA, 500, "vanished"), line("expiry", a3, macC, 300, "ends-passed")}},
			{at: 600 + grace, want: []string{line("expiry", c1, macA, 500, "vanished"), line("expiry", b1, macA, 500, "vanished")}},
			// Rule 3 for the survivor's VLAN and the lone one; VLAN
			// 5002 is in normal, its hooks tell.
			{at: 10000, want: []string{line("expiry", c2, macB, 5000, "ends-passed"), line("expiry", a2, macB, 5000, "ends-passed")}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.SetPeers(peersOf(t, threeVLANs))
			runSteps(t, s, tc.steps)
			if got := s.pairOf(netip.MustParseAddr(b1)); got.Role != RolePrimary || got.MyState != "normal" {
				t.Errorf("VLAN 5002's pair: %+v", got)
			}
		})
	}
}

// TestSetPeersKeeps: a pair keeps its states while its peer keeps its
// role, whichever place it takes among the peers; a subnet dhcpd.conf
// no longer declares keeps its peer (its dropped leases are that pair's
// rule 2) while that peer is still used.
func TestSetPeersKeeps(t *testing.T) {
	s := NewState(grace)
	s.SetPeers(peersOf(t, threeVLANs))
	appendPair(t, s, fostateOf("failover-vlan-5002", "partner-down", "communications-interrupted"), t0)
	b := netip.MustParseAddr("198.51.100.10")
	if !s.pairOf(b).Survivor() {
		t.Fatalf("VLAN 5002's pair %+v, want the survivor", s.pairOf(b))
	}
	// VLAN 5001 loses DHCP (its subnet leaves dhcpd.conf), VLAN 5002's
	// peer becomes the lead, and a new VLAN 5003 has HA.
	s.SetPeers(peersOf(t, vlanPeer("failover-vlan-5002", "primary", "198.51.100")+vlanAlone("198.18.0")+
		vlanPeer("failover-vlan-5003", "secondary", "192.0.2")))
	if p := s.pairOf(b); !p.Survivor() || p.Peer != "failover-vlan-5002" || s.Pair.Peer != "failover-vlan-5002" {
		t.Errorf("VLAN 5002's pair %+v (lead %+v), want the survivor, now the lead", p, s.Pair)
	}
	// 203.0.113.0/24 left with its peer: its dropped leases follow that
	// peer as it was (this rack its secondary: the primary, which may
	// serve the VLAN alone now, tells what ended).
	if p := s.pairOf(netip.MustParseAddr("203.0.113.10")); p.Peer != "failover-vlan-5001" || p.Role != RoleSecondary {
		t.Errorf("a removed VLAN whose peer is gone follows %+v, want its old pair", p)
	}
	// VLAN 5002 loses DHCP, its peer stays in use elsewhere: its subnet
	// keeps the peer.
	s.SetPeers(peersOf(t, vlanAlone("198.18.0")+vlanPeer("failover-vlan-5002", "primary", "192.0.2")))
	if p := s.pairOf(b); p.Peer != "failover-vlan-5002" {
		t.Errorf("a removed subnet whose peer is still used follows %+v", p)
	}
	// The role changes: the states are unknown again.
	s.SetPeers(peersOf(t, vlanPeer("failover-vlan-5002", "secondary", "198.51.100")))
	if p := s.pairOf(b); p.MyState != "" || p.Role != RoleSecondary {
		t.Errorf("a pair whose role changed: %+v, want no states", p)
	}
}

// TestChannelRole: the pair channel's two agents must claim different
// roles (agent/pair refuses its own). MAAS names each peer after its VLAN
// on both racks, but writes them in each rack's own order, and the roles
// are chosen per VLAN: the role on the first name is one both racks
// agree on, where the role on the first in file order may not be.
func TestChannelRole(t *testing.T) {
	rack1 := peersOf(t, vlanPeer("failover-vlan-5002", "primary", "198.51.100")+vlanPeer("failover-vlan-5001", "secondary", "203.0.113"))
	rack2 := peersOf(t, vlanPeer("failover-vlan-5001", "primary", "203.0.113")+vlanPeer("failover-vlan-5002", "secondary", "198.51.100"))
	if rack1.Lead.Role != rack2.Lead.Role {
		t.Fatal("the test premise: both racks' first peers in file order have the same role")
	}
	var roles []string
	for _, p := range []Peers{rack1, rack2} {
		s := NewState(grace)
		s.SetPeers(p)
		roles = append(roles, channelRole(s.Pairs()))
	}
	if roles[0] != RoleSecondary || roles[1] != RolePrimary {
		t.Errorf("channel roles %v, want [secondary primary] (the roles on failover-vlan-5001)", roles)
	}
}

// TestChannelRoleAmong: with a channel to each partner rack
// (pair.partners), each channel's role is this side's on the peers it
// orders, and each address follows its subnet's peer (Reconciler.PeerOf,
// PrimaryAmong): rack a, the primary of VLAN 5001 with one rack and the
// secondary of 5002 and 5003 with another.
func TestChannelRoleAmong(t *testing.T) {
	s := NewState(grace)
	s.SetPeers(peersOf(t, vlanPeer("failover-vlan-5001", "primary", "203.0.113")+vlanPeer("failover-vlan-5002", "secondary", "198.51.100")+
		vlanPeer("failover-vlan-5003", "secondary", "198.18.0")+vlanAlone("198.18.1")))
	second := func(p string) bool { return p == "failover-vlan-5002" || p == "failover-vlan-5003" }
	if r := roleAmong(s.Pairs(), func(p string) bool { return !second(p) }); r != RolePrimary {
		t.Errorf("role towards the first partner %q, want primary", r)
	}
	if r := roleAmong(s.Pairs(), second); r != RoleSecondary {
		t.Errorf("role towards the second partner %q, want secondary", r)
	}
	if r := channelRole(s.Pairs()); r != RolePrimary {
		t.Errorf("one channel's role %q, want the first peer's, primary", r)
	}
	for ip, want := range map[string]string{"203.0.113.7": "failover-vlan-5001", "198.51.100.7": "failover-vlan-5002", "198.18.0.7": "failover-vlan-5003",
		"198.18.1.7": "", "2001:db8::7": ""} {
		if got := s.pairOf(netip.MustParseAddr(ip)).Peer; got != want {
			t.Errorf("%s follows %q, want %q", ip, got, want)
		}
	}
}

// TestHAOffDroppedLease: MAAS turns DHCP HA off on VLAN 5001 and keeps
// it on its primary rack alone: the secondary's dhcpd.conf loses the
// subnet and its peer, and the restart drops the VLAN's leases, which
// live on at the primary. The secondary's agent sends no expiry for them;
// the primary's, where the VLAN's DHCP is turned off altogether, sends
// them once. Here the agent was down meanwhile: at its start it reads
// dhcpd.conf (scanPair) before the rewrite, so the dropped leases' subnet
// is one dhcpd.conf no longer declares, with a peer it no longer
// declares either (Retired).
func TestHAOffDroppedLease(t *testing.T) {
	const a1 = "203.0.113.10"
	for _, tc := range []struct {
		role string
		want []string
	}{
		{RoleSecondary, nil},
		{RolePrimary, []string{fmt.Sprintf("expiry %s %s %+d vanished", a1, macA, 500)}},
	} {
		t.Run(tc.role, func(t *testing.T) {
			before := vlanPeer("failover-vlan-5001", tc.role, "203.0.113") + vlanAlone("198.18.0")
			s := NewState(grace)
			s.SetPeers(peersOf(t, before))
			normal := fostateOf("failover-vlan-5001", "normal", "normal")
			kept := block("198.18.0.10", "active", macB, t0-100, t0+5000)
			runSteps(t, s, []step{{at: 0, snapshot: normal + block(a1, "active", macA, t0-100, t0+500) + kept}})
			// The agent restarts: dhcpd.conf first, then the rewrite.
			s.SetPeers(peersOf(t, vlanAlone("198.18.0")))
			runSteps(t, s, []step{{at: 10, snapshot: kept}})
			got := dueAt(s, 500+grace, 4000)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestHAOnDroppedLease: MAAS turns DHCP HA on for a VLAN this rack
// served alone and shrinks its range in the same change. The agent
// restarts: dhcpd.conf first, then the rewrite, whose records show
// dhcpd's start of a newly declared peer (recover, the partner's state
// unknown: ISC dhcp server/confpars.c, parse_failover_peer), and, the
// agent back late, the pair reaching normal. The partner never had the
// lease the rewrite dropped: its end is this side's, whatever role it
// has now. A rack of an established pair restarts in recover too when
// its leases file lost the pair's state; there the partner, which goes
// partner-down on that recover (server/failover.c,
// dhcp_failover_peer_state_changed), speaks for the lease, and the
// primary's end is dropped as before. So it is once the new pair has
// been in normal. And at the agent's first read, dhcpd.conf before it
// unknown, a peer is not taken for new.
func TestHAOnDroppedLease(t *testing.T) {
	const a1, peer = "203.0.113.10", "failover-vlan-5001"
	end := []string{fmt.Sprintf("expiry %s %s %+d vanished", a1, macA, 500)}
	lease := block(a1, "active", macA, t0-100, t0+500)
	kept := block("203.0.113.11", "active", macB, t0-100, t0+5000)
	started := fostateOf(peer, "recover", "unknown-state") + fostateOf(peer, "recover", "recover")
	normal := fostateOf(peer, "normal", "normal")
	for _, tc := range []struct {
		name          string
		before, after string // dhcpd.conf
		first         string // the file when the agent reads it with dhcpd.conf before
		rewrite       string // the failover records of the rewrite that drops a1
		want          []string
		haOn          bool // before that, HA came on with no shrink: the agent followed the VLAN alone
	}{
		{"primary", vlanAlone("203.0.113"), vlanPeer(peer, "primary", "203.0.113"), "", started + normal, end, false},
		{"secondary", vlanAlone("203.0.113"), vlanPeer(peer, "secondary", "203.0.113"), "", started + normal, end, false},
		{"primary, recovering still", vlanAlone("203.0.113"), vlanPeer(peer, "primary", "203.0.113"), "", started, end, false},
		{"established pair", vlanPeer(peer, "primary", "203.0.113"), vlanPeer(peer, "primary", "203.0.113"), normal, started, nil, false},
		{"new pair, once in normal", vlanPeer(peer, "primary", "203.0.113"), vlanPeer(peer, "primary", "203.0.113"), started + normal, started, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			if tc.haOn {
				s.SetPeers(peersOf(t, vlanAlone("203.0.113")))
				runSteps(t, s, []step{{at: -50, snapshot: lease + kept}})
			}
			s.SetPeers(peersOf(t, tc.before))
			if p := s.pairOf(netip.MustParseAddr(a1)); p.New != tc.haOn {
				t.Fatalf("%+v; want New %t (not at the agent's first read, which knows no dhcpd.conf before)", p, tc.haOn)
			}
			runSteps(t, s, []step{{at: 0, snapshot: tc.first + lease + kept}})
			// The agent restarts: dhcpd.conf first, then the rewrite.
			s.SetPeers(peersOf(t, tc.after))
			runSteps(t, s, []step{{at: 10, snapshot: tc.rewrite + kept}})
			got := dueAt(s, 500+grace, 4000)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestHAOnPartnersLease: with HA just on, both dhcpd recover from each
// other (a full update: server/failover.c, dhcp_failover_send_update_request_all),
// and this side's file gets the partner's leases as binding updates (no
// cltt: not this side's ack). A restart that drops one while the peer
// is still new leaves its end to the partner, as in any pair: only the
// leases this side acked alone are its own to end (a review: both sent
// it).
func TestHAOnPartnersLease(t *testing.T) {
	const peer = "failover-vlan-5001"
	for _, role := range []string{RolePrimary, RoleSecondary} {
		t.Run(role, func(t *testing.T) {
			s := NewState(grace)
			s.SetPeers(peersOf(t, vlanAlone("203.0.113")))
			kept := block("203.0.113.12", "active", macB, t0-100, t0+5000)
			runSteps(t, s, []step{{at: 0, snapshot: kept}})
			s.SetPeers(peersOf(t, vlanPeer(peer, role, "203.0.113")))
			runSteps(t, s, []step{
				{at: 5, appended: fostateOf(peer, "recover", "recover") + block(ip1, "active", macA, t0, t0+500)},
				{at: 10, snapshot: fostateOf(peer, "recover", "unknown-state") + kept},
			})
			if tl := s.Told[netip.MustParseAddr(ip1)]; !tl.PeerOwns {
				t.Fatalf("the partner's binding update recorded as %+v, not the peer's; the test premise is gone", tl)
			}
			if got := dueAt(s, 500+grace, 4000); len(got) != 0 {
				t.Errorf("this side sent %q: the partner's lease", got)
			}
		})
	}
}

// TestNewPeerStatesReadFirst: a running agent reads dhcpd's rewrite, and
// the pair's records up to normal, before it reads the dhcpd.conf that
// declares the peer (dhcpd writes its pid file after the rewrite). The
// pair SetPeers then makes starts from the last of those records: in
// normal, no longer new (a review: it stayed new, and a later rewrite
// took the partner's word for this side's).
func TestNewPeerStatesReadFirst(t *testing.T) {
	const peer = "failover-vlan-5001"
	s := NewState(grace)
	s.SetPeers(peersOf(t, vlanAlone("203.0.113")))
	kept := block("203.0.113.12", "active", macB, t0-100, t0+5000)
	runSteps(t, s, []step{
		{at: 0, snapshot: kept},
		{at: 5, snapshot: fostateOf(peer, "recover", "unknown-state") + kept},
		{at: 6, appended: fostateOf(peer, "recover-done", "recover-done") + fostateOf(peer, "normal", "normal")},
	})
	s.SetPeers(peersOf(t, vlanPeer(peer, RolePrimary, "203.0.113")))
	p := s.pairOf(netip.MustParseAddr(ip1))
	if p.New || p.MyState != StateNormal || p.PartnerState != StateNormal {
		t.Errorf("pair %+v; want normal with its partner, not new", p)
	}
	s = NewState(grace)
	s.SetPeers(peersOf(t, vlanAlone("203.0.113")))
	runSteps(t, s, []step{{at: 0, snapshot: kept}, {at: 5, snapshot: fostateOf(peer, "recover", "unknown-state") + kept}})
	s.SetPeers(peersOf(t, vlanPeer(peer, RolePrimary, "203.0.113")))
	if p := s.pairOf(netip.MustParseAddr(ip1)); !p.New || p.MyState != "recover" {
		t.Errorf("pair %+v; want new, recovering", p)
	}
	// HA off, the peer's last record normal; dhcpd's restart alone
	// writes a file without it; HA on again under the same name: new.
	runSteps(t, s, []step{{at: 10, appended: fostateOf(peer, "normal", "normal")}})
	s.SetPeers(peersOf(t, vlanAlone("203.0.113")))
	runSteps(t, s, []step{{at: 20, appended: fostateOf(peer, "normal", "normal")}, {at: 30, snapshot: kept}})
	s.SetPeers(peersOf(t, vlanPeer(peer, RolePrimary, "203.0.113")))
	if p := s.pairOf(netip.MustParseAddr(ip1)); !p.New {
		t.Errorf("HA on again: pair %+v; want new (the record before HA off is no state of it)", p)
	}
}

// TestHAOffUntoldEnd: MAAS turns DHCP HA off for a VLAN whose partner
// rack died. The primary, out of touch (communications-interrupted),
// recorded the end of a lease its hook committed in normal: no hook of
// either side told it, and dhcpd restarted alone frees it without one
// (ISC dhcp server/mdb.c, make_binding_state_transition). Once
// dhcpd.conf has no peer for the address, the end is scheduled. Not
// where the address stays in a pair: its subnet left dhcpd.conf with the
// peer (Retired: that pair's rules go on), or the pair is kept.
func TestHAOffUntoldEnd(t *testing.T) {
	const a1, peer = "203.0.113.10", "failover-vlan-5001"
	end := []string{fmt.Sprintf("expiry %s %s %+d missed-expiry", a1, macA, 500)}
	for _, tc := range []struct {
		name, after string // dhcpd.conf
		want        []string
	}{
		{"HA off", vlanAlone("203.0.113"), end},
		{"the VLAN gone from this rack", vlanAlone("198.18.0"), nil},
		{"HA kept", vlanPeer(peer, "primary", "203.0.113"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.SetPeers(peersOf(t, vlanPeer(peer, "primary", "203.0.113")))
			commit := hook(event.Commit, a1, macA, t0)
			runSteps(t, s, []step{
				{at: 0, snapshot: fostateOf(peer, "normal", "normal") + ackedBlock("203.0.113.11", "active", macB, t0-100, t0+5000)},
				{at: 1, hook: &commit, appended: ackedBlock(a1, "active", macA, t0, t0+500)},
				{at: 100, appended: fostateOf(peer, StateCommInterrupted, "normal")},
				{at: 501, appended: ackedBlock(a1, "expired", macA, t0, t0+500)},
				{at: 600},
			})
			s.SetPeers(peersOf(t, tc.after))
			got := dueAt(s, 601, 4000)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestHAOffPartnersEnd: an end the file recorded in normal, of a lease
// the partner acked, went free on the pair's ack and the partner's hook
// told it: HA off sends nothing of it (a review: without the filter on
// Told.Interrupted and ownExpired, it went again).
func TestHAOffPartnersEnd(t *testing.T) {
	const peer = "failover-vlan-5001"
	s := NewState(grace)
	s.SetPeers(peersOf(t, vlanPeer(peer, RolePrimary, "203.0.113")))
	runSteps(t, s, []step{
		{at: 0, snapshot: fostateOf(peer, "normal", "normal") + ackedBlock("203.0.113.12", "active", macB, t0-100, t0+5000)},
		{at: 1, appended: block(ip1, "active", macA, t0, t0+500)},
		{at: 501, appended: block(ip1, "free", macA, t0, t0+500)},
		{at: 600},
	})
	s.SetPeers(peersOf(t, vlanAlone("203.0.113")))
	if got := dueAt(s, 601, 4000); len(got) != 0 {
		t.Errorf("sent %q: the partner told it", got)
	}
}

// TestUnwrittenSurvivor: a survivor's agent back before its dhcpd (make
// chaos PAIR=1 VLANS=2 seed 113): what the file shows is the dead
// dhcpd's, and rule 3 waits until dhcpd writes it again (FileWritten);
// the lone VLAN's leases are not held. Then a lease of the pair's whose
// end passed meanwhile is ended as before. A dhcpd that does not write
// within the bound (UnwrittenUntil) is taken for one that stays down:
// rule 3 goes on without the write.
func TestUnwrittenSurvivor(t *testing.T) {
	const a1, c1 = "203.0.113.10", "198.18.0.10"
	for _, tc := range []struct {
		name  string
		until int64 // UnwrittenUntil, from t0
		write bool  // dhcpd writes at 601
	}{
		{"dhcpd writes", 1000, true},
		{"dhcpd stays silent", 700, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.SetPeers(peersOf(t, vlanPeer("failover-vlan-5001", "secondary", "203.0.113")+vlanAlone("198.18.0")))
			runSteps(t, s, []step{{at: 0, snapshot: fostateOf("failover-vlan-5001", "partner-down", "communications-interrupted") +
				block(a1, "active", macA, t0-100, t0+500) + block(c1, "active", macB, t0-100, t0+500)}})
			s.UnwrittenUntil = t0 + tc.until // the agent restarts (Reconciler.Run)
			show := func(at int64) (got []string) {
				for _, ev := range s.Due(t0 + at) {
					got = append(got, fmt.Sprintf("%s %s %s", ev.Action, ev.IP, ev.Reason))
					s.Hook(ev)
				}
				return got
			}
			if next, ok := s.NextDue(); !ok || next != t0+500+grace {
				t.Errorf("NextDue = %d, %t; want the lone VLAN's lease's end + grace", next-t0, ok)
			}
			if diff := cmp.Diff([]string{"expiry " + c1 + " ends-passed"}, show(500+grace)); diff != "" {
				t.Errorf("before dhcpd writes (-want +got):\n%s", diff)
			}
			if got := show(600); got != nil {
				t.Errorf("the survivor's lease ended before dhcpd wrote the file: %v", got)
			}
			if tc.write {
				s.FileWritten(0)
				if diff := cmp.Diff([]string{"expiry " + a1 + " ends-passed"}, show(601)); diff != "" {
					t.Errorf("once dhcpd writes (-want +got):\n%s", diff)
				}
				return
			}
			if next, ok := s.NextDue(); !ok || next != t0+tc.until {
				t.Errorf("NextDue = %d, %t; want the bound, %d", next-t0, ok, tc.until)
			}
			if got := show(tc.until - 1); got != nil {
				t.Errorf("the survivor's lease ended before the bound: %v", got)
			}
			if diff := cmp.Diff([]string{"expiry " + a1 + " ends-passed"}, show(tc.until)); diff != "" {
				t.Errorf("at the bound (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStartupSurvivor: a survivor back with its rack, dhcpd starting too
// (make chaos PAIR=1 VLANS=2 seed 116 at cb43d38: 8 `false`). dhcpd's
// first write after the agent's start opens rule 3 (FileWritten), but a
// starting dhcpd repeats the state it saved, dated as it was (startup:
// server/failover.c keeps stos, server/db.c prints saved_state), and its
// partner, up all along, may have renewed the leases whose end passed:
// the survivor's rule 3 waits for a state record dated since the start,
// or StartupWait (dhcpd's startup timeout, back in partner-down). The
// lone VLAN's leases are not held.
func TestStartupSurvivor(t *testing.T) {
	const a1, c1 = "203.0.113.10", "198.18.0.10"
	// fresh is a record of the pair's state dated at t0+at.
	fresh := func(my, partner string, at int64) string {
		return strings.ReplaceAll(fostateOf("failover-vlan-5001", my, partner), "4 2026/11/26 12:00:00", date(t0+at))
	}
	for _, tc := range []struct {
		name   string
		record string // appended at 605
		want   []string
		at     int64 // when want is due
	}{
		// The partner answered: this side steps back (the record keeps
		// the saved date: dhcpd keeps stos out of startup too), and the
		// partner's side tells the lease (renewed, or ended).
		{"the partner answers", fostateOf("failover-vlan-5001", "potential-conflict", "partner-down"), nil, 0},
		// dhcpd's startup ran out (the partner silent): back in the
		// state it saved, dated as before: the bound ends the wait.
		{"startup runs out", fostateOf("failover-vlan-5001", "partner-down", "communications-interrupted"), []string{"expiry " + a1 + " ends-passed"}, 600 + StartupWait},
		// A fresh partner-down (dhcpd out of startup, then an
		// operator's partner-down again, dated anew): the survivor's
		// rule 3 at once.
		{"a fresh partner-down", fresh("partner-down", "communications-interrupted", 605), []string{"expiry " + a1 + " ends-passed"}, 605},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.SetPeers(peersOf(t, vlanPeer("failover-vlan-5001", "secondary", "203.0.113")+vlanAlone("198.18.0")))
			runSteps(t, s, []step{{at: 0, snapshot: fostateOf("failover-vlan-5001", "partner-down", "communications-interrupted") +
				block(a1, "active", macA, t0-100, t0+500) + block(c1, "active", macB, t0-100, t0+500)}})
			s.StartedAt, s.UnwrittenUntil = t0+590, t0+590+UnwrittenWait // the agent restarts (Reconciler.Run)
			show := func(at int64) (got []string) {
				for _, ev := range s.Due(t0 + at) {
					got = append(got, fmt.Sprintf("%s %s %s", ev.Action, ev.IP, ev.Reason))
					s.Hook(ev)
				}
				return got
			}
			if diff := cmp.Diff([]string{"expiry " + c1 + " ends-passed"}, show(595)); diff != "" {
				t.Errorf("before dhcpd writes (-want +got):\n%s", diff)
			}
			// dhcpd starts: its first write, the state it saved.
			appendPair(t, s, fostateOf("failover-vlan-5001", "partner-down", "communications-interrupted"), t0+600)
			s.FileWritten(t0 + 600)
			if got := show(600); got != nil {
				t.Errorf("the survivor's lease ended while dhcpd starts: %v", got)
			}
			if next, ok := s.NextDue(); !ok || next != t0+600+StartupWait {
				t.Errorf("NextDue = %d, %t; want the startup bound, %d", next-t0, ok, 600+StartupWait)
			}
			appendPair(t, s, tc.record, t0+605)
			var got []string
			for at := int64(605); at <= 600+StartupWait+grace; at++ {
				if evs := show(at); evs != nil {
					if at != tc.at {
						t.Errorf("at %d: %v, want it at %d", at, evs, tc.at)
					}
					got = append(got, evs...)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestHAOffKeptSubnet: MAAS turns HA off on the rack's only HA VLAN and
// keeps it on this rack (src/maasserver/dhcp.py writes no peer when the
// VLAN has no secondary rack): the subnet stays in dhcpd.conf, now
// served alone, and its addresses are dhcpd's alone — rule 3 and the
// rest apply to them again — not those of the pair that was (a cold
// review: the subnet was taken for one that left dhcpd.conf, its peer
// retired, and the file's rules stayed off for good).
func TestHAOffKeptSubnet(t *testing.T) {
	const a1 = "203.0.113.10"
	s := NewState(grace)
	s.SetPeers(peersOf(t, vlanPeer("failover-vlan-5001", "primary", "203.0.113")))
	runSteps(t, s, []step{{at: 0, snapshot: fostateOf("failover-vlan-5001", "normal", "normal") + block(a1, "active", macA, t0-100, t0+500)}})
	s.SetPeers(peersOf(t, vlanAlone("203.0.113")))
	if p := s.pairOf(netip.MustParseAddr(a1)); p.InPair() {
		t.Errorf("%s follows %+v, want dhcpd alone", a1, p)
	}
	if s.peers != nil {
		t.Errorf("peers %+v kept where every address is dhcpd's alone", s.peers)
	}
	var got []string
	for _, ev := range s.Due(t0 + 500 + grace) {
		got = append(got, fmt.Sprintf("%s %s %s", ev.Action, ev.IP, ev.Reason))
	}
	if diff := cmp.Diff([]string{"expiry " + a1 + " ends-passed"}, got); diff != "" {
		t.Errorf("rule 3 (-want +got):\n%s", diff)
	}
}

// TestLapsedByPeer: the standby expiries that lapse (the primary had its
// time to send them) are counted by the peer whose primary that is, so
// the log names the right pair.
func TestLapsedByPeer(t *testing.T) {
	const a1, b1, b2 = "203.0.113.10", "198.51.100.10", "198.51.100.11"
	conf := vlanPeer("failover-vlan-5001", "secondary", "203.0.113") + vlanPeer("failover-vlan-5003", "secondary", "198.51.100")
	normal := fostateOf("failover-vlan-5001", "normal", "normal") + fostateOf("failover-vlan-5003", "normal", "normal")
	base := normal + block(a1, "active", macA, t0-100, t0+500) + block(b1, "active", macA, t0-100, t0+500) +
		block(b2, "active", macB, t0-100, t0+500)
	s := NewState(grace)
	s.SetPeers(peersOf(t, conf))
	runSteps(t, s, []step{{at: 0, snapshot: base}, {at: 10, snapshot: normal}, {at: 500 + grace}})
	if got, want := s.TakeLapsed(), map[string]int{"failover-vlan-5001": 1, "failover-vlan-5003": 2}; !maps.Equal(got, want) {
		t.Errorf("lapsed %v, want %v", got, want)
	}
	if got := s.TakeLapsed(); got != nil {
		t.Errorf("taken twice: %v", got)
	}
}

// TestUnwrittenBoundWhileUnknown: the bound passes while the file cannot
// be read (Unknown): Due clears it all the same, so NextDue no longer
// names a time gone by (a cold review: the reconciler's timer fired at
// once, again and again, until the file read again).
func TestUnwrittenBoundWhileUnknown(t *testing.T) {
	s := NewState(grace)
	s.UnwrittenUntil, s.Unknown = t0+120, true
	if next, ok := s.NextDue(); !ok || next != t0+120 {
		t.Errorf("NextDue = %d, %t before the bound; want the bound", next-t0, ok)
	}
	s.Due(t0 + 120)
	if next, ok := s.NextDue(); ok {
		t.Errorf("NextDue = %d after the bound, with nothing to do", next-t0)
	}
}

// TestDroppedWaitsByPeer: the rule-2 expiries dropped because a partner
// spoke for them are counted by that partner's peer (the log names it),
// and only its pair's are dropped.
func TestDroppedWaitsByPeer(t *testing.T) {
	a, b := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("198.51.100.10")
	s := NewState(grace)
	s.SetPeers(peersOf(t, vlanPeer("failover-vlan-5001", "primary", "203.0.113")+vlanPeer("failover-vlan-5003", "primary", "198.51.100")))
	for _, ip := range []netip.Addr{a, b} {
		s.Pending[ip] = []Pending{{Event: event.Event{Action: event.Expiry, IP: ip, MAC: macA, Timestamp: t0, Reason: ReasonVanished}, Due: t0 + 20, PairWait: true}}
	}
	if got, want := s.dropPairWaits([]string{"failover-vlan-5001"}), map[string]int{"failover-vlan-5001": 1}; !maps.Equal(got, want) {
		t.Errorf("dropped %v, want %v", got, want)
	}
	if _, ok := s.Pending[a]; ok {
		t.Error("the spoke pair's wait was kept")
	}
	if len(s.Pending[b]) != 1 {
		t.Error("the other pair's wait was dropped")
	}
}

// TestPairOfDHCPv6: a DHCPv6 address is in no failover pair, not even
// the lead one an address of no known subnet falls back to: dhcpd's
// failover (ISC dhcp's server/failover.c) updates DHCPv4 leases alone,
// and a pair's rules (Stale's settling, replays, the pair channel's
// answers) would hold or drop its news.
func TestPairOfDHCPv6(t *testing.T) {
	s := NewState(0)
	s.Pair = Pair{Peer: "failover-partner", Role: "primary", MyState: "normal", PartnerState: "normal"}
	for ip, want := range map[string]bool{"203.0.113.10": true, "::ffff:203.0.113.10": true, "2001:db8::10": false} {
		if got := s.pairOf(netip.MustParseAddr(ip)).InPair(); got != want {
			t.Errorf("pairOf(%s).InPair() = %t, want %t", ip, got, want)
		}
	}
}

// dueAt is what s sends at each of the times given (seconds after t0),
// each as "action ip mac time reason", told as sent (Hook).
func dueAt(s *State, ats ...int64) []string {
	var got []string
	for _, at := range ats {
		for _, ev := range s.Due(t0 + at) {
			got = append(got, fmt.Sprintf("%s %s %s %+d %s", ev.Action, ev.IP, ev.MAC, ev.Timestamp-t0, ev.Reason))
			s.Hook(ev)
		}
	}
	return got
}
