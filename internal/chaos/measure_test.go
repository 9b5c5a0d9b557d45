package chaos

import "testing"

// TestMeasureResult: the counters of every agent process a run started
// (the last read of each) add up, by label where the report splits them.
func TestMeasureResult(t *testing.T) {
	m := measure{counts: map[int]map[string]float64{
		1: {
			`leasekeeper_events_received_total{source="hook"}`: 5,
			`leasekeeper_synthesised_total{reason="vanished"}`: 2,
			`leasekeeper_pair_gave_up_total{why="silent"}`:     1,
			`leasekeeper_pair_gave_up_total{why="peer-older"}`: 0,
			`leasekeeper_deliver_superseded_total`:             3,
		},
		2: {
			`leasekeeper_events_received_total{source="hook"}`:  4,
			`leasekeeper_events_received_total{source="spool"}`: 6,
			`leasekeeper_deliver_superseded_total`:              2,
		},
	}}
	got := m.result()
	if got.Received["hook"] != 9 || got.Received["spool"] != 6 {
		t.Errorf("received %v, want hook 9, spool 6", got.Received)
	}
	if got.Synthesised["vanished"] != 2 || got.SynthesisedTotal() != 2 {
		t.Errorf("synthesised %v", got.Synthesised)
	}
	if len(got.PairGaveUp) != 1 || got.PairGaveUp["silent"] != 1 {
		t.Errorf("gave up %v, want only silent 1 (a zero series is not shown)", got.PairGaveUp)
	}
	if got.Superseded != 5 {
		t.Errorf("superseded %d, want 5", got.Superseded)
	}
}
