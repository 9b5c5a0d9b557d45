package lab

import (
	"net/netip"
)

// AddServer adds a second server namespace on the lab's bridge, for the
// other half of a dhcpd failover pair: a namespace joined to the bridge
// as a client is (eth0), given addr statically. Start its dhcpd with
// DhcpdConfig.NS set to the returned client's NS (Iface defaults to
// eth0 there). addr must lie in the bridge's subnet.
func (l *Lab) AddServer(name string, addr netip.Addr) *Client {
	l.t.Helper()
	p := netip.PrefixFrom(addr, l.Addr.Bits())
	if !allowedPrefix(p) || p.Masked() != l.Addr.Masked() || addr == l.Addr.Addr() {
		l.t.Fatalf("lab: server %s: address %s is not another address of the bridge's subnet %s", name, addr, l.Addr.Masked())
	}
	c := l.AddClient(name)
	if err := l.setup(c.NS, []string{"addr", "add", p.String(), "dev", c.Iface}); err != nil {
		l.t.Fatalf("lab: server %s: %v", name, err)
	}
	return c
}
