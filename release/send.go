package release

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/internal/arp"
)

// Ports of RFC 2131.
const (
	clientPort = 68
	serverPort = 67
)

// unconfirmedLinger is how long a send whose leaving cannot be seen
// (no neighbour entry to watch) waits for an asynchronous error (ICMP
// unreachable) before it is reported as sent, not confirmed:
// DHCPRELEASE has no reply.
const unconfirmedLinger = 300 * time.Millisecond

// Sent is how a release left the node.
type Sent struct {
	// Via is the interface the release left through when it is not the
	// lease's own: the kernel's route from the lease's address to the
	// server leaves through another one.
	Via string
	// Confirmed is true when the next hop's neighbour entry showed the
	// packet went to a known link-layer address. When false, NotConfirmed
	// says why nothing could show it.
	Confirmed    bool
	NotConfirmed string
}

// path is where the kernel sends a packet from the lease's address to
// the server, as RTM_GETROUTE answers.
type path struct {
	dev   string
	index int
	// hop is whose neighbour entry shows the packet has gone: the
	// gateway, or the server itself when the route is direct. Invalid
	// when the gateway is not an IPv4 address (RTA_VIA).
	hop   netip.Addr
	noARP bool             // the device resolves no neighbours (IFF_NOARP, loopback)
	hw    net.HardwareAddr // the device's hardware address (askHop asks from it)
	// bind is the device the socket is bound to (SO_BINDTODEVICE): the
	// lease's interface when the route leaves through it, its VRF when
	// it is enslaved to one, else "".
	bind string
}

// route asks the kernel (RTM_GETROUTE, this network namespace) which
// route a packet from the lease's address to the server takes: the
// lookup a socket bound to that address makes, so policy routing
// ("from" rules) is honoured. When the lease's interface is enslaved to
// a VRF, the lookup and the socket are confined to the VRF.
func route(a Action) (path, error) {
	server := a.Lease.Server
	link, err := netlink.LinkByName(a.Iface)
	if err != nil {
		return path{}, fmt.Errorf("interface %s: %w", a.Iface, err)
	}
	opts := &netlink.RouteGetOptions{SrcAddr: net.IP(a.Lease.Address.AsSlice())}
	var vrf string
	if mi := link.Attrs().MasterIndex; mi > 0 {
		if m, err := netlink.LinkByIndex(mi); err == nil {
			if _, ok := m.(*netlink.Vrf); ok {
				vrf = m.Attrs().Name
				opts.OifIndex = mi
			}
		}
	}
	rs, err := netlink.RouteGetWithOptions(net.IP(server.AsSlice()), opts)
	if err == nil && len(rs) == 0 {
		err = syscall.ENETUNREACH
	}
	if err != nil {
		return path{}, explain(err, server)
	}
	r := rs[0]
	switch r.Type {
	case unix.RTN_UNICAST:
	case unix.RTN_LOCAL:
		return path{}, fmt.Errorf("%s is an address of this node, not a server's", server)
	default:
		return path{}, fmt.Errorf("the route to %s is not a unicast route (type %d)", server, r.Type)
	}
	p := path{index: r.LinkIndex, bind: vrf}
	if r.LinkIndex == link.Attrs().Index {
		p.bind = a.Iface
		// The socket bound to the interface looks up with it as the
		// output interface; ask that question for the gateway.
		opts.OifIndex = r.LinkIndex
		if rs, err := netlink.RouteGetWithOptions(net.IP(server.AsSlice()), opts); err == nil && len(rs) > 0 && rs[0].LinkIndex == r.LinkIndex {
			r = rs[0]
		}
	}
	out, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return path{}, fmt.Errorf("the route to %s leaves through interface index %d: %w", server, r.LinkIndex, err)
	}
	p.dev, p.hw = out.Attrs().Name, out.Attrs().HardwareAddr
	p.noARP = out.Attrs().RawFlags&unix.IFF_NOARP != 0 || out.Attrs().Flags&net.FlagLoopback != 0
	switch gw, ok := netip.AddrFromSlice(r.Gw); {
	case r.Via != nil:
		// An IPv4 route through an IPv6 gateway: no ARP entry to watch.
	case ok && len(r.Gw) > 0:
		p.hop = gw.Unmap()
	default:
		p.hop = server
	}
	return p, nil
}

// send unicasts the packet from the lease's address, port 68, to the
// server's port 67 (RFC 2131 4.4.6) along the kernel's route from that
// address to the server: bound to the lease's interface (SO_BINDTODEVICE)
// when the route leaves through it, else unbound, through the interface
// the route names (as dhclient -r sends its unicast release). The socket
// is connected so that errors the kernel learns after the packet left
// (no ARP answer: EHOSTUNREACH; ICMP port unreachable: ECONNREFUSED)
// reach it. Then it watches the next hop's neighbour entry: resolved
// means the packet has gone; failed, or still unresolved when ctx ends,
// means nobody took it. An entry the kernel already had before the send
// (cachedBefore) shows only that the hop answered some time ago (a rack
// that went down a minute since is still STALE, and the kernel sends to
// it for seconds before it asks again), so the hop is then asked with
// an ARP request of its own (askHop). Where no entry can show it, the
// release is reported sent, not confirmed.
func send(ctx context.Context, a Action, pkt []byte) (Sent, error) {
	server := netip.AddrPortFrom(a.Lease.Server, serverPort)
	p, err := route(a)
	if err != nil {
		return Sent{}, err
	}
	var out Sent
	if p.dev != a.Iface {
		out.Via = p.dev
	}
	d := net.Dialer{
		LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Lease.Address, clientPort)),
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				// dhclient or networkd may hold port 68 too.
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
				if serr == nil && p.bind != "" {
					serr = os.NewSyscallError("setsockopt SO_BINDTODEVICE",
						syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, p.bind))
				}
			})
			return errors.Join(err, serr)
		},
	}
	c, err := d.DialContext(ctx, "udp4", server.String())
	if err != nil {
		return out, explain(err, a.Lease.Server)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetWriteDeadline(dl)
	}
	cached := ""
	if !p.noARP && p.hop.IsValid() {
		if state, found, err := neighbour(p.index, p.hop); err == nil && found {
			cached = cachedBefore(state)
		}
	}
	if _, err := c.Write(pkt); err != nil {
		return out, explain(err, a.Lease.Server)
	}

	watch := !p.noARP && p.hop.IsValid()
	var why string
	switch {
	case p.noARP:
		why = fmt.Sprintf("%s resolves no neighbours, so nothing shows the packet left", p.dev)
	case !p.hop.IsValid():
		why = "the route's gateway is not an IPv4 address, so no ARP entry shows the packet left"
	}
	linger := time.Now().Add(unconfirmedLinger)
	seen := false // the next hop had a neighbour entry
	buf := make([]byte, 1500)
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, rerr := c.Read(buf)
		var ne net.Error
		switch {
		case rerr == nil:
			// Nothing answers a release; ignore whatever this is.
		case errors.As(rerr, &ne) && ne.Timeout():
		case errors.Is(rerr, syscall.EHOSTUNREACH) && watch:
			// The kernel gave up resolving the next hop, or a router
			// could not reach the server.
			if state, found, err := neighbour(p.index, p.hop); err == nil && found && neighVerdict(state) != neighGone {
				return out, noARP(p, a.Lease.Server, false)
			}
			return out, explain(rerr, a.Lease.Server)
		default:
			return out, explain(rerr, a.Lease.Server)
		}
		if watch {
			state, found, err := neighbour(p.index, p.hop)
			switch v := neighVerdict(state); {
			case err != nil:
				watch, why = false, fmt.Sprintf("the neighbour table could not be read (%v)", err)
			case !found:
			case v == neighGone && cached != "":
				// The entry predates the send: ask the hop now.
				switch err := askHop(ctx, p, a.Lease.Address); {
				case err == nil:
					out.Confirmed = true
					return out, nil
				case errors.Is(err, errHopSilent):
					return out, fmt.Errorf("%w (the kernel's entry for it, %s, was from before)", noARP(p, a.Lease.Server, ctx.Err() != nil), cached)
				default:
					out.NotConfirmed = fmt.Sprintf("%s's neighbour entry on %s (%s) was from before the release, and asking it again failed: %v", p.hop, p.dev, cached, err)
					return out, nil
				}
			case v == neighGone:
				out.Confirmed = true
				return out, nil
			case v == neighFailed:
				return out, noARP(p, a.Lease.Server, false)
			case v == neighUnresolvable:
				watch, why = false, fmt.Sprintf("%s on %s needs no ARP (state NOARP), so nothing shows the packet left", p.hop, p.dev)
			default:
				seen = true
			}
			if !seen && watch && time.Now().After(linger) {
				watch, why = false, fmt.Sprintf("no neighbour entry for %s on %s appeared", p.hop, p.dev)
			}
		}
		if !watch && time.Now().After(linger) {
			out.NotConfirmed = why
			return out, nil
		}
		if ctx.Err() != nil {
			if watch {
				return out, noARP(p, a.Lease.Server, true)
			}
			out.NotConfirmed = why
			return out, nil
		}
	}
}

// noARP is the error for a next hop that did not answer ARP: the
// release went nowhere.
func noARP(p path, server netip.Addr, timedOut bool) error {
	when := ""
	if timedOut {
		when = " within the time limit"
	}
	if p.hop != server {
		return fmt.Errorf("sent, but the router %s did not answer ARP on %s%s: %s is unreachable", p.hop, p.dev, when, server)
	}
	return fmt.Errorf("sent, but %s did not answer ARP on %s%s: the server is unreachable", server, p.dev, when)
}

// explain turns socket and route lookup errors into what they mean for
// a release.
func explain(err error, server netip.Addr) error {
	// Refused privileges first: EACCES and EPERM from the socket's own
	// set-up are about who runs release, not about the way to the
	// server.
	var se *os.SyscallError
	if errors.As(err, &se) && (errors.Is(se.Err, syscall.EACCES) || errors.Is(se.Err, syscall.EPERM)) {
		switch se.Syscall {
		case "bind":
			return fmt.Errorf("binding UDP port 68 needs root (CAP_NET_BIND_SERVICE): %w", err)
		case "setsockopt SO_BINDTODEVICE":
			return fmt.Errorf("binding the socket to its interface needs root (CAP_NET_RAW): %w", err)
		}
	}
	switch {
	case errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("no route to %s from this address (network unreachable): %w", server, err)
	case errors.Is(err, syscall.EHOSTUNREACH):
		return fmt.Errorf("%s is unreachable (no ARP answer or ICMP host unreachable): %w", server, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("sending to %s is prohibited here (a prohibit route or a firewall): %w", server, err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("no usable route to %s from this address (a blackhole route, or the address is not local): %w", server, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s refused it (ICMP port unreachable: no DHCP server listening on port 67): %w", server, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("the lease's address is not configured here: %w", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("not sent within the time limit: %w", err)
	}
	return err
}

// neighbour returns the state of ip's neighbour entry on the interface
// with index (RTM_GETNEIGH, this network namespace's) and whether there
// is one.
func neighbour(index int, ip netip.Addr) (state int, found bool, err error) {
	ns, err := netlink.NeighList(index, netlink.FAMILY_V4)
	if err != nil {
		return 0, false, err
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n.State, true, nil
		}
	}
	return 0, false, nil
}

// cachedBefore names a neighbour state (NUD_* bits) found before the
// send that resolution will not refresh at once: the kernel sends to the
// address it has (REACHABLE, PERMANENT) or re-checks it only seconds
// later (STALE: DELAY, then PROBE, delay_first_probe_time after). ""
// for none, INCOMPLETE, FAILED and NOARP.
func cachedBefore(state int) string {
	for _, s := range []struct {
		bit  int
		name string
	}{
		{netlink.NUD_REACHABLE, "REACHABLE"}, {netlink.NUD_STALE, "STALE"}, {netlink.NUD_DELAY, "DELAY"},
		{netlink.NUD_PROBE, "PROBE"}, {netlink.NUD_PERMANENT, "PERMANENT"},
	} {
		if state&s.bit != 0 {
			return s.name
		}
	}
	return ""
}

// errHopSilent: the next hop did not answer askHop's ARP requests.
var errHopSilent = errors.New("the next hop did not answer ARP")

// hopAskWait bounds askHop: as long as the kernel's own resolution takes
// to give up (mcast_solicit 3 requests, retrans_time 1 s apart).
const hopAskWait = 3 * time.Second

// askHop asks p's next hop, with an ARP request from the lease's address
// on p's interface (as the kernel's own would be), whether it is there:
// nil when it answered, errHopSilent when it did not within hopAskWait
// or ctx, another error when it could not be asked (no CAP_NET_RAW).
func askHop(ctx context.Context, p path, from netip.Addr) error {
	by, err := arp.Ask(ctx, p.index, p.hw, from, p.hop, hopAskWait)
	switch {
	case by != nil:
		return nil
	case err == nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return errHopSilent
	}
	return err
}

// neighState is what a neighbour entry's state says about a packet sent
// to it.
type neighState int

const (
	neighPending      neighState = iota // no entry yet, or being resolved (INCOMPLETE)
	neighGone                           // resolved: the packet went to a known address
	neighFailed                         // resolution failed: nobody answered ARP
	neighUnresolvable                   // NOARP: sent without resolution, nothing to show
)

// neighVerdict reads a neighbour state (NUD_* bits). STALE, DELAY and
// PROBE count as gone: the kernel sends to the address it has while it
// re-checks it, and a UDP send gives no confirmation that would end
// DELAY before the release's time limit.
func neighVerdict(state int) neighState {
	switch {
	case state&netlink.NUD_FAILED != 0:
		return neighFailed
	case state&netlink.NUD_NOARP != 0:
		return neighUnresolvable
	case state&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0:
		return neighGone
	}
	return neighPending
}
