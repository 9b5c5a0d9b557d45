package pair

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// peerHeld is a HeldFunc over a map the test changes.
type peerHeld struct {
	mu   sync.Mutex
	keys map[netip.Addr]int64
	asks atomic.Int64
}

func (p *peerHeld) held(ips []netip.Addr, after []int64) ([]Holding, error) {
	p.asks.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Holding, len(ips))
	for i, ip := range ips {
		if k := p.keys[ip]; k > after[i] {
			out[i].Oldest = k
		}
	}
	return out, nil
}

func (p *peerHeld) set(ip string, k int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k == 0 {
		delete(p.keys, netip.MustParseAddr(ip))
	} else {
		p.keys[netip.MustParseAddr(ip)] = k
	}
}

type end struct {
	l   *Link
	reg *prometheus.Registry
	h   *peerHeld
}

// twoLinks makes the pair's two ends on loopback: a the primary, b the
// secondary (or, bPrimary, a second primary). ready gates b's answers;
// bKey, if set, is b's key instead of testKey.
func twoLinks(t *testing.T, holdMax time.Duration, ready func() bool, bKey []byte, bPrimary bool) (a, b end) {
	t.Helper()
	return twoLinksClock(t, holdMax, ready, bKey, bPrimary, nil, nil)
}

// twoLinksClock is twoLinks with b's clock bNow (nil: the real one) and
// b's Memory bMem (nil: none).
func twoLinksClock(t *testing.T, holdMax time.Duration, ready func() bool, bKey []byte, bPrimary bool, bNow func() time.Time, bMem Memory) (a, b end) {
	t.Helper()
	var ports [2]string
	for i := range ports {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = c.LocalAddr().String()
		c.Close()
	}
	mk := func(i int, primary bool, ready func() bool, key []byte, now func() time.Time, mem Memory) end {
		e := end{reg: prometheus.NewRegistry(), h: &peerHeld{keys: map[netip.Addr]int64{}}}
		l, err := New(Config{Listen: ports[i], Peer: ports[1-i], Key: key, HoldMax: holdMax,
			Primary: func() bool { return primary }, Ready: ready, AnswerTimeout: DefaultAnswerTimeout, Memory: mem},
			e.h.held, zerolog.New(zerolog.NewTestWriter(t)), e.reg, now)
		if err != nil {
			t.Fatal(err)
		}
		e.l = l
		return e
	}
	if bKey == nil {
		bKey = testKey
	}
	a, b = mk(0, true, nil, testKey, nil, nil), mk(1, bPrimary, ready, bKey, bNow, bMem)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, e := range []end{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); e.l.Run(ctx, func() {}) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait(); a.l.Close(); b.l.Close() })
	return a, b
}

// waitCounter waits until c is non-zero: another link's Run goroutine
// counts what it received, with nothing ordering that against what this
// test saw of the asking link.
func waitCounter(t *testing.T, c prometheus.Collector, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(c) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: counted nothing within 10 s", what)
		}
	}
}

func batchAt(ips ...string) []event.Queued {
	var out []event.Queued
	for i, ip := range ips {
		out = append(out, event.Queued{Seq: uint64(i + 1), Event: event.Event{Action: event.Commit, IP: netip.MustParseAddr(ip),
			MAC: "00:16:3e:00:00:01", Timestamp: 1_000_000 + int64(i)}})
	}
	return out
}

// TestLinkWaitsForPeerOlder: over a real UDP socket, the secondary's
// batch waits while the primary holds older news of its first address,
// and goes the moment the primary no longer does.
func TestLinkWaitsForPeerOlder(t *testing.T) {
	a, b := twoLinks(t, time.Minute, nil, nil, false)
	batch := batchAt("203.0.113.1", "203.0.113.2")
	a.h.set("203.0.113.1", 999_999e9) // older than the batch's first
	got := make(chan int, 1)
	go func() { got <- len(b.l.Clear(context.Background(), batch, nil)) }()
	for a.h.asks.Load() < 3 { // asked, waited, asked again
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case n := <-got:
		t.Fatalf("Clear = %d while the peer holds older news", n)
	default:
	}
	if h := b.l.Health(); h.Waiting.IsZero() || h.Heard.IsZero() || h.Alone {
		t.Errorf("health while held back: %+v, want waiting, heard, not alone", h)
	}
	a.h.set("203.0.113.1", 0) // the primary delivered it
	if n := <-got; n != 2 {
		t.Errorf("Clear = %d, want the whole batch", n)
	}
	if h := b.l.Health(); !h.Waiting.IsZero() {
		t.Errorf("health after the batch went: %+v, want not waiting", h)
	}
	// Newer news of the peer does not hold the batch back.
	a.h.set("203.0.113.2", 2_000_000e9)
	if n := len(b.l.Clear(context.Background(), batch, nil)); n != 2 {
		t.Errorf("Clear = %d, want 2", n)
	}
	// The primary's own batch, with the secondary holding older news of
	// its second address: its first event goes.
	b.h.set("203.0.113.2", 999_999e9)
	if n := len(a.l.Clear(context.Background(), batch, nil)); n != 1 {
		t.Errorf("primary's Clear = %d, want 1", n)
	}
	if v := testutil.ToFloat64(a.l.met.datagrams.WithLabelValues("refused")); v != 0 {
		t.Errorf("%v datagrams refused", v)
	}
}

// TestLinkSilentPeer: a peer that does not answer (starting: not ready)
// holds the batch for HoldMax, then the agent goes on alone; once the
// peer answers a probe, the agent waits for its older news again.
func TestLinkSilentPeer(t *testing.T) {
	var ready atomic.Bool
	a, b := twoLinks(t, time.Second, ready.Load, nil, false)
	batch := batchAt("203.0.113.1")
	b.h.set("203.0.113.1", 999_999e9)
	if n := len(a.l.Clear(context.Background(), batch, nil)); n != 1 {
		t.Fatalf("Clear = %d, want 1 once the silence lasted hold_max", n)
	}
	if !a.l.alone.Load() || testutil.ToFloat64(a.l.met.gaveUp.WithLabelValues("silent")) != 1 ||
		testutil.ToFloat64(a.l.met.answering) != 0 {
		t.Fatal("not delivering alone after the peer's silence")
	}
	waitCounter(t, b.l.met.datagrams.WithLabelValues("unready"), "the unready peer's queries")
	if h := a.l.Health(); !h.Alone || !h.Heard.IsZero() {
		t.Errorf("health after the silence: %+v, want alone, never heard", h)
	}
	ready.Store(true)
	// Alone, Clear does not wait; it probes (at most once a second) and
	// the probe's answer ends the solitude. (Another address than the
	// one the peer holds: should the answer come between the loop's
	// check and Clear's, the peer is asked about an address it does not
	// hold, and the wait measured below is still the first.)
	deadline := time.Now().Add(10 * time.Second)
	for a.l.alone.Load() && time.Now().Before(deadline) {
		a.l.Clear(context.Background(), batchAt("203.0.113.2"), nil)
		time.Sleep(50 * time.Millisecond)
	}
	if a.l.alone.Load() {
		t.Fatal("still alone after the peer answered")
	}
	if h := a.l.Health(); h.Alone || h.Heard.IsZero() {
		t.Errorf("health with the peer back: %+v, want heard, not alone", h)
	}
	// With the peer back and holding older news of the address, the
	// event waits for that news for hold_max and then goes: counted as
	// given up on the peer's older news, not on its silence (which a
	// peer that no longer answered would count again).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if n := len(a.l.Clear(ctx, batch, nil)); n != 1 {
		t.Fatalf("Clear = %d with the peer back and holding older news; want the event after hold_max", n)
	}
	if waited := time.Since(began); waited < time.Second { // a lower bound: the wait is the link's own
		t.Errorf("the event went after %v; want it held for hold_max (1s) first", waited)
	}
	if older, silent := testutil.ToFloat64(a.l.met.gaveUp.WithLabelValues(WhyPeerOlder)),
		testutil.ToFloat64(a.l.met.gaveUp.WithLabelValues("silent")); older != 1 || silent != 1 || a.l.alone.Load() {
		t.Errorf("gave up on older news %v times, on silence %v times, alone %v; want 1, 1 (the first silence only), false",
			older, silent, a.l.alone.Load())
	}
}

// TestLinkBackWhileIdle: an agent delivering alone learns of the peer's
// return with nothing to deliver (Run asks every IdleProbe): its health
// and leasekeeper_pair_peer_answering say so, where before they said the
// peer was silent until the next delivery (a review of the alerting
// rules: LeasekeeperPairPeerSilent went on firing for a peer long back).
func TestLinkBackWhileIdle(t *testing.T) {
	var ready atomic.Bool
	a, _ := twoLinks(t, time.Second, ready.Load, nil, false)
	if n := len(a.l.Clear(context.Background(), batchAt("203.0.113.1"), nil)); n != 1 {
		t.Fatalf("Clear = %d, want 1 once the silence lasted hold_max", n)
	}
	if !a.l.alone.Load() || testutil.ToFloat64(a.l.met.answering) != 0 {
		t.Fatal("not delivering alone after the peer's silence")
	}
	ready.Store(true)
	began := time.Now()
	for a.l.alone.Load() && time.Since(began) < 3*DefaultIdleProbe {
		time.Sleep(20 * time.Millisecond)
	}
	if a.l.alone.Load() {
		t.Fatalf("still alone %v after the peer answers, with nothing delivered", time.Since(began).Round(time.Millisecond))
	}
	if got := testutil.ToFloat64(a.l.met.answering); got != 1 {
		t.Errorf("leasekeeper_pair_peer_answering = %v with the peer back, want 1", got)
	}
	if h := a.l.Health(); h.Alone || h.Heard.IsZero() {
		t.Errorf("health with the peer back: %+v, want heard, not alone", h)
	}
}

// TestLinkRefuses: datagrams signed with another key, and from a sender
// claiming this agent's own role, are refused and never answered.
func TestLinkRefuses(t *testing.T) {
	a, b := twoLinks(t, time.Second, nil, bytes.Repeat([]byte("x"), MinKeyLen), false)
	if n := len(a.l.Clear(context.Background(), batchAt("203.0.113.1"), nil)); n != 1 || !a.l.alone.Load() {
		t.Fatalf("Clear = %d alone %v: a peer with another key must count as silent", n, a.l.alone.Load())
	}
	waitCounter(t, b.l.met.datagrams.WithLabelValues("refused"), "datagrams signed with another key")
	if b.h.asks.Load() != 0 {
		t.Error("a query signed with another key was answered")
	}
	if h := b.l.Health(); !h.Heard.IsZero() {
		t.Errorf("a datagram signed with another key counted as heard: %+v", h)
	}
	a, b = twoLinks(t, time.Second, nil, nil, true)
	if n := len(a.l.Clear(context.Background(), batchAt("203.0.113.1"), nil)); n != 1 || !a.l.alone.Load() {
		t.Fatalf("Clear = %d alone %v: a peer of the same role must count as silent", n, a.l.alone.Load())
	}
	waitCounter(t, b.l.met.datagrams.WithLabelValues("refused"), "datagrams from a sender of the same role")
	if b.h.asks.Load() != 0 {
		t.Error("a query from a sender of the same role was answered")
	}
}

// TestLinkHoldMaxPerPeerNews: once a piece of the peer's news has been
// held for HoldMax, every event it held back goes at once, not one event
// per HoldMax.
func TestLinkHoldMaxPerPeerNews(t *testing.T) {
	a, b := twoLinks(t, time.Second, nil, nil, false)
	a.h.set("203.0.113.1", 999_999e9)
	batch := batchAt("203.0.113.1", "203.0.113.1", "203.0.113.2")
	if n := len(b.l.Clear(context.Background(), batch, nil)); n != 3 {
		t.Fatalf("Clear = %d, want the whole batch once the peer's news was held hold_max", n)
	}
	if n := len(b.l.Clear(context.Background(), batch[1:], nil)); n != 2 {
		t.Errorf("Clear = %d: the same news of the peer is waited for once", n)
	}
	if v := testutil.ToFloat64(b.l.met.gaveUp.WithLabelValues(WhyPeerOlder)); v != 1 {
		t.Errorf("gave up %v times, want 1", v)
	}
}

// TestLinkClearPieces: of a batch the region may have applied already,
// only whole pieces go: one piece waits whole while the peer holds older
// news of any of its addresses, not just its first; another piece goes
// past it.
func TestLinkClearPieces(t *testing.T) {
	a, b := twoLinks(t, time.Minute, nil, nil, false)
	batch := batchAt("203.0.113.1", "203.0.113.2", "203.0.113.3")
	batch[2].Event.MAC = "00:16:3e:00:00:02"
	piece := []int{0, 0, 2}             // the first two share a MAC
	a.h.set("203.0.113.2", 1_000_000e9) // older than the batch's second event
	if got := b.l.ClearPieces(context.Background(), batch, piece); len(got) != 1 || got[0].Seq != 3 {
		t.Fatalf("ClearPieces = %v, want the third event's piece alone", seqs(got))
	}
	got := make(chan []event.Queued, 1)
	go func() { got <- b.l.ClearPieces(context.Background(), batch[:2], piece[:2]) }()
	for a.h.asks.Load() < 4 {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case g := <-got:
		t.Fatalf("ClearPieces = %v while the peer holds older news of the piece's second address", seqs(g))
	default:
	}
	a.h.set("203.0.113.2", 0)
	if g := <-got; len(g) != 2 {
		t.Errorf("ClearPieces = %v, want the whole piece", seqs(g))
	}
	if n := len(b.l.Clear(context.Background(), batch, nil)); n != 3 {
		t.Errorf("Clear = %d", n)
	}

	// Addresses beyond what one question names wait to be asked about:
	// the doubt is a bound on Seq, and may cover events held back before
	// and never sent, which must not go unchecked.
	var ips []string
	for i := range MaxItems + 2 {
		ips = append(ips, netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i)}).String())
	}
	many := batchAt(ips...)
	alone := make([]int, len(many)) // each event a piece of its own
	for i := range many {
		many[i].Event.MAC = fmt.Sprintf("00:16:3e:00:01:%02x", i)
		alone[i] = i
	}
	if got := b.l.ClearPieces(context.Background(), many, alone); len(got) != MaxItems {
		t.Errorf("ClearPieces = %d events, want the %d asked about", len(got), MaxItems)
	}
}

// TestLinkOvertaken: news the peer holds that this agent's delivered
// news has already overtaken in the region holds nothing back (it goes
// restated or dropped, whatever its place): the query carries what this
// agent delivered, and the answer leaves out what is older.
func TestLinkOvertaken(t *testing.T) {
	a, b := twoLinks(t, time.Minute, nil, nil, false)
	batch := batchAt("203.0.113.1")
	a.h.set("203.0.113.1", 999_000e9) // older than b's event…
	b.l.dmu.Lock()
	b.l.delivered[netip.MustParseAddr("203.0.113.1")] = News{Key: 999_500e9} // …and than b's news in the region
	b.l.dmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // far below hold_max
	defer cancel()
	if n := len(b.l.Clear(ctx, batch, nil)); n != 1 {
		t.Errorf("Clear = %d: the peer's overtaken news held the batch", n)
	}
}

// TestLinkPeerDeliveredAcrossQuestions: a batch cleared by two questions
// (ClearPieces for what may have been applied, Clear for the rest) knows
// the peer's answer for the addresses of both.
func TestLinkPeerDeliveredAcrossQuestions(t *testing.T) {
	a, b := twoLinks(t, time.Minute, nil, nil, false)
	_ = a
	batch := batchAt("203.0.113.1", "203.0.113.2")
	if len(b.l.ClearPieces(context.Background(), batch[:1], []int{0})) != 1 {
		t.Fatal("ClearPieces held the batch")
	}
	if n := len(b.l.Clear(context.Background(), batch[1:], nil)); n != 1 {
		t.Fatalf("Clear = %d", n)
	}
	for _, q := range batch {
		if k, known := b.l.PeerDelivered(q.Event); !known || k > Key(q.Event) {
			t.Errorf("%s: PeerDelivered = %d, known %v; want known, not newer than %d", q.Event.IP, k, known, Key(q.Event))
		}
	}
	b.l.Delivered(batch)
	if _, known := b.l.PeerDelivered(batch[0].Event); known {
		t.Error("still known after the delivery: the next batch must be asked about afresh")
	}
}

// TestLinkGoesPast: over a real UDP socket, what the peer's older news
// holds back does not hold back the events of other addresses and MACs
// behind it; and an event held for its own sake (dated ahead of the
// clock) while the others flow goes once it has been the first held for
// hold_max.
func TestLinkGoesPast(t *testing.T) {
	a, b := twoLinks(t, 3*time.Second, nil, nil, false)
	batch := batchAt("203.0.113.1", "203.0.113.2", "203.0.113.1")
	batch[1].Event.MAC = "00:16:3e:00:00:02"
	a.h.set("203.0.113.1", 999_999e9) // older than the batch's first
	// Below hold_max:
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if got := b.l.Clear(ctx, batch, nil); len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("Clear = %v, want the second event alone at once", seqs(got))
	}
	a.h.set("203.0.113.1", 0)

	future := batchAt("203.0.113.3", "203.0.113.4")
	future[0].Event.Timestamp = time.Now().Add(time.Hour).Unix()
	future[1].Event.MAC = "00:16:3e:00:00:02"
	if got := b.l.Clear(context.Background(), future, nil); len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("Clear = %v, want the event behind the one dated ahead", seqs(got))
	}
	start := time.Now()
	got := b.l.Clear(context.Background(), future[:1], nil)
	if len(got) != 1 || time.Since(start) < 1500*time.Millisecond {
		t.Fatalf("Clear = %v after %v: the event dated ahead goes after hold_max", seqs(got), time.Since(start))
	}
	if v := testutil.ToFloat64(b.l.met.gaveUp.WithLabelValues(WhyRecent)); v != 1 {
		t.Errorf("gave up %v times for %s, want 1", v, WhyRecent)
	}
}

// TestLinkTakesMore: news queued behind a batch the link holds whole
// goes when the rule lets it, not when the held batch does. Clear takes
// the longer batch more returns before each new round; before, it
// judged the batch in hand until some of it went, and the news queued
// behind waited up to hold_max (a minute here). The peer holds older
// news of the head's address; then, silent, it holds every IPv4
// address, and a DHCPv6 address's news (no failover orders it) goes.
func TestLinkTakesMore(t *testing.T) {
	a, b := twoLinks(t, time.Minute, nil, nil, false)
	a.h.set("203.0.113.1", 999_999e9) // older than the batch's first
	silent, err := New(Config{Listen: "127.0.0.1:0", Peer: "127.0.0.1:9", Key: testKey, HoldMax: time.Minute,
		Primary: func() bool { return false }}, nil, zerolog.New(zerolog.NewTestWriter(t)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, c := range []struct {
		name  string
		l     *Link
		after string // the address queued behind 203.0.113.1
	}{
		{"peer holds the head", b.l, "203.0.113.2"},
		{"silent peer", silent, "2001:db8::2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			longer := batchAt("203.0.113.1", c.after)
			longer[1].Event.MAC = "00:16:3e:00:00:02"
			var calls atomic.Int32
			more := func() []event.Queued {
				if calls.Add(1) < 3 {
					return nil // nothing queued for two rounds
				}
				return longer
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a third of hold_max
			defer cancel()
			if got := c.l.Clear(ctx, longer[:1], more); len(got) != 1 || got[0].Seq != 2 {
				t.Fatalf("Clear = %v, want the event queued behind the held one", seqs(got))
			}
			if n := calls.Load(); n < 3 {
				t.Errorf("more called %d times, want 3", n)
			}
		})
	}
}

func seqs(b []event.Queued) []uint64 {
	var out []uint64
	for _, q := range b {
		out = append(out, q.Seq)
	}
	return out
}

// TestLinkClockOffset: the two racks' clocks 5 s apart (the secondary's
// ahead): each side's estimate from its answers shows it, within the
// round trip, as leasekeeper_pair_clock_offset_seconds.
func TestLinkClockOffset(t *testing.T) {
	ahead := func() time.Time { return time.Now().Add(5 * time.Second) }
	a, b := twoLinksClock(t, time.Minute, nil, nil, false, ahead, nil)
	for _, e := range []end{a, b} {
		if got := e.l.Clear(context.Background(), batchAt("203.0.113.1"), nil); len(got) != 1 {
			t.Fatalf("cleared %d of 1", len(got))
		}
	}
	for _, c := range []struct {
		e    end
		want float64
	}{{a, 5}, {b, -5}} {
		if got := testutil.ToFloat64(c.e.l.met.offset); got < c.want-0.5 || got > c.want+0.5 {
			t.Errorf("clock offset %.3f s, want about %v", got, c.want)
		}
	}
}

// hookCommit is a hook's commit of ip, at ns, by one MAC.
func hookCommit(seq uint64, ip string, ns int64) event.Queued {
	return event.Queued{Seq: seq, Event: event.Event{Action: event.Commit, IP: netip.MustParseAddr(ip), MAC: "00:16:3e:00:00:01",
		Timestamp: ns / 1e9, TimestampNS: ns, Source: event.SourceHook}}
}

// TestLinkCopyGoes: over a real UDP socket, the answer names the news
// the peer delivered by its tag, and this agent's copy of it (the other
// server's hook of the same ack, 4 ms later) goes at once out of a batch
// the region may have applied already, though its piece waits (its
// MAC's later news on another address waits on the peer's older news of
// that address), and Copy says it is one, for the deliverer to drop it.
// Held with its piece, the copy held the peer's later news of its
// address back, which the piece's own later news may wait on (make chaos
// PAIR=1 TIMERS=maas seed 118).
func TestLinkCopyGoes(t *testing.T) {
	a, b := twoLinks(t, time.Minute, nil, nil, false)
	copyOfAck(t, a, b, true)
}

// copyOfAck has b deliver a hook's commit (unless delivered is false:
// b's memory says b did, before a restart) and a clear its copy of it,
// in one piece with later news of the MAC that waits on b's older news.
func copyOfAck(t *testing.T, a, b end, deliver bool) {
	t.Helper()
	const t0 = 1_000_000_000e9
	if deliver {
		b.l.Delivered([]event.Queued{hookCommit(1, "203.0.113.2", t0+20e9)}) // b's hook of the ack, delivered
	}
	b.h.set("203.0.113.1", t0+5e9) // b's older news of the MAC's other address, held
	batch := []event.Queued{hookCommit(1, "203.0.113.2", t0+20e9+4e6), hookCommit(2, "203.0.113.1", t0+30e9)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // far below hold_max
	defer cancel()
	got := a.l.ClearPieces(ctx, batch, []int{0, 0})
	if len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("ClearPieces = %v, want the copy alone (seq 1)", seqs(got))
	}
	if !a.l.Copy(got[0].Event) {
		t.Error("Copy = false for the copy the link let go")
	}
	// Another MAC's commit of that moment is news: it waits with its
	// piece.
	other := batch
	for i := range other {
		other[i].Event.MAC = "00:16:3e:00:00:02"
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if got := a.l.ClearPieces(ctx2, other, []int{0, 0}); got != nil {
		t.Errorf("ClearPieces = %v: another MAC's news went out of its piece", seqs(got))
	}
	if a.l.Copy(other[0].Event) {
		t.Error("Copy = true for another MAC's news")
	}
}

// memory is a Memory in a map.
type memory struct {
	mu    sync.Mutex
	m     map[netip.Addr]News
	waits map[Wait]time.Duration
}

func (m *memory) LoadWaits() (map[Wait]time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.waits), nil
}

func (m *memory) SaveWaits(add map[Wait]time.Duration, drop []Wait) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waits == nil {
		m.waits = map[Wait]time.Duration{}
	}
	for _, w := range drop {
		delete(m.waits, w)
	}
	maps.Copy(m.waits, add)
	return nil
}

func (m *memory) Load() (map[netip.Addr]News, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.m), nil
}

func (m *memory) Save(n map[netip.Addr]News) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	maps.Copy(m.m, n)
	return nil
}

func (m *memory) get(ip netip.Addr) (News, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.m[ip]
	return n, ok
}

// TestLinkMemory: what an agent delivered is handed to its Memory, and
// a link started again on that memory (the agent restarted) names it by
// its tag in its answers: the peer's copy of it goes at once, as in
// TestLinkCopyGoes. Without it the copy waited for hold_max (make chaos
// PAIR=1 TIMERS=maas seed 118: the agent that delivered the commit had
// restarted since).
func TestLinkMemory(t *testing.T) {
	const t0 = 1_000_000_000e9
	mem := &memory{m: map[netip.Addr]News{}}
	_, b := twoLinksClock(t, time.Minute, nil, nil, false, nil, mem)
	delivered := hookCommit(1, "203.0.113.2", t0+20e9)
	b.l.Delivered([]event.Queued{delivered})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, ok := mem.get(netip.MustParseAddr("203.0.113.2")); ok {
			if n != (News{Key: Key(delivered.Event), Tag: Tag(delivered.Event)}) {
				t.Fatalf("stored %+v", n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delivered news was not stored within 5 s")
		}
	}
	a, b := twoLinksClock(t, time.Minute, nil, nil, false, nil, mem) // b's agent again, after a restart
	copyOfAck(t, a, b, false)
}

// TestLinkMemoryAtClose: what a stopping agent's last flush delivered,
// after its tasks' context ended (Run's last save), is stored at Close.
func TestLinkMemoryAtClose(t *testing.T) {
	mem := &memory{m: map[netip.Addr]News{}}
	l, err := New(Config{Listen: "127.0.0.1:0", Peer: "127.0.0.1:9", Key: testKey, HoldMax: time.Minute, Memory: mem},
		(&peerHeld{keys: map[netip.Addr]int64{}}).held, zerolog.New(zerolog.NewTestWriter(t)), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := hookCommit(1, "203.0.113.2", 1_000_000_020e9)
	l.Delivered([]event.Queued{q})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n, ok := mem.get(netip.MustParseAddr("203.0.113.2")); !ok || n.Key != Key(q.Event) {
		t.Errorf("stored %+v, %v after Close; want the delivered news", n, ok)
	}
}

// TestLinkHoldMaxAcrossRestart: hold_max bounds a wait on the peer's
// news across this agent's restarts, counting the time the news held
// this agent's back, not the time this agent was down (make chaos PAIR=1
// TIMERS=maas seed 118: each rack's agent restarted while it waited on
// the other's older news, each wait started again, and the one that
// went first made the other's news of a lease's end and the client's
// next lease older than what the region had, dropped unsent).
func TestLinkHoldMaxAcrossRestart(t *testing.T) {
	const older = 999_999e9 // the peer's news, older than the batch's
	w := Wait{IP: netip.MustParseAddr("203.0.113.1"), Key: older}
	hourLater := func() time.Time { return time.Now().Add(time.Hour) } // the agent down for an hour
	for _, c := range []struct {
		name   string
		waited time.Duration // by the earlier run
		goes   bool
	}{
		{"waited 59.5 s of a minute: goes within a second", 59500 * time.Millisecond, true},
		{"waited 10 s of a minute, then down an hour: still held", 10 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := &memory{m: map[netip.Addr]News{}, waits: map[Wait]time.Duration{w: c.waited}}
			a, b := twoLinksClock(t, time.Minute, nil, nil, false, hourLater, mem)
			a.h.set("203.0.113.1", older)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			got := b.l.Clear(ctx, batchAt("203.0.113.1"), nil)
			if c.goes != (len(got) == 1) {
				t.Fatalf("cleared %d events; want the batch: %v", len(got), c.goes)
			}
			if err := b.l.Close(); err != nil {
				t.Fatal(err)
			}
			if d, _ := mem.LoadWaits(); d[w] <= c.waited || d[w] > c.waited+3*time.Second {
				t.Errorf("stored %v waited, want the earlier run's %v and this one's", d[w], c.waited)
			}
		})
	}
}

// TestLinkWaitsForgotten: a wait forgotten beyond maxWaits is forgotten
// by the memory too, and one stored beyond it is dropped from it at the
// next save.
func TestLinkWaitsForgotten(t *testing.T) {
	mem := &memory{m: map[netip.Addr]News{}, waits: map[Wait]time.Duration{}}
	for i := range maxWaits + 1 {
		mem.waits[Wait{IP: netip.MustParseAddr("203.0.113.1"), Key: int64(i)}] = time.Duration(i+1) * time.Second
	}
	l, err := New(Config{Listen: "127.0.0.1:0", Peer: "127.0.0.1:9", Key: testKey, HoldMax: time.Hour * 24, Memory: mem},
		(&peerHeld{keys: map[netip.Addr]int64{}}).held, zerolog.New(zerolog.NewTestWriter(t)), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	shortest := Wait{IP: netip.MustParseAddr("203.0.113.1"), Key: 0}
	if _, ok := l.seen[shortest]; ok || len(l.seen) != maxWaits {
		t.Errorf("restored %d waits (the shortest among them: %v), want the longest %d", len(l.seen), ok, maxWaits)
	}
	fresh := Wait{IP: netip.MustParseAddr("203.0.113.2"), Key: 7}
	l.overdue(fresh.IP, fresh.Key, time.Now()) // forgets the oldest, the longest waited
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ws, _ := mem.LoadWaits()
	longest := Wait{IP: netip.MustParseAddr("203.0.113.1"), Key: maxWaits}
	if _, ok := ws[shortest]; ok {
		t.Error("the wait stored beyond maxWaits is still stored")
	}
	if _, ok := ws[longest]; ok {
		t.Error("the wait forgotten for a new one is still stored")
	}
	if d, ok := ws[fresh]; !ok || d != 0 || len(ws) != maxWaits {
		t.Errorf("stored %d waits, the new one %v (%v); want %d, 0", len(ws), d, ok, maxWaits)
	}
}

// TestLinkDeliveredSkipsDHCPv6: what the region accepted of a DHCPv6
// address is not kept for the peer's questions (none asks about one):
// it would only fill the map whose overflow clears the pair's own news.
func TestLinkDeliveredSkipsDHCPv6(t *testing.T) {
	_, b := twoLinks(t, time.Minute, nil, nil, false)
	b.l.Delivered(batchAt("203.0.113.1", "2001:db8::1"))
	b.l.dmu.Lock()
	defer b.l.dmu.Unlock()
	if _, ok := b.l.delivered[netip.MustParseAddr("2001:db8::1")]; ok || len(b.l.delivered) != 1 {
		t.Errorf("delivered %v; want 203.0.113.1's alone", b.l.delivered)
	}
}
