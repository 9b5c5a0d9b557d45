package pair

import (
	"net/netip"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// Key is an event's place in the pair's one order: when dhcpd acted, in
// Unix ns. The hook's own clock gives nanoseconds; an event the agent
// made from the leases file has dhcpd's second (its TimestampNS is when
// the agent made it, not when dhcpd acted, and is not used).
func Key(e event.Event) int64 {
	if ns := e.TimestampNS; ns > 0 && ns/1e9 == e.Timestamp {
		return ns
	}
	return e.Timestamp * 1e9
}

// Query lists the addresses of batch to ask the peer about, in batch
// order, each with the key of its first event in the batch; at most
// MaxItems addresses. An event without an address (it will be
// dead-lettered, never sent) is not asked about.
func Query(batch []event.Queued) []Item {
	var items []Item
	seen := make(map[netip.Addr]bool, min(len(batch), MaxItems))
	for _, q := range batch {
		ip := q.Event.IP.Unmap()
		if !ip.IsValid() || seen[ip] {
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

// Verdict is what Clear decided for a batch.
type Verdict struct {
	// N events from the batch's start may go to the region now.
	N int
	// When N is less than the batch: the first event held back, and why
	// (one of the Why constants).
	Held event.Event
	Why  string
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
// same moment, still on its way to the peer's queue). Events go in queue
// order, so the batch stops at the first that may not.
//
// asked are the addresses the query named and held, in the same order,
// the keys of the peer's answer (0: it holds nothing for the address).
//
// Why this cannot deadlock: an agent's events for one address are
// queued in key order, so the oldest held event for an address, of
// either agent, is never held back by the rule for that address; it
// waits only behind its own queue's earlier events for other addresses.
// A cycle of such waits between the agents is possible only when a
// queue is out of key order across addresses, and it is broken by the
// caller's hold_max (Link.Clear).
func Clear(batch []event.Queued, asked []Item, held []int64, primary bool, horizon int64) Verdict {
	return clearBatch(batch, asked, held, primary, horizon, false)
}

// clearBatch is Clear; skipUnasked passes the events whose address the
// query did not name instead of stopping at the first (a batch that goes
// whole: ClearAll).
func clearBatch(batch []event.Queued, asked []Item, held []int64, primary bool, horizon int64, skipUnasked bool) Verdict {
	peer := make(map[netip.Addr]int64, len(asked))
	for i, it := range asked {
		if i < len(held) {
			peer[it.IP] = held[i]
		}
	}
	for i, q := range batch {
		ip := q.Event.IP.Unmap()
		if !ip.IsValid() {
			continue
		}
		k := Key(q.Event)
		h, ok := peer[ip]
		switch {
		case !ok && skipUnasked:
			continue
		case !ok:
			return Verdict{N: i, Held: q.Event, Why: WhyUnasked}
		case h != 0 && (h < k || h == k && !primary):
			return Verdict{N: i, Held: q.Event, Why: WhyPeerOlder}
		case k > horizon:
			return Verdict{N: i, Held: q.Event, Why: WhyRecent}
		}
	}
	return Verdict{N: len(batch)}
}
