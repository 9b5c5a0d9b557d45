package release

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// bootpMin is the shortest message dhcpcd reads back as a lease: the
// BOOTP header and the 4-byte magic cookie (dhcpcd's DHCP_MIN_LEN).
const bootpMin = 240

// magicCookie starts a BOOTP message's options when they are DHCP's
// (RFC 2131 3).
var magicCookie = []byte{99, 130, 83, 99}

// isDhcpcdLease reports whether b looks like a lease dhcpcd stored: a
// BOOTREPLY with the DHCP magic cookie where the options start.
func isDhcpcdLease(b []byte) bool {
	return len(b) >= bootpMin && b[0] == byte(dhcpv4.OpcodeBootReply) &&
		bytes.Equal(b[236:240], magicCookie)
}

// ParseDhcpcd reads a lease file of dhcpcd (6 and later;
// /var/lib/dhcpcd/IFACE.lease on Debian, Ubuntu, Arch, Alpine): the
// server's DHCPACK as it arrived, byte for byte (src/dhcp.c: dhcp_bind
// writes state->new at every bind, renewal and rebind; read_lease reads
// it back as a struct bootp). Address is yiaddr; Server option 54;
// Lifetime option 51, Never when it is 0xffffffff or missing (dhcpcd's
// get_lease takes a missing lease time for infinite); ClientID option 61
// when the server echoed it (ISC dhcpd does not unless told to: the
// release then goes without one, and dhcpd finds the lease by ciaddr and
// chaddr). The file records no interface (its name does) and no time.
// dhcpcd takes the file's modification time for the lease's start
// (dhcp.c, dhcp_start1), but that is no end to rely on here: a clock set
// forward after the write (a board without a real-time clock, a restored
// virtual machine) would end a running lease. As for networkd, the
// address still on the interface tells the lease runs: dhcpcd gives the
// kernel the lease time as the address's lifetime, and the kernel
// removes the address at its end. A reply without a message type (BOOTP
// with DHCP's cookie) is a lease; any other message type is an error;
// options overloaded into sname or file (option 52) are not read.
func ParseDhcpcd(b []byte) (Lease, error) {
	if !isDhcpcdLease(b) {
		return Lease{}, errors.New("not a DHCP reply (no BOOTREPLY with the DHCP magic cookie)")
	}
	m, err := dhcpv4.FromBytes(b)
	if err != nil {
		return Lease{}, fmt.Errorf("DHCP message: %w", err)
	}
	if t := m.MessageType(); t != dhcpv4.MessageTypeNone && t != dhcpv4.MessageTypeAck {
		return Lease{}, fmt.Errorf("a %s, not a DHCPACK", t)
	}
	var l Lease
	a, ok := netip.AddrFromSlice(m.YourIPAddr.To4())
	if !ok || a.IsUnspecified() {
		return Lease{}, errors.New("no address (yiaddr 0.0.0.0)")
	}
	l.Address = a
	if v := m.Options.Get(dhcpv4.OptionServerIdentifier); v != nil {
		s, ok := netip.AddrFromSlice(v)
		if !ok || !s.Is4() {
			return Lease{}, fmt.Errorf("server identifier (option 54) of %d bytes, not an IPv4 address", len(v))
		}
		l.Server = s
	}
	switch v := m.Options.Get(dhcpv4.OptionIPAddressLeaseTime); {
	case v == nil:
		l.Never = true
	case len(v) != 4:
		return Lease{}, fmt.Errorf("lease time (option 51) of %d bytes, not 4", len(v))
	default:
		secs := binary.BigEndian.Uint32(v)
		if secs == 0xffffffff {
			l.Never = true
		} else {
			l.Lifetime = time.Duration(secs) * time.Second
		}
	}
	if v := m.Options.Get(dhcpv4.OptionClientIdentifier); len(v) > 0 {
		l.ClientID = bytes.Clone(v)
	}
	// The address dhcpd keeps the lease under, and compares a release's
	// chaddr with (server/dhcp.c, dhcprelease): the interface's may have
	// changed since (a bridge takes its lowest port's).
	if m.HWType == iana.HWTypeEthernet && len(m.ClientHWAddr) == 6 && !bytes.Equal(m.ClientHWAddr, make([]byte, 6)) {
		l.HWAddr = slices.Clone(m.ClientHWAddr)
	}
	l.Line = 1
	return l, nil
}

// dhcpcdIface is the interface a dhcpcd lease file's name gives:
// IFACE.lease (dhcpcd 7 and later), dhcpcd-IFACE.lease (dhcpcd 6), and
// either with -SSID after IFACE for a wireless interface. exists tells
// the names of the node's interfaces; the longest that fits is taken
// (interface names may hold '-' too). When none exists the name without
// suffix or prefix is returned, for the report to say it is missing; ""
// for a name that is no dhcpcd lease file's.
func dhcpcdIface(base string, exists func(string) bool) string {
	stem, ok := strings.CutSuffix(base, ".lease")
	if !ok || stem == "" {
		return ""
	}
	cands := []string{stem}
	if s, ok := strings.CutPrefix(stem, "dhcpcd-"); ok && s != "" {
		cands = append(cands, s)
	}
	for _, c := range cands {
		for n := c; n != ""; {
			if exists(n) {
				return n
			}
			i := strings.LastIndexByte(n, '-')
			if i <= 0 {
				break
			}
			n = n[:i]
		}
	}
	return cands[len(cands)-1]
}
