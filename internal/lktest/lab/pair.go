package lab

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
)

// PairChannel is what the two agents of a failover pair need for the
// pair channel (agent/pair, [pair]) when both run on this host: a UDP
// address each on loopback (Listen[0] for the first agent, which names
// Listen[1] as its peer, and the other way round) and one key file.
type PairChannel struct {
	Listen  [2]string
	KeyFile string
}

// NewPairChannel picks two free loopback UDP ports and writes a key file
// (mode 0600) in dir.
func NewPairChannel(dir string) (PairChannel, error) {
	var pc PairChannel
	for i := range pc.Listen {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return pc, fmt.Errorf("pair channel: %w", err)
		}
		pc.Listen[i] = c.LocalAddr().String()
		c.Close()
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return pc, err
	}
	pc.KeyFile = filepath.Join(dir, "pair.key")
	if err := os.WriteFile(pc.KeyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return pc, err
	}
	return pc, nil
}

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
