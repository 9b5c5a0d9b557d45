package release

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Packet builds the DHCPRELEASE for a lease (RFC 2131 4.4.6, table 5):
// op BOOTREQUEST, ciaddr the leased address, chaddr the interface's
// hardware address, option 53 RELEASE, option 54 the lease's server,
// option 61 the client identifier when there is one, xid the caller's
// (fresh per packet), no broadcast flag, no requested address. hw must
// be an Ethernet (6-byte) address: dhcpd releases only when chaddr
// matches the lease's hardware address.
func Packet(l Lease, hw net.HardwareAddr, clientID []byte, xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) {
	if !l.Address.Is4() {
		return nil, fmt.Errorf("lease address %v is not IPv4", l.Address)
	}
	if !l.Server.Is4() {
		return nil, errors.New("the lease records no server identifier")
	}
	if len(hw) != 6 {
		return nil, fmt.Errorf("hardware address %v is not Ethernet (6 bytes)", hw)
	}
	if len(clientID) > 255 {
		return nil, fmt.Errorf("client identifier of %d bytes (at most 255)", len(clientID))
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithTransactionID(xid),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
		dhcpv4.WithClientIP(l.Address.AsSlice()),
		dhcpv4.WithHwAddr(hw),
		dhcpv4.WithBroadcast(false),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(l.Server.AsSlice())),
	}
	if len(clientID) > 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClientIdentifier(clientID)))
	}
	p, err := dhcpv4.New(mods...)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Describe is a one-line account of a release packet for reports and
// --dry-run.
func Describe(p *dhcpv4.DHCPv4) string {
	var b strings.Builder
	fmt.Fprintf(&b, "DHCPRELEASE xid %s ciaddr %s chaddr %s server-id %s",
		p.TransactionID, p.ClientIPAddr, p.ClientHWAddr, p.ServerIdentifier())
	if id := p.Options.Get(dhcpv4.OptionClientIdentifier); len(id) > 0 {
		fmt.Fprintf(&b, " client-id %s", colonHex(id))
	}
	return b.String()
}

func colonHex(b []byte) string {
	var s strings.Builder
	for i, c := range b {
		if i > 0 {
			s.WriteByte(':')
		}
		fmt.Fprintf(&s, "%02x", c)
	}
	return s.String()
}
