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
