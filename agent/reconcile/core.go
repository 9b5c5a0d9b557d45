// Package reconcile makes the region's view of leases converge to
// dhcpd.leases. Its core (this file) is pure: a State fed with what the
// file shows and what the hooks reported, and a clock reading, decides
// which events to synthesise and when. The watcher that feeds it lives
// next to it; nothing here does I/O.
//
// The rules (DESIGN.md, "The model"):
//
//  1. The file shows an IP changing state and no hook reports it within
//     the grace: synthesise it (commit for an active binding, new or
//     renewed; release for released; expiry for free, expired and the
//     other unbound states). With no hooks at all this alone delivers
//     every event.
//  2. An IP whose last state was active vanishes from a rewritten file:
//     synthesise an expiry at the lease's own end (now if it has passed),
//     with its MAC, unless the IP reappears first or is committed to
//     another MAC.
//  3. An active lease whose end passed and that dhcpd never expired (dhcpd
//     dead or stuck): synthesise the expiry after the grace.
//  4. Never: an expiry before the end of a lease still in the file; an
//     event for a restart that kept the lease; anything from a file that
//     did not parse whole; an expiry for MAC A once the IP was committed
//     to MAC B (the region keys rows by IP alone and would clear B).
package reconcile

import (
	"cmp"
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
	ReasonEndsPassed    = "ends-passed"    // rule 3
)

// commitSlack is how much earlier than the lease's start a hook's commit
// may be stamped and still report it: both are whole seconds taken a few
// milliseconds apart.
const commitSlack = 2

// Lease is what the reconciler keeps of an address's last block.
type Lease struct {
	State    parser.State `json:"state"` // effective binding state
	Family   string       `json:"family"`
	MAC      string       `json:"mac"`
	Hostname string       `json:"hostname,omitempty"`
	Starts   int64        `json:"starts"`
	Ends     int64        `json:"ends"` // Unix seconds; math.MaxInt64 for never
}

// Told is what the region has been told (queued for it) about an address.
type Told struct {
	Action string `json:"action"`
	MAC    string `json:"mac"`
	At     int64  `json:"at"` // the event's timestamp
}

// Pending is a synthesised event waiting for its time.
type Pending struct {
	Event event.Event `json:"event"`
	Due   int64       `json:"due"` // Unix seconds
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
	// Baselined is set once a first complete snapshot has been taken.
	Baselined bool `json:"baselined"`
	// Grace is how long to wait for a hook before synthesising (seconds).
	Grace int64 `json:"grace"`
}

// NewState returns an empty state waiting for its baseline.
func NewState(grace int64) *State {
	return &State{
		File:    map[netip.Addr]Lease{},
		Told:    map[netip.Addr]Told{},
		Pending: map[netip.Addr][]Pending{},
		Grace:   grace,
	}
}

// leaseOf reduces a parsed block to what the reconciler keeps.
func leaseOf(l *parser.Lease, now parser.Time) Lease {
	return Lease{
		State:    l.Binding(now),
		Family:   l.Family.String(),
		MAC:      parser.HexString(l.HardwareAddr),
		Hostname: event.CleanHostname(l.ClientHostname),
		Starts:   int64(l.Starts),
		Ends:     int64(l.Ends),
	}
}

// want is the event a block asks the region to have seen, if any.
func want(ip netip.Addr, l Lease) (event.Event, bool) {
	ev := event.Event{IP: ip, Family: l.Family, MAC: l.MAC, Source: event.SourceFile}
	switch l.State {
	case parser.StateActive:
		ev.Action, ev.Timestamp, ev.Hostname, ev.Reason = event.Commit, l.Starts, l.Hostname, ReasonMissedCommit
		if l.Ends > l.Starts && l.Ends != int64(parser.Never) {
			ev.LeaseTime = l.Ends - l.Starts
		}
	case parser.StateReleased:
		ev.Action, ev.Timestamp, ev.Reason = event.Release, l.Ends, ReasonMissedRelease
	case parser.StateFree, parser.StateExpired, parser.StateAbandoned, parser.StateReset, parser.StateBackup:
		ev.Action, ev.Timestamp, ev.Reason = event.Expiry, l.Ends, ReasonMissedExpiry
	default:
		return event.Event{}, false
	}
	if ev.MAC == "" || ev.Timestamp < 0 {
		// IPv6 leases have no MAC and the region API needs one; a block
		// without a time cannot be placed either.
		return event.Event{}, false
	}
	return ev, true
}

// satisfied reports whether what the region was told already covers ev.
func satisfied(t Told, ok bool, ev event.Event) bool {
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
	s.Told[ev.IP] = Told{Action: ev.Action, MAC: ev.MAC, At: ev.Timestamp}
}

// Appended folds blocks dhcpd appended (commits, releases, expiries)
// into the state, scheduling what no hook reports within the grace.
func (s *State) Appended(blocks []*parser.Lease, now int64) {
	for _, b := range blocks {
		s.observe(b.IP, leaseOf(b, parser.Time(now)), now)
	}
}

func (s *State) observe(ip netip.Addr, l Lease, now int64) {
	prev, had := s.File[ip]
	s.File[ip] = l
	ev, ok := want(ip, l)
	if !ok || (had && prev == l) {
		return // nothing new: a restart that kept the lease, a repeat
	}
	if l.State != parser.StateActive && (!had || prev.State != parser.StateActive) {
		// An unbound block for an address the file never showed bound:
		// free leases a rewrite lists, or states the region never heard
		// of. Nothing to tell.
		if t, told := s.Told[ip]; !told || t.Action != event.Commit {
			return
		}
	}
	if l.State == parser.StateActive {
		// Back in the file: an expiry scheduled for its disappearance
		// must not follow the new binding.
		s.dropPending(ip, ReasonVanished)
	}
	s.schedule(ip, Pending{Event: ev, Due: now + s.Grace})
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
	if len(keep) == 0 {
		delete(s.Pending, ip)
	} else {
		s.Pending[ip] = keep
	}
}

// schedule queues p after what is already pending for the address,
// replacing an identical pending event.
func (s *State) schedule(ip netip.Addr, p Pending) {
	q := s.Pending[ip]
	for _, x := range q {
		if x.Event.Action == p.Event.Action && x.Event.MAC == p.Event.MAC && x.Event.Timestamp == p.Event.Timestamp {
			return
		}
	}
	s.Pending[ip] = append(q, p)
}

// Snapshot reconciles a whole file read after a rewrite (or at start).
// complete is false when the file had syntax errors or a torn end: then
// nothing is decided (rule 4), and the caller retries later.
func (s *State) Snapshot(t *parser.Table, complete bool, now int64) {
	if !complete {
		return
	}
	seen := make(map[netip.Addr]bool, t.Len())
	baseline := !s.Baselined
	t.Each(func(b *parser.Lease) {
		if b.PrefixLen > 0 {
			return // delegated prefixes: the region API has no place for them
		}
		seen[b.IP] = true
		l := leaseOf(b, parser.Time(now))
		if baseline {
			// First sight: assume the region knows what the file says;
			// inventing thousands of events at first start helps nobody.
			s.File[b.IP] = l
			if ev, ok := want(b.IP, l); ok && l.State == parser.StateActive {
				s.Hook(ev)
			}
			return
		}
		s.observe(b.IP, l, now)
	})
	s.Baselined = true
	for ip, l := range s.File {
		if seen[ip] {
			continue
		}
		delete(s.File, ip)
		if l.State != parser.StateActive {
			continue
		}
		// Rule 2: dropped by the rewrite; expire at its own end.
		due := max(l.Ends, now)
		ev := event.Event{Action: event.Expiry, Family: l.Family, MAC: l.MAC, IP: ip,
			Timestamp: l.Ends, Source: event.SourceFile, Reason: ReasonVanished}
		if ev.MAC != "" {
			s.schedule(ip, Pending{Event: ev, Due: due})
		}
	}
}

// Due returns the synthesised events whose time has come, in time order,
// dropping those that became pointless (a hook reported them, the IP came
// back, the IP went to another MAC). It also applies rule 3. The caller
// queues the events for the region and then calls Hook for each.
func (s *State) Due(now int64) []event.Event {
	// Rule 3: active leases dhcpd should have expired by now.
	for ip, l := range s.File {
		if l.State != parser.StateActive || l.Ends == int64(parser.Never) || l.Ends+s.Grace > now {
			continue
		}
		ev := event.Event{Action: event.Expiry, Family: l.Family, MAC: l.MAC, IP: ip,
			Timestamp: l.Ends, Source: event.SourceFile, Reason: ReasonEndsPassed}
		t, ok := s.Told[ip]
		if ev.MAC != "" && !satisfied(t, ok, ev) {
			s.schedule(ip, Pending{Event: ev, Due: now})
		}
	}
	type group struct {
		ip    netip.Addr
		first int64
		evs   []event.Event
	}
	var groups []group
	for ip, q := range s.Pending {
		// Per address strictly in order: stop at the first not yet due,
		// and judge each against what the ones before it will have told.
		t, told := s.Told[ip]
		var g group
		i := 0
		for ; i < len(q) && q[i].Due <= now; i++ {
			if s.pointless(ip, q[i], t, told) {
				continue
			}
			if len(g.evs) == 0 {
				g.first = q[i].Due
			}
			g.evs = append(g.evs, q[i].Event)
			t, told = Told{Action: q[i].Event.Action, MAC: q[i].Event.MAC, At: q[i].Event.Timestamp}, true
		}
		if i == len(q) {
			delete(s.Pending, ip)
		} else {
			s.Pending[ip] = q[i:]
		}
		if len(g.evs) > 0 {
			g.ip = ip
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b group) int {
		if c := cmp.Compare(a.first, b.first); c != 0 {
			return c
		}
		return a.ip.Compare(b.ip)
	})
	var evs []event.Event
	for _, g := range groups {
		evs = append(evs, g.evs...)
	}
	return evs
}

// pointless reports whether a pending event no longer needs sending,
// given what the region will have been told before it.
func (s *State) pointless(ip netip.Addr, p Pending, t Told, ok bool) bool {
	if satisfied(t, ok, p.Event) {
		return true
	}
	if p.Event.Reason == ReasonVanished {
		if l, back := s.File[ip]; back && (l.State == parser.StateActive || l.MAC != p.Event.MAC) {
			return true // reappeared, or the address moved on
		}
	}
	return false
}

// NextDue is the earliest time Due has something to do, and false when
// nothing is pending (rule 3 is checked on every Due call anyway).
func (s *State) NextDue() (int64, bool) {
	var next int64
	found := false
	for _, q := range s.Pending {
		if len(q) > 0 && (!found || q[0].Due < next) {
			next, found = q[0].Due, true
		}
	}
	return next, found
}
