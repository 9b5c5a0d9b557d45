package lab

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLabDhclient6: in a lab made WithIPv6 a client gets an address
// from dhcpd -6 with dhclient -6 and releases it; dhcpd's file shows
// both, with the client's DUID.
func TestLabDhclient6(t *testing.T) {
	Require(t, "dhcpd", "dhclient")
	t.Parallel()
	l := New(t, WithIPv6(netip.MustParsePrefix("2001:db8:2::1/64")))
	d := l.StartDhcpd(t, DhcpdConfig{Family: 6, Conf: "default-lease-time 600;\npreferred-lifetime 300;\n" +
		l.Subnet6Conf("range6 2001:db8:2::100 2001:db8:2::1ff;")})
	c := l.AddClient("c1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ip, err := c.Dhclient6(ctx, "-D", "LL")
	if err != nil {
		t.Fatalf("%v\ndhcpd:\n%s", err, d.Logs())
	}
	if !netip.MustParsePrefix("2001:db8:2::/64").Contains(ip) || c.Addr() != ip {
		t.Fatalf("got %s (Addr %s)", ip, c.Addr())
	}
	// DUID-LL: type 3, Ethernet, eth0's MAC.
	if duid := "00:03:00:01:" + c.MAC.String(); !strings.Contains(d.Logs(), "client with duid "+duid) {
		t.Errorf("dhcpd did not see DUID %s:\n%s", duid, d.Logs())
	}
	if err := c.Release6(ctx); err != nil {
		t.Fatal(err)
	}
	// dhclient exits once dhcpd answered; dhcpd may write the release
	// a moment later (CI read the file before it had).
	waitFor(t, 10*time.Second, ip.String()+" released in dhcpd's file", func() bool {
		b, err := os.ReadFile(d.LeasesPath())
		return err == nil && strings.Contains(string(b), "iaaddr "+ip.String()+" {\n    binding state released;")
	})
	if c.Addr().IsValid() {
		t.Errorf("Addr %s after Release6", c.Addr())
	}
}
