package deliver

import "github.com/leasekeeper/leasekeeper/agent/event"

// How a batch the region failed (500) or refused (422) is split.
//
// MAAS keeps one record per address and, per MAC, only the address of its
// last event (src/maasservicelayer/services/leases.py, store_lease_info:
// an event deletes the MAC's other discovered addresses of the family).
// So an event's effect depends on the events before it that share its
// address or its MAC, and on no other. Halves sent one after the other,
// in order, take the region through the same states as the whole batch
// would — unless the region has applied the batch already (a copy sent
// before, never answered: Deliverer.doubt). Then the first half sent
// again shows the region, until the second lands, the older state of an
// address or MAC with events on both sides: an older state after a newer
// one (make chaos, seed 2029: a restart under a slow region, then a 500,
// and a cut in the middle put a commit after its release).
//
// So a batch is cut where no address and no MAC has events on both sides
// (cleanCut), nearest the middle. Failing that, a batch with no event in
// doubt is cut in the middle; one with events in doubt is divided into
// parts that share no address and no MAC, each in its own order
// (independent): each part, applied alone, takes its addresses and MACs
// to their newest state. A batch all of one piece is not split while in
// doubt: it is sent whole again (send).

// cleanCut is the cut nearest the middle that leaves no address and no
// MAC with events on both sides, and whether there is one.
func cleanCut(batch []event.Queued) (int, bool) {
	n := len(batch)
	mid := n / 2
	if n < 2 {
		return mid, false
	}
	first := make(map[string]int, n)
	last := make(map[string]int, n)
	for i, q := range batch {
		for _, key := range keys(q) {
			if _, ok := first[key]; !ok {
				first[key] = i
			}
			last[key] = i
		}
	}
	// diff[k] counts the keys with events before the cut k and at or
	// after it, as a difference array.
	diff := make([]int, n+1)
	for key, f := range first {
		if l := last[key]; l > f {
			diff[f+1]++
			diff[l+1]--
		}
	}
	best, run := -1, 0
	for k := 1; k < n; k++ {
		run += diff[k]
		if run == 0 && (best < 0 || abs(k-mid) < abs(best-mid)) {
			best = k
		}
	}
	if best < 0 {
		return mid, false
	}
	return best, true
}

// independent divides batch into two parts that share no address and no
// MAC, each in the batch's order, as near to halves as the batch allows;
// false when it is all one piece.
func independent(batch []event.Queued) (a, b []event.Queued, ok bool) {
	n := len(batch)
	piece := pieces(batch)
	// Pieces in the order of their first event; the first ones go to a
	// until it holds about half the events.
	size := make(map[int]int)
	var order []int
	for _, r := range piece {
		if size[r] == 0 {
			order = append(order, r)
		}
		size[r]++
	}
	if len(order) < 2 {
		return nil, nil, false
	}
	inA := map[int]bool{}
	for k, total := 0, 0; k < len(order)-1 && (total == 0 || total+size[order[k]]/2 <= n/2); k++ {
		inA[order[k]] = true
		total += size[order[k]]
	}
	for i, q := range batch {
		if inA[piece[i]] {
			a = append(a, q)
		} else {
			b = append(b, q)
		}
	}
	return a, b, true
}

// pieces labels each event of batch with its piece: the events linked to
// it, directly or through others, by a shared address or MAC. A piece's
// label is the index of its first event. Pieces are what may be sent
// apart from each other even when the region may have applied the batch
// already (cleared, independent).
func pieces(batch []event.Queued) []int {
	n := len(batch)
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	owner := make(map[string]int, 2*n)
	for i, q := range batch {
		for _, key := range keys(q) {
			if j, seen := owner[key]; seen {
				if ri, rj := find(i), find(j); ri != rj {
					parent[max(ri, rj)] = min(ri, rj) // the root is a piece's first event
				}
			} else {
				owner[key] = i
			}
		}
	}
	for i := range parent {
		parent[i] = find(i)
	}
	return parent
}

// keys are what an event's effect depends on: its address and its MAC.
func keys(q event.Queued) []string {
	k := []string{"ip " + q.Event.IP.String()}
	if q.Event.MAC != "" {
		k = append(k, "mac "+q.Event.MAC)
	}
	return k
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
