package outbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/testlog"
)

var cmpAddr = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// ev is a valid event for IP 198.18.x.y (the load range) numbered n.
func ev(n int, action string) event.Event {
	return event.Event{
		Action: action, Family: event.IPv4,
		MAC:       fmt.Sprintf("02:00:00:%02x:%02x:%02x", byte(n>>16), byte(n>>8), byte(n)),
		IP:        netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}),
		Hostname:  fmt.Sprintf("host-%d", n),
		Timestamp: 1_700_000_000 + int64(n), LeaseTime: 600, Source: event.SourceHook,
	}
}

type testStore struct {
	*Store
	reg  *prometheus.Registry
	logs *testlog.Buffer
}

var testNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func openTest(t testing.TB, path string, max int) *testStore {
	t.Helper()
	ts := &testStore{reg: prometheus.NewRegistry(), logs: &testlog.Buffer{}}
	s, err := Open(path, Options{
		MaxEvents:  max,
		Logger:     zerolog.New(ts.logs).With().Str("component", "outbox").Logger(),
		Registerer: ts.reg,
		Now:        func() time.Time { return testNow },
	})
	if err != nil {
		t.Fatal(err)
	}
	ts.Store = s
	t.Cleanup(func() { s.Close() })
	return ts
}

// metric reads one unlabelled metric's value (a histogram's count).
func (ts *testStore) metric(t testing.TB, name string) float64 {
	t.Helper()
	mfs, err := ts.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func peekAll(t testing.TB, s *Store) []event.Queued {
	t.Helper()
	q, err := s.Peek(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func seqs(q []event.Queued) []uint64 {
	out := make([]uint64, len(q))
	for i := range q {
		out[i] = q[i].Seq
	}
	return out
}

func TestAppendPeekAck(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "state", "outbox.db"), 0)
	ctx := context.Background()

	select {
	case <-s.Notify():
		t.Fatal("notified before any append")
	default:
	}
	first, err := s.AppendSeq(ctx, ev(1, event.Commit), ev(2, event.Commit))
	if err != nil || first != 1 {
		t.Fatalf("AppendSeq = %d, %v; want 1, nil", first, err)
	}
	select {
	case <-s.Notify():
	default:
		t.Fatal("no notification after append")
	}
	if err := s.Append(ctx, ev(3, event.Expiry)); err != nil {
		t.Fatal(err)
	}
	if got := s.Depth(); got != 3 {
		t.Errorf("Depth = %d, want 3", got)
	}
	q, err := s.Peek(2)
	if err != nil {
		t.Fatal(err)
	}
	want := []event.Queued{{Seq: 1, Event: ev(1, event.Commit)}, {Seq: 2, Event: ev(2, event.Commit)}}
	if diff := cmp.Diff(want, q, cmpAddr); diff != "" {
		t.Errorf("Peek(2) (-want +got):\n%s", diff)
	}
	if err := s.Ack(1, 2, 99); err != nil { // 99 was never queued: ignored
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{3}, seqs(peekAll(t, s.Store))); diff != "" {
		t.Errorf("after Ack (-want +got):\n%s", diff)
	}
	if got := s.Depth(); got != 1 {
		t.Errorf("Depth = %d, want 1", got)
	}
	if got, _ := s.Peek(0); got != nil {
		t.Errorf("Peek(0) = %v, want nothing", got)
	}
	if got := s.metric(t, "leasekeeper_outbox_appended_total"); got != 3 {
		t.Errorf("appended_total = %v, want 3", got)
	}
	if got := s.metric(t, "leasekeeper_outbox_depth"); got != 1 {
		t.Errorf("outbox_depth = %v, want 1", got)
	}
	if got := s.metric(t, "leasekeeper_outbox_commit_seconds"); got < 3 {
		t.Errorf("commit_seconds count = %v, want ≥ 3", got)
	}
}

func TestAppendRejects(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	bad := ev(2, event.Commit)
	bad.IP = netip.Addr{}
	if err := s.Append(context.Background(), ev(1, event.Commit), bad); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("Append without IP: err = %v, want event.ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Append(ctx, ev(1, event.Commit)); !errors.Is(err, context.Canceled) {
		t.Errorf("Append with a done context: err = %v", err)
	}
	if s.Depth() != 0 || len(peekAll(t, s.Store)) != 0 {
		t.Errorf("rejected appends stored something")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Append(context.Background(), ev(1, event.Commit)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: err = %v, want ErrClosed", err)
	}
}

func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	openTest(t, path, 0)
	_, err := Open(path, Options{})
	if !errors.Is(err, ErrLocked) {
		t.Errorf("second Open: err = %v, want ErrLocked", err)
	}
}

func TestDeadLetters(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if err := s.Append(ctx, ev(i, event.Commit)); err != nil {
			t.Fatal(err)
		}
	}
	q := peekAll(t, s.Store)
	if err := s.DeadLetter(q[1], "422: bad mac"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{1, 3}, seqs(peekAll(t, s.Store))); diff != "" {
		t.Errorf("queue after DeadLetter (-want +got):\n%s", diff)
	}
	want := []DeadLetter{{Seq: 2, Event: ev(2, event.Commit), Reason: "422: bad mac", Time: testNow}}
	got, err := s.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpAddr); diff != "" {
		t.Errorf("DeadLetters (-want +got):\n%s", diff)
	}
	if s.Depth() != 2 || s.DeadLetterCount() != 1 || s.metric(t, "leasekeeper_deadletters") != 1 {
		t.Errorf("Depth %d, DeadLetterCount %d, gauge %v; want 2, 1, 1",
			s.Depth(), s.DeadLetterCount(), s.metric(t, "leasekeeper_deadletters"))
	}
	// Dead-lettering again (a retry of the deliverer) changes nothing.
	if err := s.DeadLetter(q[1], "422: bad mac"); err != nil || s.DeadLetterCount() != 1 {
		t.Errorf("second DeadLetter: %v, count %d", err, s.DeadLetterCount())
	}

	// Retry: back at the end with a new Seq.
	<-s.Notify()
	if err := s.RetryDeadLetter(2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Notify():
	default:
		t.Error("no notification after RetryDeadLetter")
	}
	q = peekAll(t, s.Store)
	if diff := cmp.Diff([]uint64{1, 3, 4}, seqs(q)); diff != "" {
		t.Errorf("queue after retry (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ev(2, event.Commit), q[2].Event, cmpAddr); diff != "" {
		t.Errorf("retried event (-want +got):\n%s", diff)
	}
	if s.DeadLetterCount() != 0 || s.Depth() != 3 {
		t.Errorf("DeadLetterCount %d, Depth %d; want 0, 3", s.DeadLetterCount(), s.Depth())
	}
	if err := s.RetryDeadLetter(2); !errors.Is(err, ErrNotFound) {
		t.Errorf("retry of a retried dead letter: %v, want ErrNotFound", err)
	}

	// Drop.
	if err := s.DeadLetter(q[0], "422: bad ip"); err != nil {
		t.Fatal(err)
	}
	if err := s.DropDeadLetter(1); err != nil {
		t.Fatal(err)
	}
	if err := s.DropDeadLetter(1); !errors.Is(err, ErrNotFound) {
		t.Errorf("second drop: %v, want ErrNotFound", err)
	}
	if d, _ := s.DeadLetters(); len(d) != 0 || s.metric(t, "leasekeeper_deadletters") != 0 {
		t.Errorf("dead letters after drop: %v", d)
	}
	if diff := cmp.Diff([]uint64{3, 4}, seqs(peekAll(t, s.Store))); diff != "" {
		t.Errorf("queue at the end (-want +got):\n%s", diff)
	}
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	ctx := context.Background()
	s := openTest(t, path, 0)
	for i := 1; i <= 5; i++ {
		if err := s.Append(ctx, ev(i, event.Commit)); err != nil {
			t.Fatal(err)
		}
	}
	q := peekAll(t, s.Store)
	must(t, s.Ack(1, 5)) // the highest Seq gone: the counter must not reuse it
	must(t, s.DeadLetter(q[2], "404 for 198.18.0.3"))
	must(t, s.Update(ctx, "leases", func(b *bbolt.Bucket) ([]event.Event, error) {
		return nil, b.Put([]byte("198.18.0.9"), []byte("active"))
	}))
	must(t, s.Close())

	s = openTest(t, path, 0)
	if diff := cmp.Diff([]uint64{2, 4}, seqs(peekAll(t, s.Store))); diff != "" {
		t.Errorf("queue after reopen (-want +got):\n%s", diff)
	}
	if s.Depth() != 2 || s.DeadLetterCount() != 1 || s.metric(t, "leasekeeper_outbox_depth") != 2 {
		t.Errorf("Depth %d, DeadLetterCount %d after reopen; want 2, 1", s.Depth(), s.DeadLetterCount())
	}
	d, err := s.DeadLetters()
	if err != nil || len(d) != 1 || d[0].Seq != 3 || d[0].Reason != "404 for 198.18.0.3" || !d[0].Time.Equal(testNow) {
		t.Errorf("dead letters after reopen: %+v, %v", d, err)
	}
	must(t, s.View("leases", func(b *bbolt.Bucket) error {
		if got := string(b.Get([]byte("198.18.0.9"))); got != "active" {
			t.Errorf("kv after reopen: %q", got)
		}
		return nil
	}))
	must(t, s.View("never", func(b *bbolt.Bucket) error {
		if b != nil {
			t.Error("View of an unused name: bucket not nil")
		}
		return nil
	}))
	first, err := s.AppendSeq(ctx, ev(6, event.Commit))
	if err != nil || first != 6 {
		t.Errorf("first Seq after reopen = %d, %v; want 6", first, err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestForget: Forget deletes a key/value bucket whole, says whether there
// was one, and leaves the queue and the other buckets as they were.
func TestForget(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	ctx := context.Background()
	for _, name := range []string{"keep", "drop"} {
		must(t, s.Update(ctx, name, func(b *bbolt.Bucket) ([]event.Event, error) {
			return []event.Event{ev(1, event.Commit)}, b.Put([]byte("k"), []byte(name))
		}))
	}
	for i, want := range []bool{true, false} {
		had, err := s.Forget(ctx, "drop")
		if err != nil || had != want {
			t.Errorf("Forget #%d = %t, %v; want %t", i+1, had, err, want)
		}
	}
	must(t, s.View("drop", func(b *bbolt.Bucket) error {
		if b != nil {
			t.Error("the forgotten bucket is still there")
		}
		return nil
	}))
	must(t, s.View("keep", func(b *bbolt.Bucket) error {
		if b == nil || string(b.Get([]byte("k"))) != "keep" {
			t.Error("the other bucket lost its content")
		}
		return nil
	}))
	if d := s.Depth(); d != 2 {
		t.Errorf("Depth %d after Forget, want 2", d)
	}
}

func TestUpdate(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	ctx := context.Background()
	// State and events commit together.
	must(t, s.Update(ctx, "leases", func(b *bbolt.Bucket) ([]event.Event, error) {
		if err := b.Put([]byte("198.18.0.1"), []byte("expired")); err != nil {
			return nil, err
		}
		return []event.Event{ev(1, event.Expiry)}, nil
	}))
	if q := peekAll(t, s.Store); len(q) != 1 || q[0].Event.Action != event.Expiry {
		t.Fatalf("queue after Update: %+v", q)
	}
	// An error rolls back both, and other requests grouped with it still
	// commit.
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = s.Update(ctx, "leases", func(b *bbolt.Bucket) ([]event.Event, error) {
					if err := b.Put([]byte("198.18.0.1"), []byte("broken")); err != nil {
						return nil, err
					}
					return []event.Event{ev(100+i, event.Commit)}, boom
				})
			} else {
				errs[i] = s.Append(ctx, ev(100+i, event.Commit))
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if want := error(nil); i%2 == 0 {
			if !errors.Is(err, boom) {
				t.Errorf("request %d: err = %v, want boom", i, err)
			}
		} else if err != want {
			t.Errorf("request %d: err = %v", i, err)
		}
	}
	must(t, s.View("leases", func(b *bbolt.Bucket) error {
		if got := string(b.Get([]byte("198.18.0.1"))); got != "expired" {
			t.Errorf("kv after failed updates: %q, want expired", got)
		}
		return nil
	}))
	q := peekAll(t, s.Store)
	if len(q) != 11 || s.Depth() != 11 {
		t.Errorf("queue has %d events, Depth %d; want 11", len(q), s.Depth())
	}
	for i := 1; i < len(q); i++ {
		if q[i].Seq != q[i-1].Seq+1 {
			t.Errorf("Seqs not consecutive (rolled-back requests leave no gap): %v", seqs(q))
			break
		}
	}
}

func TestConcurrentAppend(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	const writers, per = 64, 40
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				// Writer w's events, numbered in its own order.
				e := ev(w*per+i, event.Commit)
				if err := s.Append(context.Background(), e); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// A deliverer peeking and acking concurrently.
	stop := make(chan struct{})
	acked := map[uint64]bool{}
	var dwg sync.WaitGroup
	dwg.Add(1)
	go func() {
		defer dwg.Done()
		for {
			select {
			case <-stop:
				return
			case <-s.Notify():
			}
			q, err := s.Peek(7)
			if err != nil {
				t.Error(err)
				return
			}
			if len(q) > 0 {
				must(t, s.Ack(q[0].Seq))
				acked[q[0].Seq] = true
			}
		}
	}()
	wg.Wait()
	close(stop)
	dwg.Wait()

	q := peekAll(t, s.Store)
	if got, want := len(q)+len(acked), writers*per; got != want {
		t.Fatalf("%d queued + %d acked, want %d", len(q), len(acked), want)
	}
	if s.Depth() != len(q) {
		t.Errorf("Depth %d, queue %d", s.Depth(), len(q))
	}
	// Seqs strictly increasing and, with the acked ones, gapless.
	all := map[uint64]bool{}
	for k := range acked {
		all[k] = true
	}
	for i, e := range q {
		if i > 0 && e.Seq <= q[i-1].Seq {
			t.Fatalf("Seqs not increasing at %d: %d after %d", i, e.Seq, q[i-1].Seq)
		}
		all[e.Seq] = true
	}
	for seq := uint64(1); seq <= writers*per; seq++ {
		if !all[seq] {
			t.Fatalf("Seq %d missing", seq)
		}
	}
	// Each writer's events in its order.
	lastOf := map[int]int{}
	for _, e := range q {
		n := int(e.Event.IP.As4()[2])<<8 | int(e.Event.IP.As4()[3])
		w, i := n/per, n%per
		if prev, ok := lastOf[w]; ok && i <= prev {
			t.Fatalf("writer %d: event %d queued after %d", w, i, prev)
		}
		lastOf[w] = i
	}
	if got := s.metric(t, "leasekeeper_outbox_commit_seconds"); got >= writers*per {
		t.Logf("no grouping: %v commits for %d appends", got, writers*per)
	} else {
		t.Logf("%d appends (+%d acks) in %v commits", writers*per, len(acked), got)
	}
}

func TestCoalescingStore(t *testing.T) {
	const max = 10
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), max)
	ctx := context.Background()
	ip := func(n int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(n)}) }
	mk := func(action string, mac string, n int) event.Event {
		e := ev(n, action)
		e.MAC, e.IP = macOf(mac), ip(n)
		return e
	}
	// Three IPs renewing: the eleventh event starts a pass.
	var all []event.Event
	for i := 0; i < 11; i++ {
		e := mk(event.Commit, "A", 1+i%3)
		e.Timestamp = int64(i)
		all = append(all, e)
	}
	for _, e := range all {
		must(t, s.Append(ctx, e))
	}
	q := peekAll(t, s.Store)
	// Kept: the last commit of each IP, in queue order (Seqs 9, 10, 11).
	if diff := cmp.Diff([]uint64{9, 10, 11}, seqs(q)); diff != "" {
		t.Errorf("queue after coalescing (-want +got):\n%s", diff)
	}
	if s.Depth() != 3 || s.metric(t, "leasekeeper_outbox_coalesced_total") != 8 {
		t.Errorf("Depth %d, coalesced_total %v; want 3, 8", s.Depth(), s.metric(t, "leasekeeper_outbox_coalesced_total"))
	}
	// Fill again with a MAC change and a final expiry: the pass keeps
	// A's expiry and commit B (IP 1: MAAS must hear the old client's end
	// first) and commit+expiry A (IP 2).
	for _, e := range []event.Event{
		mk(event.Expiry, "A", 1), mk(event.Commit, "B", 1), mk(event.Commit, "A", 2), mk(event.Commit, "A", 2),
		mk(event.Commit, "A", 2), mk(event.Expiry, "A", 2), mk(event.Commit, "B", 1), mk(event.Commit, "B", 1),
	} {
		must(t, s.Append(ctx, e))
	}
	q = peekAll(t, s.Store)
	var got []string
	for _, e := range q {
		got = append(got, fmt.Sprintf("%s %s %s", e.Event.IP, e.Event.Action, e.Event.MAC[len(e.Event.MAC)-2:]))
	}
	want := []string{"198.18.0.3 commit 41", "198.18.0.1 expiry 41", "198.18.0.2 commit 41", "198.18.0.2 expiry 41", "198.18.0.1 commit 42"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("queue after second pass (-want +got):\n%s", diff)
	}
	if n := strings.Count(s.logs.String(), "coalescing queued events"); n != 1 {
		t.Errorf("%d coalescing warnings in one episode, want 1:\n%s", n, s.logs.String())
	}
	if s.metric(t, "leasekeeper_outbox_over_bound") != 0 {
		t.Error("over_bound set while coalescing kept the queue under its bound")
	}

	// More distinct IPs than the bound: everything accepted, error logged
	// once, metric set.
	for i := 10; i < 30; i++ {
		must(t, s.Append(ctx, mk(event.Commit, "C", i)))
	}
	if s.Depth() != 25 || len(peekAll(t, s.Store)) != 25 {
		t.Errorf("Depth %d, want 25 (nothing dropped)", s.Depth())
	}
	if s.metric(t, "leasekeeper_outbox_over_bound") != 1 {
		t.Error("over_bound not set")
	}
	if n := strings.Count(s.logs.String(), "over its bound even after coalescing"); n != 1 {
		t.Errorf("%d over-bound errors, want 1:\n%s", n, s.logs.String())
	}
	// Delivering ends the episode.
	q = peekAll(t, s.Store)
	must(t, s.Ack(seqs(q[:20])...))
	if s.metric(t, "leasekeeper_outbox_over_bound") != 0 || !strings.Contains(s.logs.String(), "coalescing episode over") {
		t.Errorf("episode not over after draining:\n%s", s.logs.String())
	}
}

func TestCorruptRecord(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	ctx := context.Background()
	must(t, s.Append(ctx, ev(1, event.Commit), ev(2, event.Commit)))
	must(t, s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketQueue).Put(seqKey(2), []byte{9, 9, 9})
	}))
	q, err := s.Peek(10)
	if err != nil || len(q) != 1 {
		t.Fatalf("Peek before the bad record = %v, %v; want one event", q, err)
	}
	must(t, s.Ack(1))
	_, err = s.Peek(10)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seq != 2 || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Peek at the bad record: err = %v, want *CorruptError for Seq 2", err)
	}
	must(t, s.Ack(2))
	if q, err := s.Peek(10); err != nil || len(q) != 0 {
		t.Errorf("after acking the bad record: %v, %v", q, err)
	}
}

func TestOldestPending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	now := testNow
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tick := func() { mu.Lock(); now = now.Add(time.Second); mu.Unlock() }
	s, err := Open(path, Options{Now: clock})
	must(t, err)
	defer func() { s.Close() }()
	ctx := context.Background()
	if !s.OldestPending().IsZero() {
		t.Error("OldestPending of an empty queue not zero")
	}
	must(t, s.Append(ctx, ev(1, event.Commit), ev(2, event.Commit))) // at +0
	tick()
	must(t, s.Append(ctx, ev(3, event.Commit))) // at +1
	tick()
	if got := s.OldestPending(); !got.Equal(testNow) {
		t.Errorf("OldestPending = %v, want %v", got, testNow)
	}
	must(t, s.Ack(1))
	if got := s.OldestPending(); !got.Equal(testNow) {
		t.Errorf("after acking half the first commit: %v, want %v", got, testNow)
	}
	must(t, s.Ack(2))
	if got := s.OldestPending(); !got.Equal(testNow.Add(time.Second)) {
		t.Errorf("after acking the first commit: %v, want +1s", got)
	}
	must(t, s.Close())
	s, err = Open(path, Options{Now: clock})
	must(t, err)
	if got := s.OldestPending(); !got.Equal(testNow.Add(2 * time.Second)) {
		t.Errorf("after reopen: %v, want the open time", got)
	}
	must(t, s.Ack(3))
	if !s.OldestPending().IsZero() {
		t.Error("OldestPending of a drained queue not zero")
	}
}

// TestOldest: the oldest queued key per address, above a floor, and
// whether anything of the address is queued at all.
func TestOldest(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	ev := func(ip string, ts int64) event.Event {
		return event.Event{Action: event.Commit, Family: event.IPv4, MAC: "00:16:3e:00:00:01", IP: netip.MustParseAddr(ip), Timestamp: ts}
	}
	if err := s.Append(context.Background(), ev("203.0.113.1", 30), ev("203.0.113.1", 10), ev("203.0.113.2", 20)); err != nil {
		t.Fatal(err)
	}
	ips := []netip.Addr{netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2"), netip.MustParseAddr("203.0.113.3")}
	key := func(e event.Event) int64 { return e.Timestamp }
	got, queued, err := s.Oldest(ips, []int64{0, 25, 0}, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{10, 0, 0}; !cmp.Equal(got, want) {
		t.Errorf("Oldest = %v, want %v", got, want)
	}
	if want := []bool{true, true, false}; !cmp.Equal(queued, want) {
		t.Errorf("queued = %v, want %v", queued, want)
	}
	if got, _, _ := s.Oldest(ips[:1], []int64{15}, key); got[0] != 30 {
		t.Errorf("above 15: %d, want 30", got[0])
	}
}
