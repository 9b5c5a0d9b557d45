package deliver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/internal/regionstub"
	"github.com/leasekeeper/leasekeeper/internal/testlog"
)

// memQueue is an in-memory Queue.
type memQueue struct {
	mu       sync.Mutex
	q        []event.Queued
	next     uint64
	dead     []deadLetter
	notify   chan struct{}
	failAcks int   // the next failAcks Acks fail
	peekErr  error // returned once by the next Peek
	acks     int
}

type deadLetter struct {
	q      event.Queued
	reason string
}

func newMemQueue() *memQueue { return &memQueue{next: 1, notify: make(chan struct{}, 1)} }

func (m *memQueue) Append(evs ...event.Event) {
	m.mu.Lock()
	for _, e := range evs {
		m.q = append(m.q, event.Queued{Seq: m.next, Event: e})
		m.next++
	}
	m.mu.Unlock()
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

func (m *memQueue) Peek(max int) ([]event.Queued, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.peekErr; err != nil {
		m.peekErr = nil
		return nil, err
	}
	return slices.Clone(m.q[:min(max, len(m.q))]), nil
}

func (m *memQueue) Ack(seqs ...uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failAcks > 0 {
		m.failAcks--
		return errors.New("disk full")
	}
	m.acks++
	set := make(map[uint64]bool, len(seqs))
	for _, s := range seqs {
		set[s] = true
	}
	m.q = slices.DeleteFunc(m.q, func(q event.Queued) bool { return set[q.Seq] })
	return nil
}

func (m *memQueue) DeadLetter(q event.Queued, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.q = slices.DeleteFunc(m.q, func(x event.Queued) bool { return x.Seq == q.Seq })
	m.dead = append(m.dead, deadLetter{q, reason})
	return nil
}

func (m *memQueue) Notify() <-chan struct{} { return m.notify }

func (m *memQueue) Depth() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.q)
}

func (m *memQueue) DeadLetters() []deadLetter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.dead)
}

// events makes n events over ips addresses in 198.18.0.0/15, each
// identified by its Timestamp (base+i), with actions cycling.
func events(n, ips int) []event.Event {
	const base = 1_700_000_000
	actions := []string{event.Commit, event.Commit, event.Expiry, event.Commit, event.Release}
	out := make([]event.Event, n)
	for i := range out {
		k := (i*7919 + i/ips) % ips // spread, not round robin
		ip := netip.AddrFrom4([4]byte{198, 18, byte(k >> 8), byte(k)})
		e := event.Event{
			Action:      actions[i%len(actions)],
			Family:      event.IPv4,
			MAC:         fmt.Sprintf("02:00:00:00:%02x:%02x", byte(k>>8), byte(k)),
			IP:          ip,
			Timestamp:   int64(base + i),
			TimestampNS: time.Now().UnixNano(),
			Source:      event.SourceHook,
		}
		if e.Action == event.Commit {
			e.LeaseTime = 600
			e.Hostname = fmt.Sprintf("node-%d", k)
		}
		out[i] = e
	}
	return out
}

func items(evs []event.Event) []event.RegionItem {
	out := make([]event.RegionItem, len(evs))
	for i := range evs {
		out[i] = evs[i].Item()
	}
	return out
}

// stub starts a region stub for the test, requiring client certificates.
func stub(t *testing.T, opts regionstub.Options) (*regionstub.Server, regionstub.Files) {
	t.Helper()
	s, err := regionstub.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	files, err := s.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s, files
}

// fastConfig talks to s with mTLS and short backoffs.
func fastConfig(s *regionstub.Server, f regionstub.Files) Config {
	return Config{
		URL: s.URL(), CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey,
		BatchMax: 50, Timeout: 2 * time.Second, UserAgent: "leasekeeper/test",
		MinBackoff: 2 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, WarnEvery: time.Second,
	}
}

type harness struct {
	d   *Deliverer
	reg *prometheus.Registry
	log *testlog.Buffer
}

func newDeliverer(t *testing.T, cfg Config, q Queue) harness {
	t.Helper()
	h := harness{reg: prometheus.NewRegistry(), log: &testlog.Buffer{}}
	var err error
	h.d, err = New(cfg, q, zerolog.New(h.log).With().Str("component", "deliver").Logger(), h.reg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// run starts d.Run and returns a stop function that cancels it and
// checks that it returned nil.
func run(t *testing.T, d *Deliverer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Run did not return within 5s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// received is what the region ended up applying, from the batches it
// accepted: a batch seen again right after itself (same Idempotency-Key:
// its answer was lost and the agent retried) is a legitimate duplicate and
// is counted, not applied twice. A key seen again later means a batch was
// resent after a later one — an order violation.
func received(t *testing.T, batches ...[]regionstub.Batch) (got []event.RegionItem, dups int) {
	t.Helper()
	seen := map[string]bool{}
	prev := ""
	for _, bs := range batches {
		for i, b := range bs {
			if b.IdempotencyKey == "" {
				t.Fatalf("batch %d has no Idempotency-Key", i)
			}
			if b.IdempotencyKey == prev {
				dups++
				continue
			}
			if seen[b.IdempotencyKey] {
				t.Fatalf("batch %s accepted again after later batches", b.IdempotencyKey)
			}
			seen[b.IdempotencyKey], prev = true, b.IdempotencyKey
			got = append(got, b.Items...)
		}
	}
	return got, dups
}

// checkOrder compares what the region applied with what was queued,
// globally and per IP.
func checkOrder(t *testing.T, want, got []event.RegionItem) {
	t.Helper()
	perIP := func(items []event.RegionItem) map[string][]int64 {
		m := map[string][]int64{}
		for _, it := range items {
			m[it.IP] = append(m[it.IP], it.Timestamp)
		}
		return m
	}
	if diff := cmp.Diff(perIP(want), perIP(got)); diff != "" {
		t.Errorf("per-IP sequences (timestamps) differ (-want +got):\n%.3000s", diff)
	}
	if len(got) != len(want) {
		t.Fatalf("region applied %d items, want %d", len(got), len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("item %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// metric sums the samples of the named metric whose labels include want.
func metric(t *testing.T, reg *prometheus.Registry, name string, want ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(want); i += 2 {
				ok := false
				for _, l := range m.GetLabel() {
					ok = ok || l.GetName() == want[i] && l.GetValue() == want[i+1]
				}
				if !ok {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// TestOrderUnderRandomFailures: 5 000 events over 200 IPs, appended while
// delivery runs, the stub failing 30 % of requests at random (503, 502
// after accepting, resets before and after accepting). The region must end
// with exactly the queued sequence, duplicates only of whole batches whose
// answer was lost.
func TestOrderUnderRandomFailures(t *testing.T) {
	t.Parallel()
	s, f := stub(t, regionstub.Options{})
	s.SetFlaky(0.3, 42)
	q := newMemQueue()
	h := newDeliverer(t, fastConfig(s, f), q)
	start := time.Now()
	stop := run(t, h.d)
	evs := events(5000, 200)
	for i := 0; i < len(evs); {
		n := min(1+i%97, len(evs)-i) // uneven chunks, as the hook and reconciler append
		q.Append(evs[i : i+n]...)
		i += n
		if i%5 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(t, 25*time.Second, "the queue to drain", func() bool { return q.Depth() == 0 })
	stop()
	got, dups := received(t, s.Batches())
	checkOrder(t, items(evs), got)
	if len(q.DeadLetters()) != 0 {
		t.Errorf("dead letters: %v", q.DeadLetters())
	}
	if n := metric(t, h.reg, "leasekeeper_delivered_total"); n != 5000 {
		t.Errorf("delivered_total = %v, want 5000", n)
	}
	retries := metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "retry")
	if retries == 0 {
		t.Error("no retries counted under 30% failures")
	}
	t.Logf("5000 events in %v: %d requests, %v retried attempts, %d duplicate batches (answer lost)",
		time.Since(start).Round(time.Millisecond), len(s.Requests()), retries, dups)
}

// TestRegionDownThenBack: the region goes away (connection refused) for
// 5 s while events keep coming, then comes back on the same address.
func TestRegionDownThenBack(t *testing.T) {
	t.Parallel()
	s1, f := stub(t, regionstub.Options{})
	addr := s1.Addr().String()
	q := newMemQueue()
	cfg := fastConfig(s1, f)
	cfg.MaxBackoff = 200 * time.Millisecond
	h := newDeliverer(t, cfg, q)
	stop := run(t, h.d)
	evs := events(1500, 300)
	q.Append(evs[:500]...)
	waitFor(t, 10*time.Second, "the first 500 events", func() bool { return q.Depth() == 0 })
	s1.Close()
	down := time.Now()
	for i := 500; i < 1500; i += 100 {
		q.Append(evs[i : i+100]...)
		time.Sleep(400 * time.Millisecond)
	}
	time.Sleep(5*time.Second - time.Since(down))
	if q.Depth() != 1000 {
		t.Errorf("queue depth %d while the region was down, want 1000", q.Depth())
	}
	s2, err := regionstub.Start(regionstub.Options{Addr: addr, PKI: s1.PKI()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	back := time.Now()
	waitFor(t, 10*time.Second, "the backlog to drain", func() bool { return q.Depth() == 0 })
	t.Logf("1000 queued events drained %v after the region came back", time.Since(back).Round(time.Millisecond))
	stop()
	got, _ := received(t, s1.Batches(), s2.Batches())
	checkOrder(t, items(evs), got)
	logs := h.log.String()
	for _, want := range []string{"region delivery failed; retrying", "region unreachable for ", "events queued", "region reachable again after"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%.2000s", want, logs)
		}
	}
	if n := strings.Count(logs, "region unreachable for "); n > 7 {
		t.Errorf("%d outage warnings in 5 s at WarnEvery 1s: not rate limited", n)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestPoisonItem: one event the region refuses (404 for its IP) among
// 1 000 others: all the others are delivered, in order, and promptly; the
// poison one is dead-lettered with the region's answer.
func TestPoisonItem(t *testing.T) {
	t.Parallel()
	s, f := stub(t, regionstub.Options{})
	evs := events(1000, 100)
	poison := event.Event{Action: event.Commit, Family: event.IPv4, MAC: "02:00:00:00:ff:ff",
		IP: netip.MustParseAddr("203.0.113.99"), Timestamp: 1, LeaseTime: 600, Hostname: "poison"}
	s.Poison(poison.IP.String(), http.StatusNotFound)
	all := slices.Insert(slices.Clone(evs), 437, poison)
	q := newMemQueue()
	cfg := fastConfig(s, f)
	cfg.BatchMax = 100
	h := newDeliverer(t, cfg, q)
	start := time.Now()
	q.Append(all...)
	run(t, h.d)
	waitFor(t, 10*time.Second, "the queue to drain", func() bool { return q.Depth() == 0 })
	took := time.Since(start)
	got, dups := received(t, s.Batches())
	if dups != 0 {
		t.Errorf("%d duplicate batches without faults", dups)
	}
	checkOrder(t, items(evs), got)
	dl := q.DeadLetters()
	if len(dl) != 1 || dl[0].q.Event.IP != poison.IP {
		t.Fatalf("dead letters %+v, want the poison event", dl)
	}
	if r := dl[0].reason; !strings.HasPrefix(r, "HTTP 404: ") || !strings.Contains(r, "203.0.113.99") {
		t.Errorf("dead letter reason %q, want the region's 404 answer", r)
	}
	rejected := metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "rejected")
	if rejected < 2 || rejected > 8 { // ⌈log2 100⌉+1 splits for one bad item
		t.Errorf("%v rejected attempts, want a bisection's worth (2..8)", rejected)
	}
	if n := metric(t, h.reg, "leasekeeper_deadlettered_total"); n != 1 {
		t.Errorf("deadlettered_total = %v, want 1", n)
	}
	if !strings.Contains(h.log.String(), "dead-lettered") {
		t.Error("no log line for the dead letter")
	}
	t.Logf("1000 events + 1 poison delivered in %v, %v rejected attempts", took.Round(time.Millisecond), rejected)
}

// TestRefusedItemThenSameIP: the region refuses one event (422: a MAC
// MAAS does not take, which the agent's own check lets through); the
// events for the same IP after it are still delivered, in order.
func TestRefusedItemThenSameIP(t *testing.T) {
	t.Parallel()
	s, f := stub(t, regionstub.Options{})
	ip := netip.MustParseAddr("203.0.113.5")
	mk := func(action, mac string, ts int64) event.Event {
		return event.Event{Action: action, Family: event.IPv4, MAC: mac, IP: ip, Timestamp: ts}
	}
	evs := events(20, 5)
	bad := mk(event.Commit, "02:00:00:00:00:00:05", 2) // 7 octets: event accepts, MAAS does not
	x1, x3 := mk(event.Commit, "02:00:00:00:00:05", 1), mk(event.Release, "02:00:00:00:00:05", 3)
	all := slices.Concat(evs[:5], []event.Event{x1}, evs[5:10], []event.Event{bad}, evs[10:15], []event.Event{x3}, evs[15:])
	q := newMemQueue()
	q.Append(all...)
	h := newDeliverer(t, fastConfig(s, f), q)
	if err := h.d.Flush(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(evs[:5], []event.Event{x1}, evs[5:15], []event.Event{x3}, evs[15:])
	got, _ := received(t, s.Batches())
	checkOrder(t, items(want), got)
	if diff := cmp.Diff(items([]event.Event{x1, x3}), s.ItemsFor(ip.String())); diff != "" {
		t.Errorf("the IP's items (-want +got):\n%s", diff)
	}
	dl := q.DeadLetters()
	if len(dl) != 1 || dl[0].q.Event.Timestamp != 2 {
		t.Fatalf("dead letters %+v, want the 7-octet commit", dl)
	}
	if r := dl[0].reason; !strings.HasPrefix(r, "HTTP 422: ") || !strings.Contains(r, `"field":"mac"`) {
		t.Errorf("reason %q, want the region's 422 naming the mac", r)
	}
}

// TestInvalidEventNotSent: an event that cannot be valid is dead-lettered
// without a request; its neighbours go out in one batch.
func TestInvalidEventNotSent(t *testing.T) {
	s, f := stub(t, regionstub.Options{})
	evs := events(3, 3)
	bad := evs[1]
	bad.Action = "renew"
	q := newMemQueue()
	q.Append(evs[0], bad, evs[2])
	h := newDeliverer(t, fastConfig(s, f), q)
	if err := h.d.Flush(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(items([]event.Event{evs[0], evs[2]}), s.Items()); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	if r := s.Requests(); len(r) != 1 {
		t.Errorf("%d requests, want 1", len(r))
	}
	if dl := q.DeadLetters(); len(dl) != 1 || !strings.HasPrefix(dl[0].reason, "not sent: invalid event: action") {
		t.Errorf("dead letters %+v", dl)
	}
}

// TestRetryAfter: the gap between a 503/429 with Retry-After and the
// retry is at least what the region asked for, far above MinBackoff.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   func() regionstub.Fault
		atLeast time.Duration
	}{
		{"503 seconds", func() regionstub.Fault {
			return regionstub.Fault{Status: 503, RetryAfter: "1"}
		}, time.Second},
		{"429 http date", func() regionstub.Fault {
			// An HTTP date has whole seconds: 2 s ahead is 1..2 s away.
			return regionstub.Fault{Status: 429, RetryAfter: time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)}
		}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, f := stub(t, regionstub.Options{})
			s.FailNext(1, tc.fault())
			q := newMemQueue()
			q.Append(events(1, 1)...)
			h := newDeliverer(t, fastConfig(s, f), q)
			if err := h.d.Flush(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			r := s.Requests()
			if len(r) != 2 || r[0].Status != tc.fault().Status || r[1].Status != 204 {
				t.Fatalf("requests %+v, want a refusal then 204", r)
			}
			gap := r[1].At.Sub(r[0].At)
			if gap < tc.atLeast || gap > tc.atLeast+10*time.Second { // upper bound: only "not absurd"
				t.Errorf("retried after %v, want ≥ %v (Retry-After)", gap, tc.atLeast)
			}
			t.Logf("Retry-After %q: retried after %v", r[0].Fault, gap.Round(time.Millisecond))
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"7", 7 * time.Second, true},
		{" 12 ", 12 * time.Second, true},
		{"-3", 0, false},
		{"1.5", 0, false},
		{"999999999999", MaxRetryAfter, true},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second, true},
		{"Saturday, 01-Mar-25 12:01:00 GMT", time.Minute, true}, // RFC 850
		{"Sat Mar  1 12:00:05 2025", 5 * time.Second, true},     // ANSI C
		{"Sat, 01 Mar 2025 11:00:00 GMT", 0, true},              // past: now
		{"soon", 0, false},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	lo, hi := 100*time.Millisecond, 30*time.Second
	for attempt := range 40 {
		ceil := hi
		if attempt < 20 {
			ceil = min(lo<<attempt, hi)
		}
		for range 200 {
			if d := jitter(lo, hi, attempt); d < lo || d > ceil {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, lo, ceil)
			}
		}
	}
	d := &Deliverer{now: time.Now}
	resp := &http.Response{Header: http.Header{"Retry-After": {"4"}}}
	if got := d.backoff(lo, hi, 0, resp); got != 4*time.Second {
		t.Errorf("with Retry-After 4: %v", got)
	}
	resp.Header.Set("Retry-After", "0")
	if got := d.backoff(lo, hi, 3, resp); got != lo {
		t.Errorf("with Retry-After 0: %v, want the floor %v", got, lo)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		result string
		retry  bool
	}{
		{200, resultOK, false}, {204, resultOK, false},
		{408, resultRetry, true}, {429, resultRetry, true}, {500, resultRetry, true}, {502, resultRetry, true}, {503, resultRetry, true},
		{400, resultRejected, false}, {404, resultRejected, false}, {409, resultRejected, false}, {413, resultRejected, false}, {422, resultRejected, false},
		{401, resultError, true}, {403, resultError, true}, {301, resultError, true}, {307, resultError, true},
	} {
		result, retry := classify(&http.Response{StatusCode: tc.status}, nil)
		if result != tc.result || retry != tc.retry {
			t.Errorf("%d: %s %v, want %s %v", tc.status, result, retry, tc.result, tc.retry)
		}
	}
	if result, retry := classify(nil, errors.New("reset")); result != resultRetry || !retry {
		t.Errorf("transport error: %s %v", result, retry)
	}
}

// TestHeadersAndMetrics: the headers, a key stable across retries, and
// what the metrics say after one batch retried twice.
func TestHeadersAndMetrics(t *testing.T) {
	s, f := stub(t, regionstub.Options{})
	s.FailNext(2, regionstub.Fault{Status: 503})
	q := newMemQueue()
	evs := events(10, 10)
	evs[0].TimestampNS = time.Now().Add(-2 * time.Second).UnixNano()
	q.Append(evs...)
	h := newDeliverer(t, fastConfig(s, f), q)
	if !h.d.LastDelivery().IsZero() {
		t.Error("LastDelivery before any delivery is not zero")
	}
	if err := h.d.Flush(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := s.Requests()
	if len(r) != 3 {
		t.Fatalf("%d requests, want 3", len(r))
	}
	for _, req := range r {
		if req.IdempotencyKey != r[0].IdempotencyKey || !strings.HasPrefix(req.IdempotencyKey, "lk-") || req.UserAgent != "leasekeeper/test" {
			t.Errorf("request %+v: want key %s and User-Agent leasekeeper/test", req, r[0].IdempotencyKey)
		}
	}
	if since := time.Since(h.d.LastDelivery()); since < 0 || since > 5*time.Second {
		t.Errorf("LastDelivery %v", h.d.LastDelivery())
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"leasekeeper_delivered_total", nil, 10},
		{"leasekeeper_delivery_attempts_total", []string{"result", "ok"}, 1},
		{"leasekeeper_delivery_attempts_total", []string{"result", "retry"}, 2},
		{"leasekeeper_delivery_attempts_total", []string{"result", "rejected"}, 0},
		{"leasekeeper_delivery_latency_seconds", nil, 10},
		{"leasekeeper_deadlettered_total", nil, 0},
	} {
		if got := metric(t, h.reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if ts := metric(t, h.reg, "leasekeeper_last_delivery_timestamp_seconds"); ts < float64(time.Now().Unix()-5) {
		t.Errorf("last_delivery_timestamp_seconds = %v", ts)
	}
	if k1, k2 := IdempotencyKey([]event.Queued{{Seq: 1}, {Seq: 2}}), IdempotencyKey([]event.Queued{{Seq: 1}}); k1 == k2 {
		t.Error("different batches, same key")
	}
	// A second Deliverer on the same registry is refused until Close.
	if _, err := New(fastConfig(s, f), q, zerolog.Nop(), h.reg, nil); err == nil {
		t.Error("New registered its metrics twice")
	}
	h.d.Close()
	if _, err := New(fastConfig(s, f), q, zerolog.Nop(), h.reg, nil); err != nil {
		t.Errorf("New after Close: %v", err)
	}
}

// TestFlush: a bounded flush delivers everything when the region answers,
// and returns at its deadline, losing nothing, when it does not.
func TestFlush(t *testing.T) {
	t.Parallel()
	t.Run("delivers all", func(t *testing.T) {
		s, f := stub(t, regionstub.Options{})
		q := newMemQueue()
		evs := events(250, 40)
		q.Append(evs...)
		h := newDeliverer(t, fastConfig(s, f), q)
		t0 := time.Now()
		if err := h.d.Flush(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		t.Logf("flushed 250 events in %v", time.Since(t0).Round(time.Millisecond))
		if q.Depth() != 0 || s.Len() != 250 {
			t.Errorf("depth %d, region %d items", q.Depth(), s.Len())
		}
	})
	t.Run("deadline", func(t *testing.T) {
		s, f := stub(t, regionstub.Options{})
		s.Unavailable(time.Hour, "")
		q := newMemQueue()
		q.Append(events(250, 40)...)
		h := newDeliverer(t, fastConfig(s, f), q)
		t0 := time.Now()
		err := h.d.Flush(ctxT(t, 300*time.Millisecond))
		took := time.Since(t0)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Flush = %v, want a deadline error", err)
		}
		if took > 5*time.Second { // generous: a busy machine must not fail this
			t.Errorf("Flush took %v with a 300ms deadline", took)
		}
		if q.Depth() != 250 {
			t.Errorf("depth %d after a failed flush, want 250", q.Depth())
		}
	})
	t.Run("while running", func(t *testing.T) {
		s, f := stub(t, regionstub.Options{})
		q := newMemQueue()
		evs := events(2000, 100)
		h := newDeliverer(t, fastConfig(s, f), q)
		stop := run(t, h.d)
		q.Append(evs...)
		if err := h.d.Flush(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		stop()
		got, dups := received(t, s.Batches())
		if dups != 0 {
			t.Errorf("%d duplicate batches with Run and Flush together", dups)
		}
		checkOrder(t, items(evs), got)
	})
}

// TestOutboxWriteFailure: an Ack that fails (full disk) is retried before
// anything else is sent, so the batch is neither resent nor overtaken.
func TestOutboxWriteFailure(t *testing.T) {
	s, f := stub(t, regionstub.Options{})
	q := newMemQueue()
	evs := events(120, 30)
	q.Append(evs...)
	q.failAcks = 3
	h := newDeliverer(t, fastConfig(s, f), q)
	if err := h.d.Flush(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, dups := received(t, s.Batches())
	if dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	checkOrder(t, items(evs), got)
	if !strings.Contains(h.log.String(), "outbox write failed") {
		t.Error("no log line for the failed Ack")
	}
}

// TestCorruptRecord: a record the outbox cannot decode is dropped (acked)
// and delivery goes on.
func TestCorruptRecord(t *testing.T) {
	s, f := stub(t, regionstub.Options{})
	q := newMemQueue()
	q.Append(events(3, 3)...)
	q.peekErr = &outbox.CorruptError{Seq: 99, Err: errors.New("truncated")}
	h := newDeliverer(t, fastConfig(s, f), q)
	if err := h.d.Flush(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 || !strings.Contains(h.log.String(), "does not decode") {
		t.Errorf("region has %d items; log:\n%s", s.Len(), h.log)
	}
}

// TestAuthFailureIsNotPoison: a 401 is the agent's configuration, not the
// items' fault: nothing is dead-lettered, the batch waits.
func TestAuthFailureIsNotPoison(t *testing.T) {
	s, _ := stub(t, regionstub.Options{Token: "right", NoClientCert: true})
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, s.PKI().CAPEM, 0o644)
	q := newMemQueue()
	q.Append(events(5, 5)...)
	h := newDeliverer(t, Config{URL: s.URL(), CAFile: ca, TokenFile: tok, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, q)
	err := h.d.Flush(ctxT(t, 300*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush = %v, want a deadline error", err)
	}
	if q.Depth() != 5 || len(q.DeadLetters()) != 0 {
		t.Errorf("depth %d, dead letters %d; want 5 and 0", q.Depth(), len(q.DeadLetters()))
	}
	if n := metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "error"); n < 2 {
		t.Errorf("%v error attempts, want several", n)
	}
	if !strings.Contains(h.log.String(), `"level":"error"`) {
		t.Errorf("a 401 is not logged as an error:\n%s", h.log)
	}
}

// TestToken: bearer token auth end to end, and the token file checks.
func TestToken(t *testing.T) {
	s, _ := stub(t, regionstub.Options{Token: "s3cret-token", NoClientCert: true})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, s.PKI().CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		err           string // "" = accepted
	}{
		{"ok", "s3cret-token\n", 0o600, ""},
		{"read-only", "s3cret-token", 0o400, ""},
		{"group readable", "s3cret-token", 0o640, "mode 0640"},
		{"world readable", "s3cret-token", 0o644, "mode 0644"},
		{"group writable", "s3cret-token", 0o620, "mode 0620"},
		{"others only", "s3cret-token", 0o604, "mode 0604"},
		{"empty", "", 0o600, "is empty"},
		{"blank", " \n\t\n", 0o600, "is empty"},
		{"two words", "a b", 0o600, "white space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(strings.ReplaceAll(tc.name, " ", "-"), tc.content, tc.mode)
			q := newMemQueue()
			d, err := New(Config{URL: s.URL(), CAFile: ca, TokenFile: p}, q, zerolog.Nop(), nil, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("New = %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			q.Append(events(3, 3)...)
			if err := d.Flush(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := New(Config{URL: s.URL(), TokenFile: filepath.Join(dir, "missing")}, newMemQueue(), zerolog.Nop(), nil, nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing token file: %v", err)
	}
	if _, err := New(Config{URL: s.URL(), TokenFile: dir}, newMemQueue(), zerolog.Nop(), nil, nil); err == nil {
		t.Error("a directory as token file was accepted")
	}
	if s.Len() != 6 {
		t.Errorf("region has %d items, want 6", s.Len())
	}
}

func TestConfigErrors(t *testing.T) {
	s, f := stub(t, regionstub.Options{})
	good := fastConfig(s, f)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string // "" = accepted
	}{
		{"good", func(*Config) {}, ""},
		{"http loopback", func(c *Config) { c.URL = "http://127.0.0.1:9/leases" }, ""},
		{"http localhost", func(c *Config) { c.URL = "http://localhost:9/leases" }, ""},
		{"http ::1", func(c *Config) { c.URL = "http://[::1]:9/leases" }, ""},
		{"http remote", func(c *Config) { c.URL = "http://region:5240/MAAS/a/v3internal/leases" }, "plain http is allowed only to a loopback"},
		{"http 10/8", func(c *Config) { c.URL = "http://10.0.0.1/leases" }, "plain http"},
		{"no url", func(c *Config) { c.URL = "" }, "url is empty"},
		{"relative", func(c *Config) { c.URL = "/MAAS/a/v3internal/leases" }, "no host"},
		{"ftp", func(c *Config) { c.URL = "ftp://region/leases" }, "is not https"},
		{"credentials in url", func(c *Config) { c.URL = "https://u:p@region/leases" }, "carries credentials"},
		{"cert without key", func(c *Config) { c.KeyFile = "" }, "go together"},
		{"no credentials", func(c *Config) { c.KeyFile, c.CertFile = "", "" }, "no credentials"},
		{"bad ca", func(c *Config) { c.CAFile = f.ClientKey }, "no PEM certificate"},
		{"missing ca", func(c *Config) { c.CAFile = "/nonexistent/ca.pem" }, "ca_file"},
		{"key mismatch", func(c *Config) { c.KeyFile = f.ServerKey }, "cert_file/key_file"},
		{"backoff inverted", func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Second, time.Millisecond }, "below min backoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.mod(&cfg)
			_, err := New(cfg, newMemQueue(), zerolog.Nop(), nil, nil)
			if tc.err == "" && err != nil {
				t.Fatalf("New: %v", err)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("New = %v, want an error with %q", err, tc.err)
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	long := strings.Repeat("é", 400) // 800 bytes
	for _, tc := range []struct{ in, want string }{
		{"  {\"a\":\n 1}\n", `{"a": 1}`},
		{"bad \xff byte", "bad \uFFFD byte"},
		{long, strings.Repeat("é", 256) + "…"},
	} {
		if got := oneLine([]byte(tc.in), maxReason); got != tc.want {
			t.Errorf("oneLine(%.20q) = %.40q, want %.40q", tc.in, got, tc.want)
		}
	}
}
