package release

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Ports of RFC 2131.
const (
	clientPort = 68
	serverPort = 67
)

// offLinkLinger is how long a send to a server behind a router waits
// for an asynchronous error (ICMP unreachable) before it counts as sent:
// DHCPRELEASE has no reply.
const offLinkLinger = 300 * time.Millisecond

// send unicasts the packet from the lease's address, port 68, to the
// server's port 67 (RFC 2131 4.4.6), through the interface. The socket
// is connected so that errors the kernel learns after the packet left
// (no ARP answer: EHOSTUNREACH; ICMP port unreachable: ECONNREFUSED)
// reach it. For an on-link server it waits until the server's ARP entry
// is complete (the packet has gone) or an error arrives, bounded by ctx.
func send(ctx context.Context, a Action, pkt []byte) error {
	server := netip.AddrPortFrom(a.Lease.Server, serverPort)
	// A socket bound to a device sends where no route leads, as if the
	// destination were on the link (and then waits for ARP in vain), so
	// ask the routing table first, from the lease's address.
	probe := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Lease.Address, 0))}
	pc, err := probe.DialContext(ctx, "udp4", server.String())
	if err != nil {
		return explain(err, a.Lease.Server)
	}
	pc.Close()

	d := net.Dialer{
		LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Lease.Address, clientPort)),
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				// dhclient or networkd may hold port 68 too.
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
				if serr == nil {
					serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, a.Iface)
				}
			})
			return errors.Join(err, serr)
		},
	}
	c, err := d.DialContext(ctx, "udp4", server.String())
	if err != nil {
		return explain(err, a.Lease.Server)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetWriteDeadline(dl)
	}
	if _, err := c.Write(pkt); err != nil {
		return explain(err, a.Lease.Server)
	}

	hop, known := nextHop(a.Lease.Server, a.Iface)
	linger := time.Now().Add(offLinkLinger)
	buf := make([]byte, 1500)
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(buf)
		var ne net.Error
		switch {
		case err == nil:
			// Nothing answers a release; ignore whatever this is.
		case errors.As(err, &ne) && ne.Timeout():
		default:
			return explain(err, a.Lease.Server)
		}
		if known && neighbourComplete(hop, a.Iface) {
			return nil
		}
		if !known && time.Now().After(linger) {
			return nil
		}
		if ctx.Err() != nil {
			if !known {
				return nil
			}
			if hop != a.Lease.Server {
				return fmt.Errorf("sent, but the router %s did not answer ARP on %s within the time limit: %s is unreachable", hop, a.Iface, a.Lease.Server)
			}
			return fmt.Errorf("sent, but %s did not answer ARP on %s within the time limit: the server is unreachable", a.Lease.Server, a.Iface)
		}
	}
}

// explain turns socket errors into what they mean for a release.
func explain(err error, server netip.Addr) error {
	switch {
	case errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("no route to %s from this address (network unreachable): %w", server, err)
	case errors.Is(err, syscall.EHOSTUNREACH):
		return fmt.Errorf("%s is unreachable (no ARP answer or ICMP host unreachable): %w", server, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s refused it (ICMP port unreachable: no DHCP server listening on port 67): %w", server, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("the lease's address is not configured here: %w", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("not sent within the time limit: %w", err)
	}
	return err
}

// nextHop is the address whose ARP entry on dev shows that a packet to
// dst has left: dst itself when a route on dev reaches it directly, the
// gateway when one does through a router. known is false when the main
// table (/proc/net/route, this namespace's) has no route for dst on dev.
func nextHop(dst netip.Addr, dev string) (hop netip.Addr, known bool) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return netip.Addr{}, false
	}
	defer f.Close()
	return routeNextHop(f, dst, dev)
}

// routeNextHop reads /proc/net/route: "Iface Destination Gateway Flags
// RefCnt Use Metric Mask …" after a header line, addresses as 8 hex
// digits in host (little-endian) byte order. The longest matching
// prefix on dev wins, then the lowest metric.
func routeNextHop(r io.Reader, dst netip.Addr, dev string) (netip.Addr, bool) {
	sc := bufio.NewScanner(r)
	best, bestMetric := -1, uint64(0)
	var hop netip.Addr
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 || f[0] != dev {
			continue
		}
		d, ok1 := procAddr(f[1])
		gw, ok2 := procAddr(f[2])
		mask, ok3 := procAddr(f[7])
		metric, err := strconv.ParseUint(f[6], 10, 32)
		if !ok1 || !ok2 || !ok3 || err != nil {
			continue
		}
		bits := 0
		for _, b := range mask.As4() {
			for ; b&0x80 != 0; b <<= 1 {
				bits++
			}
		}
		p := netip.PrefixFrom(d, bits)
		if !p.Masked().Contains(dst) || bits < best || bits == best && metric >= bestMetric {
			continue
		}
		best, bestMetric = bits, metric
		hop = dst
		if gw != netip.IPv4Unspecified() {
			hop = gw
		}
	}
	return hop, best >= 0
}

func procAddr(s string) (netip.Addr, bool) {
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil || len(s) != 8 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}), true
}

// neighbourComplete reports whether the kernel has a complete ARP
// entry for ip on dev (/proc/net/arp, this network namespace's).
func neighbourComplete(ip netip.Addr, dev string) bool {
	f, err := os.Open("/proc/net/arp")
	if err != nil {
		return false
	}
	defer f.Close()
	return arpComplete(f, ip, dev)
}

// arpComplete reads /proc/net/arp: "IP HWtype Flags HWaddr Mask Device"
// after a header line; flag 0x2 (ATF_COM) marks a resolved entry.
func arpComplete(r io.Reader, ip netip.Addr, dev string) bool {
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[0] != ip.String() || f[5] != dev {
			continue
		}
		flags, err := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 32)
		if err == nil && flags&0x2 != 0 {
			return true
		}
	}
	return false
}
