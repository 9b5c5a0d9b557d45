package rack

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestPickInterface(t *testing.T) {
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{0x52, 0x54, 0, 0, 0, b} }
	pfx := netip.MustParsePrefix
	ifs := []ifaceInfo{
		{Name: "lo", Loopback: true, Addrs: []netip.Prefix{pfx("127.0.0.1/8")}},
		{Name: "br0", MAC: mac(1), Addrs: []netip.Prefix{pfx("203.0.113.1/24"), pfx("203.0.113.2/24")}},
		{Name: "eth1", MAC: mac(2), Addrs: []netip.Prefix{pfx("198.51.100.1/25")}},
		{Name: "eth2", MAC: mac(3), Addrs: []netip.Prefix{pfx("198.51.100.129/25")}},
		{Name: "eth3", MAC: mac(4), Addrs: []netip.Prefix{pfx("198.51.100.130/25")}},
		{Name: "tun0", Addrs: []netip.Prefix{pfx("198.51.100.200/32")}},
	}
	for _, tc := range []struct {
		name       string
		ip, want   string
		server     string
		wantIface  string
		wantServer string
		err        string
	}{
		{name: "subnet holds the IP", ip: "203.0.113.100", wantIface: "br0", wantServer: "203.0.113.1"},
		{name: "named interface", ip: "203.0.113.100", want: "br0", wantIface: "br0", wantServer: "203.0.113.1"},
		{name: "named server wins", ip: "203.0.113.100", server: "203.0.113.2", wantIface: "br0", wantServer: "203.0.113.2"},
		{name: "other subnet", ip: "198.51.100.10", wantIface: "eth1", wantServer: "198.51.100.1"},
		{name: "relayed subnet, interface and server named", ip: "192.0.2.10", want: "eth1", server: "198.51.100.1", wantIface: "eth1", wantServer: "198.51.100.1"},
		{name: "relayed subnet, server names the interface", ip: "192.0.2.10", server: "198.51.100.1", wantIface: "eth1", wantServer: "198.51.100.1"},
		{name: "relayed subnet, nothing named", ip: "192.0.2.10", err: "no interface has an address in a subnet holding 192.0.2.10"},
		{name: "relayed subnet, no server", ip: "192.0.2.10", want: "eth1", err: "pass --server"},
		{name: "ambiguous", ip: "198.51.100.140", err: "interfaces eth2, eth3 all have"},
		{name: "ambiguous, named", ip: "198.51.100.140", want: "eth3", wantIface: "eth3", wantServer: "198.51.100.130"},
		{name: "no such interface", ip: "203.0.113.100", want: "eth9", err: `no interface "eth9"`},
		{name: "loopback", ip: "203.0.113.100", want: "lo", server: "127.0.0.1", err: "no Ethernet address"},
		{name: "no MAC", ip: "198.51.100.200", want: "tun0", err: "no Ethernet address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var server netip.Addr
			if tc.server != "" {
				server = netip.MustParseAddr(tc.server)
			}
			ifc, srv, err := pickInterface(ifs, netip.MustParseAddr(tc.ip), tc.want, server)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("pickInterface = %s, %s, %v; want an error with %q", ifc.Name, srv, err, tc.err)
				}
				return
			}
			if err != nil || ifc.Name != tc.wantIface || srv.String() != tc.wantServer {
				t.Fatalf("pickInterface = %s, %s, %v; want %s, %s", ifc.Name, srv, err, tc.wantIface, tc.wantServer)
			}
		})
	}
}
