package deliver

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// spec builds a batch from "ip/mac" fields, a single letter or digit each.
func spec(s string) []event.Queued {
	var out []event.Queued
	for i, f := range strings.Fields(s) {
		ip, mac, _ := strings.Cut(f, "/")
		out = append(out, event.Queued{Seq: uint64(i + 1), Event: event.Event{
			IP:  netip.AddrFrom4([4]byte{198, 18, 0, ip[0]}),
			MAC: "02:00:00:00:00:" + mac,
		}})
	}
	return out
}

// seqs names a part by its events' positions in the batch.
func seqs(part []event.Queued) []uint64 {
	var out []uint64
	for _, q := range part {
		out = append(out, q.Seq)
	}
	return out
}

func TestCleanCut(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       int
		ok         bool
	}{
		{"one event", "a/1", 0, false},
		{"two", "a/1 b/2", 1, true},
		{"two of one IP", "a/1 a/1", 1, false},
		{"all distinct: the middle", "a/1 b/2 c/3 d/4", 2, true},
		{"an IP across the middle moves the cut", "a/1 b/2 b/2 c/3", 1, true},
		{"nearest clean cut on either side", "a/1 b/2 c/3 c/3 d/4 e/5", 2, true},
		{"a MAC across the middle", "a/1 b/2 c/2 d/4", 1, true},
		{"one IP throughout", "a/1 a/1 a/1 a/1", 2, false},
		{"interleaved: none", "a/1 b/2 a/1 b/2", 2, false},
		{"clean cut far from the middle", "a/1 b/2 b/2 b/2 b/2 b/2", 1, true},
	} {
		got, ok := cleanCut(spec(tc.spec))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: cleanCut(%s) = %d, %t; want %d, %t", tc.name, tc.spec, got, ok, tc.want, tc.ok)
		}
	}
}

func TestIndependent(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		a, b       []uint64 // nil: no division
	}{
		{"interleaved addresses", "a/1 b/2 a/1 b/2", []uint64{1, 3}, []uint64{2, 4}},
		{"linked by a MAC: one piece", "a/1 b/2 a/2 b/1", nil, nil},
		{"one address", "a/1 a/1", nil, nil},
		{"pieces filled to about half", "a/1 b/2 c/3 a/1 b/2 c/3 d/4 d/4", []uint64{1, 2, 4, 5}, []uint64{3, 6, 7, 8}},
		{"a large first piece stays alone", "a/1 b/2 a/1 a/1 a/1 a/1 c/3 b/2", []uint64{1, 3, 4, 5, 6}, []uint64{2, 7, 8}},
	} {
		b := spec(tc.spec)
		x, y, ok := independent(b)
		if ok != (tc.a != nil) || !slices.Equal(seqs(x), tc.a) || !slices.Equal(seqs(y), tc.b) {
			t.Errorf("%s: independent(%s) = %v, %v, %t; want %v, %v", tc.name, tc.spec, seqs(x), seqs(y), ok, tc.a, tc.b)
			continue
		}
		if !ok {
			continue
		}
		// The property that matters: no address or MAC in both parts.
		in := map[string]bool{}
		for _, q := range x {
			for _, k := range keys(q) {
				in[k] = true
			}
		}
		for _, q := range y {
			for _, k := range keys(q) {
				if in[k] {
					t.Errorf("%s: %s in both parts", tc.name, k)
				}
			}
		}
	}
}

// TestAppliedUnackedResent: the region took a batch (204) and the agent
// stopped before the Ack was in the outbox (a stop while a full disk fails
// the Ack, or a kill -9 between the answer and the commit). The batch is
// sent again: by the Flush at stop ("flush"), or as the head of the next
// run's first batch ("restart"). Its events are in doubt (Deliverer.doubt,
// and the in-flight record keeps the Seq after the answer), so a 500 to
// the copy is not cut in the middle, which would have the region apply
// the commits again after their releases. MAAS applies a request in one
// transaction, a 500 rolling it back
// (src/maasapiserver/common/middlewares/db.py), each item overwriting the
// address's state without comparing times
// (src/maasservicelayer/services/leases.py). Found by two reviews.
func TestAppliedUnackedResent(t *testing.T) {
	for _, copyBy := range []string{"flush", "restart"} {
		t.Run(copyBy, func(t *testing.T) {
			mk := func(i int, ip byte, action string) event.Event {
				e := event.Event{Action: action, Family: event.IPv4, IP: netip.AddrFrom4([4]byte{198, 18, 0, ip}),
					MAC: "02:00:00:00:00:01", Timestamp: int64(1_700_000_000 + i), Source: event.SourceHook}
				if action == event.Commit {
					e.LeaseTime = 600
				}
				return e
			}
			s, f := stub(t, regionstub.Options{})
			q := newMemQueue()
			q.Append(mk(0, 97, event.Commit), mk(1, 98, event.Commit), mk(2, 97, event.Release), mk(3, 98, event.Release))
			q.failAcks = 1 << 30
			cfg := fastConfig(s, f)
			cfg.InflightFile = filepath.Join(t.TempDir(), "region-request")
			h := newDeliverer(t, cfg, q)
			stop := run(t, h.d)
			// The answer read and the Ack tried (and failed): the stop
			// comes after the 2xx, not while the request is out.
			waitFor(t, 5*time.Second, "the region to apply the batch and the Ack to fail", func() bool {
				q.mu.Lock()
				defer q.mu.Unlock()
				return s.Len() >= 4 && q.failAcks < 1<<30
			})
			stop()
			if q.Depth() != 4 {
				t.Fatalf("%d queued after the stop, want the 4 whose Ack failed", q.Depth())
			}
			s.FailNext(1, regionstub.Fault{Status: 500})
			d := h.d
			if copyBy == "restart" {
				h.d.Close()
				q.failAcks = 0
				d = newDeliverer(t, cfg, q).d
				if d.Holding() {
					t.Error("the request was answered: the next run need not hold")
				}
			}
			// The flush at stop ends when its time is up, the Acks still
			// failing; the restarted run's delivers everything.
			wait := 10 * time.Second
			if copyBy == "flush" {
				wait = 2 * time.Second
			}
			if err := d.Flush(ctxT(t, wait)); err != nil && copyBy == "restart" {
				t.Fatal(err)
			}
			noRegression(t, s)
			if copyBy == "restart" && q.Depth() != 0 {
				t.Errorf("%d still queued", q.Depth())
			}
		})
	}
}

// TestTakenNotDoubtAfterAck: the doubt a batch the region took carries
// ends once its Ack is stored. In a failover pair the gate lets later
// events past one it holds (the peer holds older news of its address);
// had the delivered batch's Seq stayed in doubt, the held event, never
// sent, would be "in doubt" and every event behind it would wait for it
// (a review of the change: Seq 3, unrelated, still queued after 8 s).
func TestTakenNotDoubtAfterAck(t *testing.T) {
	mk := func(i int, ip byte) event.Event {
		return event.Event{Action: event.Commit, Family: event.IPv4, IP: netip.AddrFrom4([4]byte{198, 18, 0, ip}),
			MAC: "02:00:00:00:00:" + string("0123456789"[ip%10]) + "0", Timestamp: int64(1_700_000_000 + i), LeaseTime: 600, Source: event.SourceHook}
	}
	s, f := stub(t, regionstub.Options{})
	q := newMemQueue()
	q.Append(mk(0, 1), mk(1, 2))
	h := newDeliverer(t, fastConfig(s, f), q)
	h.d.SetGate(&fakeGate{hold: map[uint64]bool{1: true}})
	stop := run(t, h.d)
	defer stop()
	waitFor(t, 5*time.Second, "Seq 2 to go past the held Seq 1", func() bool { return q.Depth() == 1 })
	q.Append(mk(2, 3))
	waitFor(t, 5*time.Second, "Seq 3, unrelated, to go past the held Seq 1 too", func() bool { return q.Depth() == 1 && s.Len() >= 2 })
	if d := h.d.inDoubt(); d != 0 {
		t.Errorf("in doubt up to Seq %d with nothing unanswered or unacknowledged", d)
	}
}

// TestReplacedOutboxRecordIgnored: the in-flight record names Seqs the
// outbox never gave (the old outbox moved aside, a new one made): its
// doubt is stale, and the new events, Seqs from 1 again, are not in doubt
// (a review of the change: in a pair a poison event at the head then found
// no neighbour, and nothing behind it went).
func TestReplacedOutboxRecordIgnored(t *testing.T) {
	s, f := stub(t, regionstub.Options{})
	cfg := fastConfig(s, f)
	cfg.InflightFile = filepath.Join(t.TempDir(), "region-request")
	q1 := newMemQueue()
	q1.Append(events(10, 10)...)
	q1.failAcks = 1 << 30 // the batch is taken, its Ack never stored: Seq 10 stays in the record
	h1 := newDeliverer(t, cfg, q1)
	stop := run(t, h1.d)
	waitFor(t, 5*time.Second, "the region to take the batch and the Ack to fail", func() bool {
		q1.mu.Lock()
		defer q1.mu.Unlock()
		return s.Len() >= 10 && q1.failAcks < 1<<30
	})
	stop()
	h1.d.Close()
	q2 := newMemQueue() // a new outbox
	q2.Append(events(3, 3)...)
	if d := newDeliverer(t, cfg, q2).d.inDoubt(); d != 0 {
		t.Errorf("a new outbox's events are in doubt up to %d from the old record", d)
	}
	q1.failAcks = 0
	if d := newDeliverer(t, cfg, q1).d.inDoubt(); d != 10 {
		t.Errorf("the old outbox's unacknowledged batch: in doubt up to %d, want 10", d)
	}
}

// TestProbeNeighboursNotInDoubt: neighbours a poison suspect's probe
// delivers out of turn leave no doubt behind once acknowledged; the
// events the probe skipped (they share the suspect's MAC), never sent,
// are not taken for perhaps applied: a 500 to them is cut as usual,
// without whole re-sends and an "unsafe split" (a review of the change).
func TestProbeNeighboursNotInDoubt(t *testing.T) {
	s, f := poisonStub(t)
	good := func(i int, mac string) event.Event {
		return event.Event{Action: event.Commit, Family: event.IPv4, IP: netip.AddrFrom4([4]byte{198, 18, 1, byte(i)}),
			MAC: mac, Timestamp: int64(10 + i), LeaseTime: 600}
	}
	p2 := poisonEvent()
	p2.MAC, p2.Timestamp = "02:00:00:00:ee:01", 2
	q := newMemQueue()
	q.Append(poisonEvent(), p2, good(3, "02:00:00:00:ee:01"), good(4, "02:00:00:00:00:04"), good(5, "02:00:00:00:00:05"), good(6, "02:00:00:00:00:06"))
	h := newDeliverer(t, fastConfig(s, f), q)
	stop := run(t, h.d)
	defer stop()
	waitFor(t, 10*time.Second, "the first poison event dead-lettered", func() bool { return len(q.DeadLetters()) >= 1 })
	// The second, with the good event of its MAC, fails with 500 from
	// now on: cut as a batch never sent is (the second then waits alone
	// for a neighbour to be judged by), never sent whole again as if the
	// region may have applied it.
	waitFor(t, 10*time.Second, "the second poison event alone", func() bool {
		for _, r := range s.Requests() {
			if r.Items == 1 && r.Status == 500 && r.At.After(time.Now().Add(-time.Second)) {
				return true
			}
		}
		return false
	})
	if n := testutil.ToFloat64(h.d.m.unsafeSplits); n != 0 || strings.Contains(h.log.String(), "may have applied already") {
		t.Errorf("unsafe splits %v: events never sent were taken for perhaps applied", n)
	}
}
