package reconcile

// The pure decision core: a State fed with what the file shows and what
// the hooks reported, and a clock reading, decides which events to
// synthesise and when. Nothing in this file does I/O.

import (
	"cmp"
	"container/heap"
	"net/netip"
	"slices"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser"
)

// Reasons a synthesised event exists; the metric label and the log field.
const (
	ReasonMissedCommit  = "missed-commit"  // rule 1
	ReasonMissedRelease = "missed-release" // rule 1
	ReasonMissedExpiry  = "missed-expiry"  // rule 1
	ReasonVanished      = "vanished"       // rule 2
	ReasonPairNewest    = "pair-newest"    // a failover pair's newest news, sent after a stale event (NewestForPair)
	ReasonEndsPassed    = "ends-passed"    // rule 3
	ReasonUnwritten     = "unwritten"      // rule 3, for a hook's commit no file showed (unwrittenEnd)
	ReasonGivenAway     = "given-away"     // rule 2, for a lease whose address another client's commit took before any read showed it dropped (givenAwayTold)
	ReasonRestated      = "restated"       // a MAC's current lease, told again after the end of another of its addresses (Restatement)
	ReasonStaleUpdate   = "stale-update"   // a failover pair: a hook's expiry cutting this side's running lease, held to that lease's end (HoldCut)
)

// commitSlack is how much earlier than the lease's start a hook's commit
// may be stamped and still report it: both are whole seconds taken a few
// milliseconds apart.
const commitSlack = 2

// Lease is what the reconciler keeps of an address's last block.
type Lease struct {
	State    parser.State `json:"state"` // effective binding state
	Family   string       `json:"family"`
	MAC      string       `json:"mac"`            // for IPv6, the Ethernet address in the client's DUID, or ""
	DUID     string       `json:"duid,omitempty"` // IPv6: the client's DUID (hex octets)
	Hostname string       `json:"hostname,omitempty"`
	Starts   int64        `json:"starts"`
	Ends     int64        `json:"ends"` // Unix seconds; math.MaxInt64 for never
	// Acked: an IPv4 block whose cltt is its start or later — this
	// server acked the client then. dhcpd sets both to the same time in
	// ack_lease (server/dhcp.c), and a renewal it answers with the lease
	// unaltered (dhcp-cache-threshold, "reuse_lease: lease age under 25%
	// threshold") moves cltt alone (make chaos PAIR=1 seed 6: such a
	// block taken for the peer's made this side's own expiry hook a
	// repeat of the peer's, and the end was lost); a partner's binding
	// update sets neither cltt nor a new one (server/failover.c,
	// dhcp_failover_process_bind_update takes starts and ends from the
	// update and keeps the lease's own cltt, if any: older than the new
	// start). In a failover pair it tells this side's acks from the
	// peer's (failover.go, recordTold).
	Acked bool `json:"acked,omitempty"`
}

// Told is what the region has been told (queued for it) about an address.
type Told struct {
	Action string `json:"action"`
	MAC    string `json:"mac"`
	At     int64  `json:"at"` // the event's timestamp
	// AtNS is the event's time to the nanosecond when a hook reported it
	// (its timestamp_ns), 0 otherwise: it orders two events of the same
	// second, which At alone cannot (a client's commit and its release
	// often share one). See after.
	AtNS int64 `json:"at_ns,omitempty"`
	// Recorded: taken from the file, not queued by this agent — in a
	// failover pair outside partner-down the file's blocks are recorded
	// as told (the peer's hooks report the peer's work), but a block can
	// also be this side's own work whose hook is still to come (dhcpd
	// writes a lease expired, and runs on expiry only when the peer's ack
	// lets it go free). So a hook after a recorded block is news.
	Recorded bool `json:"recorded,omitempty"`
	// PeerOwns: in a failover pair, this lease's end is the peer's to
	// tell — the peer acked it last (the file recorded its commit and
	// this side's hook reported none), or the file recorded the end while
	// the partner spoke for the pair. A hook of this side's for it then
	// runs an on expiry (or on release) dhcpd kept from an older ack of
	// its own (failover.go, recordTold, pairRepeat).
	PeerOwns bool `json:"peer_owns,omitempty"`
	// Spoke: in a failover pair, the file recorded this end while the
	// partner spoke for the pair (partner state partner-down, or this
	// side recovering): the partner's agent, telling what its file
	// records, told it (untoldEnd).
	Spoke bool `json:"spoke,omitempty"`
	// Interrupted: in a failover pair, the file recorded this end while
	// this server was in communications-interrupted. dhcpd runs on expiry
	// when an expired lease goes free, which needs the partner's ack: no
	// hook of either side has told it, and none will before the lease
	// goes free, an MCLT after a takeover. This side's agent tells it
	// when this side takes over (tellInterrupted). On a commit: this
	// side acked it while in communications-interrupted, so the partner
	// has no copy until its binding update gets through (ackedAlone).
	Interrupted bool `json:"interrupted,omitempty"`
	// Ends is a hook's commit's end (its timestamp plus lease_time), 0
	// otherwise, and 0 again once the file shows the commit's block
	// (setFile) or a rewrite drops the lease it renewed (droppedTold):
	// what the agent knows of a lease the file never showed it
	// (neverShown, unwrittenEnd).
	Ends int64 `json:"ends,omitempty"`
	// OwnAt and OwnAtNS are the time (as At and AtNS) of the last event
	// this agent queued for the address, kept when the file's blocks
	// are recorded over it: in a failover pair a hook event no newer
	// than that is a repeat (a spool or socket replayed after a crash),
	// never this side's backlog (failover.go, ownBacklog). Both 0: At
	// and AtNS themselves; OwnAt -1: nothing queued by this agent.
	OwnAt   int64 `json:"own_at,omitempty"`
	OwnAtNS int64 `json:"own_at_ns,omitempty"`
	// OwnDropped: the deliverer dropped that last event unsent (Dropped):
	// the region never heard it, so the pair channel's answers do not
	// give it as this agent's delivered news (OwnTold).
	OwnDropped bool `json:"own_dropped,omitempty"`
}

// recordedEnd reports whether t is ev, an end, as the file recorded it
// (Told.Recorded): no one has told it for that.
func (t Told) recordedEnd(ev event.Event) bool {
	return t.Recorded && t.Action == ev.Action && t.MAC == ev.MAC && t.At == ev.Timestamp
}

// own is the time (as At and AtNS) of the last event this agent queued
// for the address: OwnAt and OwnAtNS, or At and AtNS when both are 0.
func (t Told) own() (at, atNS int64) {
	if t.OwnAt == 0 && t.OwnAtNS == 0 {
		return t.At, t.AtNS
	}
	return t.OwnAt, t.OwnAtNS
}

// Pending is a synthesised event waiting for its time.
type Pending struct {
	Event event.Event `json:"event"`
	Due   int64       `json:"due"` // Unix seconds
	// Orphan: a vanished lease whose address left every range of
	// dhcpd.conf. The region ignores events outside its dynamic ranges,
	// so the expiry alone leaves the address observed there; at the
	// same time the address is handed on to be freed (TakeOrphans).
	Orphan bool `json:"orphan,omitempty"`
	// PairWait: a vanished lease's expiry from a failover pair's primary
	// outside partner-down, dropped if the file shows before it is due
	// that the partner spoke for the pair (failover.go, pairVanished).
	PairWait bool `json:"pair_wait,omitempty"`
	// Standby: a vanished lease's expiry a failover pair's secondary
	// holds while the primary holds its own copy (Due: when the
	// primary's copy is due, pairVanished's rule). It is sent only if
	// this side takes over before then (the primary died before it could
	// send it); at Due it is dropped (failover.go, pairStandby).
	Standby bool `json:"standby,omitempty"`
	// Untold: an end this side's agent is to tell in a failover pair
	// whatever the file records as told meanwhile: one recorded while
	// communications were interrupted or of this side's own lease not
	// yet free, scheduled on taking over (tellInterrupted, ownExpired),
	// or one a survivor's file recorded before it
	// stepped back (keepSurvivorEnds). It is dropped only if the region
	// was told it or newer news of its address since.
	Untold bool `json:"untold,omitempty"`
	// Spoke: an Untold end the file recorded while this side spoke for
	// its pair (partner-down), kept as it stepped back
	// (keepSurvivorEnds). No hook of the partner's reports it, nor its
	// agent (untoldEnd: Told.Spoke), so it goes ahead of the partner's
	// next commit of its address that the file records as told
	// (vanishedBack). The other Untold ends, recorded before a takeover,
	// the partner's agent may send ahead of its own commit.
	Spoke bool `json:"spoke,omitempty"`
	// Ahead: in a failover pair, a dropped lease's expiry (rule 2) that
	// this side sends, whose client the file then showed bound again
	// after the lease's end, or whose address it showed bound to another
	// client (givenAway), in a block recorded as told (the partner's
	// binding update, or this side's ack before its hook): the end goes
	// now, ahead of that commit, whatever the record says (vanishedBack,
	// aheadCovered). The pair's channel orders it before the partner's
	// delivery of the commit.
	Ahead bool `json:"ahead,omitempty"`
	// Carried: in a failover pair, an end the file recorded that no hook
	// told, carried past the same client's next lease, this side's ack,
	// that the reader got to before that lease's hook commit was judged
	// (carriedEnd). It goes only ahead of that commit (TakeEndedBefore);
	// a hook's own end covers it; at Due it is dropped, as it was before
	// it was carried: no hook of this side told the commit it precedes.
	Carried bool `json:"carried,omitempty"`
	// Cut: in a failover pair, a hook's expiry of the lease this side
	// acked last, seconds into it: a partner's stale binding update of
	// the client's life before, freed at that life's end, taken over the
	// newer one (HoldCut; cutByFile where the file shows the update
	// first). Life is the cut life's start, Until its end. Due the
	// grace after that end (reason stale-update); dropped if the same
	// client's next lease of the address comes by then (it never stopped
	// holding it: a renewal in the cut life's last seconds reaches the
	// file a moment later); due at once, ahead, if another client's
	// lease comes, or the same client's after the cut life's end, or if
	// the file shows the cut life itself end (settleCut,
	// TakeEndedBefore). It goes dated at the cut life's end (Until,
	// moved to when the file showed that life end, or another client's
	// lease begin, if sooner: cutEnd), weighed by the pair channel
	// against the hook's own time (Event; queueReplay): the deliverer
	// drops it if the peer delivered newer news than that (agent:
	// judgePair), as a renewal this side's file did not show. The pair
	// channel does not tell the peer of it while it is held
	// (PendingOldest): the peer's news does not wait for it.
	Cut   bool  `json:"cut,omitempty"`
	Life  int64 `json:"life,omitempty"`
	Until int64 `json:"until,omitempty"`
}

// cutCovered reports whether p, a Cut end, no longer needs sending: this
// agent queued it, or newer news of its address, since — not the file's
// record of the stale end, which is recorded as told.
func (p Pending) cutCovered(t Told, told bool) bool {
	return told && !t.Recorded && satisfied(t, told, p.Event)
}

// cutEnd is p, a Cut end, as it goes: dated at Until, and recorded for
// the pair channel to weigh against the hook's time (judgePair drops it
// if the peer delivered newer news of the address).
func (s *State) cutEnd(p Pending) event.Event {
	ev := p.Event
	ev.Timestamp, ev.TimestampNS = p.Until, 0
	s.queueReplay(ev, p.Event)
	return ev
}

// ownRules reports whether Due judges p by rules of its own (an untold
// end, an expiry held in standby, waiting on the pair's state, owed
// ahead of a recorded commit, or held for the life it cut), not by what
// the region was told of its address before it (coveredUpTo,
// pointless): a hook's commit that covers the pending events before it
// leaves these (toldCommit).
func (p Pending) ownRules() bool {
	return p.Untold || p.Standby || p.PairWait || p.Ahead || p.Carried || p.Cut
}

// aheadCovered reports whether p, an Ahead end, no longer needs sending:
// this agent queued it, or newer news of its address, since — not the
// file's record of the commit that followed it, which is why p is due.
func (p Pending) aheadCovered(t Told, told bool) bool {
	return told && !t.Recorded && satisfied(t, told, p.Event)
}

// carriedCovered reports whether p, a Carried end, no longer needs
// sending: this agent queued news of its address at or after it since (a
// hook's end of that lease from the backlog, recorded behind the file's
// newer record: Told.OwnAt), or newer news that is not the file's record.
func (p Pending) carriedCovered(t Told, told bool) bool {
	if !told {
		return false
	}
	own, _ := t.own()
	return own >= p.Event.Timestamp || p.aheadCovered(t, told)
}

// untoldCovered reports whether p, an Untold end, no longer needs
// sending, given what the region was told (t): that end, or newer news
// of its address — not the file's mere record of it (Told.Recorded),
// which is why p is pending at all.
func (p Pending) untoldCovered(t Told, told bool) bool {
	return told && !t.recordedEnd(p.Event) && satisfied(t, told, p.Event)
}

// Orphan is an address whose lease a reload dropped because it left every
// range, due now: the region still lists it, and only freeing its record
// (agent/orphans) clears it.
type Orphan struct {
	IP       netip.Addr
	MAC      string
	Hostname string
	Ends     int64 // the lease's own end, Unix seconds
}

// State is everything the reconciler knows. The zero value is not ready:
// use NewState. Callers persist it (all fields are exported and encode as
// JSON) so a restarted agent, or one that was down while dhcpd restarted,
// reconciles from where it left off.
type State struct {
	// File is the last known block per address.
	File map[netip.Addr]Lease `json:"file"`
	// Told is the last event queued for the region per address.
	Told map[netip.Addr]Told `json:"told"`
	// Pending are synthesised events per address, in order.
	Pending map[netip.Addr][]Pending `json:"pending"`
	// Replays are, in a failover pair, the last replays, unwritten ends
	// and rule 3's ends this agent queued per address (maxReplays, oldest
	// first), with what the pair channel's answer is weighed against
	// (Replay; failover.go, queueReplay).
	Replays map[netip.Addr][]Replay `json:"replays,omitempty"`
	// Baselined is set once a first complete snapshot has been taken.
	Baselined bool `json:"baselined"`
	// NoFile: before any baseline, this run found the leases file
	// missing: dhcpd had written nothing the region could know of, so
	// the first snapshot, once it appears, is news, not a baseline. (Not
	// persisted: a file that appears while no agent runs is a baseline,
	// as after a path corrected between two runs, which must not replay
	// a rack's every lease.)
	NoFile bool `json:"-"`
	// SureMode is the mode last detected for sure from dhcpd.conf (not
	// forced, not unsure), kept while dhcpd.conf cannot be read. Set by
	// the caller; persisted with Baselined.
	SureMode Mode `json:"sure_mode,omitempty"`
	// Grace is how long to wait for a hook before synthesising (seconds).
	Grace int64 `json:"grace"`
	// Complement: the hooks report to someone else (MAAS's own helper
	// tells MAAS), so the region hears about every change dhcpd writes
	// to the file without us. Only what no hook ever reports is
	// synthesised: rule 2. Rules 1 and 3 would duplicate what the
	// hooks already told the region. Set by the caller from the mode.
	Complement bool `json:"-"`
	// Hookless: dhcpd runs no reporting hook (grace 0). Set by the
	// caller from the mode.
	Hookless bool `json:"-"`
	// Pair is dhcpd's failover pair (failover.go): in one, the file's
	// rules apply only to the side that speaks for them. The caller sets
	// Peer and Role from dhcpd.conf (SetPeers); FailoverSeen the states.
	// Persisted with Baselined (metaDirty). It is the lead one of the
	// peers dhcpd.conf's pools use (MAAS: one per HA VLAN), and peers
	// holds the others and which subnet follows which (peers.go); an
	// address's pair is pairOf.
	Pair  Pair `json:"-"`
	peers *peerSet
	// undeclared is the last state record of each peer the file names
	// and dhcpd.conf, as the agent last read it, does not (dhcpd restarted
	// on a new dhcpd.conf before the agent read it): a pair SetPeers
	// then makes for it starts from it (Pair.New). In memory only.
	undeclared map[string]*parser.FailoverState
	// OutOfRange tells whether an address lies outside every range of
	// dhcpd.conf as dhcpd read it at its last start; nil when unknown
	// (no dhcpd.conf, unreadable). Set by the caller before Snapshot.
	OutOfRange func(netip.Addr) bool `json:"-"`
	// Unknown: what the file says now is not known — the last read of it
	// failed (permission denied, an I/O error) or a whole read is held
	// unfinished (torn, garbage). File may be out of date (dhcpd may have
	// renewed a lease File still shows ending), so nothing is synthesised
	// from it until a read succeeds: Due returns nothing and keeps what is
	// pending. Hook events are not affected. Set by the caller.
	Unknown bool `json:"-"`
	// UnwrittenUntil (Unix seconds, 0: not set): in a pair, rule 3
	// waits for dhcpd to write the file again (FileWritten), or until
	// then: the caller sets it as a restarted agent resumes, a bound
	// ahead (UnwrittenWait). What the file shows then is the last
	// dhcpd's, which may be dead — its rack down with this agent's, the
	// agent back first — and the partner has spoken for the pair
	// meanwhile: the pair's state persisted (a survivor's) and the ends
	// that passed while the rack was down say nothing of the leases the
	// partner renewed (make chaos PAIR=1 VLANS=2 seed 113: four expiries
	// the files never showed). A dhcpd that runs writes its own
	// expirations (pool_timer), so rule 3 is a pair's fallback for a file
	// no one writes; the bound keeps it for a dhcpd that stays dead. Not
	// outside a pair.
	UnwrittenUntil int64 `json:"-"`
	heldUnwritten  int   // what Due passed by for it (TakeHeldUnwritten)
	// StartedAt (Unix seconds) is when the agent started, set with
	// UnwrittenUntil. StartupUntil (Unix seconds, 0: not set): once dhcpd
	// first writes after that (FileWritten), a survivor's rule 3 waits on
	// until the file records a state of its pair dated at or after
	// StartedAt (freshPeers), or until then (StartupWait). A dhcpd that
	// starts is in startup until its partner answers, or 15 s, and
	// meanwhile writes the state it saved, dated as it was
	// (server/failover.c dhcp_failover_set_state keeps stos into and out
	// of startup; server/db.c write_failover_state prints saved_state):
	// a survivor back with its rack reads its own partner-down again, and
	// expired, as the survivor, the leases whose end passed while it was
	// down, which the partner, up all along, had renewed (make chaos
	// PAIR=1 VLANS=2 seed 116 at cb43d38: 8 expiries the files never
	// showed, seconds before dhcpd recorded potential-conflict).
	StartedAt, StartupUntil int64           `json:"-"`
	freshPeers              map[string]bool // peers whose state the file recorded since StartedAt
	// shownEnd is, in a pair, when the file showed an end it recorded
	// (Told) dated ahead of that moment (Unix seconds; endShownBefore).
	// Kept in memory only: after a restart such an end counts as shown
	// at the start (noteLoadedEnds).
	shownEnd map[netip.Addr]int64

	// dirty are the addresses whose File, Told or Pending entry changed
	// since TakeDirty, and which of them; metaDirty is Baselined or Pair
	// changing. They let the caller persist per entry, not the whole
	// state per change.
	dirty     map[netip.Addr]Changed
	metaDirty bool
	dirtyHint int // the size of the last dirty map taken
	// ends orders the active leases by end, for rule 3 without a scan of
	// File on every Due; built on first use, entries checked when popped.
	ends    endsHeap
	indexed bool
	// toldEnds orders the hooks' commits (Told.Ends) by end, for rule 3
	// on leases the file never showed (unwrittenEnd); built on first
	// use, entries checked against Told when popped.
	toldEnds    endsHeap
	toldIndexed bool
	// orphans are the Orphan pendings Due reached, for TakeOrphans.
	orphans []Orphan
	// lapsed counts the standby expiries Due dropped, by failover peer,
	// for TakeLapsed.
	lapsed map[string]int
	// aheadSent are the Ahead ends Due or TakeEndedBefore handed out,
	// for TakeAheadSent.
	aheadSent []event.Event
	// cutKept are the Cut ends dropped because the client's next lease
	// of the address came by the end of the life they cut, for
	// TakeCutKept.
	cutKept []event.Event
	// keptCuts: per address, the last end held for a cut life that was
	// dropped because the client kept the address (keepCut), so that
	// the hook's own expiry of that life, judged later, is dropped too
	// (KeptCutEnd). In memory only.
	keptCuts map[netip.Addr]Pending
	// lastCommit is, per MAC and family, the addresses of the last two
	// commits recorded in Told for that MAC (Restatement); built from
	// Told on first use, entries checked against Told when read.
	lastCommit *commitIndex
	// due is Due's scratch, kept from call to call.
	due struct {
		groups []dueGroup
		picked []int32
	}
}

// dueGroup is one address's events Due picked: its queue, and its
// indices in picked.
type dueGroup struct {
	ip         netip.Addr
	first      int64
	q          []Pending
	start, end int
}

// NewState returns an empty state waiting for its baseline.
func NewState(grace int64) *State {
	return &State{
		File:    map[netip.Addr]Lease{},
		Told:    map[netip.Addr]Told{},
		Pending: map[netip.Addr][]Pending{},
		Replays: map[netip.Addr][]Replay{},
		Grace:   grace,
	}
}

// dropFamily forgets every record of the addresses not of family f (a
// Config.Family; "" keeps all), marking them changed so that the next
// commit deletes them too, and returns how many addresses it dropped.
// Call it on a loaded state, before its indexes are built.
func (s *State) dropFamily(f string) int {
	if f == "" {
		return 0
	}
	drop := map[netip.Addr]bool{}
	note := func(ip netip.Addr) {
		if FamilyOf(ip) != f {
			drop[ip] = true
		}
	}
	for ip := range s.File {
		note(ip)
	}
	for ip := range s.Told {
		note(ip)
	}
	for ip := range s.Pending {
		note(ip)
	}
	for ip := range s.Replays {
		note(ip)
	}
	for ip := range drop {
		delete(s.File, ip)
		delete(s.Told, ip)
		delete(s.Pending, ip)
		delete(s.Replays, ip)
		s.mark(ip, ChangedAll|ChangedReplay)
	}
	return len(drop)
}

// Changed says which of an address's entries changed.
type Changed uint8

const (
	ChangedFile Changed = 1 << iota
	ChangedTold
	ChangedPending
	ChangedReplay
	// ChangedAll: what a change of the address's lease can touch (not
	// its Replay, which only queueReplay sets).
	ChangedAll = ChangedFile | ChangedTold | ChangedPending
)

// touch marks all of ip's entries as changed.
func (s *State) touch(ip netip.Addr) { s.mark(ip, ChangedAll) }

// mark marks ip's entries c as changed.
func (s *State) mark(ip netip.Addr, c Changed) {
	if s.dirty == nil {
		// Sized as the last one taken: under load every round marks
		// about as many addresses as the one before, and growing the
		// map from nothing each round rehashed it every time.
		s.dirty = make(map[netip.Addr]Changed, s.dirtyHint)
	}
	s.dirty[ip] |= c
}

// Dirty says what changed since the last TakeDirty.
type Dirty struct {
	IPs  map[netip.Addr]Changed
	Meta bool // Baselined, Pair
}

// Empty reports whether nothing changed.
func (d Dirty) Empty() bool { return len(d.IPs) == 0 && !d.Meta }

// TakeDirty returns what changed since the last call and forgets it. A
// caller that fails to persist it hands it back with MarkDirty.
func (s *State) TakeDirty() Dirty {
	d := Dirty{IPs: s.dirty, Meta: s.metaDirty}
	s.dirty, s.metaDirty, s.dirtyHint = nil, false, len(s.dirty)
	return d
}

// MarkMeta has the next TakeDirty persist Baselined, Pair and SureMode.
func (s *State) MarkMeta() { s.metaDirty = true }

// MarkDirty adds d back to what changed (a failed write).
func (s *State) MarkDirty(d Dirty) {
	for ip, c := range d.IPs {
		s.mark(ip, c)
	}
	s.metaDirty = s.metaDirty || d.Meta
}

// setFile records ip's last block, indexing its end for rule 3.
func (s *State) setFile(ip netip.Addr, l Lease) {
	if prev, had := s.File[ip]; had && prev == l {
		return
	}
	s.File[ip] = l
	s.mark(ip, ChangedFile)
	if s.indexed && l.State == parser.StateActive && l.Ends != int64(parser.Never) {
		s.ends.push(endsEntry{ends: l.Ends, ip: ip})
	}
	if s.Hookless {
		return // (no hook tells a commit's end: nothing to clear)
	}
	if t, ok := s.Told[ip]; ok && hookEnd(t) && l.MAC == t.MAC && l.Starts >= t.At-commitSlack {
		// The file shows the hook's commit (or a later lease of its
		// client): the file's rules end it, not unwrittenEnd's.
		t.Ends = 0
		s.setTold(ip, t)
	}
}

func (s *State) setTold(ip netip.Addr, t Told) {
	if prev, ok := s.Told[ip]; ok && prev == t {
		return
	}
	s.Told[ip] = t
	s.mark(ip, ChangedTold)
	if s.toldIndexed && hookEnd(t) {
		s.toldEnds.push(endsEntry{ends: t.Ends, ip: ip})
	}
	if t.Action == event.Commit {
		if k, ok := macKey(t.MAC); ok {
			s.indexCommits()
			s.lastCommit.set(k, ip)
		}
	}
}

// macKey is a MAC as Normalize writes it (six octets, two hex digits
// each, colons) in the low 48 bits; false for any other MAC.
func macKey(mac string) (uint64, bool) {
	if len(mac) != 17 {
		return 0, false
	}
	var k uint64
	for i := 0; i < 17; i += 3 {
		hi, ok1 := parser.HexDigit(mac[i])
		lo, ok2 := parser.HexDigit(mac[i+1])
		if !ok1 || !ok2 || (i+2 < 17 && mac[i+2] != ':') {
			return 0, false
		}
		k = k<<8 | uint64(hi<<4|lo)
	}
	return k, true
}

// commitIndex maps a MAC (macKey) to the addresses of its last two
// commits per family, the newest first (two: the end of the newest may
// leave the one before it the MAC's running lease). Its maps hold no
// pointers (a netip.Addr does), so the garbage collector does not scan
// them, and their slots are small: on a fresh rack every new client
// grows the IPv4 map. The zero address is no address.
type commitIndex struct {
	v4 map[uint64][2]uint32
	v6 map[uint64][2][16]byte
}

func (c *commitIndex) set(mac uint64, ip netip.Addr) {
	if ip = ip.Unmap(); ip.Is4() {
		a := ip.As4()
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		if cur := c.v4[mac]; cur[0] != v {
			c.v4[mac] = [2]uint32{v, cur[0]}
		}
		return
	}
	if c.v6 == nil {
		c.v6 = make(map[uint64][2][16]byte)
	}
	if v, cur := ip.As16(), c.v6[mac]; cur[0] != v {
		c.v6[mac] = [2][16]byte{v, cur[0]}
	}
}

// get is the MAC's last two addresses in ip's family, the newest first;
// n of them are set.
func (c *commitIndex) get(mac uint64, ip netip.Addr) (out [2]netip.Addr, n int) {
	if ip.Unmap().Is4() {
		for _, v := range c.v4[mac] {
			if v != 0 {
				out[n] = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
				n++
			}
		}
		return out, n
	}
	for _, v := range c.v6[mac] {
		if v != ([16]byte{}) {
			out[n] = netip.AddrFrom16(v)
			n++
		}
	}
	return out, n
}

// indexCommits builds lastCommit from Told when it is not built yet (a
// new state, or one loaded from disk): Told's commits in time order.
func (s *State) indexCommits() {
	if s.lastCommit != nil {
		return
	}
	s.lastCommit = &commitIndex{v4: make(map[uint64][2]uint32)}
	type commit struct {
		mac uint64
		ip  netip.Addr
		at  int64
	}
	var cs []commit
	for ip, t := range s.Told {
		if k, ok := macKey(t.MAC); ok && t.Action == event.Commit {
			cs = append(cs, commit{k, ip, t.At})
		}
	}
	slices.SortFunc(cs, func(a, b commit) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return a.ip.Compare(b.ip)
	})
	for _, c := range cs {
		s.lastCommit.set(c.mac, c.ip)
	}
}

// Restatement is what to queue right after ev, an end (expiry or
// release) about to be queued for the region: the commit of the address
// the region last heard ev's MAC commit in that family, told again, when
// that is another address whose lease the MAC still holds (or, when the
// newest is ev's own address, the one before it). MAAS deletes a MAC's
// other discovered addresses of the family at every event of the MAC,
// an end's included (maasservicelayer/services/leases.py
// store_lease_info), so the end of one of two leases a machine holds
// under two client identifiers on one MAC (a PXE ROM's and the installed
// system's: dhcpd does not give a client a lease found by its hardware
// address that another client identifier holds, server/dhcp.c
// find_lease) would leave the region without the address the machine
// holds now, until its next renewal. Told again after the end, the
// commit puts it back (and its host name, which the end's deletion
// released). A region keying rows by address alone takes it as a
// repeat.
//
// The commit is the file's active block of that address for the MAC
// (its start, end and host name), or the hook's commit Told recorded
// when that is newer than what the file shows (the reader behind dhcpd;
// the host name then from the file's block of the same MAC, if any).
// While the file is Unknown only the hook's commit is used. Not in
// complement mode (MAAS's own helper tells the region the hooks' events,
// in an order this agent does not see) nor in a failover pair (both
// racks' agents tell the region; an address's news is ordered between
// them by the pair's own rules).
func (s *State) Restatement(ev event.Event, now int64) (event.Event, bool) {
	if ev.Action == event.Commit || s.Complement || s.pairOf(ev.IP).InPair() {
		return event.Event{}, false
	}
	k, ok := macKey(ev.MAC)
	if !ok {
		return event.Event{}, false
	}
	s.indexCommits()
	ips, n := s.lastCommit.get(k, ev.IP)
	for _, ip := range ips[:n] {
		if ip == ev.IP.Unmap() {
			continue
		}
		if x, ok := s.restate(ip, ev, now); ok {
			return x, true
		}
	}
	return event.Event{}, false
}

// restate is the commit of ip for ev's MAC to tell again, if its lease
// runs (Restatement).
func (s *State) restate(ip netip.Addr, ev event.Event, now int64) (event.Event, bool) {
	t, told := s.Told[ip]
	if !told || t.Action != event.Commit || t.MAC != ev.MAC {
		return event.Event{}, false // that address has newer news
	}
	l, shown := s.File[ip]
	fileAt := l.Starts
	if l.State != parser.StateActive {
		fileAt = l.Ends
	}
	var n event.Event
	switch {
	case t.Ends > 0 && (shown && t.At > fileAt || !shown && len(s.Pending[ip]) == 0):
		// A hook's commit the file does not show yet. (Not one whose
		// lease a rewrite dropped: its end is pending.)
		if t.Ends <= now {
			return event.Event{}, false
		}
		n = event.Event{Action: event.Commit, Family: ev.Family, IP: ip, MAC: t.MAC, Timestamp: t.At, LeaseTime: t.Ends - t.At, Source: event.SourceFile}
		if shown && l.MAC == ev.MAC {
			n.Hostname = l.Hostname
		}
	case shown && !s.Unknown:
		if l.State != parser.StateActive || l.MAC != ev.MAC || l.Ends <= now {
			return event.Event{}, false // its end or its new client is the news to come
		}
		var ok bool
		if n, ok = want(ip, l); !ok {
			return event.Event{}, false
		}
	default:
		return event.Event{}, false
	}
	n.Reason = ReasonRestated
	if n.Normalize() != nil || n.Deliverable() != nil {
		return event.Event{}, false
	}
	return n, true
}

// leaseOf reduces a parsed block to what the reconciler keeps. An IPv6
// block has no hardware address: its MAC is the one in the client's DUID
// (the IA's identifier after the IAID), if there is one.
func leaseOf(l *parser.Lease, now parser.Time) Lease {
	out := Lease{
		State:    l.Binding(now),
		Family:   l.Family.String(),
		MAC:      parser.HexString(l.HardwareAddr),
		Hostname: event.CleanHostname(l.ClientHostname),
		Starts:   int64(l.Starts),
		Ends:     int64(l.Ends),
		Acked:    l.Family == parser.IPv4 && l.Starts.IsSet() && l.Cltt.IsSet() && l.Cltt >= l.Starts,
	}
	if l.Family == parser.IPv6 && l.IA != nil {
		if !l.Starts.IsSet() {
			// An iaaddr has no starts: its IA's cltt is when the client
			// last bound or renewed it.
			out.Starts = int64(l.Cltt)
		}
		out.DUID = parser.HexString(l.IA.DUID)
		if hw, ok := event.MACFromDUID(l.IA.DUID); ok {
			out.MAC = parser.HexString(hw)
		}
	}
	return out
}

// want is the event a block asks the region to have seen, if any.
func want(ip netip.Addr, l Lease) (event.Event, bool) {
	ev := event.Event{IP: ip, Family: l.Family, MAC: l.MAC, DUID: l.DUID, Source: event.SourceFile}
	switch l.State {
	case parser.StateActive:
		ev.Action, ev.Timestamp, ev.Hostname, ev.Reason = event.Commit, l.Starts, l.Hostname, ReasonMissedCommit
		if l.Ends > l.Starts && l.Ends != int64(parser.Never) {
			ev.LeaseTime = l.Ends - l.Starts
		}
	case parser.StateReleased:
		ev.Action, ev.Timestamp, ev.Reason = event.Release, l.Ends, ReasonMissedRelease
		if l.Family == event.IPv6 {
			// dhcpd -6 keeps the address's end on release and moves
			// its IA's cltt (Starts here) to the release.
			ev.Timestamp = l.Starts
		}
	case parser.StateFree, parser.StateExpired, parser.StateAbandoned, parser.StateReset, parser.StateBackup:
		ev.Action, ev.Timestamp, ev.Reason = event.Expiry, l.Ends, ReasonMissedExpiry
	default:
		return event.Event{}, false
	}
	if ev.Timestamp < 0 {
		// A block without a time cannot be placed. (One without a MAC
		// the region can take goes on: the caller keeps it back, counted
		// and logged — event.Deliverable.)
		return event.Event{}, false
	}
	return ev, true
}

// offerHold reports whether l, read at now, is dhcpd holding an offered
// address for its client: a DHCPDISCOVER makes the lease free with its
// end two minutes ahead, or at the lease's end if later, in memory only
// (server/dhcp.c, dhcpdiscover: when = cur_time + 120; ack_lease with
// DHCPOFFER), and a rewrite of the file between the OFFER and the ACK
// writes that hold: "binding state free" with an end to come. An end
// that has not come ends nothing. Taken for one, it was an expiry dated
// two minutes ahead, and every event of the address until then was
// dropped as older (make chaos seed 42: a commit the hook told as dhcpd
// died, before its write, and the restarted dhcpd's file showed the
// offer it came from). IPv4 outside a failover pair: dhcpd -6 keeps a
// released address's end, and a pair's free and backup blocks carry the
// pair's own times (failover.go).
func offerHold(l Lease, now int64) bool {
	return l.State == parser.StateFree && l.Family == event.IPv4 && l.Ends > now
}

// satisfied reports whether what the region was told already covers ev:
// the same news, or newer news about the address (sending ev after it
// would take the region back in time: a commit after the release that
// followed it, an expiry after the renewal that followed it).
func satisfied(t Told, ok bool, ev event.Event) bool {
	if ok && t.after(ev) {
		return true
	}
	switch ev.Action {
	case event.Commit:
		return ok && t.Action == event.Commit && t.MAC == ev.MAC && t.At >= ev.Timestamp-commitSlack
	default: // release, expiry
		if !ok {
			return false
		}
		if t.Action == event.Commit && t.MAC != ev.MAC {
			return true // rule 4: the IP is another client's now
		}
		return t.MAC == ev.MAC && (t.Action == event.Release || t.Action == event.Expiry)
	}
}

// Hook records an event a hook reported (or the agent queued for any
// reason): the region has been told it.
func (s *State) Hook(ev event.Event) {
	t := Told{Action: ev.Action, MAC: ev.MAC, At: ev.Timestamp, AtNS: fineTime(ev)}
	if ev.Action == event.Commit && ev.LeaseTime > 0 && ev.Source != event.SourceFile {
		t.Ends = ev.Timestamp + ev.LeaseTime
	}
	if ev.Reason == ReasonRestated {
		if prev, ok := s.Told[ev.IP]; ok && hookEnd(prev) && prev.MAC == ev.MAC && prev.At == ev.Timestamp {
			// The hook's commit told again (Restatement): still a lease
			// the file may never show (unwrittenEnd).
			t.Ends = prev.Ends
		}
	}
	if prev, ok := s.Told[ev.IP]; ok && s.pairOf(ev.IP).InPair() && prev.Recorded && prev.after(ev) && !s.endShownBefore(prev, ev) {
		// This side's backlog, sent ahead of its own later news that
		// the file already recorded (ownBacklog): the record stays the
		// latest news, and the hook of that news, queued behind ev,
		// tells it.
		prev.OwnAt, prev.OwnAtNS, prev.OwnDropped = t.At, t.AtNS, false
		t = prev
	} else if ev.Action == event.Commit && ev.Source != event.SourceFile {
		t.Interrupted = s.pairOf(ev.IP).MyState == StateCommInterrupted // (ackedAlone)
	}
	s.setTold(ev.IP, t)
	if ev.Action == event.Commit && ev.Source != event.SourceFile {
		s.toldCommit(ev)
		s.renewedVanished(ev)
	}
}

// toldCommit drops the first pending commit the file showed that ev, a
// hook's commit, reports — the same client's lease starting in ev's
// second or up to commitSlack after it, for ev's lease time — and what
// is pending before it, as Due would (coveredUpTo; not the untold,
// standby and waiting ends, which Due judges by their own rules). Told now, it is old
// news whatever the region hears next: left pending, an end of
// that lease in the same second — a hook's, whose block is read later,
// or never while the pair's state has this side only record it — cannot
// be ordered against it (whole seconds), and it would go after that end
// and leave the region holding the lease (make chaos PAIR=1 seed 99: a
// survivor's missed-commit sent after its own hook's expiry of that
// second; the life's end lost). The first: hooks come in dhcpd's order,
// the file's blocks too.
func (s *State) toldCommit(ev event.Event) {
	q := s.Pending[ev.IP]
	for i, p := range q {
		e := p.Event
		if e.Action != event.Commit || e.Source != event.SourceFile || p.ownRules() || e.MAC != ev.MAC {
			continue
		}
		if e.Timestamp < ev.Timestamp || e.Timestamp > ev.Timestamp+commitSlack || ev.LeaseTime > 0 && e.LeaseTime != ev.LeaseTime {
			continue
		}
		// Before it, what Due would cut with it (coveredUpTo); the
		// pending events Due judges by their own rules stay.
		keep := make([]Pending, 0, len(q)-1)
		for _, b := range q[:i] {
			if b.ownRules() {
				keep = append(keep, b)
			}
		}
		s.setPending(ev.IP, append(keep, q[i+1:]...))
		return
	}
}

// toldEnd drops what the file made pending for ip of t's client, dated
// no later than t, a hook's end that the file has just recorded outside
// the rules that make this side tell the file's news (observe,
// !tellsFromFile): the file's blocks come in dhcpd's order, so what its
// earlier blocks made pending for that client is older news than that
// end, and sent after it would take the region back. The pending events
// Due judges by their own rules stay, and so do the ends of leases a
// rewrite dropped (rule 2: vanishedBack and pointless settle those).
// (make chaos PAIR=1 seed 95: a survivor's hook told a commit and, after
// its step-back, the release of the same second; the missed-commit its
// file had made pending as the survivor, no longer covered by a pending
// release, went out after the release, and the region ended on a
// released lease.)
func (s *State) toldEnd(ip netip.Addr, t Told) {
	q := s.Pending[ip]
	keep := make([]Pending, 0, len(q))
	for _, p := range q {
		if p.ownRules() || p.Event.Timestamp > t.At || p.Event.MAC != t.MAC || p.Event.Reason == ReasonVanished {
			keep = append(keep, p)
		}
	}
	if len(keep) < len(q) {
		s.setPending(ip, keep)
	}
}

// renewedVanished: a hook's commit for a lease a rewrite dropped, to the
// same MAC and ending later than the end the file showed, is a renewal
// the file never showed the agent (it was down, or could not read the
// file, between dhcpd's append and its rewrite). dhcpd held the lease
// until the renewed end, so the expiry waits for it. Were the commit a
// new binding after the rewrite instead, the file shows the address
// again and the expiry is dropped then (observe).
func (s *State) renewedVanished(ev event.Event) {
	if ev.LeaseTime <= 0 {
		return
	}
	end := ev.Timestamp + ev.LeaseTime
	q := s.Pending[ev.IP]
	for i := range q {
		p := &q[i]
		if p.Event.Reason != ReasonVanished || p.Event.MAC != ev.MAC || p.Event.Timestamp >= end || endedBefore(*p, ev.MAC, ev.Timestamp) {
			continue
		}
		p.Event.Timestamp = end
		p.Due = max(p.Due, end+s.vanishedWait())
		s.touch(ev.IP)
	}
}

// endedBefore reports whether p is the end (an expiry or a release) of a
// lease that ended before the same client's binding starting at start:
// that binding is not a renewal but a new lease, after dhcpd had let the
// old one end. The region is owed the end, and before the new commit
// (make chaos: a commit 2 s after a dropped lease's end, within the
// grace, moved the expiry to the new end as a renewal's would be, and
// the new commit's news then covered it: the expiry was never sent). A
// failover primary's PairWait expiry is the pair's to decide
// (failover.go).
func endedBefore(p Pending, mac string, start int64) bool {
	return p.Event.Action != event.Commit && !p.PairWait && !p.Standby && p.Event.MAC == mac &&
		sooner(p.Event.Action, p.Event.Timestamp, p.Event.Reason == ReasonMissedExpiry, start)
}

// givenAway reports whether p is the end of a lease of another client
// than mac, the address's new holder: the expiry of a lease a rewrite
// dropped (rule 2), over once dhcpd gives its address away, whatever its
// end, or an end the file showed that no hook has told yet (rule 1).
// MAAS must hear that end before the new commit: a commit updates the
// address's DISCOVERED record in place and links it to the new MAC's
// interfaces without unlinking the old one's
// (maasservicelayer/services/leases.py _commit_lease_info;
// db/repositories/staticipaddress.py create_or_update, an upsert on ip;
// services/interfaces.py link_ip, which only adds), so the old client's
// next lease anywhere deletes the record, and its late expiry clears it,
// for the new client too (internal/maasmodel). A failover primary's
// PairWait expiry and the secondary's Standby copy are the pair's to
// decide, and are dropped as before (failover.go).
func givenAway(p Pending, mac string) bool {
	return p.Event.Action != event.Commit && p.Event.MAC != "" && p.Event.MAC != mac && !p.PairWait && !p.Standby
}

// owedBefore reports whether p is an end the region must hear before
// the binding of mac starting at start: the same client's lease that
// ended before it (endedBefore), or another client's (givenAway).
func owedBefore(p Pending, mac string, start int64) bool {
	return endedBefore(p, mac, start) || givenAway(p, mac)
}

// endedAt is p's event dated no later than start, the new binding's: the
// end of a lease whose address went to another client before its end
// (givenAway) is dated when it did.
func endedAt(p Pending, start int64) event.Event {
	ev := p.Event
	ev.Timestamp = min(ev.Timestamp, start)
	return ev
}

// sooner reports whether an end (action, at) of a client's lease came
// before that client's lease starting at start (seconds): in an earlier
// second, or in the same one when the leases file recorded the lease
// expired (recorded) — dhcpd writes an expired lease only once its end
// has passed, and a renewal before that would have moved the end, so the
// client's lease of that second is a new one after the end. Without the
// file's word (a deadline the agent saw pass, a lease a rewrite dropped),
// a commit in the end's second is taken for a renewal; a release in it
// may be of the new lease.
func sooner(action string, at int64, recorded bool, start int64) bool {
	return start > at || start == at && recorded && action == event.Expiry
}

// TakeEndedBefore removes and returns, in order, the ends of ev's
// address that ended before ev, a commit a hook reported, and that the
// region has not been told: pending ends of the same client
// (endedBefore) or of another (givenAway, dated no later than ev; those
// already told are only removed), and in a failover pair an end the file
// recorded while it only recorded (outside partner-down, or before the
// takeover) that no hook of this side reported (untoldEnd). The caller
// queues them ahead of ev, and calls Hook for each. Sent after ev, or
// covered by it, the lease life would never have ended in the region.
func (s *State) TakeEndedBefore(ev event.Event) []event.Event {
	if ev.Action != event.Commit || s.Complement {
		return nil
	}
	fromFile := s.tellsFromFile(ev.IP)
	q := s.Pending[ev.IP]
	t, told := s.Told[ev.IP]
	var out []event.Event
	keep := q[:0:0]
	for _, p := range q {
		if p.Cut {
			end := p.Event
			switch {
			case ev.MAC == end.MAC && ev.Timestamp <= p.Life+commitSlack:
				keep = append(keep, p) // the cut life's own commit, told again (a spool replayed)
			case ev.MAC == end.MAC && ev.Timestamp <= p.Until:
				s.keepCut(ev.IP, p) // the client's next lease by the cut life's end: it kept the address
			case !p.cutCovered(t, told):
				// Another client's lease, or the same client's after the
				// cut life's end: the end first, dated no later.
				p.Until = min(p.Until, ev.Timestamp)
				end = s.cutEnd(p)
				out = append(out, end)
				t, told = Told{Action: end.Action, MAC: end.MAC, At: end.Timestamp}, true
			}
			continue
		}
		// Where the hooks tell the region, only this side's untold ends
		// (ownDropped, tellInterrupted) and the rule-2 expiries this
		// side sends (a pair's primary after its wait, pairRewrite; a
		// survivor's, kept when it steps back) are pending ends of its
		// own. (make chaos PAIR=1 seed 17: a returned primary's rule-2
		// expiry, due after its client came back, was kept pending here;
		// the commit then covered it and no one told that end.)
		if !owedBefore(p, ev.MAC, ev.Timestamp) || !fromFile && !p.Untold && !p.Carried && p.Event.Reason != ReasonVanished {
			keep = append(keep, p)
			continue
		}
		p.Event = endedAt(p, ev.Timestamp)
		covered := satisfied(t, told, p.Event)
		switch {
		case p.Untold:
			covered = p.untoldCovered(t, told)
		case p.Ahead:
			covered = p.aheadCovered(t, told)
		case p.Carried:
			covered = p.carriedCovered(t, told)
		}
		if !covered {
			out = append(out, p.Event)
			t, told = Told{Action: p.Event.Action, MAC: p.Event.MAC, At: p.Event.Timestamp}, true
			if p.Ahead {
				s.aheadSent = append(s.aheadSent, p.Event)
			}
		}
	}
	if len(keep) != len(q) {
		s.setPending(ev.IP, keep)
	}
	if end, ok := s.givenAwayTold(ev, t, told); ok {
		return append(out, end)
	}
	if len(out) == 0 {
		// A survivor tells what its file records from the takeover on;
		// an end recorded before it (communications interrupted: nothing
		// expires then) was recorded as told, and no hook reports it if
		// the client is back before the lease goes free.
		if end, ok := s.untoldEnd(ev); ok {
			return []event.Event{end}
		}
	}
	return out
}

// BackAfterEnd reports whether ev, a hook's commit, may be its client's
// new lease after dhcpd ended the one the agent knows of it, at or before
// ev's second: then the file may hold that end, written before dhcpd ran
// the hook, and the reader may not have got to it. The end is owed
// before the commit (TakeEndedBefore), and only the file tells it when no
// hook does: in a failover pair dhcpd runs on expiry only when the lease
// moves on to free or backup (server/mdb.c, make_binding_state_transition),
// and while the partner is away an expired lease stays expired, so the
// client back in the same second gets a new lease whose commit is the
// only hook (make chaos PAIR=1 SEED=107). Accept has the file read first.
// A renewal comes well before the end: this costs a read only for a
// client that comes back.
func (s *State) BackAfterEnd(ev event.Event) bool {
	if ev.Action != event.Commit || s.Complement {
		return false
	}
	if l, ok := s.File[ev.IP]; ok && l.State == parser.StateActive && l.MAC == ev.MAC && l.Ends <= ev.Timestamp {
		return true
	}
	t, ok := s.Told[ev.IP]
	return ok && hookEnd(t) && t.MAC == ev.MAC && t.Ends <= ev.Timestamp
}

// carriedEnd is, in a failover pair where the hooks tell the region,
// the end the file recorded for l's client that no hook told and this
// agent has not queued (untoldEnd), when l, an active block of the same
// client that this side acked, begins after it. Recording l as told
// would bury that end: untoldEnd finds it only while it is the last news.
// dhcpd writes l after it runs the commit's hook, so the reader may get
// to l before the hook's datagram is judged (BackAfterEnd has the file
// read first). The caller schedules it Carried: TakeEndedBefore puts it
// ahead of the hook's commit; a hook's end of that lease, still on its
// way (an agent's backlog), covers it.
func (s *State) carriedEnd(ip netip.Addr, l Lease) (event.Event, bool) {
	if s.tellsFromFile(ip) || s.Complement || l.State != parser.StateActive || !l.Acked || !s.pairOf(ip).InPair() {
		return event.Event{}, false
	}
	return s.untoldEnd(event.Event{Action: event.Commit, Family: l.Family, IP: ip, MAC: l.MAC, Timestamp: l.Starts})
}

// givenAwayTold is the end of the lease the region was told last for
// ev's address (t, if told) when ev, a hook's commit, gives the address
// to another client and nothing pending ends that lease: dhcpd gives an
// address away only once the lease on it is over, and one a restart
// dropped (its range shrunk, then back) ends with no hook, and no read
// of the file may have shown the drop yet (a busyRound apart under
// load: TestLabDroppedThenGivenAway). Dated no later than ev and sent
// ahead of it (givenAway). Only when the commit told came before ev for
// sure (Told.before), not in a failover pair (the partner may have told
// that end) nor for an address without a MAC.
func (s *State) givenAwayTold(ev event.Event, t Told, told bool) (event.Event, bool) {
	if !told || s.pairOf(ev.IP).InPair() || t.Action != event.Commit || t.MAC == "" || t.MAC == ev.MAC || !t.before(ev) {
		return event.Event{}, false
	}
	// The lease ended at the commit's end, or the file's block's (a
	// renewal dhcpd answered from the lease it had: coveredBy), if
	// before ev; never before the commit told.
	at := ev.Timestamp
	if hookEnd(t) && t.Ends < at {
		at = t.Ends
	}
	if l, ok := s.File[ev.IP]; ok && l.State == parser.StateActive && t.coveredBy(l) && l.Ends < at {
		at = l.Ends
	}
	return event.Event{Action: event.Expiry, Family: ev.Family, MAC: t.MAC, IP: ev.IP,
		Timestamp: max(at, t.At), Source: event.SourceFile, Reason: ReasonGivenAway}, true
}

// before reports whether what the region was told happened before ev
// for sure: in an earlier second, or in the same second when both are
// hook events timed to the nanosecond. (A commit of the same second
// from the file, or replayed from the spool, may be older than what was
// told.)
func (t Told) before(ev event.Event) bool {
	if t.At != ev.Timestamp {
		return t.At < ev.Timestamp
	}
	ns := fineTime(ev)
	return t.AtNS != 0 && ns != 0 && t.AtNS < ns
}

// untoldEnd is, in a failover pair, the end of the same client's lease
// the file recorded last for ev's address, before ev, when this agent
// queued nothing for it (Told.OwnAt older than it): recorded as told
// outside partner-down, or before this side took over (an end a
// survivor's file recorded since is pending, and told from there).
// dhcpd runs on expiry only when an expired lease goes free, which needs
// the peer's ack (server/mdb.c make_binding_state_transition;
// docs/failover.md); a client that comes back first is given
// the same address again from the expired lease, and no hook of either
// server ever reports that end (make chaos PAIR=1: lease lives that
// never ended in the region).
func (s *State) untoldEnd(ev event.Event) (event.Event, bool) {
	t, ok := s.Told[ev.IP]
	p := s.pairOf(ev.IP)
	if !ok || !p.InPair() || t.MAC != ev.MAC || !sooner(t.Action, t.At, true, ev.Timestamp) {
		return event.Event{}, false
	}
	if t.Spoke || p.partnerSpoke() {
		// The partner spoke for the pair (partner-down; this side
		// recovering) when the file recorded the end, or does now: its
		// agent told the ends its file recorded, this one among them
		// (make chaos PAIR=1 seed 21: both racks told it, the
		// survivor's copy after the client's next commit; seed 5: the
		// same once this side, back from its partner's partner-down,
		// had recovered).
		return event.Event{}, false
	}
	return s.unqueuedEnd(ev.IP, t)
}

// unqueuedEnd is the end the file shows for ip when t, what it recorded
// as told, is that end and this agent queued nothing since (untoldEnd,
// tellInterrupted).
func (s *State) unqueuedEnd(ip netip.Addr, t Told) (event.Event, bool) {
	if !t.Recorded || t.Action == event.Commit {
		return event.Event{}, false
	}
	if own, _ := t.own(); own >= t.At {
		return event.Event{}, false // this agent queued it
	}
	l, shown := s.File[ip]
	if !shown {
		return event.Event{}, false
	}
	end, ok := want(ip, l)
	if !ok || !t.recordedEnd(end) {
		return event.Event{}, false
	}
	return end, true
}

// fineTime is ev's time to the nanosecond if a hook took it: its
// timestamp_ns, read from the same clock reading as its timestamp (so
// within that second). dhcpd runs its hooks one after another, so among
// a server's hook events it is dhcpd's order. 0 for anything else: a
// synthesised event is stamped with the lease's own second and, to the
// nanosecond, with when it was synthesised, which is no order against a
// hook's.
func fineTime(ev event.Event) int64 {
	if ev.Source != event.SourceHook && ev.Source != event.SourceSpool {
		return 0
	}
	if ns := ev.TimestampNS; ns > 0 && ns/1e9 == ev.Timestamp {
		return ns
	}
	return 0
}

// after reports whether what the region was told happened after ev: in
// an earlier second, or in the same second when both are hook events
// timed to the nanosecond. (Replayed after a crash, a spooled or peeked
// commit of the same second as the release that followed it would
// otherwise pass as news, and the region, which applies in arrival
// order, would end on the commit.)
func (t Told) after(ev event.Event) bool {
	if t.At != ev.Timestamp {
		return t.At > ev.Timestamp
	}
	ns := fineTime(ev)
	return t.AtNS != 0 && ns != 0 && t.AtNS > ns
}

// Superseded reports whether ev, an event a hook reported, is older than
// what the region has been told about its address since (a spooled event
// drained late, a hook slower than the grace whose event the file already
// supplied), or is an expiry or release for MAC A arriving after the
// address was committed to MAC B in the same second. Either would take
// the region back in time — the region keys rows by IP alone and would
// free B's address (rule 4) — so the caller drops it.
func (s *State) Superseded(ev event.Event) bool { return s.SupersededWhy(ev) != "" }

// whyPairRepeat is SupersededWhy's reason for pairRepeat.
const whyPairRepeat = "a repeat of what the failover peer already reported"

// SupersededWhy is Superseded with the rule that drops ev, for the
// operator's log; "" when ev passes.
func (s *State) SupersededWhy(ev event.Event) string {
	s.ownAck(ev)
	t, ok := s.Told[ev.IP]
	if !ok {
		return ""
	}
	switch {
	case s.pairRepeat(t, ev):
		return whyPairRepeat
	case t.after(ev):
		if s.ownBacklog(t, ev) || s.endShownBefore(t, ev) {
			return ""
		}
		return "older than what the region was told about the address"
	case ev.Action != event.Commit && t.Action == event.Commit && t.MAC != ev.MAC && t.At >= ev.Timestamp:
		if s.ownBacklog(t, ev) {
			// The commit is this side's own ack, recorded from the file
			// in ev's second: dhcpd freed the lease (on expiry runs
			// then, in a pair), acked the new client, and runs that
			// commit's hook after ev's.
			return ""
		}
		return "an end of another MAC's lease, after the address was committed to a new MAC"
	}
	return ""
}

// Lookup returns what the state holds for ip (for logs and tests).
func (s *State) Lookup(ip netip.Addr) (l Lease, inFile bool, t Told, told bool) {
	l, inFile = s.File[ip]
	t, told = s.Told[ip]
	return
}

// Appended folds blocks dhcpd appended (commits, releases, expiries)
// into the state, scheduling what no hook reports within the grace.
func (s *State) Appended(blocks []*parser.Lease, now int64) {
	for _, b := range blocks {
		if b.PrefixLen > 0 {
			continue // delegated prefixes: the region API has no place for them
		}
		s.observe(b.IP, leaseOf(b, parser.Time(now)), now)
	}
}

func (s *State) observe(ip netip.Addr, l Lease, now int64) {
	if offerHold(l, now) && !s.pairOf(ip).InPair() {
		// Not a lease, nor the end of one: the file keeps what it held
		// for the address, and an end the hooks told, or rule 3's from
		// that, or unwrittenEnd's for a hook's commit never written,
		// stands.
		return
	}
	prev, had := s.File[ip]
	// Judged on the file as it was, before l replaces its block.
	carry, carried := s.carriedEnd(ip, l)
	s.setFile(ip, l)
	ev, ok := want(ip, l)
	if !ok || (had && prev == l) {
		return // nothing new: a restart that kept the lease, a repeat
	}
	if len(s.Pending[ip]) > 0 {
		s.settleCut(ip, l, now)
	}
	if had && prev.State == parser.StateActive {
		s.cutByFile(ip, prev, l, now)
	}
	sameLife := had && prev.State == parser.StateActive && prev.MAC == l.MAC // l ends the lease prev showed
	if ev.Action == event.Expiry && sameLife && l.Ends < prev.Ends {
		// dhcpd writes a release as "free" with the lease's end moved
		// to the release time — without failover, and in a pair whose
		// server is out of touch with its partner when the lease came
		// from its own free pool (server/mdb.c release_lease: in
		// not_cooperating the primary rewinds such a lease to free, the
		// secondary to backup); an expiry keeps the end it had. Where
		// the block is only recorded (the hooks tell), an expiry
		// recorded in the second of the client's next commit is taken
		// for that lease's end before it (sooner), and was sent ahead
		// of the commit the release followed (make chaos PAIR=1
		// TIMERS=maas seed 118: an agent back from a restart read the
		// free block before its spooled commit).
		ev.Action, ev.Reason = event.Release, ReasonMissedRelease
	}
	if !s.tellsFromFile(ip) {
		if carried {
			s.schedule(ip, Pending{Event: carry, Due: now + s.Grace, Carried: true})
		}
		// The hooks told the region (MAAS's helper, through MAAS): keep
		// the record of what it heard, synthesise nothing. Only a lease
		// that vanishes is ours to report (Snapshot).
		if l.State == parser.StateActive {
			// In a pair, the end of a lease this side's rewrite dropped
			// (rule 2) that ended before this binding began is still
			// this side's to tell, ahead of it; the rest are dropped.
			// Complement mode drops them all, as before: MAAS's helper
			// told the commit already, and nothing orders the end
			// before it (rule 4).
			if s.pairOf(ip).InPair() && !s.Complement {
				s.vanishedBack(ip, l, now, true)
			} else {
				s.dropPending(ip, ReasonVanished)
			}
		}
		if t, told := s.Told[ip]; l.State != parser.StateActive && told && !t.Recorded && t.Action != event.Commit && satisfied(t, told, ev) {
			// A hook told this end: what this side's file made pending
			// before it is covered, as Due covers what precedes the
			// pending copy of a told event (coveredUpTo) — here the
			// block is not scheduled, so nothing else would cover it.
			s.toldEnd(ip, t)
		}
		// An end is recorded as the news after a commit of the same
		// client only: another client's unbound block ends no lease the
		// region heard of (see below).
		if t, told := s.Told[ip]; l.State == parser.StateActive || (told && t.Action == event.Commit && t.MAC == l.MAC) {
			s.setTold(ip, s.recordTold(t, told, ev, l.Acked))
			s.noteShownEnd(ip, ev, now)
		}
		return
	}
	if l.State != parser.StateActive && (!had || prev.State != parser.StateActive) {
		// An unbound block for an address the file never showed bound:
		// free leases a rewrite lists, or states the region never heard
		// of. Nothing to tell — unless the region was told this
		// client's commit (a hook's, ahead of the file). Another
		// client's unbound block is not the end of that lease: free and
		// backup blocks carry the hardware address of a client the
		// address was never bound to in that time, as both peers' files
		// showed in make chaos PAIR=1 seed 94, where a secondary just
		// stepped back sent the expiry of such a MAC.
		if t, told := s.Told[ip]; !told || t.Action != event.Commit || t.MAC != l.MAC {
			return
		}
	}
	if l.State == parser.StateActive {
		// Back in the file: an expiry scheduled for its disappearance
		// must not follow the new binding — unless the dropped lease
		// ended before the binding began (endedBefore): then it is due
		// now, ahead of the binding's commit.
		s.vanishedBack(ip, l, now, false)
	}
	if ev.Action != event.Commit && ev.Timestamp > now && s.pairOf(ip).InPair() {
		// In a pair an unbound block's end is when its state may next
		// change, not when the lease ended (noteShownEnd): the lease
		// ended by now, at the end the file showed for it if that has
		// passed. Dated ahead, the end was news newer than the partner's
		// next commits of the address, which the channel then dropped
		// as older (make chaos PAIR=1 VLANS=2 seed 116 at c99a81f: a
		// survivor's expiry dated 111 s ahead, eight of the primary's
		// events dropped, five lease lives lost).
		ev.Timestamp = now
		if sameLife && prev.Ends <= now {
			ev.Timestamp = prev.Ends
		}
	}
	s.schedule(ip, Pending{Event: ev, Due: now + s.Grace})
}

// vanishedBack settles the pending expiries of dropped leases when the
// file shows ip bound again, as l: those that ended before l began for
// the same client, or whose address l gives to another client
// (givenAway, dated at l's start), fall due now (endedBefore; with ahead,
// marked Ahead: l is recorded as told); the others, the same client's
// lease taken back before its end, are dropped.
//
// With ahead, so do the ends a survivor's file recorded while it spoke
// for the pair (Pending.Spoke) that l, the partner's commit the file
// records as told, would cover: the partner's agent sends that commit,
// no hook or agent of the partner's reports the end (the partner drops
// its own on expiry as the survivor's news), and sent after the commit
// it would end the client's new lease in the region. Before, the record
// covered them (untoldCovered) and they went untold (make chaos PAIR=1
// VLANS=2 seed 116: the survivor's agent, restarted within the grace,
// read the end, the step-back and the partner's next commit of the
// client at once).
func (s *State) vanishedBack(ip netip.Addr, l Lease, now int64, ahead bool) {
	q := s.Pending[ip]
	keep := q[:0:0]
	changed := false
	t, told := s.Told[ip] // what the region heard before l (observe records l after)
	for _, p := range q {
		switch {
		case ahead && p.Spoke && p.untoldCovered(t, told):
			changed = true // this side's hook told it meanwhile (a cold review: sent twice)
			continue
		case ahead && p.Spoke && owedBefore(p, l.MAC, l.Starts):
			p.Event, p.Due, p.Untold, p.Spoke, p.Ahead, changed = endedAt(p, l.Starts), min(p.Due, now), false, false, true, true
		case p.Event.Reason != ReasonVanished:
		case owedBefore(p, l.MAC, l.Starts):
			if ev := endedAt(p, l.Starts); p.Due > now || ahead && !p.Ahead || ev != p.Event {
				p.Event, p.Due, p.Ahead, changed = ev, min(p.Due, now), p.Ahead || ahead, true
			}
		default:
			changed = true
			continue
		}
		keep = append(keep, p)
	}
	if !changed {
		return
	}
	s.setPending(ip, keep)
}

// setPending replaces an address's pending events with q, marked as
// changed.
func (s *State) setPending(ip netip.Addr, q []Pending) {
	s.mark(ip, ChangedPending)
	if len(q) == 0 {
		delete(s.Pending, ip)
	} else {
		s.Pending[ip] = q
	}
}

// dropPending removes an address's pending events with the reason.
func (s *State) dropPending(ip netip.Addr, reason string) {
	q := s.Pending[ip]
	keep := q[:0]
	for _, p := range q {
		if p.Event.Reason != reason {
			keep = append(keep, p)
		}
	}
	if len(keep) == len(q) {
		return
	}
	s.setPending(ip, keep)
}

// schedule queues p after what is already pending for the address,
// unless the last pending event is the same news. Only the last: the
// same event earlier in the queue is a different moment (a release, a
// commit, the release again, all in one second), and the queue's order
// is what tells them apart.
func (s *State) schedule(ip netip.Addr, p Pending) {
	q := s.Pending[ip]
	if n := len(q); n > 0 {
		if x := q[n-1]; x.Event.Action == p.Event.Action && x.Event.MAC == p.Event.MAC && x.Event.Timestamp == p.Event.Timestamp {
			return
		}
	}
	s.Pending[ip] = append(q, p)
	s.mark(ip, ChangedPending)
}

// Snapshot reconciles a whole file read after a rewrite (or at start).
// complete is false when the file had syntax errors or a torn end: then
// nothing is decided (rule 4), and the caller retries later. It returns
// the number of leases the file dropped whose end it scheduled (rule 2;
// in a pair, also ownDropped), and what the
// file's failover state records did, folded in file order after the
// waits of an earlier rewrite ended (pairRewrite: they are evidence
// about this rewrite's restart, not that one's) and before the leases.
func (s *State) Snapshot(t *parser.Table, complete bool, now int64) (vanished int, fo FailoverFold) {
	if !complete {
		return 0, fo
	}
	s.pairRewrite()
	// The records below are the file's whole say: an undeclared peer's
	// last record from an earlier file (a peer HA off removed) is no
	// state of the peer dhcpd.conf may declare again.
	s.undeclared = nil
	// Pairs new as the rewrite began: its recover is not the partner's
	// word (Pair.New), even where the records below reach normal.
	var newPeers []string
	s.pairs(func(p *Pair) {
		if p.New {
			newPeers = append(newPeers, p.Peer)
		}
	})
	// The file's blocks and failover state records are replayed in file
	// order, as if appended: a lease is judged under the pair's states
	// in force when dhcpd wrote it (a file read late may hold this side's
	// takeover, the blocks it wrote as the pair's speaker, and its
	// step-back).
	was, records, folded := s.Pairs(), t.FailoverLog(), 0
	fold := func(upTo int) {
		if upTo > folded {
			fo = fo.then(s.failoverSeen(records[folded:upTo]))
			folded = upTo
		}
	}
	seen := make(map[netip.Addr]bool, t.Len())
	baseline := !s.Baselined && !s.NoFile
	t.EachInFileOrder(func(b *parser.Lease, recordsBefore int) {
		if b.PrefixLen > 0 {
			return // delegated prefixes: the region API has no place for them
		}
		fold(recordsBefore)
		seen[b.IP] = true
		l := leaseOf(b, parser.Time(now))
		if baseline {
			// First sight: assume the region knows what the file says;
			// inventing thousands of events at first start helps nobody.
			s.setFile(b.IP, l)
			if ev, ok := want(b.IP, l); ok && l.State == parser.StateActive {
				s.Hook(ev)
			}
			return
		}
		if prev, had := s.File[b.IP]; had && s.givenAwayUnread(b.IP, prev, l) {
			// dhcpd dropped prev and gave its address to l's client
			// between two reads of the file: the end is owed ahead of
			// the new binding, as if the agent had read the rewrite
			// that dropped it (observe: vanishedBack, givenAway).
			if s.dropped(b.IP, prev, now, false, false) {
				vanished++
			}
		}
		s.observe(b.IP, l, now)
	})
	fold(len(records))
	fo.ChangedPeers = s.survivorChanged(was)
	fo.Changed = len(fo.ChangedPeers) > 0
	spoke := func(ip netip.Addr) bool {
		p := s.pairOf(ip)
		return p.InPair() && (slices.Contains(fo.SpokePeers, p.Peer) || p.partnerSpoke())
	}
	if !s.Baselined {
		s.Baselined, s.metaDirty = true, true
	}
	if !baseline && !s.allPaired() {
		// (In a pair the partner's file and hooks speak for much of
		// what this side's file lacks or shows older: failover.go
		// decides from files.)
		vanished += s.neverShown(seen, now)
	}
	for ip, l := range s.File {
		if !seen[ip] && s.dropped(ip, l, now, spoke(ip), len(newPeers) > 0 && slices.Contains(newPeers, s.pairOf(ip).Peer)) {
			vanished++
		}
	}
	return vanished, fo
}

// givenAwayUnread reports whether l, the file's block for ip in a
// rewrite, binds the address to another client than prev, the active
// lease the file last showed for it, whose commit the region was told
// last: dhcpd dropped prev (a restart whose range no longer held ip, a
// rewrite the agent did not read before the next) and gave the address
// away. Under load the agent reads the file a busyRound apart, and a
// restart that drops a lease, a second that brings the range back and
// another client's lease can all come between two reads
// (TestLabDroppedThenGivenAway). Not in a failover pair (the partner
// may have ended prev and told it; failover.go decides from files), nor
// in complement mode (MAAS's helper told the new commit already: see
// observe).
func (s *State) givenAwayUnread(ip netip.Addr, prev, l Lease) bool {
	if s.pairOf(ip).InPair() || s.Complement || prev.State != parser.StateActive || l.State != parser.StateActive || prev.MAC == "" || prev.MAC == l.MAC {
		return false
	}
	t, ok := s.Told[ip]
	return ok && t.Action == event.Commit && t.MAC == prev.MAC
}

// dropped applies rule 2 to l, ip's lease in File, which a rewrite
// dropped (spoke: the file shows the failover partner spoke for the
// pair; newPeer: ip's pair was new as the rewrite began, Pair.New). It
// reports whether an end was scheduled.
func (s *State) dropped(ip netip.Addr, l Lease, now int64, spoke, newPeer bool) bool {
	own, ownEnd := s.untoldDropped(ip, spoke) // (before the delete: it reads the file's block)
	delete(s.File, ip)
	s.touch(ip)
	toldEnd := s.droppedTold(ip, l)
	if ownEnd {
		orphan := ip.Is4() && s.OutOfRange != nil && s.OutOfRange(ip)
		s.schedule(ip, Pending{Event: own, Due: now + s.vanishedWait(), Untold: true, Orphan: orphan})
		return true
	}
	if l.State != parser.StateActive {
		return false
	}
	// A pair's new peer never had the leases this side acked alone; the
	// lease is this side's to end, whatever the pair's states and roles
	// (a newly declared peer starts in recover: Pair.New). Not one the
	// file shows as the peer's (its binding update, in the full update
	// the two exchange as they recover: the peer ends it).
	standby, alone := false, newPeer && !s.Told[ip].PeerOwns
	if !alone && !s.tellsVanished(ip, spoke) {
		if alone = s.ackedAlone(ip, l); !alone {
			if standby = s.pairStandby(ip, spoke); !standby {
				return false // the pair's primary reports it (failover.go)
			}
		}
	}
	// Rule 2: dropped by the rewrite; expire at its own end, sent
	// the grace after it (or after the rewrite, for one that has
	// already ended), as for any lease whose end passed (rule 3): the
	// file may not have shown its last renewal (the agent was down
	// or could not read it when dhcpd wrote it), or the client may
	// renew in its very last second once a range holds the address
	// again (make chaos seed 2031: the expiry went out the instant
	// the lease ended, and the renewal of that second, 0.7 s later);
	// that renewal's hook, still on its way (spooled, queued on the
	// socket), moves the expiry to the renewed end (Hook).
	wait := s.vanishedWait()
	// A renewal's hook may have come before the rewrite, its block
	// never read (the file unreadable when dhcpd appended it): the
	// lease ends at the renewed end the hook told.
	end := max(l.Ends, toldEnd)
	due := max(end, now) + wait
	ev := event.Event{Action: event.Expiry, Family: l.Family, MAC: l.MAC, DUID: l.DUID, IP: ip,
		Timestamp: end, Source: event.SourceFile, Reason: ReasonVanished}
	orphan := ip.Is4() && s.OutOfRange != nil && s.OutOfRange(ip)
	due, pairWait := s.pairVanished(ip, due, now)
	if standby || alone {
		// Standby: held as long as the primary holds its copy, the
		// same rule (pairVanished), from the same rewrite time.
		// Alone: this side's to send whatever the pair's state shows
		// next, as the partner never had the lease (ackedAlone, or a
		// new peer).
		pairWait = false
	}
	s.schedule(ip, Pending{Event: ev, Due: due, Orphan: orphan, PairWait: pairWait, Standby: standby})
	return true
}

// droppedTold hands a hook's commit of ip's client, whose lease the
// file showed (l, which a rewrite drops), over to rule 2: that lease
// is the one whose end the commit told (its block, or the lease it
// renewed: a renewal dhcpd answered from the lease it had, which it
// does not write — server/dhcp.c reuse_lease, dhcp-cache-threshold —
// or whose block was never read), so unwrittenEnd leaves it (make chaos
// PAIR=1 seed 103: such leases, a failover partner's to tell, were ended
// twice). It returns the commit's end: a renewal's hook may have come
// before the rewrite, its block never read, and the lease then ends at
// the renewed end (0: no such commit).
func (s *State) droppedTold(ip netip.Addr, l Lease) int64 {
	t, ok := s.Told[ip]
	if !ok || t.Action != event.Commit || t.MAC != l.MAC {
		return 0
	}
	end := t.Ends
	if hookEnd(t) && t.coveredBy(l) {
		t.Ends = 0
		s.setTold(ip, t)
	}
	return end
}

// coveredBy reports whether l, the file's block of t's address, is the
// lease t, a hook's commit, told (or renewed within it), or shows that
// lease's end: the same client's, ending after the commit (a life that
// ended in the commit's second or before is not one the commit renewed:
// the client came back after its end).
// dhcpd answers a renewal early in a lease from the lease it has,
// without writing it (server/dhcp.c reuse_lease: dhcp-cache-threshold,
// 25 % by default), and the lease then ends at the block's end, not at
// the end the hook computed from the lease time.
func (t Told) coveredBy(l Lease) bool {
	return l.MAC == t.MAC && l.Ends > t.At
}

// vanishedWait is how long after a dropped lease's end (or the rewrite
// that dropped it, if later) its expiry waits for a renewal's hook: the
// grace, as for any lease whose end passed. In complement mode the hooks
// tell MAAS, never the agent: nothing to wait for.
func (s *State) vanishedWait() int64 {
	if s.Complement {
		return 0
	}
	return s.Grace
}

// neverShown applies rule 2 to leases the agent knows only from a hook:
// committed (Told, with its end), never shown by the file (not in File:
// the agent was down, or could not read the file, between dhcpd's append
// and this rewrite), and not in the rewrite either. dhcpd dropped them
// like any other; the region holds them: expire each at its end, after
// the grace as for a lease that has ended. (Found by make chaos: two
// such leases never expired.)
//
// And a commit whose address the rewrite shows as it was before
// (unwrittenCommit): dhcpd runs a commit's hook before it writes the
// lease, and one stopped in between never wrote it. Not in a failover
// pair (Snapshot): there the partner may have acked the client, or
// spoken for the lease in partner-down (applied in a pair, the rule had
// the returning primary of TestLabFailoverShrinkPrimaryDown expire a
// lease the survivor had expired already), and it wants the pair's state
// taken into account (make chaos PAIR=1 seed 7 left such a lease in the
// region; issue 14).
func (s *State) neverShown(seen map[netip.Addr]bool, now int64) (n int) {
	wait := s.vanishedWait()
	for ip, t := range s.Told {
		if t.Action != event.Commit || t.Recorded || t.Ends == 0 || s.pairOf(ip).InPair() {
			continue
		}
		l, shown := s.File[ip]
		switch {
		case shown && seen[ip] && unwrittenCommit(l, t):
		case seen[ip] || shown:
			continue // the file showed it: the loop over File decides
		}
		if q := s.Pending[ip]; len(q) > 0 && q[len(q)-1].Event.Reason == ReasonVanished {
			continue // already scheduled by an earlier rewrite
		}
		family := event.IPv4
		if ip.Is6() && !ip.Is4In6() {
			family = event.IPv6
		}
		ev := event.Event{Action: event.Expiry, Family: family, MAC: t.MAC, IP: ip,
			Timestamp: t.Ends, Source: event.SourceFile, Reason: ReasonVanished}
		orphan := ip.Is4() && s.OutOfRange != nil && s.OutOfRange(ip)
		s.schedule(ip, Pending{Event: ev, Due: max(t.Ends, now) + wait, Orphan: orphan})
		n++
	}
	return n
}

// unwrittenCommit reports whether l, the block a rewrite shows for an
// address, is older than the commit t a hook told for it: it began at
// least two seconds before the hook's second (dhcpd stamps a lease's
// start when it acks, in the second its hook runs; the hook reads the
// clock a few milliseconds later) and ends before the told lease. dhcpd
// never wrote that commit.
func unwrittenCommit(l Lease, t Told) bool {
	return l.Starts < t.At-1 && l.Ends < t.Ends
}

// hookEnd reports whether t is a hook's commit with its end (Told.Ends):
// one the file may never show (unwrittenEnd).
func hookEnd(t Told) bool {
	return t.Action == event.Commit && !t.Recorded && t.Ends > 0
}

// unwrittenEnd applies rule 3 to a lease the agent knows only from a
// hook: e, a commit's end popped from toldEnds once the grace after it
// passed, whose lease the file does not hold — it shows no block for the
// address, another client's older one, or the same client's life that
// ended before the commit. dhcpd runs a commit's hook before it writes
// the lease, and one stopped in between (a restart, a crash) never wrote
// it: the client was told the lease, the region was told it, and the
// restarted dhcpd does not know it — it answers the client's renewal
// with a NAK or not at all ("unknown lease"), and no hook will ever tell
// that lease's end. A rewrite that drops such a lease while the agent
// holds its commit schedules the expiry (neverShown), but the hook's
// datagram can come after the rewrite was read (make chaos PAIR=1 seed
// 103: a secondary restarted on a new range between its hook and its
// write; the region kept the address for the client), and neverShown
// stays out of a failover pair.
//
// The file's rules end the rest: the commit's own block (setFile clears
// the commit's end when it shows it), and the client's lease the commit
// renewed (coveredBy) — dhcpd answers a renewal early in a lease from
// the lease it has and writes nothing, and a renewal it did not live to
// write leaves the restarted dhcpd with the lease before it; either way
// the lease ends at the file's end. A rewrite that drops either hands
// the commit to rule 2 (droppedTold), in a pair to whichever side speaks
// for it. (The first make chaos PAIR=1 seed 103 runs with this rule, before
// both, synthesised 10 and 19 unwritten ends where one commit went
// unwritten: TestUnwrittenEndCases, TestUnwrittenOnlyNeverShown.)
//
// The expiry is dated at the lease's end. In a pair the partner may have
// renewed the lease since (the client's rebinding request reaches both
// servers), news this side's file never showed if the partner died
// before its binding update: the expiry is then recorded as a replay
// (queueReplay), and with the pair channel it is dropped if the peer's
// agent answers that it delivered news of the address newer than the
// commit (agent: judgePair). A peer that does not answer (its rack down)
// and a pair without the channel cannot say: the expiry goes, and a
// renewal the partner made is ended early, until the client's next
// renewal is told (a live lease left in the region forever is the worse
// of the two).
func (s *State) unwrittenEnd(e endsEntry) (Pending, bool) {
	t, ok := s.Told[e.ip]
	if !ok || !hookEnd(t) || t.Ends != e.ends {
		return Pending{}, false // stale: news of the address since
	}
	if l, shown := s.File[e.ip]; shown && (l.Starts >= t.At-1 || t.coveredBy(l)) {
		// The file shows the commit's block or newer, or the lease it
		// renewed: rules 1 to 3 decide.
		return Pending{}, false
	}
	for _, p := range s.Pending[e.ip] {
		if p.Event.MAC == t.MAC && p.Event.Action != event.Commit && !p.Standby {
			// Its end is scheduled (neverShown, rule 2). Not a copy held
			// in standby: that one lapses if the primary had the time
			// to send its own (pairStandby).
			return Pending{}, false
		}
	}
	family := event.IPv4
	if e.ip.Is6() && !e.ip.Is4In6() {
		family = event.IPv6
	}
	ev := event.Event{Action: event.Expiry, Family: family, MAC: t.MAC, IP: e.ip,
		Timestamp: t.Ends, Source: event.SourceFile, Reason: ReasonUnwritten}
	if s.pairOf(e.ip).InPair() {
		s.queueReplay(ev, event.Event{IP: e.ip, MAC: t.MAC, Timestamp: t.At, TimestampNS: t.AtNS})
	}
	orphan := e.ip.Is4() && s.OutOfRange != nil && s.OutOfRange(e.ip)
	return Pending{Event: ev, Due: e.ends + s.Grace, Orphan: orphan}, true
}

// tellsUnwritten reports whether unwrittenEnd applies now: the agent
// knows what the file holds (a first whole read is taken), and the hooks
// tell the agent, not another program (complement mode). Until then the
// ends wait in toldEnds.
func (s *State) tellsUnwritten() bool { return s.Baselined && !s.Complement }

// indexTold builds toldEnds from Told when it is missing (a new or
// loaded state) or mostly stale entries (renewals push a new one each).
func (s *State) indexTold() {
	if s.toldIndexed && len(s.toldEnds) <= 2*len(s.Told)+1024 {
		return
	}
	s.toldEnds = s.toldEnds[:0]
	for ip, t := range s.Told {
		if hookEnd(t) {
			s.toldEnds = append(s.toldEnds, endsEntry{ends: t.Ends, ip: ip})
		}
	}
	heap.Init(&s.toldEnds)
	s.toldIndexed = true
}

// Due returns the synthesised events whose time has come, in time order,
// dropping those that became pointless (a hook reported them, the IP came
// back, the IP went to another MAC). It also applies rule 3. The caller
// queues the events for the region and then calls Hook for each.
func (s *State) Due(now int64) []event.Event {
	if s.UnwrittenUntil != 0 && now >= s.UnwrittenUntil {
		// No write in time: dhcpd may stay dead. (Before Unknown's
		// return: NextDue names the bound until it is cleared.)
		s.FileWritten(0)
	}
	if s.StartupUntil != 0 && now >= s.StartupUntil {
		s.startupOver() // dhcpd's startup ended in the state it saved
	}
	if s.Unknown {
		return nil
	}
	// Rule 3: active leases dhcpd should have expired by now. Not in
	// complement mode: dhcpd's on expiry, when it comes, tells the
	// region through the other program, and an expiry of ours could
	// reach the region after news that followed it.
	s.index()
	for s.someTellFromFile() && len(s.ends) > 0 && s.ends[0].ends+s.Grace <= now {
		e := s.ends.pop()
		l, ok := s.File[e.ip]
		if !ok || l.State != parser.StateActive || l.Ends != e.ends {
			continue // stale: the lease changed since
		}
		if !s.tellsFromFile(e.ip) {
			continue // its pair's partner tells it (a takeover rebuilds the heap: takeStandby)
		}
		if s.unwrittenHeld(e.ip) {
			s.heldUnwritten++
			continue // dhcpd may be dead (FileWritten rebuilds the heap)
		}
		ev := event.Event{Action: event.Expiry, Family: l.Family, MAC: l.MAC, DUID: l.DUID, IP: e.ip,
			Timestamp: l.Ends, Source: event.SourceFile, Reason: ReasonEndsPassed}
		t, told := s.Told[e.ip]
		if !satisfied(t, told, ev) {
			if s.pairOf(e.ip).InPair() {
				s.queueReplay(ev, staleCopyBound(e.ip, l))
			}
			s.schedule(e.ip, Pending{Event: ev, Due: now})
		}
	}
	// Rule 3 for the leases the file never showed: a hook's commit whose
	// end passed, the file holding its address for no lease of it.
	s.indexTold()
	for s.tellsUnwritten() && len(s.toldEnds) > 0 && s.toldEnds[0].ends+s.Grace <= now {
		e := s.toldEnds.pop()
		if p, ok := s.unwrittenEnd(e); ok {
			s.schedule(e.ip, p)
		}
	}
	// What is due is noted as indices into each address's queue, and
	// copied out once, in order, into a slice of the right size: in
	// hookless mode every block the file appends is one pending commit
	// due at once, and a slice per address, then a copy of each into a
	// growing result, was a tenth of what the agent allocated per lease.
	// The queues noted stay as they are: Pending keeps only their tail,
	// and an append to that tail writes past what is noted.
	// groups and picked are kept from call to call (s.due), not grown
	// anew each round.
	groups, picked := s.due.groups[:0], s.due.picked[:0]
	defer func() {
		clear(groups) // their queues, for the GC
		s.due.groups, s.due.picked = groups[:0], picked[:0]
	}()
	for ip, q := range s.Pending {
		// Per address strictly in order: stop at the first not yet due,
		// and judge each against what the ones before it will have told.
		t, told := s.Told[ip]
		covered := coveredUpTo(q, t, told)
		g := dueGroup{ip: ip, q: q, start: len(picked)}
		i := 0
		for ; i < len(q) && q[i].Due <= now; i++ {
			if q[i].Standby {
				if s.lapsed == nil {
					s.lapsed = map[string]int{}
				}
				s.lapsed[s.pairOf(ip).Peer]++ // the primary's to send: it had the time
				continue
			}
			if q[i].Carried {
				continue // no hook's commit of that client came to go ahead of
			}
			if q[i].Orphan {
				s.orphaned(ip, q[i])
			}
			if q[i].Untold {
				if q[i].untoldCovered(t, told) {
					continue // told since, or newer news (untoldEnd, a hook)
				}
			} else if q[i].Ahead {
				if q[i].aheadCovered(t, told) {
					continue // queued since (TakeEndedBefore), or newer news of this agent's
				}
				s.aheadSent = append(s.aheadSent, q[i].Event)
			} else if q[i].Cut {
				if q[i].cutCovered(t, told) {
					continue // this agent queued it, or newer news, since
				}
				q[i].Event = s.cutEnd(q[i]) // as it goes (the queue drops it below)
			} else if i <= covered || s.pointless(ip, q[i], t, told) {
				continue
			}
			if len(picked) == g.start {
				g.first = q[i].Due
			}
			picked = append(picked, int32(i))
			t, told = Told{Action: q[i].Event.Action, MAC: q[i].Event.MAC, At: q[i].Event.Timestamp}, true
		}
		if i > 0 {
			s.mark(ip, ChangedPending)
		}
		if i == len(q) {
			delete(s.Pending, ip)
		} else {
			s.Pending[ip] = q[i:]
		}
		if g.end = len(picked); g.end > g.start {
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b dueGroup) int {
		if c := cmp.Compare(a.first, b.first); c != 0 {
			return c
		}
		return a.ip.Compare(b.ip)
	})
	if len(picked) == 0 {
		return nil
	}
	evs := make([]event.Event, 0, len(picked))
	for _, g := range groups {
		for _, k := range picked[g.start:g.end] {
			evs = append(evs, g.q[k].Event)
		}
	}
	return evs
}

// orphaned hands on an Orphan pending reaching its time, unless the
// address is back in the file (a range holds it again: the region hears
// of it normally) or was committed to another MAC since (rule 4).
func (s *State) orphaned(ip netip.Addr, p Pending) {
	if _, back := s.File[ip]; back {
		return
	}
	if t, ok := s.Told[ip]; ok && t.Action == event.Commit && t.MAC != p.Event.MAC {
		return
	}
	s.orphans = append(s.orphans, Orphan{IP: ip, MAC: p.Event.MAC, Hostname: p.Event.Hostname, Ends: p.Event.Timestamp})
}

// TakeOrphans returns the orphaned addresses Due reached since the last
// call, and forgets them. The caller keeps them in the same commit as
// Due's events (a failed commit hands them back with PutOrphans).
func (s *State) TakeOrphans() []Orphan {
	o := s.orphans
	s.orphans = nil
	return o
}

// TakeLapsed returns how many expiries held in standby (Pending.Standby)
// Due dropped since the last call, by the failover peer whose primary had
// its time to send them; nil for none.
func (s *State) TakeLapsed() map[string]int {
	n := s.lapsed
	s.lapsed = nil
	return n
}

// TakeAheadSent returns the ends of dropped leases (Pending.Ahead) that
// Due or TakeEndedBefore handed out since the last call, ahead of the
// next commit of their address the file recorded as told, and forgets
// them.
func (s *State) TakeAheadSent() []event.Event {
	evs := s.aheadSent
	s.aheadSent = nil
	return evs
}

// TakeCutKept returns the ends held for the life they cut (Pending.Cut)
// that were dropped since the last call, the same client's next lease
// of the address having come by that life's end, and forgets them.
func (s *State) TakeCutKept() []event.Event {
	evs := s.cutKept
	s.cutKept = nil
	return evs
}

// PutOrphans gives back what TakeOrphans returned (a failed commit).
func (s *State) PutOrphans(o []Orphan) { s.orphans = append(o, s.orphans...) }

// coveredUpTo returns the index of the pending event the region was
// already told (the same action for the same MAC, told at its time or up
// to commitSlack before it), or -1; of several, the one closest in time,
// then the latest. That event and every one before it are old news. This
// matters within one second: the file's whole-second times cannot order
// a commit before the release that followed it (or a release before the
// commit that followed it), but the order of the pending queue can.
func coveredUpTo(q []Pending, t Told, told bool) int {
	if !told {
		return -1
	}
	best, bestGap := -1, int64(0)
	for i, p := range q {
		ev := p.Event
		if ev.Action != t.Action || ev.MAC != t.MAC || t.At < ev.Timestamp-commitSlack {
			continue
		}
		gap := t.At - ev.Timestamp
		if gap < 0 {
			gap = -gap
		}
		if best < 0 || gap <= bestGap {
			best, bestGap = i, gap
		}
	}
	return best
}

// pointless reports whether a pending event no longer needs sending,
// given what the region will have been told before it.
func (s *State) pointless(ip netip.Addr, p Pending, t Told, ok bool) bool {
	if satisfied(t, ok, p.Event) {
		return true
	}
	if p.Event.Reason == ReasonVanished {
		l, back := s.File[ip]
		switch {
		case !back:
		case l.State == parser.StateActive:
			// The same client's lease taken back before the end
			// (reappeared). Another client's is owed the end first
			// (givenAway), as is the same client's after it
			// (endedBefore).
			return !owedBefore(p, l.MAC, l.Starts)
		case l.MAC != "" && l.MAC != p.Event.MAC:
			// The address moved on, and that lease is over too. A block
			// with no MAC (the free lease dhcpd lists when a range holds
			// the address again) is not that: the region still holds the
			// old lease.
			return true
		}
	}
	return false
}

// NextDue is the earliest time Due has something to do: a pending event's
// time, or an active lease's end plus the grace (rule 3). It is false when
// there is nothing at all.
func (s *State) NextDue() (int64, bool) {
	var next int64
	found := false
	for _, q := range s.Pending {
		if len(q) > 0 && (!found || q[0].Due < next) {
			next, found = q[0].Due, true
		}
	}
	if s.UnwrittenUntil != 0 && (!found || s.UnwrittenUntil < next) {
		next, found = s.UnwrittenUntil, true // the wait's bound rebuilds the heap (Due)
	}
	if s.StartupUntil != 0 && (!found || s.StartupUntil < next) {
		next, found = s.StartupUntil, true // so does startup's (Due)
	}
	s.index()
	for s.someTellFromFile() && len(s.ends) > 0 {
		e := s.ends[0]
		if l, ok := s.File[e.ip]; !ok || l.State != parser.StateActive || l.Ends != e.ends || !s.tellsFromFile(e.ip) || s.unwrittenHeld(e.ip) {
			s.ends.pop() // stale, or not this side's to tell now (see Due)
			continue
		}
		if at := e.ends + s.Grace; !found || at < next {
			next, found = at, true
		}
		break
	}
	s.indexTold()
	for s.tellsUnwritten() && len(s.toldEnds) > 0 {
		e := s.toldEnds[0]
		if t, ok := s.Told[e.ip]; !ok || !hookEnd(t) || t.Ends != e.ends {
			s.toldEnds.pop() // stale
			continue
		}
		if at := e.ends + s.Grace; !found || at < next {
			next, found = at, true
		}
		break
	}
	return next, found
}

// PendingCount is the number of synthesised events waiting for their time.
func (s *State) PendingCount() int {
	n := 0
	for _, q := range s.Pending {
		n += len(q)
	}
	return n
}

// index builds the end-time heap from File when it is missing (a new or
// loaded state) or mostly stale entries (renewals push a new one each).
func (s *State) index() {
	if s.indexed && len(s.ends) <= 2*len(s.File)+1024 {
		return
	}
	s.ends = s.ends[:0]
	for ip, l := range s.File {
		if l.State == parser.StateActive && l.Ends != int64(parser.Never) {
			s.ends = append(s.ends, endsEntry{ends: l.Ends, ip: ip})
		}
	}
	heap.Init(&s.ends)
	s.indexed = true
}

// endsEntry is an active lease's end in the rule-3 heap.
type endsEntry struct {
	ends int64
	ip   netip.Addr
}

type endsHeap []endsEntry

func (h endsHeap) Len() int { return len(h) }
func (h endsHeap) Less(i, j int) bool {
	if h[i].ends != h[j].ends {
		return h[i].ends < h[j].ends
	}
	return h[i].ip.Less(h[j].ip)
}
func (h endsHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *endsHeap) Push(x any)   { *h = append(*h, x.(endsEntry)) }
func (h *endsHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// push and pop are heap.Push and heap.Pop without the interface: boxed
// in one, every entry cost an allocation (one per lease in hookless
// mode, 5 % of the agent's allocations in BenchmarkHooklessLease).
func (h *endsHeap) push(e endsEntry) {
	*h = append(*h, e)
	heap.Fix(h, len(*h)-1)
}

func (h *endsHeap) pop() endsEntry {
	old := *h
	n := len(old) - 1
	e := old[0]
	old[0] = old[n]
	*h = old[:n]
	if n > 0 {
		heap.Fix(h, 0)
	}
	return e
}
