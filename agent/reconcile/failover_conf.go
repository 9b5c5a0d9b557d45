package reconcile

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
	"go.etcd.io/bbolt"
)

// scanPair sets the core's pair from dhcpd.conf, at start and at every
// dhcpd restart (when dhcpd read it): the file as the restart's rewrite
// of the leases file found it, read then (r.rewritePair), else read now. The
// states stay until the file records new ones. An unreadable dhcpd.conf
// keeps what was known. r.mu is held, or the task is not running yet.
func (r *Reconciler) scanPair(when string) {
	if r.cfg.DhcpdConf == "" {
		return
	}
	rp, err := r.rewritePair, r.rewriteErr
	r.rewritePair, r.rewriteErr = nil, nil
	if rp == nil && err == nil {
		var cfg *dhcpdconf.Config
		cfg, err = readConf(r.cfg.DhcpdConf)
		p := PeersOf(cfg)
		rp = &p
	}
	if err != nil {
		r.log.Warn().Err(err).Str("config", r.cfg.DhcpdConf).Str("when", when).
			Msg("cannot read dhcpd.conf for a failover peer: keeping what was known")
		return
	}
	ps, old := *rp, r.st.Pairs()
	oldSubnets := r.st.peers
	r.st.SetPeers(ps)
	now := r.st.Pairs()
	r.met.failoverPeers.Store(int64(len(now)))
	if samePeers(old, now) && peerSetEqual(oldSubnets, r.st.peers) {
		return
	}
	for _, np := range now {
		if np.New {
			r.log.Info().Str("peer", np.Peer).Str("role", np.Role).Str("when", when).
				Msg("failover peer new in dhcpd.conf (DHCP HA turned on): until dhcpd is in normal with it, the leases its restarts drop are this side's to end, as the partner never had them")
		}
	}
	p := ps.Lead
	alone := 0
	for _, sp := range ps.Subnets {
		if sp.Peer == "" {
			alone++
		}
	}
	switch {
	case !p.InPair():
		r.log.Info().Str("when", when).Msg("dhcpd is on its own (no failover peer in dhcpd.conf)")
	case len(ps.Others) == 0 && alone == 0:
		r.log.Info().Str("peer", p.Peer).Str("role", p.Role).Str("when", when).
			Msg("dhcpd is in a failover pair: the file's events are told by the primary alone, or by a survivor in partner-down")
	default:
		r.log.Info().Str("peers", peerList(now)).Int("subnets", len(ps.Subnets)).Int("subnets_alone", alone).Str("when", when).
			Msg("dhcpd's pools use several failover peers, or some none (MAAS: one per HA VLAN): each address follows the pair of its subnet's pools; the file's events are told by that pair's primary alone, or by a survivor in partner-down, and dhcpd alone tells its own subnets'")
	}
}

// samePeers reports whether a and b hold the same peers and roles.
func samePeers(a, b []Pair) bool {
	return slices.EqualFunc(a, b, func(x, y Pair) bool { return x.Peer == y.Peer && x.Role == y.Role })
}

// peerList is "name (role), …" for the pairs.
func peerList(ps []Pair) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.Peer + " (" + p.Role + ")")
	}
	return b.String()
}

// failoverNoted logs what folding failover state records into the core
// did: taking over, stepping back, expiries dropped. r.mu is held.
func (r *Reconciler) failoverNoted(fo FailoverFold) {
	for _, peer := range fo.SpokePeers {
		if r.partnerSpoke == nil {
			r.partnerSpoke = map[string]bool{}
		}
		r.partnerSpoke[peer] = true
	}
	p := r.st.Pair
	if len(fo.ChangedPeers) == 1 {
		p = *r.st.pairNamed(fo.ChangedPeers[0])
	}
	for _, peer := range slices.Sorted(maps.Keys(fo.Dropped)) {
		// By the pair whose partner spoke (dropPairWaits), not the one
		// that changed last.
		d := *r.st.pairNamed(peer)
		r.log.Info().Str("peer", d.Peer).Str("role", d.Role).Str("my_state", d.MyState).Str("partner_state", d.PartnerState).
			Int("dropped", fo.Dropped[peer]).
			Msg("failover: the partner spoke for the pair while this side was down (partner-down): the expiries of leases this restart dropped were its to send; dropped here")
	}
	if !fo.Changed {
		if fo.TookOver && fo.SteppedBack {
			r.log.Warn().Str("peer", p.Peer).Str("role", p.Role).Str("my_state", p.MyState).Str("partner_state", p.PartnerState).Int("untold_ends", fo.Untold).
				Msg("failover: the file, read late, shows this side both taking over and stepping back since it was last read: the ends it took over are sent; it reports as its state now says")
		}
		return
	}
	for _, peer := range fo.ChangedPeers {
		p := *r.st.pairNamed(peer)
		if p.Survivor() {
			r.log.Warn().Str("peer", p.Peer).Str("role", p.Role).Str("partner_state", p.PartnerState).Int("untold_ends", fo.Untold).
				Msg("failover: partner down — taking over reporting for every lease in the file that this peer's pools hold, and the ends no hook has told (recorded while communications were interrupted, or of this side's own leases not yet free)")
			continue
		}
		r.log.Info().Str("peer", p.Peer).Str("role", p.Role).Str("my_state", p.MyState).Str("partner_state", p.PartnerState).
			Msg("failover: partner back — stepping back to reporting only this side's part")
	}
}

// Stale reports whether ev, an event queued for the region and not yet
// sent, is older than news the file recorded since it was queued, and
// that news as an event to send right after it (State.NewestForPair); or,
// when there is no such event to send, whether ev is older than news the
// peer told (State.StaleForPair): the deliverer then drops it. In a pair
// it first waits for Run's first read of the file, as Accept does, and an
// event older than this run's start (queued before the agent went down)
// also waits until the file can show what the partner did meanwhile
// (Pair.holdOld): a rack returns with its agent first, and its dhcpd's
// file records the partner's partner-down and the updates of the leases
// the partner expired only once dhcpd has started and caught up.
func (r *Reconciler) Stale(ctx context.Context, ev event.Event) (bool, event.Event) {
	r.mu.Lock()
	pair := r.st.pairOf(ev.IP).InPair()
	r.mu.Unlock()
	if !pair {
		return false, event.Event{}
	}
	select {
	case <-r.read:
	case <-r.ended:
		return false, event.Event{}
	case <-ctx.Done():
		return false, event.Event{}
	}
	for ev.Timestamp < r.started.Unix() {
		r.mu.Lock()
		wait := r.st.pairOf(ev.IP).holdOld(r.now().Sub(r.started))
		r.mu.Unlock()
		if wait <= 0 {
			break
		}
		t := time.NewTimer(min(wait, time.Second))
		select {
		case <-t.C:
		case <-r.ended:
			t.Stop()
			return false, event.Event{}
		case <-ctx.Done():
			t.Stop()
			return false, event.Event{}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var returned int64
	if r.partnerSpoke[r.st.pairOf(ev.IP).Peer] {
		returned = r.started.Unix()
	}
	if newest, ok := r.st.NewestForPair(ev, r.now().Unix()); ok {
		return true, newest
	}
	return r.st.StaleForPair(ev, returned), event.Event{}
}

// PendingOldest gives, for each of ips, the smallest key(event) above
// after[i] among the events the reconciler has made and waits to queue
// (the grace after a lease's end, a vanished lease's hold), 0 for none,
// and whether it waits to queue any for the address: news this agent
// holds that the failover pair's channel tells the peer of (agent/pair).
func (r *Reconciler) PendingOldest(ips []netip.Addr, after []int64, key func(event.Event) int64) (oldest []int64, pending []bool) {
	out := make([]int64, len(ips))
	pending = make([]bool, len(ips))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ip := range ips {
		for _, p := range r.st.Pending[ip.Unmap()] {
			if p.Standby {
				continue // held for the primary, which sends it
			}
			if p.Cut {
				// Held for the life it cut: told, it held the peer's
				// renewal of that life back, which then reached the
				// region after it (make chaos PAIR=1 TIMERS=maas seed 119
				// at 57a521e). Untold, that renewal goes, and the end,
				// older, is dropped behind it (agent: judgePair).
				continue
			}
			pending[i] = true
			if k := key(p.Event); k > after[i] && (out[i] == 0 || k < out[i]) {
				out[i] = k
			}
		}
	}
	return out, pending
}

// OwnTold gives, for each of ips, key(the last event this agent queued
// for it: Told.own, kept when the file's blocks are recorded over it), 0
// when there is none or the deliverer dropped it unsent (Dropped): with
// nothing of the address still queued, that event was delivered (or
// dead-lettered), the newest news of the address this agent can have
// given the region. (The peer's agent asks: a recovering side's replay
// goes only if this agent told nothing newer than that side's own news,
// PairReplay.)
func (r *Reconciler) OwnTold(ips []netip.Addr, key func(event.Event) int64) []int64 {
	out := make([]int64, len(ips))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ip := range ips {
		t, ok := r.st.Told[ip.Unmap()]
		if !ok {
			continue
		}
		at, ns := t.own()
		if at <= 0 || t.OwnDropped {
			continue // nothing queued by this agent, or nothing it queued went
		}
		if ns/1e9 != at {
			ns = 0
		}
		out[i] = key(event.Event{IP: ip, Timestamp: at, TimestampNS: ns})
	}
	return out
}

// Dropped records that the deliverer dropped e unsent: the pair's peer
// delivered newer news of its address, or this same news (agent:
// judgePair; deliver.Deliverer.OnSuperseded). If e is the last event this
// agent queued for the address (Told.own: its time, and its action and
// MAC where the record is this agent's own, not the file's block
// recorded over it), the pair channel's answers no longer give it as delivered
// (OwnTold). They did: both agents of a pair then dropped the one end
// of a lease, each taking the other's word — a secondary's rule-3 end
// dropped because the primary delivered a renewal begun after the life's
// start, then the recovering primary's replay of that end dropped
// because the secondary's answer named the end it had just dropped as
// delivered (make chaos PAIR=1 seed 126: four lease ends lost). The
// record stays what the region may have been told for every other
// rule: only the answer changes, and it falls back on what the pair
// channel itself saw delivered (pair.Link.Delivered).
func (r *Reconciler) Dropped(e event.Event) {
	ip := e.IP.Unmap()
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.st.Told[ip]
	if !ok || t.OwnDropped {
		return
	}
	at, ns := t.own()
	if at != e.Timestamp || ns != fineTime(e) {
		return
	}
	if !t.Recorded && (t.Action != e.Action || t.MAC != e.MAC) {
		return
	}
	t.OwnDropped = true
	r.st.setTold(ip, t)
	r.persistTold(ip)
}

// persistTold writes ip's told record at once, not at the next round's
// commit: the deliverer's drop is on disk already, and an agent killed
// in between would answer with the dropped event again after its
// restart. A failure leaves the record to that commit. r.mu is held.
func (r *Reconciler) persistTold(ip netip.Addr) {
	if r.store == nil {
		return
	}
	recs, err := records(r.st, Dirty{IPs: map[netip.Addr]Changed{ip: ChangedTold}}, nil)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	// On failure the record is still dirty: the next commit writes it.
	_ = r.store.Update(ctx, r.bucket(), func(b *bbolt.Bucket) ([]event.Event, error) { return nil, write(b, recs) })
}

// PairReplay gives, for e, a hook's end queued as a pair replay
// (ReasonPairReplay), the end of a lease dhcpd never wrote
// (ReasonUnwritten) or rule 3's end (ReasonEndsPassed), key(this agent's
// own last news of its address before it, or the start of the life rule
// 3 ends): e goes to the region only if the peer's agent delivered
// nothing newer (agent: judgePair). From State.Replays, persisted with
// the queued event: a restarted agent still judges it. False when e has
// no record (maxReplays newer ones of its address were queued after it,
// or its record did not load): a replay is then a repeat, as without the
// channel; an unwritten or rule 3's end is judged as any other event.
func (r *Reconciler) PairReplay(e event.Event, key func(event.Event) int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	own, ok := r.st.replayOwn(e)
	if !ok {
		return 0, false
	}
	return key(own), true
}

// Unsent is how many events the reconciler made and recorded as told but
// could not queue yet (the outbox refused them: a full disk); they are
// queued again with the next commit.
func (r *Reconciler) Unsent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.unsent)
}

// Primary reports whether dhcpd.conf makes this side the failover pair's
// primary: the pair channel's role (agent/pair: the two agents must
// claim different ones, and the primary wins ties). With several peers
// (MAAS: one per HA VLAN, roles chosen per VLAN), the role on the peer
// whose name sorts first: the two racks' dhcpd.conf name the same peers
// (MAAS names them after the VLAN), not always in the same order.
func (r *Reconciler) Primary() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return channelRole(r.st.Pairs()) == RolePrimary
}

// PrimaryAmong reports whether this side is the primary of the pair, of
// those whose failover peer in reports true, whose peer's name sorts
// first: the role of a pair channel to one partner rack of several (the
// peers this rack shares with that partner, which the partner's agent
// reads from its own dhcpd.conf).
func (r *Reconciler) PrimaryAmong(in func(peer string) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return roleAmong(r.st.Pairs(), in) == RolePrimary
}

// roleAmong is channelRole of the pairs whose peer in reports true.
func roleAmong(ps []Pair, in func(peer string) bool) string {
	return channelRole(slices.DeleteFunc(ps, func(p Pair) bool { return !in(p.Peer) }))
}

// PeerOf names the failover peer whose pair ip's leases follow: its
// subnet's pools' (the lead peer's for an address in no subnet
// dhcpd.conf declares); "" for an address dhcpd serves alone, and for a
// DHCPv6 one.
func (r *Reconciler) PeerOf(ip netip.Addr) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st.pairOf(ip).Peer
}

// channelRole is the role on the pair whose peer's name sorts first.
func channelRole(ps []Pair) string {
	if len(ps) == 0 {
		return ""
	}
	return slices.MinFunc(ps, func(a, b Pair) int { return strings.Compare(a.Peer, b.Peer) }).Role
}
