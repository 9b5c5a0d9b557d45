package deliver

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
			waitFor(t, 5*time.Second, "the region to apply the batch", func() bool { return s.Len() >= 4 })
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
