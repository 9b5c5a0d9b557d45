package deliver

// A MAAS region may run several region controllers, each serving the
// internal leases API, with one database behind them: any of them applies
// a request as the others would. region.url names one, region.other_urls
// the others. Requests go to one at a time, the one in use (never two at
// once: the deliverer's order and its record of a request in doubt are
// the same whichever controller gets it). When it cannot be reached — an
// attempt that found it down (probe.go: no connection, or one its proxy
// closed before the request was written) — the next attempt goes to the
// next controller, and while the wait lasts every controller is probed:
// the first that accepts a connection is the one in use from then on.
// So does one whose answer says this rack's settings are wrong for it
// (kindConfig: a certificate the agent does not trust, a redirect, 403,
// 404): another may be set up right. A controller that answers 5xx is
// up, and stays the one in use: a struggling region is not made to take
// each request twice over.

import (
	"fmt"
	"net"
	"net/url"

	"github.com/leasekeeper/leasekeeper/agent/config"
)

// controller is one region controller's leases API.
type controller struct {
	raw        string
	u          *url.URL
	serverName string // the name its certificate must show
}

// controllersOf is cfg's controllers: URL (parsed as u), then OtherURLs.
func controllersOf(cfg Config, u *url.URL) ([]controller, error) {
	name := func(u *url.URL) string {
		if cfg.ServerName != "" {
			return cfg.ServerName
		}
		return u.Hostname()
	}
	out := []controller{{raw: u.String(), u: u, serverName: name(u)}}
	for _, raw := range cfg.OtherURLs {
		o, err := config.RegionURL(raw)
		if err != nil {
			return nil, fmt.Errorf("other_urls: %w", err)
		}
		if o.Scheme != u.Scheme {
			return nil, fmt.Errorf("other_urls: %q: every controller's URL has url's scheme (%s)", raw, u.Scheme)
		}
		out = append(out, controller{raw: o.String(), u: o, serverName: name(o)})
	}
	return out, nil
}

// controller is the controller in use.
func (l *link) controller() controller {
	return l.controllers[int(l.cur.Load())%len(l.controllers)]
}

// passOn makes the controller after c the one in use, if c still is and
// there is another; it returns that one.
func (l *link) passOn(c controller) (controller, bool) {
	n := len(l.controllers)
	if n < 2 {
		return controller{}, false
	}
	i := int(l.cur.Load())
	if l.controllers[i%n].raw != c.raw {
		return controller{}, false // a probe chose another meanwhile
	}
	next := (i + 1) % n
	if !l.cur.CompareAndSwap(int32(i), int32(next)) {
		return controller{}, false
	}
	return l.controllers[next], true
}

// Controller is the region controller in use, where the configuration
// names several; "" where it names one.
func (d *Deliverer) Controller() string {
	l := d.link.Load()
	if l == nil || len(l.controllers) < 2 {
		return ""
	}
	return l.controller().raw
}

// use makes controller i the one in use.
func (l *link) use(i int) { l.cur.Store(int32(i)) }

// addr is the address a probe connects to: the controller's, as the
// agent uses no proxy (newHTTPClient).
func (c controller) addr() string {
	port := c.u.Port()
	if port == "" {
		port = "443"
		if c.u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(c.u.Hostname(), port)
}
