//go:build linux

package rack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/internal/arp"
)

// ErrNotOnLink: the address is not on a link of this rack (only a
// gateway's route reaches it), so no probe can tell whether it is used.
var ErrNotOnLink = errors.New("not on a link of this rack")

// Probe is the outcome of ProbeARP.
type Probe struct {
	Iface string           // the interface probed on
	By    net.HardwareAddr // who answered; nil when nobody did
	Local bool             // the address is this rack's own
}

// Busy says whether someone uses the address.
func (p Probe) Busy() bool { return p.Local || p.By != nil }

// ProbeARP asks, on the interface the kernel routes ip through directly
// (RTM_GETROUTE), whether anybody holds ip: an RFC 5227 ARP probe (sender
// address 0.0.0.0, so no neighbour's cache learns anything) sent three
// times within wait, and any ARP packet from another host claiming ip as
// its sender address counts as an answer. Needs CAP_NET_RAW. An address
// only reachable through a gateway is ErrNotOnLink.
func ProbeARP(ctx context.Context, ip netip.Addr, wait time.Duration) (Probe, error) {
	if !ip.Is4() {
		return Probe{}, fmt.Errorf("ARP probe: %s is not an IPv4 address", ip)
	}
	rs, err := netlink.RouteGet(net.IP(ip.AsSlice()))
	if err == nil && len(rs) == 0 {
		err = unix.ENETUNREACH
	}
	if err != nil {
		return Probe{}, fmt.Errorf("ARP probe: route to %s: %w", ip, err)
	}
	r := rs[0]
	if r.Type == unix.RTN_LOCAL {
		return Probe{Local: true}, nil
	}
	if r.Type != unix.RTN_UNICAST || len(r.Gw) > 0 || r.Via != nil {
		return Probe{}, fmt.Errorf("ARP probe: %s: %w", ip, ErrNotOnLink)
	}
	link, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return Probe{}, fmt.Errorf("ARP probe: interface index %d: %w", r.LinkIndex, err)
	}
	a := link.Attrs()
	p := Probe{Iface: a.Name}
	if len(a.HardwareAddr) != 6 || a.RawFlags&unix.IFF_NOARP != 0 {
		return p, fmt.Errorf("ARP probe: %s: interface %s has no ARP: %w", ip, a.Name, ErrNotOnLink)
	}
	by, err := arp.Ask(ctx, a.Index, a.HardwareAddr, netip.Addr{}, ip, wait)
	if err != nil {
		return p, fmt.Errorf("ARP probe of %s on %s: %w", ip, a.Name, err)
	}
	p.By = by
	return p, nil
}

// askARP is Options.Prober's default: an RFC 5227 probe (arp.Ask).
func askARP(ctx context.Context, ifindex int, hw net.HardwareAddr, ip netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
	return arp.Ask(ctx, ifindex, hw, netip.Addr{}, ip, wait)
}
