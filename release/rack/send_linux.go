//go:build linux

package rack

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// sendFrame writes frame, a complete Ethernet frame, on the interface with
// index ifindex through an AF_PACKET socket. The kernel passes frames
// transmitted on an interface to every packet socket bound to it, dhcpd's
// included.
func sendFrame(ifname string, ifindex int, frame []byte) error {
	// Protocol 0: the socket is never bound to receive anything.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("open a packet socket: %w (needs CAP_NET_RAW: run as root)", err)
		}
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return fmt.Errorf("open a packet socket: %w (a systemd service needs AF_PACKET in RestrictAddressFamilies)", err)
		}
		return fmt.Errorf("open a packet socket: %w", err)
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{
		Ifindex:  ifindex,
		Protocol: htons(unix.ETH_P_IP),
		Halen:    6,
	}
	copy(sa.Addr[:], frame[0:6])
	if err := unix.Sendto(fd, frame, 0, sa); err != nil {
		return fmt.Errorf("send DHCPRELEASE on %s: %w", ifname, err)
	}
	return nil
}

// htons returns v in network byte order, as sockaddr_ll's protocol
// field holds it (x/sys/unix copies the field as it is).
func htons(v uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))
}
