package rack

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ifaceInfo is what choosing the interface needs to know of one.
type ifaceInfo struct {
	Name     string
	Index    int
	MAC      net.HardwareAddr
	Loopback bool
	Addrs    []netip.Prefix // IPv4 addresses with their prefix length
}

// pickInterface chooses the interface to write the release on and
// dhcpd's address on it. want and server are the operator's choices
// (zero when not given). Without want, the interface is the one whose
// IPv4 subnet holds ip — where dhcpd received the client's packets — or,
// when only a server address was given, the one holding that address.
func pickInterface(ifs []ifaceInfo, ip netip.Addr, want string, server netip.Addr) (ifaceInfo, netip.Addr, error) {
	inSubnet := func(ifc ifaceInfo) (netip.Addr, bool) {
		for _, p := range ifc.Addrs {
			if p.Addr().Is4() && p.Contains(ip) {
				return p.Addr(), true
			}
		}
		return netip.Addr{}, false
	}
	hasAddr := func(ifc ifaceInfo, a netip.Addr) bool {
		for _, p := range ifc.Addrs {
			if p.Addr() == a {
				return true
			}
		}
		return false
	}
	finish := func(ifc ifaceInfo) (ifaceInfo, netip.Addr, error) {
		if ifc.Loopback || len(ifc.MAC) != 6 {
			return ifaceInfo{}, netip.Addr{}, interfaceErrorf("interface %s has no Ethernet address (a bridge without ports has none): dhcpd receives through the Ethernet interface it serves", ifc.Name)
		}
		if server.IsValid() {
			return ifc, server, nil
		}
		if a, ok := inSubnet(ifc); ok {
			return ifc, a, nil
		}
		return ifaceInfo{}, netip.Addr{}, interfaceErrorf("interface %s has no address in a subnet holding %s: pass --server (dhcpd's address on %s)", ifc.Name, ip, ifc.Name)
	}

	if want != "" {
		for _, ifc := range ifs {
			if ifc.Name == want {
				return finish(ifc)
			}
		}
		return ifaceInfo{}, netip.Addr{}, interfaceErrorf("no interface %q that is up", want)
	}
	var cands []ifaceInfo
	for _, ifc := range ifs {
		if _, ok := inSubnet(ifc); ok && !ifc.Loopback {
			cands = append(cands, ifc)
		}
	}
	if len(cands) == 0 && server.IsValid() {
		for _, ifc := range ifs {
			if hasAddr(ifc, server) && !ifc.Loopback {
				cands = append(cands, ifc)
			}
		}
	}
	switch len(cands) {
	case 0:
		return ifaceInfo{}, netip.Addr{}, interfaceErrorf("no interface has an address in a subnet holding %s (a relayed subnet?): pass --interface (one dhcpd serves) and --server (dhcpd's address on it)", ip)
	case 1:
		return finish(cands[0])
	}
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.Name
	}
	return ifaceInfo{}, netip.Addr{}, interfaceErrorf("interfaces %s all have an address in a subnet holding %s: pass --interface (the one dhcpd serves)", strings.Join(names, ", "), ip)
}

// systemInterfaces lists this network namespace's interfaces that are up.
func systemInterfaces() ([]ifaceInfo, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []ifaceInfo
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		info := ifaceInfo{Name: ifc.Name, Index: ifc.Index, MAC: ifc.HardwareAddr, Loopback: ifc.Flags&net.FlagLoopback != 0}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			addr, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			addr = addr.Unmap()
			if !addr.Is4() {
				continue
			}
			bits, _ := ipn.Mask.Size()
			info.Addrs = append(info.Addrs, netip.PrefixFrom(addr, bits))
		}
		out = append(out, info)
	}
	return out, nil
}

// InterfaceError: no interface to send the release on could be chosen,
// or the one named cannot carry it; the caller can name the interface
// (and dhcpd's address on it) to send on.
type InterfaceError struct{ msg string }

func (e *InterfaceError) Error() string { return e.msg }

func interfaceErrorf(format string, args ...any) error {
	return &InterfaceError{fmt.Sprintf(format, args...)}
}
