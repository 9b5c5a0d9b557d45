//go:build linux

package rack

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	by, err := arpProbe(ctx, a.Index, a.HardwareAddr, ip, wait)
	if err != nil {
		return p, fmt.Errorf("ARP probe of %s on %s: %w", ip, a.Name, err)
	}
	p.By = by
	return p, nil
}

// arpProbe sends the probes on ifindex and watches for an answer.
func arpProbe(ctx context.Context, ifindex int, hw net.HardwareAddr, ip netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("open a packet socket: %w (needs CAP_NET_RAW)", err)
		}
		return nil, fmt.Errorf("open a packet socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(unix.ETH_P_ARP)}); err != nil {
		return nil, fmt.Errorf("bind a packet socket: %w", err)
	}
	frame := arpProbeFrame(hw, ip)
	dst := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(unix.ETH_P_ARP), Halen: 6}
	copy(dst.Addr[:], frame[0:6])
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	const probes = 3
	nextSend, sent := time.Now(), 0
	buf := make([]byte, 1500)
	for {
		now := time.Now()
		if sent < probes && !now.Before(nextSend) {
			if err := unix.Sendto(fd, frame, 0, dst); err != nil {
				return nil, fmt.Errorf("send: %w", err)
			}
			sent++
			nextSend = now.Add(wait / probes)
		}
		if !now.Before(deadline) {
			return nil, ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		slice := min(deadline.Sub(now), 50*time.Millisecond)
		if sent < probes {
			slice = min(slice, max(nextSend.Sub(now), time.Millisecond))
		}
		tv := unix.NsecToTimeval(max(slice, time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, err
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		if by, ok := arpClaims(buf[:n], hw, ip); ok {
			return by, nil
		}
	}
}

// arpProbeFrame is an Ethernet broadcast ARP request for ip from hw with
// sender address 0.0.0.0 (RFC 5227 2.1.1).
func arpProbeFrame(hw net.HardwareAddr, ip netip.Addr) []byte {
	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, hw...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
	f = binary.BigEndian.AppendUint16(f, 1)      // hardware type Ethernet
	f = binary.BigEndian.AppendUint16(f, 0x0800) // protocol IPv4
	f = append(f, 6, 4)
	f = binary.BigEndian.AppendUint16(f, 1) // request
	f = append(f, hw...)
	f = append(f, 0, 0, 0, 0)       // sender IP: a probe
	f = append(f, 0, 0, 0, 0, 0, 0) // target hardware: unknown
	t := ip.As4()
	return append(f, t[:]...)
}

// arpClaims reports whether frame is an ARP packet (reply, or another
// host's request or announcement) from someone other than self whose
// sender protocol address is ip.
func arpClaims(frame []byte, self net.HardwareAddr, ip netip.Addr) (net.HardwareAddr, bool) {
	if len(frame) < 42 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_ARP {
		return nil, false
	}
	a := frame[14:]
	if binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return nil, false
	}
	sha, spa := net.HardwareAddr(a[8:14]), a[14:18]
	t := ip.As4()
	if !bytes.Equal(spa, t[:]) || bytes.Equal(sha, self) {
		return nil, false
	}
	return append(net.HardwareAddr(nil), sha...), true
}
