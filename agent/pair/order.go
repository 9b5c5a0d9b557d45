package pair

import (
	"hash/fnv"
	"net/netip"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// Key is an event's place in the pair's one order: when dhcpd acted, in
// Unix ns. The hook's own clock gives nanoseconds; an event the agent
// made from the leases file has dhcpd's second (its TimestampNS is when
// the agent made it, not when dhcpd acted, and is not used — also when
// the agent made it within that second: keyed by it, the end of a lease
// made as it ended went after the partner's commit of the client's next
// lease in that second, and the region was left on the end; make chaos
// PAIR=1 TIMERS=maas seed 118).
func Key(e event.Event) int64 {
	if ns := e.TimestampNS; ns > 0 && ns/1e9 == e.Timestamp && e.Source != event.SourceFile {
		return ns
	}
	return e.Timestamp * 1e9
}

// News is one agent's newest delivered news of an address, as the
// answers tell it: its Key and its Tag (0 for either: not known).
type News struct {
	Key int64
	Tag uint32
}

// Tag names what an event tells of its address, its action and its MAC,
// so that an agent can tell its copy of the peer's news from other news
// of the same moment. Never 0 (0 is "not known").
func Tag(e event.Event) uint32 {
	mac, err := event.NormalizeMAC(e.MAC)
	if err != nil {
		mac = e.MAC
	}
	h := fnv.New32a()
	h.Write([]byte(e.Action))
	h.Write([]byte{0})
	h.Write([]byte(mac))
	return max(h.Sum32(), 1)
}

// CopyWindow is how much newer than the peer's delivered news an event
// of the same Tag may be and still be taken for this agent's copy of it.
// Both servers of a pair may ack one broadcast REQUEST (load balancing
// splits DISCOVERs only; MAAS's dhcpd.conf,
// src/maasserver/templates/dhcp/dhcpd.conf.template, sets no
// server-id-check, which dhcpd leaves off: server/dhcp.c), and both run
// on commit, milliseconds apart; both run on expiry as a lease both hold
// goes free.
const CopyWindow = time.Second

// CopyOf reports whether e, this agent's, is its copy of the peer's
// delivered news d: a hook's event (what the agent made itself has its
// own rules) with d's Tag, no older than d and at most CopyWindow newer.
// The region has heard it from the peer: sent, it tells nothing new, and
// held, it would hold this agent's later news of its MAC back — and the
// peer's news of its address, which waits for it — until hold_max (make
// chaos PAIR=1 TIMERS=maas seed 118: both servers acked a client's
// request 4 ms apart, and each agent's later news waited on the other's
// copy while both restarted, until one broke the wait and the other
// dropped lease lives as superseded). The deliverer drops it (agent:
// judgePair).
func CopyOf(e event.Event, d News) bool {
	if d.Key == 0 || d.Tag == 0 || e.Source == event.SourceFile || e.Reason != "" {
		return false
	}
	k := Key(e)
	return k >= d.Key && k-d.Key <= int64(CopyWindow) && Tag(e) == d.Tag
}

// Query lists the addresses of batch to ask the peer about, in batch
// order, each with the key of its first event in the batch; at most
// MaxItems addresses. An event without an address (it will be
// dead-lettered, never sent) is not asked about, nor a DHCPv6 address's:
// dhcpd's failover is DHCPv4's alone (ISC dhcp's server/failover.c
// updates struct lease, DHCPv4's; server/dhcpv6.c and server/mdb6.c have
// none), so no pair shares it (outsidePair).
func Query(batch []event.Queued) []Item { return queryOf(batch, outsidePair) }

// queryOf is Query, with outside telling the addresses the peer is not
// asked about.
func queryOf(batch []event.Queued, outside func(netip.Addr) bool) []Item {
	var items []Item
	seen := make(map[netip.Addr]bool, min(len(batch), MaxItems))
	for _, q := range batch {
		ip := q.Event.IP.Unmap()
		if seen[ip] || outside(ip) {
			continue
		}
		if len(items) == MaxItems {
			break
		}
		seen[ip] = true
		items = append(items, Item{IP: ip, Key: Key(q.Event)})
	}
	return items
}

// outsidePair: news of ip (unmapped) is no failover pair's, so the peer
// is not asked about it and it goes as it comes: no address (the event is
// dead-lettered), or a DHCPv6 one (Query). Held back all the same behind
// a held event of its MAC (clearBatch), or with its piece of a batch the
// region may have applied (ClearPieces).
func outsidePair(ip netip.Addr) bool { return !ip.IsValid() || !ip.Is4() }

// Verdict is what Clear decided for a batch.
type Verdict struct {
	// Go marks the events of the batch that may go to the region now,
	// N counts them.
	Go []bool
	N  int
	// The index of the first event held back, and why (one of the Why
	// constants); Why is "" when every event may go.
	First int
	Why   string
	// Copy marks the events of Go that are this agent's copies of the
	// peer's delivered news (CopyOf), to be dropped unsent; nil for
	// none.
	Copy []bool
}

// Subset is the events of batch the verdict lets go, in batch order.
func (v Verdict) Subset(batch []event.Queued) []event.Queued {
	if v.N == len(batch) {
		return batch
	}
	out := make([]event.Queued, 0, v.N)
	for i, q := range batch {
		if v.Go[i] {
			out = append(out, q)
		}
	}
	return out
}

// Why an event waits.
const (
	WhyPeerOlder = "peer-older" // the peer holds older news of the same address
	WhyRecent    = "too-recent" // younger than the horizon: the peer may not have its own news of the moment yet
	WhyUnasked   = "not-asked"  // its address was beyond the query's MaxItems
)

// Clear is the pair's one rule: an event of this agent's queue may go to
// the region once the peer holds no older event for its address —
// older by key; a tie goes to the primary — and the event is older than
// horizon (the query's time less a margin for the peer's own news of the
// same moment, still on its way to the peer's queue).
//
// An event held back holds back every later event of the batch that
// shares its address or its MAC: MAAS applies an event against the
// address's record and the MAC's other addresses
// (src/maasservicelayer/services/leases.py, store_lease_info), so only
// those must keep their queue order (agent/deliver, split.go). The
// others go past it.
//
// asked are the addresses the query named and held, in the same order,
// the keys of the peer's answer (0: it holds nothing for the address).
//
// Why this does not deadlock: an agent's events for one address are
// queued in key order, so the oldest held event for an address, of
// either agent, is never held back by the rule for that address, and
// no event of another address or MAC holds it back unless they share a
// MAC. When the events went in queue order only, each queue's first held
// event held back all behind it, and two queues out of key order across
// addresses waited for each other until hold_max (make chaos PAIR=1 seed
// 7: a minute's wait on each side, the news held meanwhile then older
// than what the other side delivered, and ten lease lives lost). A
// cycle through shared MACs is still possible, and broken by the
// caller's hold_max (Link.Clear).
//
// delivered, if set, is the peer's newest delivered news of each asked
// address, in asked's order: an event that is this agent's copy of it
// (CopyOf), the batch's first news of its address and of its MAC, with
// nothing of the address delivered by this agent (asked's Delivered)
// or held by the peer in between, goes, marked in Copy, to be dropped,
// never sent.
func Clear(batch []event.Queued, asked []Item, held []int64, delivered []News, primary bool, horizon int64) Verdict {
	return clearBatch(batch, asked, held, delivered, primary, horizon, nil, outsidePair)
}

// clearBatch is Clear; force, if set, lets one event go whatever the
// rule says (one held for hold_max); outside tells the addresses that
// go as they come (outsidePair, and another partner's: Link.Judge).
func clearBatch(batch []event.Queued, asked []Item, held []int64, delivered []News, primary bool, horizon int64, force func(event.Queued) bool, outside func(netip.Addr) bool) Verdict {
	peer := make(map[netip.Addr]int64, len(asked))
	var news map[netip.Addr]News
	for i, it := range asked {
		if i < len(held) {
			peer[it.IP] = held[i]
		}
		if i < len(delivered) && delivered[i].Tag != 0 && it.Delivered < delivered[i].Key {
			// This agent delivered nothing of the address since the
			// peer's news: else its copy may follow news of its own.
			if news == nil {
				news = make(map[netip.Addr]News, len(asked))
			}
			news[it.IP] = delivered[i]
		}
	}
	v := Verdict{Go: make([]bool, len(batch)), First: len(batch)}
	var blockedIP map[netip.Addr]bool
	var blockedMAC map[string]bool
	hold := func(i int, q event.Queued, ip netip.Addr, why string) {
		if blockedIP == nil {
			blockedIP, blockedMAC = map[netip.Addr]bool{}, map[string]bool{}
		}
		blockedIP[ip] = true
		if q.Event.MAC != "" {
			blockedMAC[q.Event.MAC] = true
		}
		if v.Why == "" {
			v.First, v.Why = i, why
		}
	}
	var earlierIP map[netip.Addr]bool
	var earlierMAC map[string]bool
	if news != nil {
		earlierIP, earlierMAC = map[netip.Addr]bool{}, map[string]bool{}
	}
	for i, q := range batch {
		ip := q.Event.IP.Unmap()
		first := news != nil && !earlierIP[ip] && (q.Event.MAC == "" || !earlierMAC[q.Event.MAC])
		if news != nil {
			earlierIP[ip] = true
			if q.Event.MAC != "" {
				earlierMAC[q.Event.MAC] = true
			}
		}
		// A copy only where it is the batch's first news of its
		// address and of its MAC, and the peer holds no news of the
		// address older than it: after other news of either it would
		// not be redundant (MAAS applies an event against the MAC's
		// other addresses, store_lease_info: news of the MAC on another
		// address first takes this one away, and the copy gives it
		// back).
		if d, ok := news[ip]; ok && first && (peer[ip] == 0 || peer[ip] > Key(q.Event)) && CopyOf(q.Event, d) {
			v.Go[i] = true
			v.N++
			if v.Copy == nil {
				v.Copy = make([]bool, len(batch))
			}
			v.Copy[i] = true
			continue
		}
		if blockedIP[ip] || q.Event.MAC != "" && blockedMAC[q.Event.MAC] {
			hold(i, q, ip, "")
			continue
		}
		if outside(ip) || force != nil && force(q) {
			v.Go[i] = true
			v.N++
			continue
		}
		k := Key(q.Event)
		h, ok := peer[ip]
		switch {
		case !ok:
			hold(i, q, ip, WhyUnasked)
			continue
		case h != 0 && (h < k || h == k && !primary):
			hold(i, q, ip, WhyPeerOlder)
			continue
		case k > horizon:
			hold(i, q, ip, WhyRecent)
			continue
		}
		v.Go[i] = true
		v.N++
	}
	return v
}

// Pieces is what of batch the verdict lets go when only whole pieces may
// (Link.ClearPieces): the events of the pieces that go in full
// (WholePieces) and, whatever their piece, the copies (Copy). A copy is
// its piece's first news of its address and MAC, and the peer has told
// the region the same: dropped unsent, it leaves the region as the rest
// of its piece, sent later, expects. Held with its piece, it held the
// peer's later news of its address back, which the piece's own later
// news may wait on.
func (v Verdict) Pieces(batch []event.Queued, piece []int) []event.Queued {
	return wholePieces(batch, piece, v.Go, v.Copy)
}

// WholePieces is what of batch may go when only whole pieces may
// (Link.ClearPieces): the events whose piece — the events with the same
// label in piece — goes in full, in batch order.
func WholePieces(batch []event.Queued, piece []int, goes []bool) []event.Queued {
	return wholePieces(batch, piece, goes, nil)
}

// WholePiecesAlone is WholePieces, with the events marked in alone (nil:
// none; copies, Verdict.Copy) going whatever their piece.
func WholePiecesAlone(batch []event.Queued, piece []int, goes, alone []bool) []event.Queued {
	return wholePieces(batch, piece, goes, alone)
}

// wholePieces is WholePieces, with the events marked in alone (nil: none)
// going whatever their piece.
func wholePieces(batch []event.Queued, piece []int, goes, alone []bool) []event.Queued {
	held := map[int]bool{}
	for i, g := range goes {
		if !g {
			held[piece[i]] = true
		}
	}
	if len(held) == 0 {
		return batch
	}
	var out []event.Queued
	for i, q := range batch {
		if !held[piece[i]] || alone != nil && alone[i] {
			out = append(out, q)
		}
	}
	return out
}
