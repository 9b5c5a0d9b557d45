package rack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// Request is a release on behalf as it is asked for, text as given:
// `leasekeeper release --for IP --mac MAC [--server S] [--interface I]`
// and POST /leases/{ip}/release read theirs through it, so both accept
// the same addresses.
type Request struct {
	IP, MAC, Server, Interface string
}

// RequestError names the field of a Request that is not what it must be.
type RequestError struct {
	Field string // "ip", "mac" or "server"
	Value string
}

func (e *RequestError) Error() string {
	if e.Field == "mac" {
		return fmt.Sprintf("mac %q is not a 6-octet Ethernet address", e.Value)
	}
	return fmt.Sprintf("%s %q is not an IPv4 address", e.Field, e.Value)
}

// Options checks r (IP, then MAC, then Server; a *RequestError for the
// first that is wrong) and returns the Options it asks for, the fields
// it does not set left zero.
func (r Request) Options() (Options, error) {
	ip, err := netip.ParseAddr(r.IP)
	if err != nil || !ip.Is4() {
		return Options{}, &RequestError{"ip", r.IP}
	}
	mac, err := ParseMAC(r.MAC)
	if err != nil {
		return Options{}, &RequestError{"mac", r.MAC}
	}
	opts := Options{IP: ip, MAC: mac, Interface: r.Interface}
	if r.Server != "" {
		if opts.Server, err = netip.ParseAddr(r.Server); err != nil || !opts.Server.Is4() {
			return Options{}, &RequestError{"server", r.Server}
		}
	}
	return opts, nil
}

// ParseMAC accepts the forms operators and dhcpd write
// (02:00:00:0a:0b:0c, unpadded 2:0:0:a:b:c, upper case, dashes) and
// wants 6 octets.
func ParseMAC(s string) (net.HardwareAddr, error) {
	norm, err := event.NormalizeMAC(s)
	if err == nil {
		var hw net.HardwareAddr
		if hw, err = net.ParseMAC(norm); err == nil && len(hw) == 6 {
			return hw, nil
		}
	}
	hw, err2 := net.ParseMAC(s)
	if err2 == nil && len(hw) == 6 {
		return hw, nil
	}
	return nil, fmt.Errorf("%q is not a 6-octet Ethernet address", s)
}
