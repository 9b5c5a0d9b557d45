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
		want Lease // HWAddr: the ACK's chaddr, unless noHW
		noHW bool
		err  string
	}{
		{name: "ack", want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Lifetime: 10 * time.Minute, Line: 1}},
		{name: "echoed client id", mods: []dhcpv4.Modifier{dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte{0xff, 1, 2, 3, 4, 0, 4, 9})},
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), ClientID: []byte{0xff, 1, 2, 3, 4, 0, 4, 9}, Lifetime: 10 * time.Minute, Line: 1}},
		{name: "infinite", mods: []dhcpv4.Modifier{dhcpv4.WithLeaseTime(0xffffffff)},
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Never: true, Line: 1}},
		{name: "no server id", mods: []dhcpv4.Modifier{dhcpv4.WithoutOption(dhcpv4.OptionServerIdentifier)},
			want: Lease{Address: addr("203.0.113.100"), Lifetime: 10 * time.Minute, Line: 1}},
		{name: "no lease time", mods: []dhcpv4.Modifier{dhcpv4.WithoutOption(dhcpv4.OptionIPAddressLeaseTime)}, // dhcpcd: infinite
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Never: true, Line: 1}},
		{name: "bootp reply", mods: []dhcpv4.Modifier{dhcpv4.WithoutOption(dhcpv4.OptionDHCPMessageType)},
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Lifetime: 10 * time.Minute, Line: 1}},
		// chaddr is the client's address as dhcpd keeps the lease under
		// it; none recorded (zeros) leaves the interface's to stand in.
		{name: "no chaddr", mods: []dhcpv4.Modifier{dhcpv4.WithHwAddr(make(net.HardwareAddr, 6))}, noHW: true,
			want: Lease{Address: addr("203.0.113.100"), Server: addr("203.0.113.1"), Lifetime: 10 * time.Minute, Line: 1}},
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
			if !tc.noHW {
				tc.want.HWAddr = net.HardwareAddr{2, 0, 0, 0, 0, 1}
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

// TestDhcpcdLeaseEnd: a dhcpcd lease's end is unknown whatever the
// file's time (a clock set forward after the write would otherwise end a
// running lease); readSource stamps it with that time, and of two files
// naming one address on one interface Plan takes the newer.
func TestDhcpcdLeaseEnd(t *testing.T) {
	dir := t.TempDir()
	older, newer := filepath.Join(dir, "wlan0-cafe.lease"), filepath.Join(dir, "wlan0-home.lease")
	if err := os.WriteFile(older, ack(t, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(203, 0, 113, 2)))), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newer, ack(t), 0o640); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for i, p := range []string{newer, older} {
		when := at.Add(-time.Duration(i) * 24 * time.Hour)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	var sources []Source
	for _, p := range []string{newer, older} {
		s, err := readSource(p, "wlan0")
		if err != nil {
			t.Fatal(err)
		}
		if s.Format != FormatDhcpcd || len(s.Leases) != 1 {
			t.Fatalf("source %+v", s)
		}
		if end, ok := s.Leases[0].Expiry(); ok {
			t.Errorf("%s: end %v, want unknown", p, end)
		}
		sources = append(sources, *s)
	}
	if !sources[0].Leases[0].Written.Equal(at) {
		t.Errorf("written %v, want the file's time %v", sources[0].Leases[0].Written, at)
	}
	ifaces := map[string]Iface{"wlan0": {Name: "wlan0", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1},
		Prefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.100/24")}}}
	// Whichever file is read first, the newer one's server is released to;
	// a day later than both files' lease time the lease still runs.
	for _, order := range [][]Source{sources, {sources[1], sources[0]}} {
		acts := Plan(order, ifaces, nil, at.Add(48*time.Hour))
		if len(acts) != 1 || acts[0].Verdict != Release || acts[0].Lease.Server != netip.MustParseAddr("203.0.113.1") {
			t.Errorf("plan from %s first: %+v, want one release to 203.0.113.1", order[0].Path, acts)
		}
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
