package agent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// TestJudgePair: what the pair channel's answer says the peer delivered
// decides before the reconciler's judgment. An older event after the
// peer's newer news is dropped because MAAS would apply it all the same:
// an expiry or release clears the MAC's address whatever came before
// (maasservicelayer/services/leases.py _release_lease_info).
func TestJudgePair(t *testing.T) {
	e := event.Event{Action: event.Expiry, IP: netip.MustParseAddr("203.0.113.7"), MAC: "00:16:3e:00:00:01", Timestamp: 100}
	newest := event.Event{Action: event.Commit, IP: e.IP, MAC: e.MAC, Timestamp: 120}
	tests := []struct {
		name         string
		newer, known bool
		stale        bool        // the reconciler's verdict
		restate      event.Event // and its newest
		wantStale    bool
		wantNewest   bool
		wantAsked    bool // the reconciler was asked
	}{
		{name: "the peer delivered nothing newer: sent, not judged", known: true, stale: true, restate: newest},
		{name: "the peer did not answer: the reconciler's verdict", stale: true, restate: newest, wantStale: true, wantNewest: true, wantAsked: true},
		{name: "the peer did not answer, the reconciler sends it alone", wantAsked: true},
		{name: "the peer delivered newer news: dropped, never restated past the peer's held news", newer: true, known: true,
			stale: true, restate: newest, wantStale: true},
		{name: "the peer delivered newer news, the reconciler would send it alone: dropped", newer: true, known: true,
			wantStale: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			f := judgePair(func(event.Event) (bool, bool) { return tc.newer, tc.known },
				func(context.Context, event.Event) (bool, event.Event) {
					asked = true
					if tc.stale {
						return true, tc.restate
					}
					return false, event.Event{}
				})
			stale, n := f(context.Background(), e)
			if stale != tc.wantStale || n.IP.IsValid() != tc.wantNewest || asked != tc.wantAsked {
				t.Errorf("stale %v, newest %v, asked %v; want %v, %v, %v", stale, n.IP.IsValid(), asked, tc.wantStale, tc.wantNewest, tc.wantAsked)
			}
		})
	}
}

// TestPairHeld: the answer to the peer's question. Queued news older than
// what the peer delivered of the address is left out (overtaken in the
// region already) — except while the deliverer holds after a request the
// region left unanswered: that request may still land after the peer's
// newer news, so every queued event is held (make chaos PAIR=1 SEED=7).
func TestPairHeld(t *testing.T) {
	ip := netip.MustParseAddr("203.0.113.7")
	queuedKey := int64(100) // an event of the unanswered request
	for _, tc := range []struct {
		name       string
		holding    bool
		delivered  int64 // what the peer says it delivered of ip
		wantOldest int64
	}{
		{name: "older than the peer's delivered: left out", delivered: 150},
		{name: "newer than the peer's delivered: held", delivered: 50, wantOldest: queuedKey},
		{name: "holding after an unanswered request: held all the same", holding: true, delivered: 150, wantOldest: queuedKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := pairHeld{
				pending: func(ips []netip.Addr, after []int64, _ func(event.Event) int64) ([]int64, []bool) {
					return make([]int64, len(ips)), make([]bool, len(ips))
				},
				told: func(ips []netip.Addr, _ func(event.Event) int64) []int64 { return make([]int64, len(ips)) },
				queued: func(ips []netip.Addr, after []int64, _ func(event.Event) int64) ([]int64, []bool, error) {
					out := make([]int64, len(ips))
					for i := range ips {
						if queuedKey > after[i] {
							out[i] = queuedKey
						}
					}
					return out, []bool{true}, nil
				},
				holding: func() bool { return tc.holding },
			}
			got, err := h.held([]netip.Addr{ip}, []int64{tc.delivered})
			if err != nil {
				t.Fatal(err)
			}
			if got[0].Oldest != tc.wantOldest {
				t.Errorf("oldest held %d, want %d", got[0].Oldest, tc.wantOldest)
			}
		})
	}
}
