package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/agent/pair"
)

// pairLinks is the pair channel to each partner rack's agent. MAAS sets
// a primary and a secondary rack per VLAN (src/maasserver/dhcp.py,
// make_failover_peer_config: one failover peer per HA VLAN, named
// "failover-vlan-ID", whose peer address is that VLAN's other rack), so
// one rack's HA VLANs can have different partner racks. links[0] is
// pair.peer's; links[i] for i > 0 is pair.partners[i-1]'s, which orders
// the news of the addresses whose subnet's pools use the failover peers
// that entry names (reconcile: PeerOf), links[0] every other address's.
// Each link's role is this side's on its own peers (PrimaryAmong): the
// partner's agent reads the same peers from its own dhcpd.conf, which
// names no other.
//
// It is the deliverer's gate (clear): every link judges each batch,
// asking its partner's agent about its own addresses only and letting
// the others go, and what leaves is what every partner lets go. An
// event one link holds back holds back its MAC's later events in the
// batch whatever their link, as within one link: MAAS applies an event
// against the MAC's other addresses
// (src/maasservicelayer/services/leases.py, store_lease_info).
type pairLinks struct {
	links []*pair.Link
	// peers[i] are the failover peers links[i] covers (nil for
	// links[0]: every peer no partner names).
	peers [][]string
	// peerOf names the failover peer an address follows.
	peerOf func(netip.Addr) string
	// inConf names the failover peers dhcpd.conf's pools use now (nil:
	// not checked).
	inConf func() []string
	log    zerolog.Logger
}

// newPairLinks builds the channel to pair.peer's agent and to each of
// pair.partners' (newPairLink builds each).
func newPairLinks(cfg *config.Config, build func(pc pairConf) (*pair.Link, error), peerOf func(netip.Addr) string, primaryAmong func(func(string) bool) bool, primary func() bool,
	inConf func() []string, log zerolog.Logger) (*pairLinks, error) {
	partners, err := cfg.Pair.PartnerList()
	if err != nil {
		return nil, fmt.Errorf("pair.partners: %w", err)
	}
	g := &pairLinks{peerOf: peerOf, peers: [][]string{nil}, inConf: inConf, log: log}
	for _, p := range partners {
		g.peers = append(g.peers, p.FailoverPeers)
	}
	main := pairConf{listen: cfg.Pair.Listen, peer: cfg.Pair.Peer, primary: primary}
	if len(partners) > 0 {
		main.several = true
		main.primary = func() bool { return primaryAmong(func(p string) bool { return g.named(p) == 0 }) }
	}
	confs := []pairConf{main}
	for i, p := range partners {
		confs = append(confs, pairConf{
			listen: p.Listen, peer: p.Peer, memory: "@" + p.Peer, several: true,
			primary: func() bool { return primaryAmong(func(n string) bool { return g.named(n) == i+1 }) },
		})
	}
	for i, pc := range confs {
		l, err := build(pc)
		if err != nil {
			g.Close()
			if i > 0 {
				err = fmt.Errorf("pair.partners (%s): %w", pc.peer, err)
			}
			return nil, err
		}
		g.links = append(g.links, l)
	}
	return g, nil
}

// forgetPartners drops the stored memory (pairMemory's buckets) of each
// partner agent partners no longer names: kept, it would be stale when
// that partner is named again (the news this agent delivered before, how
// long the partner's news held it back), and it would stay in the state
// for nothing.
func forgetPartners(ctx context.Context, store *outbox.Store, partners []config.Partner, log zerolog.Logger) error {
	named := map[string]bool{}
	for _, p := range partners {
		named["@"+p.Peer] = true
	}
	for _, base := range []string{pairMemoryBucket, pairWaitsBucket} {
		names, err := store.KVNames(base + "@")
		if err != nil {
			return err
		}
		for _, n := range names {
			suffix := strings.TrimPrefix(n, base)
			if named[suffix] {
				continue
			}
			if forgot, err := store.Forget(ctx, n); err != nil {
				return err
			} else if forgot {
				log.Info().Str("peer_agent", suffix[1:]).Str("bucket", n).
					Msg("pair.partners no longer names this partner agent: dropped what its channel stored; named again, the channel starts with no memory")
			}
		}
	}
	return nil
}

// pairConf is what differs between the links of pairLinks.
type pairConf struct {
	listen, peer string
	primary      func() bool
	memory       string // pairMemory's suffix: "" for pair.peer's link
	several      bool   // one of several links: its log names its peer agent
}

// named is the index of the link whose partner shares the failover peer
// named: 0 for a peer no partner names.
func (g *pairLinks) named(peer string) int {
	for i := 1; i < len(g.peers); i++ {
		if slices.Contains(g.peers[i], peer) {
			return i
		}
	}
	return 0
}

// of is the index of the link that orders ip's news.
func (g *pairLinks) of(ip netip.Addr) int {
	if len(g.peers) == 1 {
		return 0 // no partners: pair.peer's
	}
	return g.named(g.peerOf(ip))
}

// link is the link that orders e's news.
func (g *pairLinks) link(e event.Event) *pair.Link { return g.links[g.of(e.IP)] }

// Clear is deliver.Gate's: what every link lets go.
func (g *pairLinks) Clear(ctx context.Context, batch []event.Queued, more func() []event.Queued) []event.Queued {
	if len(g.links) == 1 {
		return g.links[0].Clear(ctx, batch, more)
	}
	return g.clear(ctx, batch, nil, more)
}

// ClearPieces is deliver.Gate's: of the pieces (piece labels each event
// of batch), those every link lets go in full, and the copies.
func (g *pairLinks) ClearPieces(ctx context.Context, batch []event.Queued, piece []int) []event.Queued {
	if len(g.links) == 1 {
		return g.links[0].ClearPieces(ctx, batch, piece)
	}
	return g.clear(ctx, batch, piece, nil)
}

// clear is Clear and ClearPieces (piece set) over several links: in
// each round every link judges the whole batch (pair.Link.Judge: its
// own partner's addresses asked about, the others let go unless a held
// event of their MAC holds them), an event goes if every link lets it
// go or one let it go as a copy of its partner's news, and the round is
// repeated, after the longest wait a link asks for, until something
// goes. Each link's answers are thus as fresh as the round that lets
// the batch go, which the deliverer's stale check reads (judgePair); a
// copy goes alone whatever its piece, as with one link; and a silent
// partner's link holds back its own addresses' news, not the others',
// including the news queued behind a batch it holds whole (more, taken
// before each new round as pair.Link.Clear does).
func (g *pairLinks) clear(ctx context.Context, batch []event.Queued, piece []int, more func() []event.Queued) []event.Queued {
	if len(batch) == 0 {
		return nil
	}
	linkOf := make(map[netip.Addr]int, len(batch)) // of() takes the reconciler's lock: once an address a call
	outside := make([]func(netip.Addr) bool, len(g.links))
	for i := range g.links {
		outside[i] = func(ip netip.Addr) bool {
			j, ok := linkOf[ip]
			if !ok {
				j = g.of(ip)
				linkOf[ip] = j
			}
			return j != i
		}
	}
	// since[i]: from the first round in which nothing went and link i's
	// partner, answering, held something back, until a round in which it
	// holds nothing or something goes: the link's waiting and held time
	// (one link counts the rounds in which nothing goes; a silent
	// partner's do not count, as with one link).
	since := make([]time.Time, len(g.links))
	settle := func(i int, now time.Time) {
		if !since[i].IsZero() {
			g.links[i].AddHeld(now.Sub(since[i]))
			g.links[i].SetWaiting(time.Time{})
			since[i] = time.Time{}
		}
	}
	defer func() {
		now := time.Now()
		for i := range g.links {
			settle(i, now)
		}
	}()
	for ctx.Err() == nil {
		now := time.Now()
		goes := make([]bool, len(batch))
		for i := range goes {
			goes[i] = true
		}
		var copies []bool
		var wait time.Duration
		holding := make([]bool, len(g.links))
		for i, l := range g.links {
			r, ok := l.Judge(ctx, batch, outside[i])
			if !ok {
				return nil
			}
			if r.All {
				continue
			}
			holding[i] = r.Wait > 0 && r.V.N < len(batch) // answered, and holds something
			for j, gj := range r.V.Go {
				goes[j] = goes[j] && gj
			}
			for j, c := range r.V.Copy {
				if c {
					if copies == nil {
						copies = make([]bool, len(batch))
					}
					copies[j] = true
				}
			}
			wait = max(wait, r.Wait)
		}
		for j, c := range copies {
			goes[j] = goes[j] || c
		}
		var out []event.Queued
		if piece != nil {
			out = pair.WholePiecesAlone(batch, piece, goes, copies)
		} else {
			for j, q := range batch {
				if goes[j] {
					out = append(out, q)
				}
			}
		}
		if len(out) > 0 {
			return out // (the deferred settle counts the waits)
		}
		for i, l := range g.links {
			switch {
			case holding[i] && since[i].IsZero():
				since[i] = now
				l.SetWaiting(now)
			case !holding[i]:
				settle(i, now)
			}
		}
		if wait > 0 { // (0: a silent partner, its query's timeout was the wait)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil
			}
		}
		if more != nil {
			if b := more(); b != nil {
				batch = b
			}
		}
	}
	return nil
}

// Delivered is deliver.Gate's: each link is told of the events it
// orders (and all, even of none: its answers since the last delivery are
// spent).
func (g *pairLinks) Delivered(batch []event.Queued) {
	if len(g.links) == 1 {
		g.links[0].Delivered(batch)
		return
	}
	parts := make([][]event.Queued, len(g.links))
	for _, q := range batch {
		i := g.of(q.Event.IP)
		parts[i] = append(parts[i], q)
	}
	for i, l := range g.links {
		l.Delivered(parts[i])
	}
}

// PeerDelivered is the answer of the link that orders e's news.
func (g *pairLinks) PeerDelivered(e event.Event) (int64, bool) { return g.link(e).PeerDelivered(e) }

// Copy is the judgment of the link that orders e's news.
func (g *pairLinks) Copy(e event.Event) bool { return g.link(e).Copy(e) }

// Run runs every link until ctx ends, and says in the log when
// pair.partners names a failover peer dhcpd.conf's pools do not use
// (checkEvery).
func (g *pairLinks) Run(ctx context.Context, ready func()) error {
	errs := make(chan error, len(g.links))
	for _, l := range g.links {
		go func() { errs <- l.Run(ctx, func() {}) }()
	}
	ready()
	if g.inConf != nil && len(g.peers) > 1 {
		go g.watchPeers(ctx)
	}
	var first error
	for range g.links {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// checkEvery is how often Run compares pair.partners with dhcpd.conf
// (which MAAS rewrites as it turns HA on and off for a VLAN).
const checkEvery = 30 * time.Second

// watchPeers logs, at each change, the failover peers pair.partners
// names that dhcpd.conf's pools do not use: that partner's channel
// orders nothing of them, and its role is this side's on the others it
// names (none: secondary, which may clash with the partner's).
func (g *pairLinks) watchPeers(ctx context.Context) {
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	var last []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		missing := g.unknownPeers(g.inConf())
		if slices.Equal(missing, last) {
			continue
		}
		if len(missing) > 0 {
			g.log.Warn().Strs("failover_peers", missing).
				Msg("pair.partners names failover peers dhcpd.conf's pools do not use (a VLAN whose DHCP HA is off, or a misspelt name): their channel orders nothing of them; leasekeeper check-maas lists which agent orders which peers")
		} else {
			g.log.Info().Msg("every failover peer pair.partners names is in dhcpd.conf again")
		}
		last = missing
	}
}

// unknownPeers is the failover peers pair.partners names that are not
// in present, in the order named.
func (g *pairLinks) unknownPeers(present []string) []string {
	var out []string
	for _, ps := range g.peers[1:] {
		for _, p := range ps {
			if !slices.Contains(present, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// Close closes every link.
func (g *pairLinks) Close() error {
	var first error
	for _, l := range g.links {
		if err := l.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ofPeer is the link of the failover peer named, for status.
func (g *pairLinks) ofPeer(peer string) *pair.Link { return g.links[g.named(peer)] }

// pairRegisterer labels the pair channel's metrics with the peer agent
// each link reaches.
func pairRegisterer(reg prometheus.Registerer, peer string) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"peer": peer}, reg)
}

// pairLogger names the peer agent in the log of each of several links.
func pairLogger(log zerolog.Logger, pc pairConf) zerolog.Logger {
	if !pc.several {
		return log
	}
	return log.With().Str("peer_agent", pc.peer).Logger()
}
