package deliver

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"time"
)

// While the region cannot be reached, the wait before the next attempt
// is watched by a probe: a bare TCP connection to the region's address
// (no TLS, no request), closed at once, every ProbeInterval with jitter.
// The first that connects ends the wait, so delivery resumes within about
// one interval of the region's return, however long the backoff has
// grown during a long outage.
//
// Only an attempt that could not connect at all (connection refused, no
// route, the connect timing out: a dial error) is "down" in this sense.
// A region that answers — 503, 502, 429, any 5xx, with or without
// Retry-After — or that accepts the connection and then stalls, resets
// it or fails the TLS handshake, is up and struggling: it gets the plain
// exponential backoff with full jitter (or its Retry-After), and no probe
// shortens that, since a successful connect says nothing about whether
// it can take a batch now. Nor does a probe change the backoff: if the
// attempt it brings forward fails again, the next wait follows on from
// the last one's attempt count.
//
// What a probe costs a region that is down: one connection attempt per
// agent per interval (a SYN answered by a RST while nothing listens),
// never more than one at a time. Jitter (each wait drawn from [½, 1½] of
// the interval) keeps the racks of a region from probing, and so coming
// back, in lockstep; when it returns they reconnect spread over an
// interval, and from then on it is the backoff that protects it.

// DefaultProbeInterval is the mean time between probes of a region that
// is down. At most 1.5× it passes between its return and the probe that
// sees it.
const DefaultProbeInterval = 250 * time.Millisecond

// probeTimeout bounds one probe's connect.
const probeTimeout = time.Second

// unreachable reports whether err, from an attempt, failed before any
// connection to the region existed: the region (or the way to it) is
// down, not struggling.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// probeAddr is the address a probe connects to, "" when probing cannot
// tell anything (a proxy stands between the agent and the region).
func (l *link) probeAddr() string {
	req := &http.Request{URL: l.u}
	if p, err := http.ProxyFromEnvironment(req); err != nil || p != nil {
		return ""
	}
	port := l.u.Port()
	if port == "" {
		port = "443"
		if l.u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(l.u.Hostname(), port)
}

// whenBack probes the region until a connection succeeds, then closes
// the channel it returned; it stops when ctx ends. With nothing to probe
// the channel never closes.
func (d *Deliverer) whenBack(ctx context.Context) <-chan struct{} {
	back := make(chan struct{})
	addr := d.link.Load().probeAddr()
	if addr == "" || d.probeEvery <= 0 {
		return back
	}
	every := d.probeEvery
	go func() {
		dialer := net.Dialer{Timeout: probeTimeout}
		for {
			// Uniform in [every/2, 3·every/2].
			t := time.NewTimer(every/2 + rand.N(every+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			c, err := dialer.DialContext(ctx, "tcp", addr)
			if ctx.Err() != nil {
				if err == nil {
					c.Close()
				}
				return
			}
			if err != nil {
				d.m.probes.WithLabelValues("down").Inc()
				continue
			}
			c.Close()
			d.m.probes.WithLabelValues("up").Inc()
			d.log.Info().Str("address", addr).Msg("region accepts connections again: retrying now")
			close(back)
			return
		}
	}()
	return back
}
