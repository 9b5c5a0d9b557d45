package rack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/leasekeeper/leasekeeper/release"
)

// Frame describes the DHCPRELEASE frame Release writes on dhcpd's
// interface.
type Frame struct {
	// IfaceMAC is the MAC of the interface the frame is written on: the
	// Ethernet source and destination, so the frame is addressed to the
	// rack itself.
	IfaceMAC net.HardwareAddr
	// Server is dhcpd's address: IP source and destination, and the
	// server identifier option.
	Server netip.Addr
	// IP and MAC are the lease's address and hardware address: ciaddr
	// and chaddr.
	IP  netip.Addr
	MAC net.HardwareAddr
	// ClientID is the lease's client identifier (option 61), sent when
	// the lease has one, as the client would.
	ClientID []byte
	// XID is the transaction id.
	XID [4]byte
}

const (
	ethHeaderLen  = 14
	ipv4HeaderLen = 20
	udpHeaderLen  = 8
	etherTypeIPv4 = 0x0800
	dhcpServer    = 67
	dhcpClient    = 68
)

// Message is the DHCPRELEASE itself, as a client would send it
// (release.Packet), with dhcpd's address as the server identifier.
func (f Frame) Message() (*dhcpv4.DHCPv4, error) {
	l := release.Lease{Address: f.IP, Server: f.Server}
	return release.Packet(l, f.MAC, f.ClientID, dhcpv4.TransactionID(f.XID))
}

// Bytes returns the whole Ethernet frame: Ethernet II, IPv4 (no options,
// DF, TTL 64) and UDP 68 → 67 with both checksums, then the DHCP message.
func (f Frame) Bytes() ([]byte, error) {
	if len(f.IfaceMAC) != 6 {
		return nil, fmt.Errorf("interface MAC %v: want a 6-byte Ethernet address", f.IfaceMAC)
	}
	m, err := f.Message()
	if err != nil {
		return nil, err
	}
	payload := m.ToBytes()
	udpLen := udpHeaderLen + len(payload)
	ipLen := ipv4HeaderLen + udpLen
	if ipLen > 1500 {
		return nil, errors.New("DHCPRELEASE larger than an Ethernet MTU")
	}
	b := make([]byte, ethHeaderLen+ipLen)

	eth := b[:ethHeaderLen]
	copy(eth[0:6], f.IfaceMAC)
	copy(eth[6:12], f.IfaceMAC)
	binary.BigEndian.PutUint16(eth[12:], etherTypeIPv4)

	src, dst := f.Server.As4(), f.Server.As4()
	ip := b[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
	ip[0] = 0x45 // version 4, 5 words
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF, offset 0 (dhcpd's filter drops fragments)
	ip[8] = 64
	ip[9] = 17 // UDP
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))

	udp := b[ethHeaderLen+ipv4HeaderLen:]
	binary.BigEndian.PutUint16(udp[0:], dhcpClient)
	binary.BigEndian.PutUint16(udp[2:], dhcpServer)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	copy(udp[udpHeaderLen:], payload)
	// Pseudo-header: source, destination, zero, protocol, UDP length.
	var pseudo uint32
	for _, a := range [][4]byte{src, dst} {
		pseudo += uint32(binary.BigEndian.Uint16(a[0:])) + uint32(binary.BigEndian.Uint16(a[2:]))
	}
	pseudo += 17 + uint32(udpLen)
	sum := checksum(udp, pseudo)
	if sum == 0 {
		sum = 0xffff // 0 means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(udp[6:], sum)
	return b, nil
}

// checksum is the Internet checksum (RFC 1071) of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
