//go:build linux

// Package arp asks a link who holds an IPv4 address: an ARP request on
// one interface through a packet socket (CAP_NET_RAW), and whoever
// claims the address in an ARP packet as its sender is the answer. The
// rack's orphan check asks whether anybody uses an address (an RFC 5227
// probe, sender 0.0.0.0, which no neighbour's cache learns from); the
// node's release asks whether the next hop it sent to is there.
package arp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotEthernet: Ask asks only on an Ethernet interface, for an IPv4
// address.
var ErrNotEthernet = errors.New("ARP over Ethernet for IPv4 only")

// Ask sends an ARP request for ip on the interface ifindex, whose
// hardware address is hw, three times within wait (or until ctx ends),
// and returns the hardware address of the first other host that claims
// ip as its sender; nil when nobody did (with ctx's error if ctx ended).
// sender is the request's sender protocol address: the zero Addr sends
// an RFC 5227 probe (0.0.0.0).
func Ask(ctx context.Context, ifindex int, hw net.HardwareAddr, sender, ip netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
	if len(hw) != 6 || !ip.Is4() {
		// The frames are Ethernet's (hlen 6) and IPv4's.
		return nil, fmt.Errorf("%w: hardware address %v, target %v", ErrNotEthernet, hw, ip)
	}
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
	frame := requestFrame(hw, sender, ip)
	dst := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(unix.ETH_P_ARP), Halen: 6}
	copy(dst.Addr[:], frame[0:6])
	deadline, cut := time.Now().Add(wait), false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, cut = d, true // ctx ends the listening early
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
			if cut {
				// Not listened for wait: no answer means nothing.
				// (ctx.Err may not say so yet at its deadline.)
				return nil, context.DeadlineExceeded
			}
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
		if by, ok := claims(buf[:n], hw, ip); ok {
			return by, nil
		}
	}
}

// requestFrame is an Ethernet broadcast ARP request for ip from hw, with
// sender protocol address sender, or 0.0.0.0 for the zero Addr (an RFC
// 5227 2.1.1 probe).
func requestFrame(hw net.HardwareAddr, sender, ip netip.Addr) []byte {
	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, hw...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
	f = binary.BigEndian.AppendUint16(f, 1)      // hardware type Ethernet
	f = binary.BigEndian.AppendUint16(f, 0x0800) // protocol IPv4
	f = append(f, 6, 4)
	f = binary.BigEndian.AppendUint16(f, 1) // request
	f = append(f, hw...)
	if sender.Is4() {
		s := sender.As4()
		f = append(f, s[:]...)
	} else {
		f = append(f, 0, 0, 0, 0) // a probe
	}
	f = append(f, 0, 0, 0, 0, 0, 0) // target hardware: unknown
	t := ip.As4()
	return append(f, t[:]...)
}

// claims reports whether frame is an ARP packet (reply, or another
// host's request or announcement) from someone other than self whose
// sender protocol address is ip.
func claims(frame []byte, self net.HardwareAddr, ip netip.Addr) (net.HardwareAddr, bool) {
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

// htons returns v in network byte order, as sockaddr_ll's protocol
// field holds it (x/sys/unix copies the field as it is).
func htons(v uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))
}
