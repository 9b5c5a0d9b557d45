package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
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
// It is the deliverer's gate: a batch goes through each link in turn,
// each asking its partner's agent about its own addresses only and
// letting the others go (pair.Config.Covers), so what leaves is what
// every partner lets go. An event one link holds back holds back its
// MAC's later events in the batch whatever their link, as within one
// link: MAAS applies an event against the MAC's other addresses
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
		main.covers = func(ip netip.Addr) bool { return g.of(ip) == 0 }
		main.primary = func() bool { return primaryAmong(func(p string) bool { return g.named(p) == 0 }) }
	}
	confs := []pairConf{main}
	for i, p := range partners {
		confs = append(confs, pairConf{
			listen: p.Listen, peer: p.Peer, memory: "@" + p.Peer, several: true,
			covers:  func(ip netip.Addr) bool { return g.of(ip) == i+1 },
			primary: func() bool { return primaryAmong(func(n string) bool { return g.named(n) == i+1 }) },
		})
	}
	for _, pc := range confs {
		l, err := build(pc)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.links = append(g.links, l)
	}
	return g, nil
}

// pairConf is what differs between the links of pairLinks.
type pairConf struct {
	listen, peer string
	covers       func(netip.Addr) bool // nil: every address
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
func (g *pairLinks) Clear(ctx context.Context, batch []event.Queued) []event.Queued {
	return g.chain(batch, nil, func(l *pair.Link, b []event.Queued, piece []int) []event.Queued { return l.Clear(ctx, b) })
}

// ClearPieces is deliver.Gate's: what every link lets go, each keeping
// pieces whole (piece labels each event of batch; a link's output is
// labelled as its input was).
func (g *pairLinks) ClearPieces(ctx context.Context, batch []event.Queued, piece []int) []event.Queued {
	return g.chain(batch, piece, func(l *pair.Link, b []event.Queued, piece []int) []event.Queued { return l.ClearPieces(ctx, b, piece) })
}

// chainFresh: a pass through the links that took longer than this is
// run again on what it let go. A link's answers are as old as the links
// after it took (one may wait up to hold_max for its partner), and its
// partner may have delivered newer news of an address meanwhile, which
// the deliverer's StaleFunc must see (judgePair): one link asks again
// every 100 ms while it waits (agent/pair, recheck).
const chainFresh = 100 * time.Millisecond

// maxPasses bounds the passes of one call: links whose partners keep
// holding the batch back in turn.
const maxPasses = 10

// chain passes batch through every link (clear: one link's Clear or
// ClearPieces; piece, if set, labels batch's pieces), until a pass is
// quick (chainFresh). nil when a link returns nothing (ctx ended).
func (g *pairLinks) chain(batch []event.Queued, piece []int, clear func(l *pair.Link, b []event.Queued, piece []int) []event.Queued) []event.Queued {
	if len(g.links) == 1 {
		return clear(g.links[0], batch, piece)
	}
	for pass := 1; ; pass++ {
		start := time.Now()
		for _, l := range g.links {
			out := clear(l, batch, piece)
			if len(out) == 0 {
				return nil
			}
			if piece != nil {
				piece = labelsOf(out, batch, piece)
			}
			batch = out
		}
		if time.Since(start) < chainFresh || pass == maxPasses {
			return batch
		}
	}
}

// labelsOf is the piece labels of out, a subset of batch in batch order.
func labelsOf(out, batch []event.Queued, piece []int) []int {
	labels := make([]int, 0, len(out))
	j := 0
	for _, q := range out {
		for j < len(batch) && batch[j].Seq != q.Seq {
			j++
		}
		if j == len(batch) {
			break
		}
		labels = append(labels, piece[j])
	}
	return labels
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
