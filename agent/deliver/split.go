package deliver

import "github.com/leasekeeper/leasekeeper/agent/event"

// splitPoint is where split cuts a batch: the cut nearest the middle that
// leaves no IP and no MAC with events on both sides, or the middle when
// there is none.
//
// A batch split after a 500 may be one the region already applied (its
// first copy's answer was lost, or the agent stopped while the region
// applied it): sent again in halves, each half its own transaction, an
// IP with events on both sides would show the region its older state
// (a commit whose release is in the other half) until the second half
// lands — an older state after a newer one (make chaos: a restart, a
// slow region, then a 500). Kept on one side, the IP's events are
// applied together, and the region goes from the newest state to the
// newest state.
func splitPoint(batch []event.Queued) int {
	n := len(batch)
	mid := n / 2
	if n < 3 {
		return mid
	}
	// dirty[k] > 0: some key has events before the cut k and at or after it.
	first := make(map[string]int, n)
	last := make(map[string]int, n)
	note := func(key string, i int) {
		if _, ok := first[key]; !ok {
			first[key] = i
		}
		last[key] = i
	}
	for i, q := range batch {
		note("ip "+q.Event.IP.String(), i)
		if q.Event.MAC != "" {
			note("mac "+q.Event.MAC, i)
		}
	}
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
		return mid
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
