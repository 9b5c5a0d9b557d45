package agent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// TestPairLinksRoute: with pair.partners, an address's news is ordered
// by the link of the partner that shares its failover peer, and every
// other address's (a peer no partner names, a subnet dhcpd serves
// alone) by pair.peer's.
func TestPairLinksRoute(t *testing.T) {
	peerAt := map[string]string{
		"203.0.113.1":  "failover-vlan-5001",
		"198.51.100.1": "failover-vlan-5002",
		"198.51.100.2": "failover-vlan-5003",
		"198.18.0.1":   "failover-vlan-5004",
		"198.18.0.2":   "",
	}
	g := &pairLinks{
		peers:  [][]string{nil, {"failover-vlan-5002", "failover-vlan-5003"}, {"failover-vlan-5004"}},
		peerOf: func(ip netip.Addr) string { return peerAt[ip.String()] },
	}
	for ip, want := range map[string]int{"203.0.113.1": 0, "198.51.100.1": 1, "198.51.100.2": 1, "198.18.0.1": 2, "198.18.0.2": 0} {
		if got := g.of(netip.MustParseAddr(ip)); got != want {
			t.Errorf("%s (peer %q): link %d, want %d", ip, peerAt[ip], got, want)
		}
	}
	// Without partners, pair.peer's link orders every address, and the
	// reconciler is not asked.
	alone := &pairLinks{peers: [][]string{nil}, peerOf: func(netip.Addr) string { t.Fatal("peerOf asked"); return "" }}
	if got := alone.of(netip.MustParseAddr("198.51.100.1")); got != 0 {
		t.Errorf("one link: %d", got)
	}
}

// TestLabelsOf: a link's output keeps the piece labels its input had,
// for the next link's ClearPieces.
func TestLabelsOf(t *testing.T) {
	var batch []event.Queued
	for s := range uint64(5) {
		batch = append(batch, event.Queued{Seq: s + 1})
	}
	piece := []int{0, 0, 1, 2, 2}
	out := []event.Queued{batch[0], batch[1], batch[3], batch[4]}
	if got, want := labelsOf(out, batch, piece), []int{0, 0, 2, 2}; !slices.Equal(got, want) {
		t.Errorf("labelsOf = %v, want %v", got, want)
	}
	if got := labelsOf(batch, batch, piece); !slices.Equal(got, piece) {
		t.Errorf("labelsOf the whole batch = %v, want %v", got, piece)
	}
}
