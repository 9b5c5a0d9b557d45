package deliver

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

func TestUnreachable(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &url.Error{Op: "Post", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, true},
		{"connect timeout", &url.Error{Op: "Post", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}}, true},
		{"reset after connecting", &url.Error{Op: "Post", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, false},
		{"handshake refused", &url.Error{Op: "Post", Err: &net.OpError{Op: "remote error", Err: tls.AlertError(42)}}, false},
		{"EOF", &url.Error{Op: "Post", Err: errors.New("EOF")}, false},
	} {
		if got := unreachable(c.err); got != c.want {
			t.Errorf("%s: unreachable = %t, want %t", c.name, got, c.want)
		}
	}
}

// TestDownBeforeWritten: a connection closed or reset before the request
// was written whole is a region down behind its proxy (nginx on 5242):
// down, probed, never applied. The same after the request went out is a
// region that may have applied it, and so is a timeout. A refused
// connection is down either way; a handshake the region refuses is
// configuration.
func TestDownBeforeWritten(t *testing.T) {
	u, _ := url.Parse("https://region:5242/MAAS/a/v3internal/leases")
	for _, c := range []struct {
		name          string
		err           error
		wrote         bool
		down, applied bool
	}{
		{"EOF before the request", &url.Error{Op: "Post", Err: io.EOF}, false, true, false},
		{"reset before the request", &url.Error{Op: "Post", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, false, true, false},
		{"EOF after the request", &url.Error{Op: "Post", Err: io.EOF}, true, false, true},
		{"reset after the request", &url.Error{Op: "Post", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, true, false, true},
		{"refused", &url.Error{Op: "Post", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, false, true, false},
		// (The transport may still be writing when the attempt times out.)
		{"timeout before the request", &url.Error{Op: "Post", Err: context.DeadlineExceeded}, false, false, true},
		{"timeout after the request", &url.Error{Op: "Post", Err: context.DeadlineExceeded}, true, false, true},
		{"handshake refused", &url.Error{Op: "Post", Err: &net.OpError{Op: "remote error", Err: tls.AlertError(42)}}, false, false, false},
	} {
		o := classifyErr(c.err, c.wrote, &Config{}, u, "maas")
		if o.down != c.down {
			t.Errorf("%s: down = %t, want %t", c.name, o.down, c.down)
		}
		if got := mayHaveApplied(o, c.err); got != c.applied {
			t.Errorf("%s: may have applied = %t, want %t", c.name, got, c.applied)
		}
		if c.down && !c.wrote && errors.Is(c.err, io.EOF) && !strings.Contains(o.hint, "nginx") {
			t.Errorf("%s: hint %q", c.name, o.hint)
		}
	}
}

// TestRegionBackBehindProxy: MAAS's port 5242 is nginx's stream proxy
// (src/maasserver/templates/http/regiond.nginx.stream.conf.template),
// which stays up while the internal API server behind it is down, and
// closes each connection it cannot pass on. The attempt ends before its
// request is written: down (probed, with a TLS handshake, since a bare
// connect succeeds), and not a batch the region may have applied. When
// the API server is back, the probe's handshake sees it and the batch
// goes out at once, however long the backoff (an hour here).
func TestRegionBackBehindProxy(t *testing.T) {
	t.Parallel()
	s1, f := stub(t, regionstub.Options{})
	addr := s1.Addr().String()
	front, err := regionstub.StartFront(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	s1.Close()
	h, q, evs := probedDeliverer(t, s1, f, front.URL(s1.URL()))
	waitFor(t, 10*time.Second, "an attempt cut short", func() bool {
		return metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "retry") >= 1
	})
	waitFor(t, 10*time.Second, "probes finding the API server down behind the proxy", func() bool {
		return metric(t, h.reg, "leasekeeper_region_probes_total", "result", "down") >= 3
	})
	if n := metric(t, h.reg, "leasekeeper_region_probes_total", "result", "up"); n != 0 {
		t.Errorf("probes up = %v while only the proxy listens", n)
	}
	if got := h.d.doubt.Load(); got != 0 {
		t.Errorf("a batch the proxy closed on is marked as perhaps applied (doubt %d)", got)
	}
	s2, err := regionstub.Start(regionstub.Options{Addr: addr, PKI: s1.PKI()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	waitFor(t, 30*time.Second, "delivery once the API server is back", func() bool { return q.Depth() == 0 })
	got, _ := received(t, s2.Batches())
	checkOrder(t, items(evs), got)
	if n := metric(t, h.reg, "leasekeeper_region_probes_total", "result", "up"); n != 1 {
		t.Errorf("probes up = %v, want 1", n)
	}
}

// probedDeliverer is a deliverer for url (s's, or a front's) whose only
// way out of a wait is the probe: an hour's backoff, a probe every 20 ms;
// it runs with 10 events queued.
func probedDeliverer(t *testing.T, s *regionstub.Server, f regionstub.Files, url string) (harness, *memQueue, []event.Event) {
	t.Helper()
	q := newMemQueue()
	cfg := fastConfig(s, f)
	cfg.URL = url
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	h := newDeliverer(t, cfg, q)
	h.d.probeEvery = 20 * time.Millisecond
	evs := events(10, 10)
	q.Append(evs...)
	run(t, h.d)
	return h, q, evs
}

// TestRegionBackProbed: the region refuses connections, so the batch
// waits out a backoff of an hour; the probe sees the region back and the
// batch goes out at once (issue 16). Without the probe the test would
// time out.
func TestRegionBackProbed(t *testing.T) {
	t.Parallel()
	s1, f := stub(t, regionstub.Options{})
	addr := s1.Addr().String()
	s1.Close()
	h, q, evs := probedDeliverer(t, s1, f, s1.URL())
	waitFor(t, 10*time.Second, "an attempt refused", func() bool {
		return metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "retry") >= 1
	})
	waitFor(t, 10*time.Second, "a probe finding the region down", func() bool {
		return metric(t, h.reg, "leasekeeper_region_probes_total", "result", "down") >= 1
	})
	s2, err := regionstub.Start(regionstub.Options{Addr: addr, PKI: s1.PKI()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	waitFor(t, 30*time.Second, "delivery once the region is back", func() bool { return q.Depth() == 0 })
	got, _ := received(t, s2.Batches())
	checkOrder(t, items(evs), got)
	if n := metric(t, h.reg, "leasekeeper_region_probes_total", "result", "up"); n != 1 {
		t.Errorf("probes up = %v, want 1", n)
	}
}

// TestStrugglingRegionNotProbed: a region that answers 503 is up and
// struggling: its backoff (an hour here) is not shortened by probes, so
// nothing more is sent, and nothing is probed.
func TestStrugglingRegionNotProbed(t *testing.T) {
	t.Parallel()
	s, f := stub(t, regionstub.Options{})
	s.Unavailable(time.Hour, "")
	q := newMemQueue()
	cfg := fastConfig(s, f)
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	h := newDeliverer(t, cfg, q)
	h.d.probeEvery = 10 * time.Millisecond
	q.Append(events(10, 10)...)
	run(t, h.d)
	waitFor(t, 10*time.Second, "the first 503", func() bool { return len(s.Requests()) >= 1 })
	time.Sleep(300 * time.Millisecond) // 30 probe intervals
	if n := len(s.Requests()); n != 1 {
		t.Errorf("%d requests to a region answering 503 within its backoff of an hour, want 1", n)
	}
	if n := metric(t, h.reg, "leasekeeper_region_probes_total"); n != 0 {
		t.Errorf("%v probes of a region that answers", n)
	}
}

// TestProxyCutsSome: nginx in front of a struggling API server closes
// some connections at once (its upstream's backlog full) and passes
// others. A probe passed through finds the region "back"; the attempt it
// brings forward is cut again; the wait after that is the backoff's in
// full (an hour here), not probed again, so a struggling region is not
// retried at the probe's pace.
func TestProxyCutsSome(t *testing.T) {
	t.Parallel()
	s, f := stub(t, regionstub.Options{})
	front, err := regionstub.StartFront(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	front.CutEvery(2) // connections 1, 3, 5… cut; 2, 4, 6… passed
	h, q, _ := probedDeliverer(t, s, f, front.URL(s.URL()))
	waitFor(t, 10*time.Second, "the attempt a probe brought forward, cut again", func() bool {
		return metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "retry") >= 2
	})
	time.Sleep(500 * time.Millisecond) // 25 probe intervals
	if n := metric(t, h.reg, "leasekeeper_delivery_attempts_total", "result", "retry"); n != 2 {
		t.Errorf("%v attempts, want 2: the first, and one brought forward by the probe", n)
	}
	if n := metric(t, h.reg, "leasekeeper_region_probes_total", "result", "up"); n != 1 {
		t.Errorf("probes up = %v, want 1", n)
	}
	if len(s.Requests()) != 0 || q.Depth() != 10 {
		t.Errorf("%d requests reached the region, queue %d", len(s.Requests()), q.Depth())
	}
}
