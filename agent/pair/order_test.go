package pair

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

func ev(ip string, sec int64) event.Queued {
	return event.Queued{Event: event.Event{Action: event.Commit, IP: netip.MustParseAddr(ip), MAC: "00:16:3e:00:00:01", Timestamp: sec}}
}

func TestKey(t *testing.T) {
	tests := []struct {
		name string
		e    event.Event
		want int64
	}{
		{"seconds only", event.Event{Timestamp: 100}, 100e9},
		{"the hook's nanoseconds", event.Event{Timestamp: 100, TimestampNS: 100_250_000_000}, 100_250_000_000},
		{"made from the file later: its second", event.Event{Timestamp: 100, TimestampNS: 130_000_000_000}, 100e9},
		{"made from the file within its second: its second", event.Event{Timestamp: 100, TimestampNS: 100_600_000_000, Source: event.SourceFile}, 100e9},
		{"a spooled hook's nanoseconds", event.Event{Timestamp: 100, TimestampNS: 100_250_000_000, Source: event.SourceSpool}, 100_250_000_000},
		{"the hook's, its source named", event.Event{Timestamp: 100, TimestampNS: 100_250_000_000, Source: event.SourceHook}, 100_250_000_000},
	}
	for _, tc := range tests {
		if got := Key(tc.e); got != tc.want {
			t.Errorf("%s: Key = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestQuery(t *testing.T) {
	batch := []event.Queued{ev("203.0.113.1", 10), ev("203.0.113.2", 11), ev("203.0.113.1", 12),
		{Event: event.Event{Action: event.Commit}}, ev("2001:db8::1", 12), ev("::ffff:203.0.113.3", 13)}
	want := []Item{{IP: netip.MustParseAddr("203.0.113.1"), Key: 10e9}, {IP: netip.MustParseAddr("203.0.113.2"), Key: 11e9},
		{IP: netip.MustParseAddr("203.0.113.3"), Key: 13e9}}
	if diff := cmp.Diff(want, Query(batch), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var many []event.Queued
	for i := range MaxItems + 5 {
		many = append(many, ev(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}).String(), 1))
	}
	if n := len(Query(many)); n != MaxItems {
		t.Errorf("%d items, want MaxItems", n)
	}
}

// TestClear: the pair's one rule, decided for a batch from the peer's
// answer. Its events share one MAC, so an event held back holds back
// every later one (TestClearPast: events of other addresses and MACs).
func TestClear(t *testing.T) {
	a, b, c := "203.0.113.1", "203.0.113.2", "203.0.113.3"
	batch := []event.Queued{ev(a, 10), ev(b, 20), ev(a, 30), ev(c, 40)}
	const horizon = 1000e9
	tests := []struct {
		name    string
		held    map[string]int64 // the peer's oldest per address; absent: not asked
		primary bool
		horizon int64
		want    int
		why     string
	}{
		{name: "the peer holds nothing", held: map[string]int64{a: 0, b: 0, c: 0}, want: 4},
		{name: "the peer's news is newer", held: map[string]int64{a: 35e9, b: 25e9, c: 50e9}, want: 4},
		{name: "older news of the first address: nothing goes", held: map[string]int64{a: 5e9, b: 0, c: 0}, want: 0, why: WhyPeerOlder},
		{name: "older than a later event: the events before it go", held: map[string]int64{a: 25e9, b: 0, c: 0}, want: 2, why: WhyPeerOlder},
		{name: "a tie goes to the primary", held: map[string]int64{a: 0, b: 20e9, c: 0}, primary: true, want: 4},
		{name: "the primary's tie goes, its later news of the address waits", held: map[string]int64{a: 10e9, b: 0, c: 0}, primary: true, want: 2, why: WhyPeerOlder},
		{name: "a tie waits on the secondary", held: map[string]int64{a: 0, b: 20e9, c: 0}, want: 1, why: WhyPeerOlder},
		{name: "not asked: stops there", held: map[string]int64{a: 0, b: 0}, want: 3, why: WhyUnasked},
		{name: "younger than the horizon", held: map[string]int64{a: 0, b: 0, c: 0}, horizon: 35e9, want: 3, why: WhyRecent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked, held := answer(tc.held, a, b, c)
			h := tc.horizon
			if h == 0 {
				h = horizon
			}
			v := Clear(batch, asked, held, nil, tc.primary, h)
			if v.N != tc.want || v.Why != tc.why {
				t.Errorf("Clear = %d %q, want %d %q", v.N, v.Why, tc.want, tc.why)
			}
			if v.N < len(batch) && (v.First != tc.want || batch[v.First].Event.IP != batch[v.N].Event.IP) {
				t.Errorf("held %d, want the batch's event %d", v.First, v.N)
			}
		})
	}
}

// TestClearDHCPv6: a DHCPv6 address's news, asked about by no query,
// goes at once, unless an event of its MAC before it is held back.
func TestClearDHCPv6(t *testing.T) {
	a := "203.0.113.1"
	v6 := ev("2001:db8::1", 40)
	v6.Event.MAC = "00:16:3e:00:00:02"
	sameMAC := ev("2001:db8::2", 50)
	batch := []event.Queued{ev(a, 10), v6, sameMAC}
	asked, held := answer(map[string]int64{a: 5e9}, a)
	v := Clear(batch, asked, held, nil, false, 1000e9)
	if want := []bool{false, true, false}; !slices.Equal(v.Go, want) {
		t.Errorf("Clear lets go %v, want %v (the first held for the peer's older news; the DHCPv6 event of another MAC goes; the one of the held event's MAC waits)", v.Go, want)
	}
}

// TestClearOtherPartner: with several partner racks (agent: pairLinks),
// a link asks about its own partner's addresses only (Link.Judge):
// another partner's go as they come, as a DHCPv6 address's, except
// behind a held event of their MAC.
func TestClearOtherPartner(t *testing.T) {
	mine, other, other2 := "203.0.113.1", "198.51.100.1", "198.51.100.2"
	outside := func(ip netip.Addr) bool { return outsidePair(ip) || ip.String() != mine }
	o := ev(other, 40)
	o.Event.MAC = "00:16:3e:00:00:02"
	sameMAC := ev(other2, 50)
	batch := []event.Queued{ev(mine, 10), o, sameMAC}
	items := queryOf(batch, outside)
	if len(items) != 1 || items[0].IP.String() != mine {
		t.Fatalf("asked about %v, want %s alone", items, mine)
	}
	asked, held := answer(map[string]int64{mine: 5e9}, mine)
	v := clearBatch(batch, asked, held, nil, false, 1000e9, nil, outside)
	if want := []bool{false, true, false}; !slices.Equal(v.Go, want) {
		t.Errorf("clearBatch lets go %v, want %v (the first held for the peer's older news; the other partner's event of another MAC goes; the one of the held event's MAC waits)", v.Go, want)
	}
	// Asked about by nobody, the other partner's address is not held as
	// unasked.
	asked, held = answer(map[string]int64{mine: 0}, mine)
	if v := clearBatch(batch, asked, held, nil, false, 1000e9, nil, outside); v.N != 3 {
		t.Errorf("clearBatch lets go %v, want all", v.Go)
	}
}

// TestClearPast: an event held back holds back the later events of its
// address and of its MAC, and no other: MAAS applies an event against
// the address's record and the MAC's other addresses
// (src/maasservicelayer/services/leases.py, store_lease_info). Two
// queues out of key order across addresses then no longer wait for each
// other (make chaos PAIR=1 seed 7: until hold_max, each side).
func TestClearPast(t *testing.T) {
	a, b, c := "203.0.113.1", "203.0.113.2", "203.0.113.3"
	at := func(ip, mac string, sec int64) event.Queued {
		q := ev(ip, sec)
		q.Event.MAC = mac
		return q
	}
	const m1, m2, m3 = "00:16:3e:00:00:01", "00:16:3e:00:00:02", "00:16:3e:00:00:03"
	tests := []struct {
		name  string
		batch []event.Queued
		held  map[string]int64
		want  []bool
		first int
		why   string
	}{
		{name: "held first: the other addresses and MACs go past it",
			batch: []event.Queued{at(a, m1, 10), at(b, m2, 20), at(c, m3, 30)},
			held:  map[string]int64{a: 5e9, b: 0, c: 0}, want: []bool{false, true, true}, first: 0, why: WhyPeerOlder},
		{name: "its address's later news waits with it",
			batch: []event.Queued{at(a, m1, 10), at(b, m2, 20), at(a, m3, 30)},
			held:  map[string]int64{a: 5e9, b: 0}, want: []bool{false, true, false}, first: 0, why: WhyPeerOlder},
		{name: "its MAC's news of another address waits with it",
			batch: []event.Queued{at(a, m1, 10), at(b, m2, 20), at(c, m1, 30)},
			held:  map[string]int64{a: 5e9, b: 0, c: 0}, want: []bool{false, true, false}, first: 0, why: WhyPeerOlder},
		{name: "and what shares a MAC with that",
			batch: []event.Queued{at(a, m1, 10), at(c, m1, 20), at(c, m2, 30), at(b, m2, 40), at(b, m3, 50)},
			held:  map[string]int64{a: 5e9, b: 0, c: 0}, want: []bool{false, false, false, false, false}, first: 0, why: WhyPeerOlder},
		{name: "not asked: held, the asked ones go past",
			batch: []event.Queued{at(a, m1, 10), at(c, m3, 20), at(b, m2, 30)},
			held:  map[string]int64{a: 0, b: 0}, want: []bool{true, false, true}, first: 1, why: WhyUnasked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked, held := answer(tc.held, a, b, c)
			v := Clear(tc.batch, asked, held, nil, false, 1000e9)
			if diff := cmp.Diff(tc.want, v.Go); diff != "" || v.First != tc.first || v.Why != tc.why {
				t.Errorf("Clear: first %d %q, want %d %q; go (-want +got):\n%s", v.First, v.Why, tc.first, tc.why, diff)
			}
			var want []event.Queued
			for i, ok := range tc.want {
				if ok {
					want = append(want, tc.batch[i])
				}
			}
			if got := v.Subset(tc.batch); len(got) != len(want) || len(got) != v.N {
				t.Errorf("Subset: %d events, N %d, want %d", len(got), v.N, len(want))
			}
		})
	}
}

// TestClearCopies: this agent's copy of news the peer delivered (both
// servers' hooks of one ack, milliseconds apart) goes whatever would
// hold it, marked as a copy to be dropped, when it is the batch's first
// news of its address and of its MAC, this agent delivered nothing of
// the address since the peer's news, and the peer holds none older than
// it. Behind other news of its MAC it is news again: MAAS applies an
// event against the MAC's other addresses (store_lease_info), so that
// news takes the copy's address away, and the copy gives it back.
func TestClearCopies(t *testing.T) {
	a, b, c := "203.0.113.1", "203.0.113.2", "203.0.113.3"
	at := func(ip, mac string, sec int64) event.Queued {
		q := ev(ip, sec)
		q.Event.MAC, q.Event.Source = mac, event.SourceHook
		return q
	}
	const m1, m2 = "00:16:3e:00:00:01", "00:16:3e:00:00:02"
	// The peer delivered its hook's commit of m1, 4 ms before this
	// agent's of the same second.
	peerOf := func(mac string, sec int64) News {
		return News{Key: sec*1e9 - 4e6, Tag: Tag(event.Event{Action: event.Commit, MAC: mac})}
	}
	fromFile := at(a, m1, 10)
	fromFile.Event.Source = event.SourceFile
	tests := []struct {
		name      string
		batch     []event.Queued
		held      map[string]int64
		ours      map[string]int64 // what this agent delivered of the address (the query's Delivered)
		delivered map[string]News
		want      []bool
		copies    []bool
	}{
		{name: "the first news of its address and MAC: a copy, too recent or not",
			batch:     []event.Queued{at(a, m1, 10), at(b, m2, 20), at(a, m1, 30)},
			held:      map[string]int64{a: 0, b: 0},
			delivered: map[string]News{a: peerOf(m1, 10)},
			want:      []bool{true, true, true},
			copies:    []bool{true, false, false}},
		{name: "behind held news of its MAC: news, it waits with the MAC",
			batch:     []event.Queued{at(a, m1, 10), at(b, m1, 20), at(c, m1, 30)},
			held:      map[string]int64{a: 5e9, b: 0, c: 0},
			delivered: map[string]News{b: peerOf(m1, 20)},
			want:      []bool{false, false, false}},
		{name: "behind news of its MAC that goes: news, sent after it",
			batch:     []event.Queued{at(a, m1, 10), at(b, m1, 20)},
			held:      map[string]int64{a: 0, b: 0},
			delivered: map[string]News{b: peerOf(m1, 20)},
			want:      []bool{true, true}},
		{name: "the peer holds news of the address older than it: no copy",
			batch:     []event.Queued{at(a, m1, 10)},
			held:      map[string]int64{a: 9e9},
			delivered: map[string]News{a: peerOf(m1, 10)},
			want:      []bool{false}},
		{name: "this agent delivered news of the address since the peer's: no copy",
			batch:     []event.Queued{at(a, m1, 10)},
			held:      map[string]int64{a: 0},
			ours:      map[string]int64{a: 10e9 - 1e6},
			delivered: map[string]News{a: peerOf(m1, 10)},
			want:      []bool{true}},
		{name: "another MAC's commit of the moment is no copy",
			batch:     []event.Queued{at(a, m1, 10)},
			held:      map[string]int64{a: 0},
			delivered: map[string]News{a: peerOf(m2, 10)},
			want:      []bool{true}},
		{name: "the same news more than a second after the peer's is no copy",
			batch:     []event.Queued{at(a, m1, 12)},
			held:      map[string]int64{a: 0},
			delivered: map[string]News{a: peerOf(m1, 10)},
			want:      []bool{true}},
		{name: "what the agent made of the file is no copy (its own rules judge it)",
			batch:     []event.Queued{fromFile},
			held:      map[string]int64{a: 0},
			delivered: map[string]News{a: peerOf(m1, 10)},
			want:      []bool{true}},
		{name: "the tag not known: no copy",
			batch:     []event.Queued{at(a, m1, 10)},
			held:      map[string]int64{a: 0},
			delivered: map[string]News{a: {Key: 10e9 - 4e6}},
			want:      []bool{true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked, held := answer(tc.held, a, b, c)
			delivered := make([]News, len(asked))
			for i, it := range asked {
				delivered[i] = tc.delivered[it.IP.String()]
				asked[i].Delivered = tc.ours[it.IP.String()]
			}
			v := Clear(tc.batch, asked, held, delivered, false, 1000e9)
			if diff := cmp.Diff(tc.want, v.Go); diff != "" {
				t.Errorf("Clear: go (-want +got):\n%s", diff)
			}
			copies := tc.copies
			if copies == nil && v.Copy != nil {
				copies = make([]bool, len(tc.batch))
			}
			if diff := cmp.Diff(copies, v.Copy); diff != "" {
				t.Errorf("Clear: copies (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPiecesCopies: of a batch the region may have applied already, a
// copy of the peer's delivered news goes, to be dropped, though its piece
// is held; the piece's other events wait whole as before.
func TestPiecesCopies(t *testing.T) {
	a, b := "203.0.113.1", "203.0.113.2"
	hook := func(ip string, sec int64, action string) event.Queued {
		q := ev(ip, sec)
		q.Event.Action, q.Event.Source = action, event.SourceHook
		return q
	}
	// One piece (one MAC): this agent's copy of the peer's commit, then
	// its own expiry, which waits on the peer's older expiry of the
	// address; a piece of another MAC after it.
	batch := []event.Queued{hook(a, 10, event.Commit), hook(a, 30, event.Expiry), ev(b, 40)}
	batch[2].Event.MAC = "00:16:3e:00:00:09"
	piece := []int{0, 0, 2}
	asked, held := answer(map[string]int64{a: 29e9, b: 0}, a, b)
	delivered := []News{{Key: 10e9 - 4e6, Tag: Tag(batch[0].Event)}, {}}
	v := Clear(batch, asked, held, delivered, false, 1000e9)
	got := v.Pieces(batch, piece)
	if len(got) != 2 || got[0].Event.Action != event.Commit || got[1].Event.IP != batch[2].Event.IP {
		t.Errorf("Pieces = %v, want the copy and the other MAC's piece", got)
	}
	// Not a copy: the piece waits whole.
	v = Clear(batch, asked, held, []News{{Key: 10e9 - 4e6}, {}}, false, 1000e9)
	if got := v.Pieces(batch, piece); len(got) != 1 || got[0].Event.IP != batch[2].Event.IP {
		t.Errorf("Pieces = %v, want the other MAC's piece alone", got)
	}
}

func TestCopyOf(t *testing.T) {
	e := event.Event{Action: event.Commit, MAC: "00:16:3e:00:00:01", Timestamp: 100, TimestampNS: 100_004_000_000, Source: event.SourceHook}
	d := News{Key: 100e9, Tag: Tag(e)}
	padded := e
	padded.MAC = "0:16:3e:0:0:1" // as dhcpd passes it
	release := e
	release.Action = event.Release
	reasoned := e
	reasoned.Reason = "pair-replay"
	for _, tc := range []struct {
		name string
		e    event.Event
		d    News
		want bool
	}{
		{"4 ms after", e, d, true},
		{"the MAC as dhcpd passes it", padded, d, true},
		{"at the same moment", e, News{Key: Key(e), Tag: d.Tag}, true},
		{"a second after", e, News{Key: Key(e) - 1e9, Tag: d.Tag}, true},
		{"more than a second after", e, News{Key: Key(e) - 1e9 - 1, Tag: d.Tag}, false},
		{"before the peer's", e, News{Key: Key(e) + 1, Tag: d.Tag}, false},
		{"another action", release, d, false},
		{"the tag not known", e, News{Key: d.Key}, false},
		{"nothing delivered", e, News{}, false},
		{"made by the agent", reasoned, d, false},
	} {
		if got := CopyOf(tc.e, tc.d); got != tc.want {
			t.Errorf("%s: CopyOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// answer is a query over ips, in that order, and the peer's answer to it:
// the addresses in held (the peer's oldest held news of each, 0 for
// none); an address not in held was not asked about.
func answer(held map[string]int64, ips ...string) ([]Item, []int64) {
	var asked []Item
	var keys []int64
	for _, ip := range ips {
		if k, ok := held[ip]; ok {
			asked = append(asked, Item{IP: netip.MustParseAddr(ip)})
			keys = append(keys, k)
		}
	}
	return asked, keys
}
