package rack

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

func testFrame() Frame {
	return Frame{
		IfaceMAC: net.HardwareAddr{0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc},
		Server:   netip.MustParseAddr("203.0.113.1"),
		IP:       netip.MustParseAddr("203.0.113.100"),
		MAC:      net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01},
		XID:      [4]byte{0xde, 0xad, 0xbe, 0xef},
	}
}

// TestFrameGolden pins the exact bytes written on the interface.
func TestFrameGolden(t *testing.T) {
	withUID := testFrame()
	withUID.ClientID = []byte{0x01, 0x02, 0, 0, 0, 0, 0x01}
	for name, f := range map[string]Frame{"release": testFrame(), "release-uid": withUID} {
		t.Run(name, func(t *testing.T) {
			b, err := f.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			lktest.Golden(t, filepath.Join("testdata", name+".hexdump"), []byte(hex.Dump(b)))
		})
	}
}

// TestFrameDecodes checks the frame field by field, independently of the
// golden bytes: what dhcpd's BPF filter and decode_udp_ip_header look at,
// and the DHCP message as a decoder reads it.
func TestFrameDecodes(t *testing.T) {
	f := testFrame()
	f.ClientID = []byte{0x01, 0x02, 0, 0, 0, 0, 0x01}
	b, err := f.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	// Ethernet: to and from the interface itself, IPv4.
	if !bytes.Equal(b[0:6], f.IfaceMAC) || !bytes.Equal(b[6:12], f.IfaceMAC) || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
		t.Errorf("Ethernet header % x", b[:14])
	}
	ip := b[14:34]
	if ip[0] != 0x45 || ip[9] != 17 || binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
		t.Errorf("IP header % x: want v4, IHL 5, UDP, not a fragment", ip)
	}
	if int(binary.BigEndian.Uint16(ip[2:])) != len(b)-14 {
		t.Errorf("IP total length %d, frame carries %d", binary.BigEndian.Uint16(ip[2:]), len(b)-14)
	}
	if checksum(ip, 0) != 0 {
		t.Error("IP header checksum does not verify")
	}
	if !bytes.Equal(ip[12:16], f.Server.AsSlice()) || !bytes.Equal(ip[16:20], f.Server.AsSlice()) {
		t.Errorf("IP source/destination % x / % x, want the server's", ip[12:16], ip[16:20])
	}
	udp := b[34:]
	if binary.BigEndian.Uint16(udp[0:]) != 68 || binary.BigEndian.Uint16(udp[2:]) != 67 || int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		t.Errorf("UDP header % x", udp[:8])
	}
	var pseudo []byte
	pseudo = append(pseudo, ip[12:20]...)
	pseudo = append(pseudo, 0, 17)
	pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(udp)))
	if checksum(append(pseudo, udp...), 0) != 0 || binary.BigEndian.Uint16(udp[6:]) == 0 {
		t.Error("UDP checksum missing or does not verify")
	}

	m, err := dhcpv4.FromBytes(udp[8:])
	if err != nil {
		t.Fatal(err)
	}
	type msg struct {
		Op, Type, CIAddr, CHAddr, ServerID, XID string
		ClientID                                []byte
	}
	got := msg{
		Op: m.OpCode.String(), Type: m.MessageType().String(), CIAddr: m.ClientIPAddr.String(),
		CHAddr: m.ClientHWAddr.String(), ServerID: m.ServerIdentifier().String(), XID: m.TransactionID.String(),
		ClientID: m.Options.Get(dhcpv4.OptionClientIdentifier),
	}
	want := msg{
		Op: "BootRequest", Type: "RELEASE", CIAddr: "203.0.113.100", CHAddr: "02:00:00:00:00:01",
		ServerID: "203.0.113.1", XID: "0xdeadbeef", ClientID: f.ClientID,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DHCP message (-want +got)\n%s", diff)
	}
	if m.Options.Has(dhcpv4.OptionRequestedIPAddress) {
		t.Error("a DHCPRELEASE must not carry requested-address (dhcpd logs it)")
	}
}

func TestFrameInvalid(t *testing.T) {
	for name, mod := range map[string]func(*Frame){
		"no interface MAC": func(f *Frame) { f.IfaceMAC = nil },
		"short client MAC": func(f *Frame) { f.MAC = f.MAC[:4] },
		"IPv6 address":     func(f *Frame) { f.IP = netip.MustParseAddr("2001:db8::1") },
		"no server":        func(f *Frame) { f.Server = netip.Addr{} },
	} {
		t.Run(name, func(t *testing.T) {
			f := testFrame()
			mod(&f)
			if b, err := f.Bytes(); err == nil {
				t.Errorf("Bytes = %d bytes, want an error", len(b))
			}
		})
	}
}

func TestChecksum(t *testing.T) {
	// RFC 1071's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
	if got := checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0); got != ^uint16(0xddf2) {
		t.Errorf("checksum = %#04x, want %#04x", got, ^uint16(0xddf2))
	}
	if got := checksum([]byte{0xff}, 0); got != ^uint16(0xff00) {
		t.Errorf("odd length: checksum = %#04x", got)
	}
}
