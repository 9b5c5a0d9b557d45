package reconcile

// Failover pairs: which side of a dhcpd failover pair this agent's dhcpd
// is, what state dhcpd says the pair is in, and so which of the file's
// rules this agent applies (see docs/failover.md). Pure.

import (
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// Failover roles, as dhcpd.conf's failover peer declaration says.
const (
	RolePrimary   = "primary"
	RoleSecondary = "secondary"
)

// StatePartnerDown is dhcpd's failover state in which a server has taken
// over the whole pool because its partner is known to be down.
const StatePartnerDown = "partner-down"

// StateNormal is the failover state of a server in touch with its
// partner, each serving its part of the pool.
const StateNormal = "normal"

// StateCommInterrupted is the failover state of a server that lost touch
// with its partner and has not taken over.
const StateCommInterrupted = "communications-interrupted"

// Pair is what the agent knows of its dhcpd's failover pair. The zero
// value is a dhcpd on its own.
type Pair struct {
	// Peer names the failover peer declaration; "" when dhcpd.conf
	// declares none (or none of its pools uses one).
	Peer string `json:"peer,omitempty"`
	// Role is RolePrimary or RoleSecondary.
	Role string `json:"role,omitempty"`
	// MyState is this server's failover state as its leases file last
	// recorded it ("normal", "communications-interrupted",
	// "partner-down", "recover", …); "" before dhcpd wrote one.
	MyState string `json:"my_state,omitempty"`
	// PartnerState is the partner's state as this server last knew it.
	PartnerState string `json:"partner_state,omitempty"`
	// New: dhcpd.conf declared this peer after the agent had followed
	// the file without it (MAAS turning DHCP HA on for a VLAN the rack
	// served alone), and the file has not yet shown this server in
	// normal with it. dhcpd starts a newly declared peer in recover
	// (ISC dhcp server/confpars.c, parse_failover_peer), which is not
	// then a sign that the partner spoke for the pair: the partner
	// never had the leases this server acked alone, and those its
	// restart drops are this side's to end (State.dropped).
	New bool `json:"new,omitempty"`
}

// InPair reports whether dhcpd runs in a failover pair.
func (p Pair) InPair() bool { return p.Peer != "" }

// Survivor reports whether this server has taken over for a partner
// known to be down: its hooks and its file are then the only witnesses of
// everything the pair does.
func (p Pair) Survivor() bool { return p.InPair() && p.MyState == StatePartnerDown }

// PairOf finds dhcpd's failover pair in its configuration: the first
// failover peer that a pool uses and that says primary or secondary. A
// peer declared but used by no pool changes nothing dhcpd does to leases.
// Where pools use several (MAAS: one per HA VLAN), PeersOf has them all.
func PairOf(cfg *dhcpdconf.Config) Pair {
	if cfg == nil {
		return Pair{}
	}
	used := map[string]bool{}
	for _, r := range cfg.Ranges {
		if r.Failover != "" {
			used[r.Failover] = true
		}
	}
	for _, fp := range cfg.FailoverPeers {
		if used[fp.Name] && (fp.Role == RolePrimary || fp.Role == RoleSecondary) {
			return Pair{Peer: fp.Name, Role: fp.Role}
		}
	}
	return Pair{}
}

// PeersIn is PeersOf for the dhcpd.conf at conf (its includes too).
func PeersIn(conf string) (Peers, error) {
	cfg, err := readConf(conf)
	if err != nil {
		return Peers{}, err
	}
	return PeersOf(cfg), nil
}

// recorded returns p with the states of fs, the file's record for its
// peer (withState), no longer new once the record shows this server in
// normal with its partner: the partner then has what this side has.
func (p Pair) recorded(fs *parser.FailoverState) Pair {
	p = p.withState(fs)
	if p.MyState == StateNormal {
		p.New = false
	}
	return p
}

// withState returns p with the states of the file's record for its peer,
// if fs is one.
func (p Pair) withState(fs *parser.FailoverState) Pair {
	if fs != nil && p.InPair() && fs.Peer == p.Peer {
		p.MyState, p.PartnerState = fs.MyState, fs.PartnerState
	}
	return p
}

// FailoverSeen folds failover state records dhcpd wrote (appended, or a
// whole file's) into the pair's state. It reports whether this agent's
// part changed (taking over, or stepping back).
func (s *State) FailoverSeen(records []*parser.FailoverState) (changed bool) {
	return s.failoverSeen(records).Changed
}

// FailoverFold is what folding failover state records into the state
// did (failoverSeen).
type FailoverFold struct {
	// Changed: this agent's part changed (it took over, or stepped back).
	Changed bool
	// Spoke: a record showed that the partner spoke for the pair
	// (partnerSpoke), whatever the states it ends on.
	Spoke bool
	// Dropped counts the rule-2 expiries dropped because the partner
	// spoke for them (dropPairWaits), by failover peer; nil for none.
	Dropped map[string]int
	// Untold counts the ends no hook has told that taking over scheduled
	// (tellInterrupted): recorded while communications were interrupted,
	// or of this side's own leases not yet free (ownExpired).
	Untold int
	// TookOver, SteppedBack: a record showed this side take over, or
	// step back (both, in a late read, with Changed false).
	TookOver, SteppedBack bool
	// SpokePeers are the peers whose partner spoke (Spoke, per pair);
	// ChangedPeers those whose part changed (Changed), in the order
	// their records came.
	SpokePeers, ChangedPeers []string
}

// then is what fo and next, folding the records that follow fo's, did
// together. Changed is left to the caller, which knows the states before
// the first.
func (fo FailoverFold) then(next FailoverFold) FailoverFold {
	fo.Spoke = fo.Spoke || next.Spoke
	for peer, n := range next.Dropped {
		if fo.Dropped == nil {
			fo.Dropped = map[string]int{}
		}
		fo.Dropped[peer] += n
	}
	fo.Untold += next.Untold
	fo.TookOver = fo.TookOver || next.TookOver
	fo.SteppedBack = fo.SteppedBack || next.SteppedBack
	fo.SpokePeers = addPeers(fo.SpokePeers, next.SpokePeers...)
	fo.ChangedPeers = addPeers(fo.ChangedPeers, next.ChangedPeers...)
	return fo
}

// failoverSeen is FailoverSeen, with all it did. Records are folded in
// file order, and any of them showing that the partner spoke for the
// pair is evidence (dropPairWaits): a reader that comes late — a whole
// read after dhcpd's return — finds dhcpd recovered and back in normal
// in the same file, and only the records before tell that the partner
// was in partner-down.
//
// A takeover or a step-back is acted on at its record, not by comparing
// the states before and after them all: a late read (a whole file the
// agent read long after dhcpd's restart, or a backlog) may hold both,
// and the ends this side took over in between are still its to send.
//
// Each record is its own peer's (several peers: peers.go); a record of a
// peer no pool uses changes nothing.
func (s *State) failoverSeen(records []*parser.FailoverState) (fo FailoverFold) {
	was := s.Pairs()
	for _, fs := range records {
		p := s.pairNamed(fs.Peer)
		if !p.InPair() {
			if fs.Peer != "" {
				if s.undeclared == nil {
					s.undeclared = map[string]*parser.FailoverState{}
				}
				s.undeclared[fs.Peer] = fs
			}
			continue
		}
		before := p.Survivor()
		*p = p.recorded(fs)
		s.freshState(p.Peer, fs.MyStateAt)
		if p.partnerSpoke() {
			fo.Spoke = true
			fo.SpokePeers = addPeers(fo.SpokePeers, p.Peer)
		}
		switch now := p.Survivor(); {
		case !before && now:
			s.takeStandby(p.Peer)
			fo.Untold += s.tellInterrupted(p.Peer)
			fo.TookOver = true
		case before && !now:
			s.keepSurvivorEnds(p.Peer)
			fo.SteppedBack = true
		}
	}
	if !slices.Equal(was, s.Pairs()) {
		// Persisted with the file position it goes with: a restarted
		// agent resuming after these records reads them no more.
		s.metaDirty = true
	}
	fo.Dropped = s.dropPairWaits(fo.SpokePeers)
	fo.ChangedPeers = s.survivorChanged(was)
	fo.Changed = len(fo.ChangedPeers) > 0
	return fo
}

// survivorChanged names the pairs whose part (Survivor) differs from
// was's, an earlier s.Pairs().
func (s *State) survivorChanged(was []Pair) (peers []string) {
	for _, w := range was {
		if s.pairNamed(w.Peer).Survivor() != w.Survivor() {
			peers = append(peers, w.Peer)
		}
	}
	return peers
}

// addPeers adds to list the peers it lacks.
func addPeers(list []string, peers ...string) []string {
	for _, p := range peers {
		if !slices.Contains(list, p) {
			list = append(list, p)
		}
	}
	return list
}

// tellsFromFile reports whether rules 1 and 3 apply: this agent turns
// what the file shows, and no hook reported, into events. Alone: unless
// another program's hooks tell the region (complement). In a pair, a
// block may be the peer's binding update, which the peer's hooks and
// agent report; so only a survivor (partner down: no one else is left)
// speaks for the file, or, with no hooks on either side, the primary
// (the one speaker; the secondary's file holds the same updates).
func (s *State) tellsFromFile(ip netip.Addr) bool { return s.pairTells(s.pairOf(ip)) }

// pairTells is tellsFromFile for the addresses that follow p.
func (s *State) pairTells(p Pair) bool {
	if s.Complement {
		return false
	}
	if !p.InPair() {
		return true
	}
	return p.Survivor() || (s.Hookless && p.Role == RolePrimary)
}

// someTellFromFile reports whether tellsFromFile holds for some address.
func (s *State) someTellFromFile() bool {
	if s.peers == nil {
		return s.pairTells(s.Pair)
	}
	if s.Complement {
		return false
	}
	some := !s.allPaired()
	s.pairs(func(p *Pair) { some = some || s.pairTells(*p) })
	return some
}

// tellsVanished reports whether rule 2 applies: both peers drop the same
// leases when the range shrinks on both (as MAAS configures them), so
// only the primary reports them, or a survivor — and not a primary whose
// file already shows that its partner spoke for the pair (spoke: a
// record of the rewrite, or the state it ends on; see partnerSpoke).
func (s *State) tellsVanished(ip netip.Addr, spoke bool) bool {
	p := s.pairOf(ip)
	if !p.InPair() || p.Survivor() {
		return true
	}
	return p.Role == RolePrimary && !spoke
}

// pairSettle is how long (seconds) after the rewrite that dropped a lease
// a pair's primary, not in partner-down, waits before expiring it, for its
// dhcpd to learn its partner's state: dhcpd connects to its partner as it
// starts and leaves its startup state on the partner's answer, or after
// 15 seconds without one (server/failover.c, the startup timeout). See
// pairVanished.
const pairSettle = 20

// pairVanished returns when to expire a lease a rewrite dropped (rule 2),
// due at due, and whether the expiry waits on the pair's state (Pending.
// PairWait): dropped if the file shows, before it is sent, that the
// partner spoke for the pair.
//
// A range shrink applied while this side's rack was down reached the
// survivor first: MAAS writes both racks' dhcpd.conf and restarts the
// dhcpd that is up, so the survivor (partner-down) dropped the lease from
// its file and expired it in the region then (it speaks for every lease
// while its partner is down). This side's dhcpd drops the same lease
// when it starts again with the same configuration, and its file last
// showed the lease active: on its own that is a second expiry of the
// same lease. What tells the two apart is dhcpd's own failover state as
// this side's file records it after the restart: returning to a partner
// in partner-down, dhcpd records its partner's state as partner-down and
// its own as recover (it must catch up before serving); after a shrink
// applied to both while both were up it records no partner-down at all.
// But the first records after the restart are dhcpd's startup, which
// repeat the state it had before it stopped (server/failover.c,
// write_failover_state writes the saved state during startup), so the
// expiry waits pairSettle for the partner's answer, and is dropped the
// moment a record shows it (FailoverSeen). A record showing the partner
// in partner-down is taken as evidence even when written before the
// restart: the partner was the pair's speaker then, with the same
// configuration applied to it — or it took over within this wait, after
// a shrink both had while both were up, and sends what it held in
// standby for it (pairStandby). A survivor never waits: no one else is
// left to speak.
func (s *State) pairVanished(ip netip.Addr, due, now int64) (int64, bool) {
	if p := s.pairOf(ip); !p.InPair() || p.Survivor() {
		return due, false
	}
	return max(due, now+pairSettle), true
}

// pairStandby reports whether a lease a rewrite dropped is held in
// standby (Pending.Standby) rather than left to the primary: on a
// secondary whose file does not show that the partner spoke for the pair.
//
// The primary holds its rule-2 expiries after its own rewrite
// (pairVanished), and drops them once its file shows that its partner
// went partner-down. A primary that dies within that wait — a shrink
// applied to both while both were up, the primary's rack lost seconds
// later — never sends them, and finds on its return that its partner
// was in partner-down: dropped there too (make chaos PAIR=1 seed 5: three
// leases never expired in the region). The partner did speak for the
// pair then, but only from its takeover on, after the shrink it had
// left to the primary. So the secondary holds the same expiries as long
// as the primary holds its copies (pairVanished: the grace after the
// lease's end or the rewrite, and at least pairSettle): if it takes over
// before then, it sends them (takeStandby), else they were the primary's
// to send, and are dropped. A duplicate is possible only if the primary
// sent them and died within the wait's last moments, or if it saw its
// dhcpd restart again before sending them (pairRewrite): the same expiry
// of an address no range holds, with nothing newer between unless a
// range change brings the address back that soon.
func (s *State) pairStandby(ip netip.Addr, spoke bool) bool {
	p := s.pairOf(ip)
	return p.InPair() && p.Role == RoleSecondary && !p.Survivor() && !spoke
}

// ackedAlone reports whether l, ip's active lease a rewrite drops, is
// this side's own ack made while out of touch with its partner
// (Told.Interrupted on this side's commit) and this server is still out
// of touch: the partner never had the lease (no binding update got
// through), so its agent, the pair's reporter of what rewrites drop when
// it is the primary, has nothing to report, and this side reports it,
// as a survivor would, without waiting on the pair's state (make chaos
// PAIR=1 VLANS=2 TIMERS=maas seed 121: the secondary acked a lease from
// its own pool seconds after the primary's rack went down, and a range
// change restarted it on a range without the address 0.4 s later; the
// primary came back on that range, and nobody ended the lease). If the
// update did get through before the rewrite, both agents send the same
// end: a duplicate, not a lost lease.
func (s *State) ackedAlone(ip netip.Addr, l Lease) bool {
	p := s.pairOf(ip)
	if !p.InPair() || p.MyState != StateCommInterrupted || s.Complement {
		return false
	}
	t, ok := s.Told[ip]
	return ok && t.Action == event.Commit && t.Interrupted && !t.PeerOwns && t.coveredBy(l)
}

// takeStandby makes the expiries held in standby (pairStandby) this
// side's to send, as it takes over for peer: due at the lease's end plus
// the grace, as any rule-2 expiry.
func (s *State) takeStandby(peer string) {
	wait := s.vanishedWait()
	if s.peers != nil {
		s.indexed = false // rule 3's heap skipped this pair's addresses (Due)
	}
	for ip, q := range s.Pending {
		if s.pairOf(ip).Peer != peer {
			continue
		}
		taken := false
		for i := range q {
			if q[i].Standby {
				q[i].Standby, q[i].Due, taken = false, q[i].Event.Timestamp+wait, true
			}
		}
		if taken {
			s.touch(ip) // (the queue stays in event order: Due stops at the first not due)
		}
	}
}

// pairRewrite ends the wait (PairWait) of the rule-2 expiries of an
// earlier rewrite, as a new one is read: the evidence of the partner's
// partner-down is about the restart that dropped the lease, whose first
// records follow it. A later restart's records are about that restart —
// a rack that died again after the shrink returns to a partner that
// went partner-down only then, and never spoke for the lease (seen in
// make chaos PAIR=1) — so those expiries are this side's to send, at
// their time. (A whole read comes with a new file: dhcpd's start or its
// hourly rewrite, or an agent that finds the file rewritten.)
func (s *State) pairRewrite() {
	for ip, q := range s.Pending {
		for i := range q {
			if q[i].PairWait {
				q[i].PairWait = false
				s.touch(ip)
			}
		}
	}
}

// partnerSpoke reports whether the file shows that the partner has been
// speaking for the pair: its state is partner-down, or this server is
// catching up after it (recover, recover-wait, recover-done).
func (p Pair) partnerSpoke() bool {
	return p.PartnerState == StatePartnerDown || p.Recovering()
}

// dropPairWaits drops the rule-2 expiries waiting on the pair's state
// (Pending.PairWait) once the file shows the partner spoke for the pair
// (spoke, failoverSeen): it expired the same leases when the same shrink
// reached it.
func (s *State) dropPairWaits(spoke []string) (dropped map[string]int) {
	if len(spoke) == 0 {
		return nil
	}
	for ip, q := range s.Pending {
		pair := s.pairOf(ip)
		if !slices.Contains(spoke, pair.Peer) || pair.Survivor() {
			continue
		}
		keep := q[:0]
		for _, p := range q {
			if (p.PairWait || p.Standby) && p.Event.Reason == ReasonVanished {
				if dropped == nil {
					dropped = map[string]int{}
				}
				dropped[pair.Peer]++
				continue
			}
			keep = append(keep, p)
		}
		if len(keep) == len(q) {
			continue
		}
		s.touch(ip)
		if len(keep) == 0 {
			delete(s.Pending, ip)
		} else {
			s.Pending[ip] = keep
		}
	}
	return dropped
}

// pairRepeat reports whether a hook's expiry or release repeats what the
// region was told or is a replay: in a pair dhcpd runs on expiry when the
// lease goes free (an MCLT after it expired), so a survivor that told the
// expiry from the expired block hears it again from its hook; and a
// server recovering from its partner's partner-down runs the on expiry
// its own old copy of a lease still carries when the partner's update
// frees it — news the survivor told while it spoke for the pair (dhcpd
// serves no client while recovering, so no hook of its is new then).
// What the file merely recorded (Told.Recorded) is not a reason: outside
// partner-down the expired block comes before this side's own hook, which
// is then the only one to tell the region — unless the lease's end is the
// peer's to tell (Told.PeerOwns, recordTold): the peer acked it last, or
// the file recorded the end while the partner spoke for the pair; this
// side's hook then runs the on expiry or on release of an older ack,
// also after recovery has ended. (With a pair channel, a recovering
// side's replay of news it may alone hold is judged by the peer's word
// instead: pairReplay.)
func (s *State) pairRepeat(t Told, ev event.Event) bool {
	p := s.pairOf(ev.IP)
	if !p.InPair() || ev.Action == event.Commit {
		return false
	}
	if p.Recovering() {
		return true
	}
	if t.MAC != ev.MAC {
		return false
	}
	if t.Action != event.Commit && !t.Recorded {
		return true
	}
	return t.PeerOwns && !p.Survivor()
}

// cutMargin is how far ahead of a hook's expiry the end of the lease it
// ends must lie for HoldCut to take it for a partner's stale binding
// update, in seconds: dhcpd frees a lease at its end at the earliest,
// by its own timer or its partner's update of that end, so an expiry a
// second early is the two racks' clocks.
const cutMargin = 2

// HoldCut holds ev, a hook's expiry in a failover pair, when it ends
// the lease this side acked last for the same client (its commit, not
// the peer's: Told.PeerOwns) at least cutMargin before that lease's
// end. A partner back from a restart sends its binding update of the
// client's life before, expired or freed at that life's end; dhcpd
// takes it over the newer lease (server/failover.c
// dhcp_failover_process_bind_update keeps the update's starts and
// ends: the file shows the lease free with the older life's times) and
// runs the on expiry it attached to this side's ack (server/mdb.c
// make_binding_state_transition). The client holds its lease all the
// same, and where the partner took this side's update of it the
// partner's file holds the lease active (make chaos PAIR=1 TIMERS=maas
// seed 119: expiries a second into the acks they ended, the region
// showing the addresses free until the clients' next leases).
//
// Held, ev is a Pending Cut, due the grace after the cut life's end
// (reason stale-update): no hook of either server tells that end (the
// on expiry ran now, and the partner, which has the life from this
// side's update, has none). Before then settleCut and TakeEndedBefore
// drop it if the same client's next lease of the address comes by that
// end (it kept the address: the region is left on that lease, as the
// client is; the grace lets a renewal in the lease's last seconds reach
// the file), and send it at once, ahead, if another client's lease
// comes, or the same client's after that end, or the file shows the cut
// life end. It goes dated at that end, weighed by the pair channel
// against ev's time, so that the deliverer drops it if the peer delivered
// newer news meanwhile (a renewal this side's file did not show), and the
// channel does not tell the peer of it while it is held (PendingOldest):
// the peer's renewal does not wait for it. (make chaos PAIR=1
// TIMERS=maas seed 119 at 5e600ab: ends sent at the cut life's end,
// judged by that date, were newer than the partner's renewal a second
// before, which this side's file showed a moment later: 11 of 13
// violations; at 57a521e the peer's renewal waited for the end the
// channel told it of: 1; at df97141 ends dated at the hook's time were
// older than the end of the life they cut: 4.) It reports whether it
// held ev, and the end held (its Until the cut lease's end, its Due the
// grace after it): the caller then neither queues nor records ev.
func (s *State) HoldCut(ev event.Event) (Pending, bool) {
	if ev.Action != event.Expiry || ev.Source == event.SourceFile || ev.Reason != "" {
		return Pending{}, false
	}
	if p := s.pairOf(ev.IP); !p.InPair() || p.Recovering() {
		return Pending{}, false
	}
	if p, ok := s.heldCut(ev.IP, ev.MAC); ok {
		return p, true // the file showed the update first (cutByFile)
	}
	t, ok := s.Told[ev.IP]
	if !ok || t.Action != event.Commit || t.MAC != ev.MAC || t.PeerOwns {
		return Pending{}, false
	}
	// The life the expiry cuts: the told lease's, or the file's newer
	// block of this side's client when the expiry falls within it. A cut
	// comes after the ack of the life it cuts, on that dhcpd's clock
	// (the partner's stale update arrives after this side's ack, and
	// dhcpd dates the ack's starts before it runs either hook), so an
	// expiry dated before the life began cuts none of it: it ended an
	// earlier life (an agent judging, after its restart, the hook
	// datagrams queued while the told lease ended and the client took
	// its next, whose block, or commit, it has read: make chaos PAIR=1
	// seed 126 held four such ends for the next life and dropped them
	// when its commit came; seeds 121 and 201, RACKS=3, one each dated
	// a second and two before it, which an allowance of commitSlack
	// took for cuts). A told commit's life begins at its hook's time,
	// and dhcpd runs its hooks one after another, waiting for each
	// (common/execute.c: fork, then waitpid), so the hook of an expiry
	// that cuts the life runs after that commit's and reads the clock
	// later.
	end, life := t.Ends, t.At
	if l, ok := s.File[ev.IP]; ok && l.State == parser.StateActive && l.MAC == ev.MAC &&
		l.Starts >= t.At-commitSlack && ev.Timestamp >= l.Starts {
		end, life = l.Ends, l.Starts
	}
	if ev.Timestamp < life || end == math.MaxInt64 || end < ev.Timestamp+cutMargin {
		return Pending{}, false
	}
	return s.holdCut(ev, end, life), true
}

// holdCut schedules ev, an expiry, as the end held for the life that
// began at life and ends at end (Pending.Cut), and returns it.
func (s *State) holdCut(ev event.Event, end, life int64) Pending {
	ev.Reason = ReasonStaleUpdate
	p := Pending{Event: ev, Due: end + s.Grace, Cut: true, Life: life, Until: end}
	s.schedule(ev.IP, p)
	return p
}

// heldCut returns the end held for the life it cut that is pending for
// ip's client mac, if there is one.
func (s *State) heldCut(ip netip.Addr, mac string) (Pending, bool) {
	for _, p := range s.Pending[ip] {
		if p.Cut && p.Event.MAC == mac {
			return p, true
		}
	}
	return Pending{}, false
}

// cutByFile is HoldCut for the file's side of the same moment: dhcpd
// writes the update's block right after the hook runs, and the agent may
// read it before it judges the hook's datagram. l, unbound, ends a life
// of prev's client older than prev, this side's own lease (Told: its
// commit, not the peer's): the end is held as HoldCut would, and the
// hook's expiry, when judged, is taken for it (or dropped, KeptCutEnd,
// if the client's next lease came by then). However late the agent
// reads it: an agent back from a restart at the end of prev's life, the
// client's next lease in the same read, sent the hook's expiry, queued
// while it was down, 8 s into that life (make chaos PAIR=1 VLANS=2
// TIMERS=maas seed 127). Only where this side's hooks reach the agent
// (not complement mode, where MAAS's helper told the expiry already;
// not hookless).
//
// So is the cut life freed with its own times (the update carried only
// its state: settleCut) read well before its end: the file may show it
// before the hook's datagram is judged, as an agent back from a restart
// reads the file before the hook events queued meanwhile (make chaos
// PAIR=1 VLANS=2 TIMERS=maas seed 127: that end went to the region at
// once, 15 s into the lease the client renewed through the partner).
func (s *State) cutByFile(ip netip.Addr, prev, l Lease, now int64) {
	older := l.Starts > 0 && l.Starts < prev.Starts-commitSlack
	ownTimes := l.State == parser.StateFree && l.Starts == prev.Starts && l.Ends == prev.Ends && prev.Ends >= now+cutMargin
	if s.Complement || s.Hookless || l.State == parser.StateActive || prev.State != parser.StateActive || l.MAC != prev.MAC ||
		!older && !ownTimes || prev.Ends == math.MaxInt64 {
		return
	}
	if p := s.pairOf(ip); !p.InPair() || p.Recovering() {
		return
	}
	if t, ok := s.Told[ip]; !ok || t.Action != event.Commit || t.MAC != l.MAC || t.PeerOwns {
		return
	}
	if _, held := s.heldCut(ip, l.MAC); held {
		return
	}
	s.holdCut(event.Event{Action: event.Expiry, Family: l.Family, MAC: l.MAC, DUID: l.DUID, IP: ip, Timestamp: now, Source: event.SourceFile}, prev.Ends, prev.Starts)
}

// settleCut settles ip's ends held for the life they cut (Pending.Cut,
// HoldCut) as the file shows l, a new block of ip: the same client's
// next lease, begun after the cut life and by its end, drops them, the
// client having kept the address (TakeCutKept), and so does that
// lease's end when the file shows only the end (make chaos PAIR=1
// TIMERS=maas seed 119: the partner renewed the client two seconds
// before the cut end and its release of that lease reached this side's
// file, the renewal's block never did; the cut end, sent dated at the
// cut lease's end, made the partner's agent drop its renewal as older
// news); begun after that end
// (read late), it makes them due now, ahead of it; another client's
// lease makes them due now, ahead of it (MAAS must hear the old lease
// end first: givenAway); an end of the cut life itself (the same
// client's unbound block begun with that life: a release, or the
// partner freeing it) makes them due now, dated at that end or when the
// file showed it, whichever is sooner (make chaos PAIR=1 TIMERS=maas seed
// 119: a lease freed nine seconds before its end, its end dated at the
// lease's end, reached the region after the client's next commit, and
// ended that lease there).
func (s *State) settleCut(ip netip.Addr, l Lease, now int64) {
	q := s.Pending[ip]
	keep := q[:0:0]
	changed := false
	for _, p := range q {
		if p.Cut {
			switch {
			case l.MAC == p.Event.MAC && p.nextLife(l) && l.Starts <= p.Until:
				s.keepCut(ip, p)
				changed = true
				continue
			case l.State != parser.StateActive && l.MAC == p.Event.MAC && !p.nextLife(l) && l.Ends >= now+cutMargin:
				// The cut life freed with its own times (the update
				// carried only its state), read well before its end:
				// the update's own block, as its hook ran, not an end of
				// the life. dhcpd frees a lease at its end at the
				// earliest, a release moves its end to then; the client
				// holds its lease to the end, so the end stays held
				// (make chaos PAIR=1 VLANS=2 TIMERS=maas seed 121: sent
				// at once where the hook came first, held and dropped
				// where the renewal's start was older than its hook).
			case l.State == parser.StateActive && l.MAC == p.Event.MAC && l.Starts > p.Life:
				p.Due, changed = min(p.Due, now), true // the same client back after the cut life's end
			case l.State == parser.StateActive && l.MAC != p.Event.MAC:
				p.Until, p.Due, changed = min(p.Until, l.Starts), min(p.Due, now), true
			case l.State != parser.StateActive && l.MAC == p.Event.MAC && l.Starts >= p.Life-commitSlack:
				// In a pair an unbound block's end is when its state may
				// next change: the life ended by now.
				p.Until, p.Due, changed = min(p.Until, now, max(l.Ends, p.Life)), min(p.Due, now), true
			}
		}
		keep = append(keep, p)
	}
	if changed {
		s.setPending(ip, keep)
	}
}

// keepCut drops p, an end held for a cut life (Pending.Cut), because the
// client kept the address: its next lease came by that life's end. The
// hook's expiry that p stands for may be judged only after that (the
// file read first, as an agent back from a restart does): KeptCutEnd
// drops it then.
func (s *State) keepCut(ip netip.Addr, p Pending) {
	s.cutKept = append(s.cutKept, p.Event)
	if s.keptCuts == nil {
		s.keptCuts = map[netip.Addr]Pending{}
	}
	s.keptCuts[ip] = p
}

// KeptCutEnd reports whether ev, a hook's expiry, ends a cut life whose
// held end was dropped because the client kept the address (keepCut):
// the same client, dated within that life. It is no end: sent, it would
// show the address free in the region while the client held it (make
// chaos PAIR=1 VLANS=2 TIMERS=maas seed 127: an agent back from a restart
// read the partner's stale update and the client's next lease before its
// hook's expiry, and sent that expiry ahead of the next lease).
func (s *State) KeptCutEnd(ev event.Event) bool {
	if ev.Action != event.Expiry || ev.Source == event.SourceFile || ev.Reason != "" {
		return false
	}
	k, ok := s.keptCuts[ev.IP]
	return ok && k.Event.MAC == ev.MAC && ev.Timestamp >= k.Life-commitSlack && ev.Timestamp <= k.Until
}

// nextLife reports whether l, a block of p's client, belongs to a life
// begun after the one p, a Cut end, cut: an active block begun after
// it, or an unbound one begun more than commitSlack after it — the end
// of that next life, whose own block the file may never have shown
// (the partner's to tell, commit and end), not the cut life's own end.
func (p Pending) nextLife(l Lease) bool {
	if l.State == parser.StateActive {
		return l.Starts > p.Life
	}
	return l.Starts > p.Life+commitSlack
}

// behindPeerRecord reports whether ev, a hook's event of this side's,
// is older than the address's last news only because the file recorded
// the peer's newer work (Told.Recorded, Told.PeerOwns) before ev was
// taken: an agent back from a restart reads the file before the events
// its hooks queued meanwhile. Whose lease ev ends (or begins) the newer
// record does not say — pairRepeat's rule is for a record no newer than
// the hook's event — and the region may not have the peer's news yet.
// With the pair channel such an event is queued, and the deliverer
// judges it by the peer's word (agent: judgePair): sent ahead of the
// peer's news if the peer has not delivered it, dropped if it has, and,
// while the peer does not answer, sent with the file's newer record
// after it. Not while dhcpd recovers: it serves no client then, and its
// hooks' ends are replays (pairReplay). (make chaos PAIR=1 seed 95: the
// secondary's agent, restarted, read the primary's commit of 203.0.113.166
// before its own hook's expiry of the lease two seconds older, and
// dropped the expiry: the region never heard that lease end.) Not when
// ev is an end and the record an end of the same MAC: that is the end
// ev tells, recorded first, and the peer's to tell — ev is then an on
// expiry dhcpd kept from this side's older ack (TestLabFailoverStaleOnExpiry:
// queued, it reached the region as well as the peer's, a duplicate).
func (s *State) behindPeerRecord(ev event.Event) bool {
	t, ok := s.Told[ev.IP]
	if p := s.pairOf(ev.IP); !ok || !p.InPair() || p.Recovering() || ev.Source == event.SourceFile ||
		!t.Recorded || !t.PeerOwns || !t.after(ev) {
		return false
	}
	return ev.Action == event.Commit || t.Action == event.Commit || t.MAC != ev.MAC
}

// ReasonPairReplay marks a hook's expiry or release that a server
// recovering from its partner's partner-down ran, and that the agent
// queues only because the failover pair's channel can tell whether it is
// news (pairReplay): the deliverer sends it only if the peer's agent,
// asked about its address, delivered nothing newer than this agent's own
// last news of it.
const ReasonPairReplay = "pair-replay"

// pairReplay reports whether ev, a hook's expiry or release that
// pairRepeat drops because this server is recovering, may be news all
// the same, and returns this agent's own last news of its address (own):
// what the peer must have told something newer than for ev to be a
// repeat.
//
// A recovering server runs the on expiry of its own old copy of a lease
// when its partner's update frees it: news the partner told if it
// recorded the end while it spoke for the pair. But an end the partner
// recorded just before (in normal, the moment its partner died: make
// chaos PAIR=1 seed 21, three lease lives lost), it left to this side's
// hook, which never ran before the death — this replay is then its only
// telling. The files cannot tell the two apart (the partner's state when
// it recorded the end is in its file alone), the partner's agent can: it
// knows what it told. So with a pair channel the event is queued, and
// judged at delivery (agent: judgePair). Only when this agent queued
// news of the address itself (Told.own: its ack's commit, typically) and
// the file's last record is the same MAC's and not newer than ev: else
// it is an older copy's, as pairRepeat says.
func (s *State) pairReplay(ev event.Event) (own event.Event, ok bool) {
	if p := s.pairOf(ev.IP); !p.InPair() || !p.Recovering() || ev.Action == event.Commit {
		return own, false
	}
	t, told := s.Told[ev.IP]
	if !told || t.MAC != ev.MAC || t.after(ev) {
		return own, false
	}
	at, atNS := t.own()
	if at <= 0 {
		return own, false // nothing of the address queued by this agent
	}
	return event.Event{IP: ev.IP, MAC: t.MAC, Timestamp: at, TimestampNS: atNS}, true
}

// Replay is a pair replay this agent queued (ReasonPairReplay,
// pairReplay), or in a pair the end of a lease dhcpd never wrote
// (ReasonUnwritten, unwrittenEnd) or rule 3's end of a lease the file
// shows active past its end (ReasonEndsPassed): the end (Action, MAC,
// At), and this agent's own last news of the address before it (OwnAt,
// OwnAtNS: its Timestamp and TimestampNS; the commit an unwritten end
// ends; the start of the life rule 3 ends, staleCopyBound), which
// the deliverer weighs against what the peer delivered
// (Reconciler.PairReplay). Persisted in the commit that queues
// the replay: an agent restarted before the replay is sent still judges
// it, where it used to drop it.
type Replay struct {
	Action  string `json:"action"`
	MAC     string `json:"mac"`
	At      int64  `json:"at"`
	OwnAt   int64  `json:"own_at"`
	OwnAtNS int64  `json:"own_at_ns,omitempty"`
}

// maxReplays is how many queued replays State.Replays keeps for one
// address, the newest: each is judged when its event is delivered, and
// a replay whose record is gone is dropped as a repeat (judgePair), so
// the records of the events still queued must outlive a newer one of
// the same address. One record an address lost a queued pair replay as
// soon as an unwritten end or rule 3's end of another MAC was queued
// after it, before the first was delivered (a region down, the channel
// holding it). Four bounds what a pair's agent holds for an address
// whose replays went long ago (they are not removed once delivered).
const maxReplays = 4

// queueReplay records ev, a hook's end queued as a pair replay, and own,
// this agent's own news of the address before it (pairReplay), after
// the address's other records (the same end recorded again replaces
// its record), keeping the newest maxReplays.
func (s *State) queueReplay(ev, own event.Event) {
	ip := ev.IP.Unmap() // as replayOwn looks it up
	rp := Replay{Action: ev.Action, MAC: ev.MAC, At: ev.Timestamp, OwnAt: own.Timestamp, OwnAtNS: own.TimestampNS}
	q := slices.DeleteFunc(s.Replays[ip], func(r Replay) bool { return r.same(rp) })
	if len(q) >= maxReplays {
		q = slices.Delete(q, 0, len(q)-maxReplays+1)
	}
	s.Replays[ip] = append(q, rp)
	s.mark(ip, ChangedReplay)
}

// same reports whether r and o record the same end.
func (r Replay) same(o Replay) bool {
	return r.Action == o.Action && r.MAC == o.MAC && r.At == o.At
}

// staleCopyBound is what rule 3's end of l, the active lease the file
// shows for ip, is weighed against in a pair (queueReplay, agent:
// judgePair): the start of its life, with commitSlack for the hook's
// stamp of the ack that wrote it. The peer's agent having delivered news
// of ip newer than that, the block is a stale copy: the partner renewed
// the lease, or ended it, and its binding update never reached this side
// (it died first, or this side was down), so the end is not news. A
// survivor that expired such copies sent ends of leases its partner had
// just renewed (make chaos PAIR=1 VLANS=2 seed 117 at 314f3bd: 8 ends
// the files never showed). So would a side whose dhcpd died while its
// agent runs on: its partner, in communications-interrupted (service
// state not_cooperating, server/failover.c
// dhcp_failover_set_service_state), acks the rebinding requests of this
// side's clients (server/dhcp.c dhcprequest serves REBINDING: "it's out
// of communication with the other server").
func staleCopyBound(ip netip.Addr, l Lease) event.Event {
	return event.Event{IP: ip, MAC: l.MAC, Timestamp: l.Starts + commitSlack}
}

// replayOwn is the own news a queued replay ev was judged against
// (queueReplay), as an event with its time; false if the address has no
// record of ev (more than maxReplays queued after it, or none loaded).
func (s *State) replayOwn(ev event.Event) (event.Event, bool) {
	want := Replay{Action: ev.Action, MAC: ev.MAC, At: ev.Timestamp}
	for _, rp := range s.Replays[ev.IP.Unmap()] {
		if rp.same(want) {
			return event.Event{IP: ev.IP, Action: rp.Action, MAC: rp.MAC, Timestamp: rp.OwnAt, TimestampNS: rp.OwnAtNS}, true
		}
	}
	return event.Event{}, false
}

// ownAck notes a hook's commit, ev, as this side's ack of the binding the
// file last showed for its address, if it is one (the same MAC, the
// block's start within commitSlack), even when it comes after the file's
// blocks (an agent that restarted reads the file before the hook events
// queued meanwhile) and is dropped as older than them: the lease's end is
// then this side's to tell, not the peer's (Told.PeerOwns).
func (s *State) ownAck(ev event.Event) {
	if !s.pairOf(ev.IP).InPair() || ev.Action != event.Commit || (ev.Source != event.SourceHook && ev.Source != event.SourceSpool) {
		return
	}
	t, ok := s.Told[ev.IP]
	l, in := s.File[ev.IP]
	if !ok || !t.PeerOwns || t.MAC != ev.MAC || !in || l.MAC != ev.MAC || l.Starts < ev.Timestamp-commitSlack || l.Starts > ev.Timestamp+commitSlack {
		return
	}
	t.PeerOwns = false
	s.setTold(ev.IP, t)
}

// recordTold is what the region has been told once the file recorded ev,
// a block this side does not tell (outside partner-down in a pair, or
// complement), after t (told: whether there was one).
//
// In a pair it also decides whose hook tells the lease's end (PeerOwns).
// dhcpd attaches the on expiry and on release statements to a lease when
// it acks it, keeps them through its partner's binding updates (a
// partner's update carries no statements: server/mdb.c supersede_lease
// keeps the old ones), and runs them when the lease goes free
// (make_binding_state_transition) — whoever expired or freed it. So after
// the client moved from one server to the other (a partner-down, a
// load-balanced ack), both servers run on expiry for the same end: the
// one that acked it last, and the one with an old copy; and a server
// returning from its partner's partner-down runs its old copy's on
// expiry after recovery has ended, when the lease its partner expired
// (and told the region about) finally goes free. dhcpd's own records
// tell which is which: the file recorded a commit this side's hook did
// not report (the peer acked it last), or an end while the partner was
// the pair's speaker (partner state partner-down, or this side
// recovering). The last acker's hook is the one that tells.
//
// acked is the block's own word that this server acked it (Lease.Acked:
// its cltt is its start or later), which holds whether or not the hook's commit
// has come yet — an agent that restarted reads the file before the hook
// events queued while it was down.
func (s *State) recordTold(t Told, told bool, ev event.Event, acked bool) Told {
	out := Told{Action: ev.Action, MAC: ev.MAC, At: ev.Timestamp, Recorded: true}
	switch {
	case !told:
		out.OwnAt = -1
	case t.OwnAt == 0 && t.OwnAtNS == 0:
		out.OwnAt, out.OwnAtNS, out.OwnDropped = t.At, t.AtNS, t.OwnDropped
	default:
		out.OwnAt, out.OwnAtNS, out.OwnDropped = t.OwnAt, t.OwnAtNS, t.OwnDropped
	}
	if out.OwnAt == out.At && out.OwnAtNS == out.AtNS {
		out.OwnAt, out.OwnAtNS = 0, 0
	}
	p := s.pairOf(ev.IP)
	if !p.InPair() {
		return out
	}
	switch {
	case ev.Action == event.Commit:
		// This side's own ack is reported by its hook (before or after
		// dhcpd writes the block): the same MAC, at the block's start.
		own := acked || told && t.Action == event.Commit && t.MAC == ev.MAC && !t.Recorded && t.At >= ev.Timestamp-commitSlack
		out.PeerOwns = !own
		out.Interrupted = own && p.MyState == StateCommInterrupted
	default:
		out.Spoke = p.partnerSpoke()
		out.PeerOwns = (told && t.MAC == ev.MAC && t.PeerOwns) || out.Spoke
		out.Interrupted = p.MyState == StateCommInterrupted
	}
	return out
}

// keepSurvivorEnds keeps, as this side steps back from partner-down, the
// ends its file recorded while it spoke for the pair and that wait for
// the grace: they stay this side's to send (Pending.Untold, Spoke). The
// partner, recovering, runs its on expiry when this side's update frees
// the lease, and its agent drops that as this side's news (pairRepeat);
// the free block this side's file records next, outside partner-down, is
// recorded as told, and the pending end was then dropped as told (make
// chaos PAIR=1 seed 21: lost).
func (s *State) keepSurvivorEnds(peer string) {
	for ip, q := range s.Pending {
		if s.pairOf(ip).Peer != peer {
			continue
		}
		kept := false
		for i := range q {
			if r := q[i].Event.Reason; q[i].Event.Action != event.Commit && (r == ReasonMissedExpiry || r == ReasonMissedRelease) && !q[i].Untold {
				q[i].Untold, q[i].Spoke, kept = true, true, true
			}
		}
		if kept {
			s.mark(ip, ChangedPending)
		}
	}
}

// tellInterrupted schedules, as this side takes over (partner-down), the
// ends its file recorded while communications were interrupted
// (Told.Interrupted) that are still the last news of their address and
// that this agent did not queue. While communications are interrupted,
// dhcpd expires leases but cannot free them (that needs the partner's
// ack), so neither side's on expiry ran; a survivor tells what its file
// records from the takeover on, and the partner, recovering, runs its
// on expiry when the survivor's update frees the lease, which the
// partner's agent drops as told by the survivor (pairRepeat). Without
// this, an end of a lease whose client does not come back reached the
// region from no one (make chaos PAIR=1 seed 14: lost). A client that
// does come back first has its end sent ahead of its commit
// (untoldEnd), and the scheduled copy is then dropped (Due).
//
// So are the ends of this side's own leases (ownExpired) that the file
// recorded expired or released before, in normal, and that have not gone
// free yet: this side's on expiry waits for the partner's ack, which
// never comes now.
func (s *State) tellInterrupted(peer string) (n int) {
	return s.tellUntold(func(ip netip.Addr) bool { return s.pairOf(ip).Peer == peer })
}

// tellUntold schedules, for the addresses of the told ones that in
// picks, the ends tellInterrupted tells: recorded while communications
// were interrupted, or of this side's own leases not yet free, and not
// queued by this agent. It returns how many.
func (s *State) tellUntold(in func(netip.Addr) bool) (n int) {
	for ip, t := range s.Told {
		if !in(ip) || (!t.Interrupted && !s.ownExpired(ip, t)) {
			continue
		}
		if end, ok := s.unqueuedEnd(ip, t); ok {
			s.schedule(ip, Pending{Event: end, Due: end.Timestamp, Untold: true})
			n++
		}
	}
	return n
}

// ownExpired reports whether the file's last block for ip, recorded as
// told (t) outside partner-down, is the end of a lease this server acked
// (Lease.Acked, and not the peer's to tell) that has not gone free: dhcpd
// runs on expiry and on release when the lease goes free, which in a
// pair needs the partner's ack (server/mdb.c
// make_binding_state_transition), so no hook has told that end. (make
// chaos PAIR=1 seed 3: the partner died just after such an end; this
// side took over and its dhcpd restarted before the MCLT freed the
// lease, and no hook ever told it.) A partner's lease is left to the
// partner's hook, which runs when it returns (pairReplay). Only where
// this agent forwards the hooks: hookless, the primary's agent told the
// end from its own file; in complement mode another program tells them.
func (s *State) ownExpired(ip netip.Addr, t Told) bool {
	if s.Hookless || s.Complement {
		return false
	}
	l, ok := s.File[ip]
	return ok && l.Acked && !t.PeerOwns && !t.Spoke && (l.State == parser.StateExpired || l.State == parser.StateReleased)
}

// untoldDropped is, in a pair, the end the file shows for ip that no
// hook told and none ever will, as a rewrite drops the lease: dhcpd runs
// on expiry when it frees a lease it has, and it no longer has this one.
// Two such ends:
//   - this side's own lease not yet free (ownExpired: make chaos PAIR=1
//     seed 21, a lease of the primary's recorded expired in normal, a
//     range shrink restarting both peers in that second; lost). The
//     partner records it as the peer's (Told.PeerOwns) and tells
//     nothing of it.
//   - an end the file recorded while this server was out of touch with
//     its partner (Told.Interrupted), where this side reports what
//     rewrites drop (tellsVanished: the primary, or a survivor): a
//     partner that acked the lease and died before its end holds it
//     active, and drops it as its range shrinks too, where the primary
//     alone reports such leases (rule 2). (make chaos PAIR=1
//     TIMERS=maas seed 118: the secondary's lease, its rack down as it
//     ended, a range shrink; TestLabFailoverInterruptedShrink, where
//     the primary's file shows "binding state expired; next binding
//     state free" from the secondary's binding update, no cltt.)
//
// The caller sends it after the grace, for the hook of a lease dhcpd
// freed before it stopped to come first (Pending.Untold).
func (s *State) untoldDropped(ip netip.Addr, spoke bool) (event.Event, bool) {
	t, ok := s.Told[ip]
	if !ok || !s.pairOf(ip).InPair() {
		return event.Event{}, false
	}
	interrupted := t.Interrupted && !t.Spoke && !s.Complement && s.tellsVanished(ip, spoke)
	if !s.ownExpired(ip, t) && !interrupted {
		return event.Event{}, false
	}
	return s.unqueuedEnd(ip, t)
}

// ownBacklog reports whether ev, a hook event of this side older than
// t, what the file recorded as told, is news all the same: this side's
// backlog. The file's later block is this side's own news (t.PeerOwns
// is false: this server acked the lease it shows, or the end of one it
// acked), whose hook comes after ev — dhcpd runs its hooks in order, and
// the agent drains them in order. That happens when the agent reads the
// file before hook events queued for it (it was down: the socket's
// backlog and the spool are judged after its first read of the file, to
// see dhcpd's failover state first), and when the file's reader simply
// got ahead of the socket. Dropped as older, ev's lease life would
// never reach the region: nobody else reports this side's work. (The
// peer's news is never this side's backlog: the peer's agent may have
// told it already, and ev after it would take the region back.) A hook
// event no newer than what this agent itself last queued for the
// address (Told.OwnAt) is a replay (a spool or socket read again after a
// crash), not backlog. A survivor too: what its file recorded (t.Recorded)
// it recorded before the takeover, when it only recorded (make chaos
// PAIR=1 seed 14: an agent killed as its dhcpd took over read the
// takeover before its hook's backlog).
func (s *State) ownBacklog(t Told, ev event.Event) bool {
	if !s.pairOf(ev.IP).InPair() || !t.Recorded || t.PeerOwns {
		return false
	}
	if ev.Source != event.SourceHook && ev.Source != event.SourceSpool {
		return false
	}
	at, atNS := t.own()
	if ev.Timestamp != at {
		return ev.Timestamp > at
	}
	ns := fineTime(ev)
	return atNS != 0 && ns != 0 && ns > atNS
}

// Recovering reports whether dhcpd is catching up with its partner after
// the partner ran alone (recover, recover-wait, recover-done): it serves
// no client and its hooks replay its partner's news.
func (p Pair) Recovering() bool {
	switch p.MyState {
	case "recover", "recover-wait", "recover-done":
		return true
	}
	return false
}

// StaleForPair reports whether ev, an event this agent queued for the
// region and has not delivered yet, is older than news the peer spoke
// for since: this side's file records a later block that is the peer's
// (Told.PeerOwns: a commit the peer acked, or an end recorded while the
// partner spoke for the pair) after ev. The peer's agent told that news,
// so ev, sent after it, would take the region back in time — a rack that
// died with events in its outbox (the region was unreachable) returns to
// find that its partner, in partner-down, expired or renewed the same
// leases meanwhile. Dropped instead: the region keeps the peer's later
// news, and misses this lease life (the commit the survivor's file
// recorded is not repeated by the survivor, which cannot tell whether
// the dead side's agent sent it: a repeat of a hook's commit is a
// duplicate). Never outside a pair.
//
// returned is this agent's start (Unix seconds) once its file has shown,
// since then, that the partner spoke for the pair (partner-down, or this
// side recovering), else 0. Then also an end of ev's lease that the file
// recorded as this side's own (its dhcpd expires its own copy of a lease
// whose end passed while it was down as it starts: server/mdb.c
// expire_all_pools runs pool_timer) makes ev stale, when the end came
// before the start and this agent never queued it (Told.OwnAt older than
// the end): the survivor told that end while this side was down.
func (s *State) StaleForPair(ev event.Event, returned int64) bool {
	if p := s.pairOf(ev.IP); !p.InPair() || p.Survivor() {
		return false
	}
	t, ok := s.Told[ev.IP]
	if !ok || !t.Recorded || !t.after(ev) {
		return false
	}
	return t.PeerOwns || s.toldWhileDown(ev, returned)
}

func (s *State) toldWhileDown(ev event.Event, returned int64) bool {
	t := s.Told[ev.IP]
	own, _ := t.own()
	return returned != 0 && ev.Timestamp < returned && t.At < returned && t.Action != event.Commit && t.MAC == ev.MAC && own < t.At
}

// NewestForPair is, in a failover pair, the news the file recorded for
// ev's address since ev, as an event to send right after it, in the same
// request: the state the file last recorded. (In partner-down too: a
// rack returning with a backlog can find its partner gone again and
// itself the survivor before it sends it — make chaos PAIR=1.) Each
// rack delivers on its own and the region applies in arrival order, so
// ev alone could take the region back from what the other rack has
// told (or will tell) — two racks flushing after one region outage put
// their events in no order between them. Sent with the newest state
// after it, ev is no step back — the region applies the request in one
// transaction and is left on that state, whichever rack's request comes
// last — and the lease life ev tells is not lost (make chaos PAIR=1:
// dropping a returning rack's stale events cost the region 31 lease
// lives in one two-minute run). The file's record, not what was told:
// a survivor's file is ahead of what it told (its synthesised events wait
// for the grace), and a rack's own newer news may wait behind ev in its
// queue, which the other rack's news may have overtaken. False when the
// file recorded nothing newer or its record cannot be sent: ev is then
// judged by StaleForPair alone.
func (s *State) NewestForPair(ev event.Event, now int64) (event.Event, bool) {
	if !s.pairOf(ev.IP).InPair() {
		return event.Event{}, false
	}
	l, shown := s.File[ev.IP]
	if !shown {
		return event.Event{}, false
	}
	n, ok := want(ev.IP, l)
	if !ok || n.Timestamp <= ev.Timestamp || n.Timestamp > now {
		// In the same second the file cannot say which came first. And
		// a free (or backup) block's end in a pair is when its state
		// may next change, not when it ended (make chaos PAIR=1: a free
		// block's end 13 s ahead sent as an expiry then): not news.
		return event.Event{}, false
	}
	n.Reason = ReasonPairNewest
	if n.Normalize() != nil || n.Deliverable() != nil {
		return event.Event{}, false
	}
	return n, true
}

// pairHoldMax bounds how long after an agent's start the events it
// found queued wait for its dhcpd to leave recovery (holdOld).
const pairHoldMax = 120 * time.Second

// holdOld returns how much longer an event queued before this agent
// started (its rack was down, or the agent) waits before it is judged
// (Reconciler.Stale), since a time since the start: pairSettle for dhcpd
// to start and learn its partner's state (server/failover.c leaves
// startup on the partner's answer, or 15 s without one), and while dhcpd
// is in recover — it asked its partner for the updates of what the
// partner did while it spoke for the pair (server/failover.c: entering
// recover, dhcp_failover_set_state sends an update-request-all) and
// leaves recover only when they are done (dhcp_failover_process_update_done
// moves it to recover-wait or recover-done) — up to pairHoldMax. 0:
// judge now.
func (p Pair) holdOld(since time.Duration) time.Duration {
	if !p.InPair() {
		return 0
	}
	if settle := pairSettle*time.Second - since; settle > 0 {
		return settle
	}
	if p.MyState == "recover" && since < pairHoldMax {
		return time.Second
	}
	return 0
}

// noteShownEnd notes, in a pair, when the file showed ev, the end it just
// recorded for ip, if ev is dated ahead of that moment (now): a free
// block's end is when its state may next change, not when the lease
// ended (endShownBefore).
func (s *State) noteShownEnd(ip netip.Addr, ev event.Event, now int64) {
	if !s.pairOf(ip).InPair() || ev.Action == event.Commit || ev.Timestamp <= now {
		if s.shownEnd != nil {
			delete(s.shownEnd, ip)
		}
		return
	}
	s.setShownEnd(ip, now)
}

// setShownEnd records that the file showed ip's recorded end at at.
func (s *State) setShownEnd(ip netip.Addr, at int64) {
	if s.shownEnd == nil {
		s.shownEnd = map[netip.Addr]int64{}
	}
	s.shownEnd[ip] = at
}

// noteLoadedEnds notes, for the records of ends loaded from the state
// directory that are dated ahead of now (the load), that the file showed
// them no later than now: an earlier run recorded them, and its memory of
// when (noteShownEnd) did not survive the restart. A hook's commit from
// now on is then newer news than such an end (endShownBefore), as it
// would have been for the run that recorded it (make chaos PAIR=1 seed
// 99: the primary's agent, killed and back a second later, dropped its
// hook's commit as older than a free block's end one second ahead, and
// the region never saw that lease life).
func (s *State) noteLoadedEnds(now int64) {
	for ip, t := range s.Told {
		if t.Recorded && t.Action != event.Commit && t.At > now {
			s.setShownEnd(ip, now)
		}
	}
}

// endShownBefore reports whether t, the file's record of an end for ev's
// address dated ahead of when the file showed it (noteShownEnd), was
// shown no later than ev, a hook's commit: the lease had ended by then,
// whatever its date says, so ev is newer news, not older — dropped as
// older, a lease life was lost (make chaos PAIR=1 seeds 7 and 14: a
// commit a second or two before the free block's end). Only for the
// judgment of hook events: the record itself keeps its date, which
// covers the file's own later blocks of the same life (re-dating the
// record made a survivor's renewal look untold: TestLabFailoverStaleOnExpiry
// at da30b4a).
func (s *State) endShownBefore(t Told, ev event.Event) bool {
	if !s.pairOf(ev.IP).InPair() || ev.Action != event.Commit || (ev.Source != event.SourceHook && ev.Source != event.SourceSpool) {
		return false
	}
	if !t.Recorded || t.Action == event.Commit {
		return false
	}
	at, ok := s.shownEnd[ev.IP]
	return ok && at <= ev.Timestamp
}
