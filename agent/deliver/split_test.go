package deliver

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

func TestSplitPoint(t *testing.T) {
	// Each event is "ip/mac": a single letter or digit each.
	batch := func(spec string) []event.Queued {
		var out []event.Queued
		for i, f := range strings.Fields(spec) {
			ip, mac, _ := strings.Cut(f, "/")
			out = append(out, event.Queued{Seq: uint64(i + 1), Event: event.Event{
				IP:  netip.AddrFrom4([4]byte{198, 18, 0, ip[0]}),
				MAC: "02:00:00:00:00:" + mac,
			}})
		}
		return out
	}
	for _, tc := range []struct {
		name, spec string
		want       int
	}{
		{"one event", "a/1", 0},
		{"two", "a/1 b/2", 1},
		{"all distinct: the middle", "a/1 b/2 c/3 d/4", 2},
		{"an IP across the middle moves the cut", "a/1 b/2 b/2 c/3", 1},
		{"nearest clean cut on either side", "a/1 b/2 c/3 c/3 d/4 e/5", 2},
		{"a MAC across the middle", "a/1 b/2 c/2 d/4", 1},
		{"one IP throughout: the middle", "a/1 a/1 a/1 a/1", 2},
		{"no clean cut: the middle", "a/1 b/2 a/1 b/2", 2},
		{"clean cut far from the middle", "a/1 b/2 b/2 b/2 b/2 b/2", 1},
	} {
		b := batch(tc.spec)
		got := splitPoint(b)
		if got != tc.want {
			t.Errorf("%s: splitPoint(%s) = %d, want %d", tc.name, tc.spec, got, tc.want)
		}
		if len(b) >= 2 && (got < 1 || got >= len(b)) {
			t.Errorf("%s: cut %d makes no progress", tc.name, got)
		}
	}
}
