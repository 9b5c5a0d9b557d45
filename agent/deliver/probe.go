package deliver

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"
)

// While the region cannot be reached, the wait before the next attempt
// is watched by a probe: a connection to the region's address and, for
// https, a TLS handshake (no request), closed at once, every
// ProbeInterval with jitter. The first that completes ends the wait, so
// delivery resumes within about one interval of the region's return,
// however long the backoff has grown during a long outage.
//
// "Down" in this sense is an attempt that could not connect at all
// (connection refused, no route, the connect timing out: a dial error),
// or whose connection was closed or reset before the request was
// written. The second is how MAAS's region is down: port 5242 is nginx's
// stream proxy, a service of its own, which accepts the connection and
// closes it when the internal API server behind it is not there
// (restarting, or stopped; src/maasserver/templates/http/
// regiond.nginx.stream.conf.template). So a bare connect says nothing
// there: the probe's TLS handshake, answered by the API server itself,
// is what tells it is back.
//
// A region that answers — 503, 502, 429, any 5xx, with or without
// Retry-After — or that takes the request and then stalls or cuts the
// connection, or whose handshake fails on trust (an alert, a
// certificate), is up and struggling or misconfigured: it gets the plain
// exponential backoff with full jitter (or its Retry-After), and no probe
// shortens that. Nor does a probe change the backoff: if the attempt it
// brings forward fails again, the next wait follows on from the last
// one's attempt count, and if it fails as down again, that wait is not
// probed (Deliverer.probedBack): nginx also closes connections it cannot
// pass to an API server whose listen backlog is full, a region
// struggling, which the probe's handshake may get through to now and
// then; so it is retried at most once per backoff between them.
//
// What a probe costs a region that is down: one connection attempt per
// agent per interval (a SYN answered by a RST while nothing listens, or
// a connection nginx closes at once, before any cryptography), never
// more than one at a time; the handshake's cost falls on the region only
// once it is back, once. Jitter (each wait drawn from [½, 1½] of the
// interval) keeps the racks of a region from probing, and so coming back,
// in lockstep; when it returns they reconnect spread over an interval,
// and from then on it is the backoff that protects it.

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

// cutShort reports whether err is the connection ending under the agent
// (closed or reset by the other side). Before the request was written,
// it is a region down behind its proxy.
func cutShort(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// whenBack probes the region until a connection succeeds, then closes
// the channel it returned; it stops when ctx ends. With probing off
// (probeEvery 0) the channel never closes. With several controllers
// (regions.go) each round probes them all at once, and the first that
// accepts a connection becomes the one in use.
func (d *Deliverer) whenBack(ctx context.Context) <-chan struct{} {
	back := make(chan struct{})
	if d.probeEvery <= 0 {
		return back
	}
	l := d.link.Load()
	every := d.probeEvery
	go func() {
		for {
			// Uniform in [every/2, 3·every/2].
			t := time.NewTimer(every/2 + rand.N(every+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			i, ok := probeRound(ctx, l)
			if ctx.Err() != nil {
				return
			}
			if !ok {
				d.m.probes.WithLabelValues("down").Inc()
				continue
			}
			d.m.probes.WithLabelValues("up").Inc()
			c := l.controllers[i]
			if was := l.controller(); was.raw != c.raw {
				l.use(i)
				d.log.Warn().Str("url", c.raw).Str("was", was.raw).Msg("region controller accepts connections: delivering to it from now on")
			}
			d.log.Info().Str("address", c.addr()).Msg("region accepts connections again: retrying now")
			close(back)
			return
		}
	}()
	return back
}

// probeRound probes every controller of l at once and returns the first
// that accepts a connection (the one in use first when several do).
func probeRound(ctx context.Context, l *link) (int, bool) {
	if len(l.controllers) == 1 {
		return 0, probe(ctx, l, l.controllers[0]) == nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := make(chan int, len(l.controllers))
	cur := l.controller().raw
	for i, c := range l.controllers {
		go func() {
			if probe(ctx, l, c) != nil {
				i = -1
			}
			up <- i
		}()
	}
	first := -1
	for range l.controllers {
		i := <-up
		if i < 0 {
			continue
		}
		if l.controllers[i].raw == cur {
			return i, true
		}
		if first < 0 {
			first = i
			// The one in use may answer a moment later: wait for it
			// no longer than a probe's own bound.
			go func() { time.Sleep(probeTimeout / 4); cancel() }()
		}
	}
	return first, first >= 0
}

// probe connects to c and, for https, completes a TLS handshake, then
// closes the connection: nil when c accepts connections.
func probe(ctx context.Context, l *link, c controller) error {
	dialer := net.Dialer{Timeout: probeTimeout}
	conn, err := dialer.DialContext(ctx, "tcp", c.addr())
	if err != nil {
		return err
	}
	if l.tls != nil {
		tc := l.tls.Clone()
		tc.ServerName = c.serverName
		if err := handshake(ctx, conn, tc); err != nil {
			return err
		}
	}
	conn.Close()
	return nil
}

// handshake runs a TLS handshake on c, bounded by probeTimeout, and
// closes c when it fails. Only a connection cut short is an error: one
// the region ends with an alert or a certificate the agent refuses is a
// region that is there (the attempt then says what is wrong).
func handshake(ctx context.Context, c net.Conn, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := tls.Client(c, tc).HandshakeContext(ctx)
	if err != nil && (cutShort(err) || ctx.Err() != nil) {
		c.Close()
		return err
	}
	return nil
}
