package reconcile

// Several failover peers in one dhcpd. MAAS declares one failover peer
// per VLAN with DHCP high availability (src/maasserver/dhcp.py,
// make_failover_peer_config: "failover-vlan-<id>", this rack's role on
// that VLAN), and one dhcpd serves every VLAN of its rack: some pools use
// one peer, some another (this rack primary on one VLAN, secondary on
// the next, or paired with another rack), some none (a VLAN this rack
// serves alone). dhcpd keeps a failover state per peer, and each pool's
// leases follow its own peer's. So the pair rules apply per address: the
// pair of the peer its subnet's pools use (State.pairOf). Pure.

import (
	"net/netip"
	"slices"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// SubnetPeer names the failover peer a subnet's pools use; "" for a
// subnet whose pools use none (dhcpd serves it alone).
type SubnetPeer struct {
	Prefix netip.Prefix `json:"prefix"`
	Peer   string       `json:"peer"`
}

// Peers is what dhcpd.conf says of failover: the lead pair (PairOf:
// the first peer a pool uses), the other peers pools use, and which
// peer each subnet's pools use (every subnet with an IPv4 range; "" for
// one served alone).
type Peers struct {
	Lead    Pair
	Others  []Pair
	Subnets []SubnetPeer
}

// PeersOf reads Peers from dhcpd.conf. A subnet's peer is the one its
// first failover pool uses (MAAS writes one per VLAN); a pool declared in
// a shared network outside any subnet gives its peer to that shared
// network's subnets.
func PeersOf(cfg *dhcpdconf.Config) Peers {
	p := Peers{Lead: PairOf(cfg)}
	if cfg == nil {
		return p
	}
	usable := map[string]Pair{}
	for _, fp := range cfg.FailoverPeers {
		if fp.Role == RolePrimary || fp.Role == RoleSecondary {
			if _, dup := usable[fp.Name]; !dup {
				usable[fp.Name] = Pair{Peer: fp.Name, Role: fp.Role}
			}
		}
	}
	bySubnet := map[netip.Prefix]string{}
	var order []netip.Prefix
	set := func(pfx netip.Prefix, peer string) {
		if cur, ok := bySubnet[pfx]; ok && (cur != "" || peer == "") {
			return // the first failover pool decides
		}
		if _, ok := bySubnet[pfx]; !ok {
			order = append(order, pfx)
		}
		bySubnet[pfx] = peer
	}
	for _, r := range cfg.Ranges {
		if r.Family != parser.IPv4 {
			continue // dhcpd's failover is DHCPv4's
		}
		peer := ""
		if _, ok := usable[r.Failover]; ok {
			peer = r.Failover
		}
		if r.Subnet.IsValid() {
			set(r.Subnet.Masked(), peer)
			continue
		}
		for _, sn := range cfg.Subnets {
			if r.SharedNetwork != "" && sn.SharedNetwork == r.SharedNetwork && sn.Prefix.Addr().Is4() {
				set(sn.Prefix.Masked(), peer)
			}
		}
	}
	seen := map[string]bool{p.Lead.Peer: true}
	for _, pfx := range order {
		if peer := bySubnet[pfx]; peer != "" && !seen[peer] {
			seen[peer] = true
			p.Others = append(p.Others, usable[peer])
		}
	}
	for _, pfx := range order {
		p.Subnets = append(p.Subnets, SubnetPeer{Prefix: pfx, Peer: bySubnet[pfx]})
	}
	return p
}

// peerSet is the state's pairs besides the lead (State.Pair), and which
// peer each subnet's addresses follow; nil outside a pair.
type peerSet struct {
	Others  []Pair       `json:"others,omitempty"`
	Subnets []SubnetPeer `json:"subnets"`
	// Retired are peers dhcpd.conf no longer declares whose subnets
	// left it too (SetPeers): their last roles and states, for those
	// subnets' dropped leases.
	Retired []Pair `json:"retired,omitempty"`
	// at and peer are the last address peerAt looked up and its peer:
	// one lease's rules ask for its pair several times in a row.
	at   netip.Addr
	peer string
}

// alone is the pair of an address dhcpd serves without a failover peer.
var alone = Pair{}

// pairOf is the failover pair ip's leases follow: its subnet's peer's
// (the lead pair for an address in no subnet known); none for a DHCPv6
// address, which no failover pair shares (ISC dhcp's failover,
// server/failover.c, updates DHCPv4 leases alone; agent/pair, Query).
func (s *State) pairOf(ip netip.Addr) Pair {
	if FamilyOf(ip) == event.IPv6 {
		return alone
	}
	if s.peers == nil {
		return s.Pair
	}
	return *s.pairNamed(s.peerAt(ip))
}

// peerAt is the failover peer ip's subnet uses: the longest known prefix
// holding it; the lead peer for none.
func (s *State) peerAt(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip == s.peers.at {
		return s.peers.peer
	}
	best, peer := -1, s.Pair.Peer
	for _, sp := range s.peers.Subnets {
		if b := sp.Prefix.Bits(); b > best && sp.Prefix.Contains(ip) {
			best, peer = b, sp.Peer
		}
	}
	s.peers.at, s.peers.peer = ip, peer
	return peer
}

// pairNamed is the state's pair for the peer named; &alone (never to be
// changed) for "" or a peer the state does not hold.
func (s *State) pairNamed(peer string) *Pair {
	switch {
	case peer == "":
		return &alone
	case peer == s.Pair.Peer:
		return &s.Pair
	case s.peers != nil:
		for i := range s.peers.Others {
			if s.peers.Others[i].Peer == peer {
				return &s.peers.Others[i]
			}
		}
		for i := range s.peers.Retired {
			if s.peers.Retired[i].Peer == peer {
				return &s.peers.Retired[i]
			}
		}
	}
	return &alone
}

// pairs calls fn for each of the state's pairs, the lead first.
func (s *State) pairs(fn func(p *Pair)) {
	if s.Pair.InPair() {
		fn(&s.Pair)
	}
	if s.peers != nil {
		for i := range s.peers.Others {
			fn(&s.peers.Others[i])
		}
	}
}

// allPaired reports whether every address follows a failover pair.
func (s *State) allPaired() bool {
	if s.peers == nil {
		return s.Pair.InPair()
	}
	return s.Pair.InPair() && !slices.ContainsFunc(s.peers.Subnets, func(sp SubnetPeer) bool { return sp.Peer == "" })
}

// Pairs is every failover pair the state follows, the lead first, with
// their states.
func (s *State) Pairs() []Pair {
	var out []Pair
	s.pairs(func(p *Pair) { out = append(out, *p) })
	return out
}

// SetPeers sets the pairs and the subnets' peers from dhcpd.conf. A
// pair's states stay while its peer keeps its role (a restarted agent
// resumes with those it persisted); a new pair's are unknown until the
// file records them. A subnet dhcpd.conf no longer declares keeps its
// peer while that peer is still used: a range removed with its subnet
// drops its leases, and their expiries are still that pair's rule 2 —
// also when its peer went with it (Retired, with its last role and
// states): MAAS turning HA off on a VLAN keeps it on the primary rack
// alone, whose leases stay, while the secondary drops them, and must
// not expire them in the region; a VLAN whose DHCP is turned off on both
// has its expiries sent by its primary. (Alone, both racks would send
// them, the secondary's for leases that live on.) Where dhcpd.conf is
// back to one peer for every subnet, every address follows it. An
// address that followed a pair and now follows none has the ends no hook
// will tell scheduled (tellDissolved).
func (s *State) SetPeers(p Peers) {
	defer s.tellDissolved(&State{Pair: s.Pair, peers: s.peers})
	old := map[string]Pair{}
	s.pairs(func(q *Pair) { old[q.Peer] = *q })
	keep := func(n Pair) Pair {
		o, ok := old[n.Peer]
		if ok && o.Role == n.Role {
			return o
		}
		// A peer the agent followed the file without: dhcpd starts it
		// in recover (Pair.New). Not at the agent's first read, which
		// knows no earlier dhcpd.conf. Its states are the file's last
		// record of it, if the agent read one before dhcpd.conf named
		// the peer (a running agent reads dhcpd's rewrite first): the
		// pair may be in normal already.
		np := Pair{Peer: n.Peer, Role: n.Role, New: !ok && s.Baselined}
		if fs := s.undeclared[n.Peer]; fs != nil {
			np = np.recorded(fs)
		}
		return np
	}
	if s.peers != nil {
		for _, r := range s.peers.Retired {
			if _, ok := old[r.Peer]; !ok {
				old[r.Peer] = r
			}
		}
	}
	lead := keep(p.Lead)
	if !p.Lead.InPair() {
		lead = Pair{}
	}
	var next *peerSet
	if lead.InPair() || s.peers != nil {
		next = &peerSet{}
		for _, o := range p.Others {
			next.Others = append(next.Others, keep(o))
		}
		next.Subnets = slices.Clone(p.Subnets)
		used := map[string]bool{"": true, p.Lead.Peer: true}
		for _, o := range p.Others {
			used[o.Peer] = true
		}
		if s.peers != nil {
			for _, sp := range s.peers.Subnets {
				if slices.ContainsFunc(p.Subnets, func(n SubnetPeer) bool { return n.Prefix.Overlaps(sp.Prefix) }) {
					continue
				}
				if r, ok := old[sp.Peer]; ok && !used[sp.Peer] && !slices.ContainsFunc(next.Retired, func(x Pair) bool { return x.Peer == r.Peer }) {
					next.Retired = append(next.Retired, r)
				}
				next.Subnets = append(next.Subnets, sp)
			}
		}
		if !lead.InPair() && len(next.Retired) == 0 && !slices.ContainsFunc(next.Subnets, func(sp SubnetPeer) bool { return sp.Peer != "" }) {
			next = nil // alone for every address: no lookups
		}
	}
	if lead == s.Pair && peerSetEqual(next, s.peers) {
		return
	}
	s.Pair, s.peers = lead, next
	s.indexed = false // rule 3's heap skips addresses whose pair does not tell (Due)
	s.metaDirty = true
}

// tellDissolved schedules, for each address that followed a failover
// pair in was (the state's pairs before SetPeers) and now follows none,
// the end its file recorded that no hook told and none will
// (tellInterrupted's: recorded while communications were interrupted,
// or this side's own lease not yet free). Going free needs the
// partner's ack; dhcpd restarted alone frees such a lease as it loads
// the file, and runs on expiry only for an active one (ISC dhcp
// server/mdb.c, make_binding_state_transition). MAAS turning DHCP HA
// off for a VLAN whose secondary rack died leaves its primary, out of
// touch until then, with such ends (TestLabHAOffInterrupted). A lease
// the file shows ended while the pair spoke normally was freed on the
// partner's ack, and its hook told it.
func (s *State) tellDissolved(was *State) {
	if (!was.Pair.InPair() && was.peers == nil) || (s.Pair == was.Pair && s.peers == was.peers) {
		return // no pair before, or nothing changed
	}
	if s.Hookless {
		// The primary's agent told the ends from its file; a secondary's
		// cannot tell which of its own the primary's file showed.
		return
	}
	s.tellUntold(func(ip netip.Addr) bool { return !s.pairOf(ip).InPair() && was.pairOf(ip).InPair() })
}

func peerSetEqual(a, b *peerSet) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.Others, b.Others) && slices.Equal(a.Subnets, b.Subnets) && slices.Equal(a.Retired, b.Retired)
}

// UnwrittenWait bounds UnwrittenUntil: how long after the agent's start
// rule 3 waits, in a pair, for dhcpd to write the file. A rack comes back
// with its agent first and its dhcpd seconds later (pairSettle); a dhcpd
// still silent after this is taken for one that stays down, and the
// leases its file shows end as their ends pass.
const UnwrittenWait = 120

// StartupWait bounds StartupUntil: dhcpd leaves startup when its partner
// answers, or 15 s after it entered it (server/failover.c,
// dhcp_failover_startup_timeout), back in the state it saved.
const StartupWait = 20

// FileWritten ends UnwrittenUntil: dhcpd wrote the file since the agent
// started, at now (Unix seconds), or the bound passed (now 0). Rule 3's
// heap, which passed the pair's addresses by, is rebuilt. A write starts
// StartupUntil: dhcpd may have started with the agent.
func (s *State) FileWritten(now int64) {
	if s.UnwrittenUntil != 0 {
		s.UnwrittenUntil, s.indexed = 0, false
		if now != 0 && s.StartedAt != 0 {
			s.StartupUntil = now + StartupWait
		}
	}
}

// startupOver ends StartupUntil: rule 3 is a survivor's again.
func (s *State) startupOver() {
	s.StartupUntil, s.freshPeers, s.indexed = 0, nil, false
}

// freshState notes a record of peer's state dated at: at or after the
// agent's start, it is dhcpd's state now, not the one a starting dhcpd
// repeats (StartupUntil).
func (s *State) freshState(peer string, at parser.Time) {
	if s.StartedAt == 0 || (s.UnwrittenUntil == 0 && s.StartupUntil == 0) || !at.IsSet() || int64(at) < s.StartedAt || s.freshPeers[peer] {
		return
	}
	if s.freshPeers == nil {
		s.freshPeers = map[string]bool{}
	}
	s.freshPeers[peer], s.indexed = true, false
}

// unwrittenHeld reports whether rule 3 passes ip by for now: its pair's
// dhcpd has not written the file since the agent's start, within the
// bound (UnwrittenUntil), or it has, and this side is the survivor by a
// state the file has not recorded since the start (StartupUntil).
func (s *State) unwrittenHeld(ip netip.Addr) bool {
	if s.UnwrittenUntil == 0 && s.StartupUntil == 0 {
		return false
	}
	p := s.pairOf(ip)
	if !p.InPair() {
		return false
	}
	return s.UnwrittenUntil != 0 || p.Survivor() && !s.freshPeers[p.Peer]
}

// RulesChanged rebuilds rule 3's heap at its next use: who tells what
// the file shows changed (the mode), and Due passed some addresses by.
func (s *State) RulesChanged() { s.indexed = false }

// TakeHeldUnwritten is how many of the pair's leases whose end passed
// Due has passed by since the last call, dhcpd not having written the
// file since the agent's start (UnwrittenUntil).
func (s *State) TakeHeldUnwritten() int {
	n := s.heldUnwritten
	s.heldUnwritten = 0
	return n
}
