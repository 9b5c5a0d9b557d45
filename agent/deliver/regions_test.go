package deliver

import (
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// TestRegionControllers: a MAAS region with two region controllers, one
// database behind them (region.url and region.other_urls). The first
// refuses connections: the batch goes to the second, at once however
// long the backoff (an hour here), and the second stays the one in use.
// Then the second goes down and the first is back: the next events go to
// the first. Across both, the region gets every event once, in order.
func TestRegionControllers(t *testing.T) {
	t.Parallel()
	s1, f := stub(t, regionstub.Options{})
	addr1 := s1.Addr().String()
	s2 := secondController(t, s1)
	s1.Close()
	h, q, _ := twoControllers(t, s1, s2, f)
	if got := h.d.Controller(); got != s1.URL() {
		t.Fatalf("controller in use %q before any attempt, want region.url %q", got, s1.URL())
	}
	evs := events(20, 10)
	q.Append(evs[:10]...)
	run(t, h.d)
	waitFor(t, 10*time.Second, "delivery to the second controller", func() bool { return q.Depth() == 0 })
	if got := h.d.Controller(); got != s2.URL() {
		t.Errorf("controller in use %q, want the second, %q", got, s2.URL())
	}
	if !strings.Contains(h.log.String(), "region controller cannot be reached") {
		t.Errorf("the log does not say the first controller could not be reached:\n%s", h.log)
	}

	// The second goes down, the first comes back. (The connection to
	// the second is closed first: one the stub closes under a request
	// the agent has just written is not "down" but perhaps applied,
	// which waits the backoff, an hour here.)
	h.d.link.Load().hc.CloseIdleConnections()
	s2.Close()
	s1b, err := regionstub.Start(regionstub.Options{Addr: addr1, PKI: s1.PKI()})
	if err != nil {
		t.Fatal(err)
	}
	defer s1b.Close()
	q.Append(evs[10:]...)
	waitFor(t, 10*time.Second, "delivery to the first controller, back", func() bool { return q.Depth() == 0 })
	if got := h.d.Controller(); got != s1.URL() {
		t.Errorf("controller in use %q, want the first again, %q", got, s1.URL())
	}
	if n := len(s1.Batches()); n != 0 {
		t.Errorf("the first controller, refusing connections, got %d batches", n)
	}
	got, _ := received(t, s2.Batches(), s1b.Batches())
	checkOrder(t, items(evs), got)
}

// TestStrugglingControllerKept: a region controller that answers 503 is
// up and struggling, not down: its backoff stands, and the other
// controller is not sent the batch (the region would get each request
// twice over whenever it struggles).
func TestStrugglingControllerKept(t *testing.T) {
	t.Parallel()
	s1, f := stub(t, regionstub.Options{})
	s1.Unavailable(time.Hour, "")
	s2 := secondController(t, s1)
	h, q, _ := twoControllers(t, s1, s2, f)
	q.Append(events(5, 10)...)
	run(t, h.d)
	waitFor(t, 10*time.Second, "an attempt answered 503", func() bool {
		return metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "retry") >= 1
	})
	time.Sleep(300 * time.Millisecond)
	if n := len(s2.Batches()); n != 0 {
		t.Errorf("the other controller got %d batches while the first answered 503", n)
	}
	if got := h.d.Controller(); got != s1.URL() {
		t.Errorf("controller in use %q, want the first, %q", got, s1.URL())
	}
}

// secondController starts another region controller beside s1 (the
// same PKI; its own address).
func secondController(t *testing.T, s1 *regionstub.Server) *regionstub.Server {
	t.Helper()
	s2, err := regionstub.Start(regionstub.Options{PKI: s1.PKI()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// twoControllers is a deliverer for s1 (region.url) and s2
// (region.other_urls) whose only way out of a wait is the probe: an
// hour's backoff, a probe every 20 ms.
func twoControllers(t *testing.T, s1, s2 *regionstub.Server, f regionstub.Files) (harness, *memQueue, Config) {
	t.Helper()
	q := newMemQueue()
	cfg := fastConfig(s1, f)
	cfg.OtherURLs = []string{s2.URL()}
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	h := newDeliverer(t, cfg, q)
	h.d.probeEvery = 20 * time.Millisecond
	return h, q, cfg
}

// TestMisconfiguredControllerPassedOn: region.url's controller presents
// a certificate from another CA (the rack's region settings are wrong
// for it, kindConfig): the next controller, set up right, gets the
// events, where the agent used to retry the first for good.
func TestMisconfiguredControllerPassedOn(t *testing.T) {
	t.Parallel()
	foreign, _ := stub(t, regionstub.Options{}) // its own PKI
	s2, f := stub(t, regionstub.Options{})
	q := newMemQueue()
	cfg := fastConfig(s2, f)
	cfg.URL, cfg.OtherURLs = foreign.URL(), []string{s2.URL()}
	h := newDeliverer(t, cfg, q)
	evs := events(5, 10)
	q.Append(evs...)
	run(t, h.d)
	waitFor(t, 10*time.Second, "delivery to the controller set up right", func() bool { return q.Depth() == 0 })
	if n := len(foreign.Batches()); n != 0 {
		t.Errorf("the misconfigured controller applied %d batches", n)
	}
	got, _ := received(t, s2.Batches())
	checkOrder(t, items(evs), got)
}

// TestReloadKeepsController: a reload keeps to the controller in use
// while the new settings still name it, rather than going back to
// region.url's, which may be the one that is down.
func TestReloadKeepsController(t *testing.T) {
	t.Parallel()
	s1, f := stub(t, regionstub.Options{})
	s2 := secondController(t, s1)
	s1.Close()
	h, q, cfg := twoControllers(t, s1, s2, f)
	q.Append(events(5, 10)...)
	run(t, h.d)
	waitFor(t, 10*time.Second, "delivery to the second controller", func() bool { return q.Depth() == 0 })
	if err := h.d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := h.d.Controller(); got != s2.URL() {
		t.Errorf("after a reload the controller in use is %q, want the second still, %q", got, s2.URL())
	}
	// Settings that no longer name it start from region.url.
	cfg.OtherURLs = []string{"https://127.0.0.1:9/MAAS/a/v3internal/leases"}
	if err := h.d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := h.d.Controller(); got != s1.URL() {
		t.Errorf("after a reload without it the controller in use is %q, want region.url's, %q", got, s1.URL())
	}
}
