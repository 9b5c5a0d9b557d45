package outbox

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/maasmodel"
)

// step is a compact way to write a queued event in a table: action, MAC
// letter, IP's last octet.
type step struct {
	action string
	mac    string
	ip     int
}

func c(mac string, ip int) step { return step{event.Commit, mac, ip} }
func x(mac string, ip int) step { return step{event.Expiry, mac, ip} }
func r(mac string, ip int) step { return step{event.Release, mac, ip} }

func macOf(letter string) string {
	return fmt.Sprintf("02:00:00:00:00:%02x", letter[0])
}

func queue(steps []step) []event.Queued {
	q := make([]event.Queued, len(steps))
	for i, s := range steps {
		q[i] = event.Queued{Seq: uint64(i + 1), Event: event.Event{
			Action: s.action, Family: event.IPv4, MAC: macOf(s.mac),
			IP: netip.AddrFrom4([4]byte{203, 0, 113, byte(s.ip)}), Timestamp: int64(i),
		}}
	}
	return q
}

func TestCoalesce(t *testing.T) {
	tests := []struct {
		name string
		q    []step
		keep []uint64 // Seqs kept (1-based positions in q)
	}{
		{"empty", nil, nil},
		{"one event", []step{c("A", 1)}, []uint64{1}},
		{"renewals keep the last commit", []step{c("A", 1), c("A", 1), c("A", 1)}, []uint64{3}},
		{"new MAC after expiry: the old MAC's end, then the commit", []step{c("A", 1), x("A", 1), c("B", 1)}, []uint64{2, 3}},
		{"new MAC after a commit with no end: last commit only", []step{c("A", 1), c("B", 1)}, []uint64{2}},
		{"an old MAC's end, then its commit again, before the last: not kept", []step{x("A", 1), c("A", 1), c("B", 1)}, []uint64{3}},
		{"the last commit's own MAC's end before it: not kept", []step{c("B", 1), r("B", 1), c("B", 1)}, []uint64{3}},
		{"final expiry after commit kept with the commit", []step{c("A", 1), c("A", 1), x("A", 1)}, []uint64{2, 3}},
		{"final action is the last one for the MAC", []step{c("A", 1), x("A", 1), r("A", 1)}, []uint64{1, 3}},
		{"repeated expiries: commit and last expiry", []step{c("A", 1), x("A", 1), x("A", 1)}, []uint64{1, 3}},
		{"stale expiry after a new commit is the last event: kept", []step{c("B", 1), x("A", 1)}, []uint64{1, 2}},
		{"stale expiry in the middle goes", []step{c("B", 1), x("A", 1), x("B", 1)}, []uint64{1, 3}},
		{"commit, its expiry, then a stale one", []step{c("B", 1), x("B", 1), x("A", 1)}, []uint64{1, 2, 3}},
		{"A, expire, B, stale A expiry", []step{c("A", 1), x("A", 1), c("B", 1), x("A", 1)}, []uint64{2, 3, 4}},
		{"no commit: last event per MAC", []step{x("A", 1), r("B", 1), x("A", 1)}, []uint64{2, 3}},
		{"no commit, one MAC: last", []step{x("A", 1), r("A", 1)}, []uint64{2}},
		{"IPs are independent and keep their order", []step{
			c("A", 1), c("X", 2), c("B", 1), x("X", 2), c("Z", 3), c("Z", 3), x("B", 1),
		}, []uint64{2, 3, 4, 6, 7}},
		{"IPv4 octets differ", []step{c("A", 1), c("A", 2), c("A", 1), c("A", 2)}, []uint64{3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := queue(tt.q)
			var got []uint64
			for _, k := range Coalesce(q) {
				got = append(got, k.Seq)
			}
			if diff := cmp.Diff(tt.keep, got); diff != "" {
				t.Errorf("kept Seqs (-want +got):\n%s", diff)
			}
		})
	}
}

// regionState models the region's row for one IP: the MAC it is bound
// to, "" when free, "?" for an unknown starting binding.
type regionState string

// apply plays events on a region that clears a row on expiry/release only
// for the bound MAC (byIP false) or whatever the MAC (byIP true).
func apply(start map[netip.Addr]regionState, q []event.Queued, byIP bool) map[netip.Addr]regionState {
	st := make(map[netip.Addr]regionState, len(start))
	for k, v := range start {
		st[k] = v
	}
	for _, e := range q {
		switch e.Event.Action {
		case event.Commit:
			st[e.Event.IP] = regionState(e.Event.MAC)
		default:
			if byIP || st[e.Event.IP] == regionState(e.Event.MAC) {
				st[e.Event.IP] = ""
			}
		}
	}
	return st
}

// TestCoalesceEquivalent checks the rule on random queues against a model
// of the region, from every starting binding, under both readings of
// expiry, and for every prefix already in flight (delivered in full
// before the coalesced rest, as happens when a pass runs while the
// deliverer holds a batch).
func TestCoalesceEquivalent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	macs := []string{"A", "B", "C"}
	actions := []func(string, int) step{c, x, r}
	for round := 0; round < 1000; round++ {
		n := rng.IntN(12)
		steps := make([]step, n)
		for i := range steps {
			steps[i] = actions[rng.IntN(3)](macs[rng.IntN(3)], 1+rng.IntN(2))
		}
		q := queue(steps)
		kept := Coalesce(q)
		for _, byIP := range []bool{false, true} {
			for _, startMAC := range append([]string{""}, macs...) {
				start := map[netip.Addr]regionState{}
				for _, ip := range []int{1, 2} {
					addr := netip.AddrFrom4([4]byte{203, 0, 113, byte(ip)})
					if startMAC != "" {
						start[addr] = regionState(macOf(startMAC))
					} else {
						start[addr] = ""
					}
				}
				want := apply(start, q, byIP)
				for p := 0; p <= len(q); p++ {
					// The first p events went out whole; the rest as kept.
					var rest []event.Queued
					for _, k := range kept {
						if k.Seq > uint64(p) {
							rest = append(rest, k)
						}
					}
					got := apply(apply(start, q[:p], byIP), rest, byIP)
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("queue %v, start %q, byIP %v, in flight %d: region state (-full +coalesced):\n%s",
							steps, startMAC, byIP, p, diff)
					}
				}
			}
		}
		// The last event of every IP survives.
		last := map[netip.Addr]uint64{}
		for _, e := range q {
			last[e.Event.IP] = e.Seq
		}
		for ip, seq := range last {
			found := false
			for _, k := range kept {
				found = found || k.Seq == seq
			}
			if !found {
				t.Fatalf("queue %v: last event %d of %s dropped", steps, seq, ip)
			}
		}
	}
}

// TestCoalesceMAAS: queues a rack writes when an address passes from one
// client to the next, played on MAAS's own model of the region
// (internal/maasmodel: maasservicelayer/services/leases.py
// store_lease_info, _commit_lease_info, _release_lease_info), which had
// the old client's lease before the queue: the coalesced queue leaves
// MAAS as the whole queue does, the address linked to the new client
// alone. Dropping the old client's end ahead of the new commit left it
// linked to both.
func TestCoalesceMAAS(t *testing.T) {
	tests := []struct {
		name        string
		before, q   []step
		wantAddress map[string]string // IP's last octet → the MACs linked (maasmodel Lease.MAC)
	}{
		{"renewals, the old client's expiry, the new client's commits",
			[]step{c("A", 1)},
			[]step{c("A", 1), c("A", 1), x("A", 1), c("B", 1), c("B", 1)},
			map[string]string{"1": macOf("B")}},
		{"a release, with another address's renewals between",
			[]step{c("A", 1), c("C", 2)},
			[]step{c("A", 1), c("C", 2), r("A", 1), c("C", 2), c("B", 1), c("C", 2)},
			map[string]string{"1": macOf("B"), "2": macOf("C")}},
		{"a stale end of the old client after the new commit",
			[]step{c("A", 1)},
			[]step{x("A", 1), c("B", 1), x("A", 1)},
			map[string]string{"1": macOf("B")}},
		{"three clients in turn",
			[]step{c("A", 1)},
			[]step{x("A", 1), c("B", 1), r("B", 1), c("C", 1)},
			map[string]string{"1": macOf("C")}},
	}
	play := func(before, q []event.Queued) map[string]string {
		m := maasmodel.New()
		for _, e := range append(append([]event.Queued(nil), before...), q...) {
			m.Apply(maasmodel.Event{Action: e.Event.Action, IP: e.Event.IP.String(), MAC: e.Event.MAC})
		}
		out := map[string]string{}
		for _, ip := range m.IPs() {
			l, _ := m.Lease(ip)
			a := netip.MustParseAddr(ip).As4()
			out[fmt.Sprint(a[3])] = l.MAC()
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, q := queue(tt.before), queue(tt.q)
			full, coalesced := play(before, q), play(before, Coalesce(q))
			if diff := cmp.Diff(tt.wantAddress, full); diff != "" {
				t.Fatalf("the whole queue (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(full, coalesced); diff != "" {
				t.Errorf("coalesced, MAAS holds (-whole queue +coalesced):\n%s", diff)
			}
		})
	}
}
