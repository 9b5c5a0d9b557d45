package agent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/pair"
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

// TestUnknownPeers: the failover peers pair.partners names that
// dhcpd.conf's pools do not use, which Run logs.
func TestUnknownPeers(t *testing.T) {
	g := &pairLinks{peers: [][]string{nil, {"failover-vlan-5002", "failover-vlan-5003"}, {"failover-vlan-5004"}}}
	for _, tc := range []struct {
		present, want []string
	}{
		{[]string{"failover-vlan-5001", "failover-vlan-5002", "failover-vlan-5003", "failover-vlan-5004"}, nil},
		{[]string{"failover-vlan-5001", "failover-vlan-5003"}, []string{"failover-vlan-5002", "failover-vlan-5004"}},
		{nil, []string{"failover-vlan-5002", "failover-vlan-5003", "failover-vlan-5004"}},
	} {
		if got := g.unknownPeers(tc.present); !slices.Equal(got, tc.want) {
			t.Errorf("unknownPeers(%v) = %v, want %v", tc.present, got, tc.want)
		}
	}
}

// heldBy is a partner agent's answers (pair.HeldFunc) that the test
// changes: the oldest news it holds and the newest it delivered, per
// address.
type heldBy struct {
	mu        sync.Mutex
	oldest    map[netip.Addr]int64
	delivered map[netip.Addr]int64
}

func (h *heldBy) held(ips []netip.Addr, after []int64) ([]pair.Holding, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]pair.Holding, len(ips))
	for i, ip := range ips {
		if k := h.oldest[ip]; k > after[i] {
			out[i].Oldest = k
		}
		out[i].Delivered = h.delivered[ip]
	}
	return out, nil
}

func (h *heldBy) set(m map[netip.Addr]int64, ip netip.Addr, k int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m[ip] = k
}

// onB is an address of b's VLAN (x in the tests' words), onC one of c's (y).
var onB, onC = netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("198.51.100.10")

// commitAt is a commit of ip by mac, at sec, queued as seq.
func commitAt(seq uint64, ip netip.Addr, mac string, sec int64) event.Queued {
	return event.Queued{Seq: seq, Event: event.Event{Action: event.Commit, IP: ip, MAC: mac, Timestamp: sec}}
}

// partnerLinks makes this agent's pairLinks to two partner agents on
// loopback, b's link ordering x's news and c's every other address's;
// the partners answer from their heldBy, through their own links
// (theirs: b's, c's).
func partnerLinks(t *testing.T) (g *pairLinks, b, c *heldBy, theirs []*pair.Link, regs []*prometheus.Registry) {
	coversB := func(ip netip.Addr) bool { return ip == onB }
	t.Helper()
	key := []byte("0123456789abcdef0123456789abcdef")
	port := func() string {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.LocalAddr().String()
	}
	mk := func(listen, peer string, primary bool, held pair.HeldFunc, reg prometheus.Registerer) *pair.Link {
		l, err := pair.New(pair.Config{Listen: listen, Peer: peer, Key: key, HoldMax: time.Minute,
			Primary: func() bool { return primary }}, held, zerolog.New(zerolog.NewTestWriter(t)), reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	b = &heldBy{oldest: map[netip.Addr]int64{}, delivered: map[netip.Addr]int64{}}
	c = &heldBy{oldest: map[netip.Addr]int64{}, delivered: map[netip.Addr]int64{}}
	none := func([]netip.Addr, []int64) ([]pair.Holding, error) { return nil, errors.New("not asked in this test") }
	g = &pairLinks{peers: [][]string{nil, {"failover-c"}}, peerOf: func(ip netip.Addr) string {
		if coversB(ip) {
			return "failover-b"
		}
		return "failover-c"
	}}
	for _, h := range []*heldBy{b, c} {
		mine, their := port(), port()
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		g.links = append(g.links, mk(mine, their, true, none, reg))
		theirs = append(theirs, mk(their, mine, false, h.held, nil))
	}
	return g, b, c, theirs, regs
}

// TestPairLinksFreshAnswers: while one partner's older news holds the
// batch back, the other partner may deliver newer news of an address
// its link already let go; the batch then goes with that link's answer
// asked again, so that the deliverer's StaleFunc sees the newer news
// (judgePair drops the older event) instead of a wait's worth old one.
// The batch: a MAC's news on c's VLAN (y), then on b's (x): c's older
// news of y holds both back.
func TestPairLinksFreshAnswers(t *testing.T) {
	g, b, c, _, _ := partnerLinks(t)
	at := time.Now().Add(-time.Minute).Unix()
	batch := []event.Queued{
		commitAt(1, onC, "00:16:3e:00:00:01", at),
		commitAt(2, onB, "00:16:3e:00:00:01", at+1),
	}
	c.set(c.oldest, onC, (at-1)*1e9) // c holds older news of y
	go func() {
		time.Sleep(300 * time.Millisecond)
		b.set(b.delivered, onB, (at+5)*1e9) // b delivers newer news of x
		c.set(c.oldest, onC, 0)             // and c its news of y
	}()
	out := g.Clear(context.Background(), batch, nil)
	if len(out) != 2 {
		t.Fatalf("Clear let %d go, want both", len(out))
	}
	if k, known := g.PeerDelivered(batch[1].Event); !known || k != (at+5)*1e9 {
		t.Errorf("b's delivered news of x: %d (known %v), want %d from an answer after c's wait", k, known, (at+5)*1e9)
	}
}

// TestPairLinksSilentPartner: a partner agent that does not answer
// holds back the news of its own addresses, not the other partner's
// (else each silent partner in turn would hold the batch up to its
// hold_max): in one batch with them, or queued behind a batch of its
// news alone, which the gate holds whole and takes the longer batch the
// deliverer's more returns before its next round (before, it judged the
// batch in hand until hold_max).
func TestPairLinksSilentPartner(t *testing.T) {
	at := time.Now().Add(-time.Minute).Unix()
	both := []event.Queued{
		commitAt(1, onB, "00:16:3e:00:00:01", at),
		commitAt(2, onC, "00:16:3e:00:00:02", at),
	}
	for _, tc := range []struct {
		name  string
		batch []event.Queued
		more  func() []event.Queued
	}{
		{"one batch", both, nil},
		{"queued behind", both[:1], func() func() []event.Queued {
			calls := 0
			return func() []event.Queued {
				if calls++; calls < 2 {
					return nil // nothing queued for a round
				}
				return both
			}
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _, _, _, _ := partnerLinks(t)
			g.links[0] = silentLink(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a third of hold_max
			defer cancel()
			if out := g.Clear(ctx, tc.batch, tc.more); len(out) != 1 || out[0].Seq != 2 {
				t.Fatalf("Clear let go %v, want c's event alone (nil: it waited for b's silent agent)", out)
			}
		})
	}
}

// silentLink is a link to b's agent gone (nothing answers its port),
// with hold_max a minute.
func silentLink(t *testing.T) *pair.Link {
	t.Helper()
	l, err := pair.New(pair.Config{Listen: "127.0.0.1:0", Peer: "127.0.0.1:9", Key: []byte("0123456789abcdef0123456789abcdef"), HoldMax: time.Minute,
		Primary: func() bool { return true }}, nil, zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestPairLinksCopyInPiece: of a batch the region may have applied
// (only whole pieces go), this agent's copy of news c's agent delivered
// (both servers' hooks of one ack: pair.CopyOf) goes alone, whatever its
// piece, as with one link (pair.Verdict.Pieces), though b holds older
// news of another address of its MAC, which holds the rest of the piece.
// Judged link by link, the first link, not knowing it for a copy, held
// it with its piece until hold_max.
func TestPairLinksCopyInPiece(t *testing.T) {
	g, b, _, theirs, _ := partnerLinks(t)
	const mac = "00:16:3e:00:00:01"
	ns := time.Now().Add(-time.Minute).UnixNano()
	ack := event.Event{Action: event.Commit, IP: onC, MAC: mac, Timestamp: ns / 1e9, TimestampNS: ns}
	theirs[1].Delivered([]event.Queued{{Seq: 99, Event: ack}}) // c's agent delivered its hook's news
	mine := ack
	mine.TimestampNS += int64(time.Millisecond) // this server's hook of the same ack
	mine.Timestamp = mine.TimestampNS / 1e9
	later := event.Event{Action: event.Commit, IP: onB, MAC: mac, Timestamp: ns/1e9 + 1, TimestampNS: ns + 1e9}
	b.set(b.oldest, onB, ns) // b holds older news of x
	batch := []event.Queued{{Seq: 1, Event: mine}, {Seq: 2, Event: later}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := g.ClearPieces(ctx, batch, []int{0, 0})
	if len(out) != 1 || out[0].Seq != 1 {
		t.Fatalf("ClearPieces let go %v, want the copy alone", out)
	}
	if !g.Copy(mine) {
		t.Error("the copy is not marked as one: the deliverer would send it")
	}
}

// TestPairLinksHeldTime: the time deliveries waited is the held time
// (leasekeeper_pair_held_seconds_total) and the waiting state of the
// link whose partner held the batch back, not of one that only holds
// something as the batch goes: b holds older news of x, whose MAC's
// later news of y (c's) waits with it, for about half a second.
func TestPairLinksHeldTime(t *testing.T) {
	g, b, _, _, regs := partnerLinks(t)
	at := time.Now().Add(-time.Minute).Unix()
	batch := []event.Queued{
		commitAt(1, onB, "00:16:3e:00:00:01", at),
		commitAt(2, onC, "00:16:3e:00:00:01", at+1),
	}
	b.set(b.oldest, onB, (at-1)*1e9)
	waiting := make(chan [2]bool, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		waiting <- [2]bool{!g.links[0].Health().Waiting.IsZero(), !g.links[1].Health().Waiting.IsZero()}
		time.Sleep(200 * time.Millisecond)
		b.set(b.oldest, onB, 0)
	}()
	if out := g.Clear(context.Background(), batch, nil); len(out) != 2 {
		t.Fatalf("Clear let %d go, want both", len(out))
	}
	if w := <-waiting; w != [2]bool{true, false} {
		t.Errorf("waiting (b's link, c's) = %v while b held x back, want [true false]", w)
	}
	held := func(reg *prometheus.Registry) float64 {
		v, err := testutil.GatherAndCount(reg, "leasekeeper_pair_held_seconds_total")
		if err != nil || v != 1 {
			t.Fatalf("held series: %d, %v", v, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "leasekeeper_pair_held_seconds_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1
	}
	if hb, hc := held(regs[0]), held(regs[1]); hb < 0.3 || hc != 0 {
		t.Errorf("held seconds: b's link %.3f, c's %.3f; want about 0.5 for b's and 0 for c's", hb, hc)
	}
	for i, l := range g.links {
		if !l.Health().Waiting.IsZero() {
			t.Errorf("link %d still waiting after the batch went", i)
		}
	}
}
