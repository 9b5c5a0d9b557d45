package deliver

import (
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

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

// TestRegionBackProbed: the region refuses connections, so the batch
// waits out a backoff of an hour; the probe sees the region back and the
// batch goes out at once (issue 16). Without the probe the test would
// time out.
func TestRegionBackProbed(t *testing.T) {
	t.Parallel()
	s1, f := stub(t, regionstub.Options{})
	addr := s1.Addr().String()
	s1.Close()
	q := newMemQueue()
	cfg := fastConfig(s1, f)
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	h := newDeliverer(t, cfg, q)
	h.d.probeEvery = 20 * time.Millisecond
	evs := events(10, 10)
	q.Append(evs...)
	run(t, h.d)
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
