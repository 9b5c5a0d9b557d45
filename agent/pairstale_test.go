package agent

import (
	"bytes"
	"context"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/agent/pair"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
)

// TestJudgePair: what the pair channel's answer says the peer delivered
// decides before the reconciler's judgment. An older event after the
// peer's newer news is dropped because MAAS would apply it all the same:
// an expiry or release clears the MAC's address whatever came before
// (maasservicelayer/services/leases.py _release_lease_info). A
// recovering side's replay goes only on the peer's word that it told
// nothing since this side's own news.
func TestJudgePair(t *testing.T) {
	e := event.Event{Action: event.Expiry, IP: netip.MustParseAddr("203.0.113.7"), MAC: "00:16:3e:00:00:01", Timestamp: 100}
	replayed := e
	replayed.Reason = reconcile.ReasonPairReplay
	unwritten := e
	unwritten.Reason = reconcile.ReasonUnwritten
	passed := e
	passed.Reason = reconcile.ReasonEndsPassed
	cut := e
	cut.Reason = reconcile.ReasonStaleUpdate
	newest := event.Event{Action: event.Commit, IP: e.IP, MAC: e.MAC, Timestamp: 120}
	// The hooks of one ack on both servers: this side's 4 ms after the
	// peer's at 100.000.
	commit := event.Event{Action: event.Commit, IP: e.IP, MAC: e.MAC, Timestamp: 100, TimestampNS: 100_004_000_000, Source: event.SourceHook}
	const (
		own   = 90e9  // this side's own last news before the replay
		older = 95e9  // the peer's news, older than e
		newer = 110e9 // the peer's news, newer than e
	)
	tests := []struct {
		name       string
		e          event.Event
		delivered  int64 // the peer's newest delivered key
		isCopy     bool  // the channel let it go as a copy of the peer's news
		known      bool  // the peer answered about the address
		unqueued   bool  // the reconciler does not know the replay (a later one of its address queued since, its record lost)
		stale      bool  // the reconciler's verdict
		restate    event.Event
		wantStale  bool
		wantNewest bool
		wantAsked  bool // the reconciler was asked
	}{
		{name: "the peer delivered nothing newer: sent, not judged", e: e, delivered: older, known: true, stale: true, restate: newest},
		{name: "the peer delivered nothing: sent, not judged", e: e, known: true, stale: true, restate: newest},
		{name: "the peer did not answer: the reconciler's verdict", e: e, stale: true, restate: newest, wantStale: true, wantNewest: true, wantAsked: true},
		{name: "the peer did not answer, the reconciler sends it alone", e: e, wantAsked: true},
		{name: "the peer delivered newer news: dropped, never restated past the peer's held news", e: e, delivered: newer, known: true,
			stale: true, restate: newest, wantStale: true},
		{name: "the peer delivered newer news, the reconciler would send it alone: dropped", e: e, delivered: newer, known: true,
			wantStale: true},
		{name: "a replay the peer told nothing after this side's news of: sent", e: replayed, known: true},
		{name: "a replay the peer told only older news than this side's of: sent", e: replayed, delivered: own - 1, known: true},
		{name: "a replay after the peer told news since this side's (the end, in partner-down): dropped", e: replayed, delivered: older, known: true,
			wantStale: true},
		{name: "a replay the peer did not answer about: dropped, as without a channel", e: replayed, wantStale: true},
		{name: "a replay the reconciler does not know (a later one of its address queued since, or its record lost): dropped", e: replayed, known: true, unqueued: true, wantStale: true},
		{name: "an unwritten lease's end the peer told nothing after the commit of: sent", e: unwritten, delivered: own - 1, known: true},
		{name: "an unwritten lease's end after the peer's newer news of its address (a renewal): dropped", e: unwritten, delivered: older, known: true,
			wantStale: true},
		{name: "an unwritten lease's end the peer did not answer about: the reconciler's verdict", e: unwritten, wantAsked: true},
		{name: "an unwritten lease's end whose record is lost: judged as any event", e: unwritten, delivered: older, known: true, unqueued: true},
		// own: the start of the life rule 3 ends (reconcile.staleCopyBound).
		{name: "rule 3's end of a lease the peer told nothing of since its start: sent", e: passed, delivered: own - 1, known: true},
		{name: "rule 3's end of a stale copy (the peer's news since the lease's start, older than the end: a renewal): dropped", e: passed, delivered: older, known: true,
			wantStale: true},
		{name: "rule 3's end the peer did not answer about: the reconciler's verdict", e: passed, wantAsked: true},
		{name: "rule 3's end whose record is lost: judged as any event", e: passed, delivered: older, known: true, unqueued: true},
		// own: the hook's time of the end held for the life it cut
		// (reconcile.HoldCut), which goes dated at that life's end.
		{name: "an end held for the life it cut, the peer told nothing since the hook: sent", e: cut, delivered: own - 1, known: true},
		{name: "an end held for the life it cut, the peer's news since the hook, older than the end's date (a renewal): dropped", e: cut, delivered: older, known: true,
			wantStale: true},
		{name: "an end held for the life it cut, the peer did not answer: the reconciler's verdict", e: cut, wantAsked: true},
		{name: "the channel's copy of the peer's commit: dropped", e: commit, delivered: 100e9, known: true, isCopy: true,
			wantStale: true},
		{name: "the same commit, not let go as a copy (news of its MAC before it in the batch): sent", e: commit, delivered: 100e9, known: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			f := judgePair(func(event.Event) (int64, bool) { return tc.delivered, tc.known },
				func(event.Event) bool { return tc.isCopy },
				func(event.Event) (int64, bool) { return own, !tc.unqueued },
				func(context.Context, event.Event) (bool, event.Event) {
					asked = true
					if tc.stale {
						return true, tc.restate
					}
					return false, event.Event{}
				})
			stale, n := f(context.Background(), tc.e)
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

// TestPairMemory: the pair channel's delivered news, stored in the
// outbox's file, is what an agent opening that file again loads: its
// answers then name the news it delivered before its restart by its tag,
// and the peer drops its copy of it (make chaos PAIR=1 TIMERS=maas seed
// 118: the agent that delivered the commit restarted, its answers named
// no tag, and the peer's copy held the peer's later news back until
// hold_max).
func TestPairMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	store, err := outbox.Open(path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := pairMemory{store, ""}
	if got, err := m.Load(); err != nil || len(got) != 0 {
		t.Fatalf("Load of a new outbox = %v, %v; want nothing", got, err)
	}
	v4, v6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7")
	want := map[netip.Addr]pair.News{v4: {Key: 1_796_530_348_745_372_193, Tag: 0xfeedf00d}, v6: {Key: 5, Tag: 1}}
	if err := m.Save(want); err != nil {
		t.Fatal(err)
	}
	newer := pair.News{Key: want[v4].Key + 1, Tag: 2}
	if err := m.Save(map[netip.Addr]pair.News{v4: newer}); err != nil {
		t.Fatal(err)
	}
	want[v4] = newer
	// A partner's link (pair.partners) keeps its own.
	other := map[netip.Addr]pair.News{v4: {Key: 9, Tag: 9}}
	if err := (pairMemory{store, "@rack-c:5290"}).Save(other); err != nil {
		t.Fatal(err)
	}
	store = reopen(t, store, path)
	for _, c := range []struct {
		suffix string
		want   map[netip.Addr]pair.News
	}{{"", want}, {"@rack-c:5290", other}, {"@rack-d:5290", map[netip.Addr]pair.News{}}} {
		got, err := pairMemory{store, c.suffix}.Load()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("Load %q after a reopen = %v, want %v", c.suffix, got, c.want)
		}
	}
}

// TestPairMemoryWaits: how long each piece of the peer's news has held
// this agent's back, stored in the outbox's file, is what an agent
// opening that file again loads (pair.Link restores it: hold_max bounds
// a wait across restarts), less what it was told to forget.
func TestPairMemoryWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	store, err := outbox.Open(path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := pairMemory{store, ""}
	if got, err := m.LoadWaits(); err != nil || len(got) != 0 {
		t.Fatalf("LoadWaits of a new outbox = %v, %v; want nothing", got, err)
	}
	v4 := pair.Wait{IP: netip.MustParseAddr("203.0.113.7"), Key: 1_796_530_348_745_372_193}
	v6 := pair.Wait{IP: netip.MustParseAddr("2001:db8::7"), Key: 5}
	gone := pair.Wait{IP: netip.MustParseAddr("203.0.113.8"), Key: 6}
	if err := m.SaveWaits(map[pair.Wait]time.Duration{v4: time.Second, v6: 0, gone: time.Minute}, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.SaveWaits(map[pair.Wait]time.Duration{v4: 59 * time.Second}, []pair.Wait{gone}); err != nil {
		t.Fatal(err)
	}
	if err := (pairMemory{store, "@rack-c:5290"}).SaveWaits(map[pair.Wait]time.Duration{gone: time.Hour}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := pairMemory{reopen(t, store, path), ""}.LoadWaits()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[pair.Wait]time.Duration{v4: 59 * time.Second, v6: 0}; !maps.Equal(got, want) {
		t.Errorf("LoadWaits after a reopen = %v, want %v", got, want)
	}
}

// reopen closes store and opens the outbox at path again, closed when
// the test ends.
func reopen(t *testing.T, store *outbox.Store, path string) *outbox.Store {
	t.Helper()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := outbox.Open(path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// TestForgetPartners: the stored memory of a partner agent pair.partners
// no longer names (its delivered news and its waits) is dropped as the
// agent starts, so that naming it again starts the channel empty, not
// with news and waits from before; a named partner's, pair.peer's (no
// suffix) and other key/value buckets stay. With the pair off, every
// partner's goes.
func TestForgetPartners(t *testing.T) {
	store, err := outbox.Open(filepath.Join(t.TempDir(), "outbox.db"), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	v4 := netip.MustParseAddr("203.0.113.7")
	for _, suffix := range []string{"", "@rack-c:5290", "@rack-d:5290"} {
		m := pairMemory{store, suffix}
		if err := m.Save(map[netip.Addr]pair.News{v4: {Key: 9, Tag: 9}}); err != nil {
			t.Fatal(err)
		}
		if err := m.SaveWaits(map[pair.Wait]time.Duration{{IP: v4, Key: 9}: time.Second}, nil); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() []string {
		names, err := store.KVNames("pair-")
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	var log bytes.Buffer
	if err := forgetPartners(context.Background(), store, []config.Partner{{FailoverPeers: []string{"failover-vlan-5002"}, Listen: ":5291", Peer: "rack-c:5290"}}, zerolog.New(&log)); err != nil {
		t.Fatal(err)
	}
	want := []string{"pair-delivered", "pair-delivered@rack-c:5290", "pair-waits", "pair-waits@rack-c:5290"}
	if got := stored(); !slices.Equal(got, want) {
		t.Errorf("buckets %v, want %v", got, want)
	}
	if n := strings.Count(log.String(), `"peer_agent":"rack-d:5290"`); n != 2 {
		t.Errorf("log names rack d's agent %d times, want 2 (a line a bucket):\n%s", n, log.String())
	}
	if err := forgetPartners(context.Background(), store, nil, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if got, want := stored(), []string{"pair-delivered", "pair-waits"}; !slices.Equal(got, want) {
		t.Errorf("with the pair off: buckets %v, want %v", got, want)
	}
}
