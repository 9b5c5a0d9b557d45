package release

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// ack is a DHCPACK as ISC dhcpd sends it to dhcpcd, with mods applied.
func ack(t *testing.T, mods ...dhcpv4.Modifier) []byte {
	t.Helper()
	base := []dhcpv4.Modifier{
		func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootReply },
		dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 1}),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
		dhcpv4.WithYourIP(net.IPv4(203, 0, 113, 100)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(203, 0, 113, 1))),
		dhcpv4.WithLeaseTime(600),
	}
	m, err := dhcpv4.New(append(base, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m.ToBytes()
}

func TestParseDhcpcd(t *testing.T) {
	addr := netip.MustParseAddr
	for _, tc := range []struct {
		name string
		mods []dhcpv4.Modifier
		want Lease
		err  string
	}{
		{name: "ack", want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Lifetime: 10 * time.Minute, Line: 1}},
		{name: "echoed client id", mods: []dhcpv4.Modifier{dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte{0xff, 1, 2, 3, 4, 0, 4, 9})},
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), ClientID: []byte{0xff, 1, 2, 3, 4, 0, 4, 9}, Lifetime: 10 * time.Minute, Line: 1}},
		{name: "infinite", mods: []dhcpv4.Modifier{dhcpv4.WithLeaseTime(0xffffffff)},
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Never: true, Line: 1}},
		{name: "no server id", mods: []dhcpv4.Modifier{dhcpv4.WithoutOption(dhcpv4.OptionServerIdentifier)},
			want: Lease{Address: addr("203.0.113.100"), Lifetime: 10 * time.Minute, Line: 1}},
		{name: "bootp reply", mods: []dhcpv4.Modifier{dhcpv4.WithoutOption(dhcpv4.OptionDHCPMessageType), dhcpv4.WithoutOption(dhcpv4.OptionIPAddressLeaseTime)},
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Line: 1}},
		{name: "nak", mods: []dhcpv4.Modifier{dhcpv4.WithMessageType(dhcpv4.MessageTypeNak)}, err: "a NAK, not a DHCPACK"},
		{name: "no address", mods: []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4zero)}, err: "no address (yiaddr 0.0.0.0)"},
		{name: "short server id", mods: []dhcpv4.Modifier{dhcpv4.WithGeneric(dhcpv4.OptionServerIdentifier, []byte{203, 0, 113})}, err: "server identifier (option 54) of 3 bytes"},
		{name: "short lease time", mods: []dhcpv4.Modifier{dhcpv4.WithGeneric(dhcpv4.OptionIPAddressLeaseTime, []byte{0, 2})}, err: "lease time (option 51) of 2 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDhcpcd(ack(t, tc.mods...))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, addrEqual); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	if f := Detect(ack(t)); f != FormatDhcpcd {
		t.Errorf("Detect(DHCPACK) = %v", f)
	}
	// What is not a BOOTREPLY with the cookie is refused before the
	// DHCP decoder sees it.
	req := ack(t, func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootRequest })
	torn := ack(t)[:200]
	if f := Detect(req); f != FormatUnknown {
		t.Errorf("Detect(DHCPREQUEST) = %v", f)
	}
	for name, b := range map[string][]byte{"request": req, "torn": torn, "empty": nil} {
		if _, err := ParseDhcpcd(b); err == nil || !strings.Contains(err.Error(), "not a DHCP reply") {
			t.Errorf("%s: error %v, want not a DHCP reply", name, err)
		}
	}
}

// TestDhcpcdLeaseEnd: dhcpcd's lease starts at the file's time (dhcpcd
// rewrites it at every renewal), so readSource sets its end from it.
func TestDhcpcdLeaseEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eth9.lease")
	if err := os.WriteFile(path, ack(t), 0o640); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
	s, err := readSource(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if s.Format != FormatDhcpcd || len(s.Leases) != 1 || s.Iface != "eth9" {
		t.Fatalf("source %+v", s)
	}
	if got, ok := s.Leases[0].Expiry(); !ok || !got.Equal(at.Add(10*time.Minute)) {
		t.Errorf("expiry %v %v, want %v", got, ok, at.Add(10*time.Minute))
	}
	// A lease that never ends keeps no end, whatever the file's time.
	if err := os.WriteFile(path, ack(t, dhcpv4.WithLeaseTime(0xffffffff)), 0o640); err != nil {
		t.Fatal(err)
	}
	if s, err = readSource(path, ""); err != nil || !s.Leases[0].Never || !s.Leases[0].Expire.IsZero() {
		t.Errorf("infinite lease: %+v, %v", s, err)
	}
}

func TestDhcpcdIface(t *testing.T) {
	ifaces := []string{"eth0", "br-ex", "wlan0", "dhcpcd-x"}
	exists := func(n string) bool { return slices.Contains(ifaces, n) }
	for _, tc := range []struct{ base, want string }{
		{"eth0.lease", "eth0"},
		{"br-ex.lease", "br-ex"},
		{"wlan0-home-net.lease", "wlan0"}, // IFACE-SSID, an SSID with '-'
		{"dhcpcd-eth0.lease", "eth0"},     // dhcpcd 6
		{"dhcpcd-x.lease", "dhcpcd-x"},    // an interface of that name wins
		{"eth1.lease", "eth1"},            // missing: named for the report
		{"dhcpcd-eth1.lease", "eth1"},
		{"eth0.lease6", ""},
		{".lease", ""},
		{"duid", ""},
	} {
		if got := dhcpcdIface(tc.base, exists); got != tc.want {
			t.Errorf("dhcpcdIface(%q) = %q, want %q", tc.base, got, tc.want)
		}
	}
}

// FuzzParseDhcpcd: any input either fails or yields an IPv4 lease that
// a release packet can be made of.
func FuzzParseDhcpcd(f *testing.F) {
	m, _ := dhcpv4.New(func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootReply },
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithYourIP(net.IPv4(203, 0, 113, 9)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(203, 0, 113, 1))), dhcpv4.WithLeaseTime(60))
	f.Add(m.ToBytes())
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := ParseDhcpcd(in)
		if err != nil {
			return
		}
		if !l.Address.Is4() || l.Address.IsUnspecified() || l.Server.IsValid() && !l.Server.Is4() {
			t.Fatalf("lease %+v", l)
		}
		if _, err := Packet(l, net.HardwareAddr{2, 0, 0, 0, 0, 1}, l.ClientID, dhcpv4.TransactionID{1, 2, 3, 4}); err != nil && l.Server.IsValid() {
			t.Fatalf("packet of %+v: %v", l, err)
		}
	})
}
