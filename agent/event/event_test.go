package event

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDatagram(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Event
		err  string
	}{
		{
			name: "maas helper commit",
			in:   `{"action": "commit", "mac": "2:0:0:a:b:C", "ip_family": "ipv4", "ip": "203.0.113.5", "timestamp": 1795000000, "lease_time": 600, "hostname": "node-1"}`,
			want: Event{Action: Commit, Family: IPv4, MAC: "02:00:00:0a:0b:0c", IP: netip.MustParseAddr("203.0.113.5"), Hostname: "node-1", Timestamp: 1795000000, LeaseTime: 600, Source: SourceHook},
		},
		{
			name: "expiry without lease time or hostname, extra keys",
			in:   `{"action":"expiry","mac":"00:16:3e:00:00:01","ip_family":"ipv4","ip":"203.0.113.6","timestamp":1795000001,"timestamp_ns":1795000001123456789,"pid":42}`,
			want: Event{Action: Expiry, Family: IPv4, MAC: "00:16:3e:00:00:01", IP: netip.MustParseAddr("203.0.113.6"), Timestamp: 1795000001, TimestampNS: 1795000001123456789, Source: SourceHook},
		},
		{
			name: "dhcpd's (none) is no hostname; float timestamp",
			in:   `{"action":"commit","mac":"00:16:3e:00:00:01","ip_family":"ipv6","ip":"2001:db8::5","timestamp":1795000000.0,"lease_time":0,"hostname":"(none)"}`,
			want: Event{Action: Commit, Family: IPv6, MAC: "00:16:3e:00:00:01", IP: netip.MustParseAddr("2001:db8::5"), Timestamp: 1795000000, Source: SourceHook},
		},
		{
			name: "no mac: valid, kept back later (Deliverable)",
			in:   `{"action":"expiry","mac":"","ip_family":"ipv4","ip":"203.0.113.6","timestamp":1795000001}`,
			want: Event{Action: Expiry, Family: IPv4, IP: netip.MustParseAddr("203.0.113.6"), Timestamp: 1795000001, Source: SourceHook},
		},
		{
			// leasekeeper6.conf passes option dhcp6.client-id as --mac;
			// this DUID-LLT is the server-duid dhcpd 4.4.3 wrote in a
			// sample leases file (type 1, hardware 1, time, MAC).
			name: "DHCPv6 DUID-LLT: the MAC inside it",
			in:   `{"action":"commit","mac":"0:1:0:1:32:9f:17:c6:26:88:1f:ef:28:30","ip_family":"ipv6","ip":"2001:db8::5","timestamp":1795000000,"lease_time":4294967295}`,
			want: Event{Action: Commit, Family: IPv6, MAC: "26:88:1f:ef:28:30", DUID: "00:01:00:01:32:9f:17:c6:26:88:1f:ef:28:30",
				IP: netip.MustParseAddr("2001:db8::5"), Timestamp: 1795000000, LeaseTime: MaxLeaseTime, Source: SourceHook},
		},
		{
			name: "DHCPv6 DUID-EN: no MAC",
			in:   `{"action":"release","mac":"0:2:0:0:ab:11:1:2:3:4:5:6:7:8","ip_family":"ipv6","ip":"2001:db8::6","timestamp":1795000000}`,
			want: Event{Action: Release, Family: IPv6, DUID: "00:02:00:00:ab:11:01:02:03:04:05:06:07:08",
				IP: netip.MustParseAddr("2001:db8::6"), Timestamp: 1795000000, Source: SourceHook},
		},
		{name: "DHCPv6 DUID too long", in: `{"action":"commit","mac":"` + strings.Repeat("1:", 130) + `1","ip_family":"ipv6","ip":"2001:db8::5","timestamp":1}`, err: "longer than 130"},
		{name: "bad action", in: `{"action":"renew","mac":"0:1:2:3:4:5","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1}`, err: "action"},
		{name: "family mismatch", in: `{"action":"commit","mac":"0:1:2:3:4:5","ip_family":"ipv6","ip":"203.0.113.5","timestamp":1}`, err: "not IPv6"},
		{name: "v4-mapped is not v6", in: `{"action":"commit","mac":"0:1:2:3:4:5","ip_family":"ipv6","ip":"::ffff:203.0.113.5","timestamp":1}`, err: "not IPv6"},
		{name: "bad mac", in: `{"action":"commit","mac":"0:1:2:3:4:zz","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1}`, err: "not hex"},
		{name: "mac octet too long", in: `{"action":"commit","mac":"000:1:2:3:4:5","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1}`, err: "octet 1"},
		{name: "no timestamp", in: `{"action":"commit","mac":"0:1:2:3:4:5","ip_family":"ipv4","ip":"203.0.113.5"}`, err: "no timestamp"},
		{name: "negative lease time", in: `{"action":"commit","mac":"0:1:2:3:4:5","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1,"lease_time":-1}`, err: "negative"},
		{name: "hostname not a string", in: `{"action":"commit","mac":"0:1:2:3:4:5","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1,"hostname":5}`, err: "hostname"},
		{name: "garbage", in: "\x00\xff{", err: "not a JSON object"},
		{name: "two objects", in: `{} {}`, err: "trailing"},
		{name: "empty", in: ``, err: "not a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDatagram([]byte(tc.in), SourceHook)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCleanHostname(t *testing.T) {
	long := strings.Repeat("é", MaxHostname) // 2 bytes a rune
	tests := []struct{ in, want string }{
		{"node-1", "node-1"},
		{"(none)", ""},
		{"bad\xffbyte", "bad\uFFFDbyte"},
		{long, long[:MaxHostname]},
		{"x" + long, ("x" + long)[:MaxHostname-1]}, // never cut inside a rune
	}
	for _, tc := range tests {
		if got := CleanHostname(tc.in); got != tc.want {
			t.Errorf("CleanHostname(%.20q…) = %.20q… (len %d), want len %d", tc.in, got, len(got), len(tc.want))
		}
	}
}

func TestMACFromDUID(t *testing.T) {
	mac := []byte{0x00, 0x16, 0x3e, 0x01, 0x02, 0x03}
	tests := []struct {
		name string
		duid []byte
		want []byte
		what string
	}{
		{"DUID-LLT Ethernet", append([]byte{0, 1, 0, 1, 0x2f, 0, 0, 1}, mac...), mac, "DUID-LLT with hardware type 1"},
		{"DUID-LL Ethernet", append([]byte{0, 3, 0, 1}, mac...), mac, "DUID-LL with hardware type 1"},
		{"DUID-LL InfiniBand", append([]byte{0, 3, 0, 32}, make([]byte, 20)...), nil, "DUID-LL with hardware type 32"},
		{"DUID-LL IEEE 802 (not type 1)", append([]byte{0, 3, 0, 6}, mac...), nil, "DUID-LL with hardware type 6"},
		{"DUID-LLT short address", []byte{0, 1, 0, 1, 0, 0, 0, 1, 1, 2}, nil, "DUID-LLT with hardware type 1"},
		{"DUID-LLT without time", []byte{0, 1, 0, 1, 0, 0}, nil, "DUID-LLT with hardware type 1"},
		{"DUID-EN", []byte{0, 2, 0, 0, 0xab, 0x11, 1, 2, 3, 4, 5, 6}, nil, "DUID-EN"},
		{"DUID-UUID", append([]byte{0, 4}, make([]byte, 16)...), nil, "DUID-UUID"},
		{"unknown type", []byte{0, 9, 0, 1, 1, 2, 3, 4, 5, 6}, nil, "a DUID of unknown type 9"},
		{"too short", []byte{0}, nil, "a DUID too short to have a type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := MACFromDUID(tc.duid)
			if ok != (tc.want != nil) || string(got) != string(tc.want) {
				t.Errorf("MACFromDUID = %x, %t; want %x", got, ok, tc.want)
			}
			if d := DescribeDUID(tc.duid); d != tc.what {
				t.Errorf("DescribeDUID = %q, want %q", d, tc.what)
			}
		})
	}
}

func TestDeliverable(t *testing.T) {
	ip4, ip6 := netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("2001:db8::5")
	tests := []struct {
		name string
		ev   Event
		kind string // "" = deliverable
	}{
		{"ethernet", Event{Action: Commit, Family: IPv4, IP: ip4, MAC: "0:16:3e:0:0:1"}, ""},
		{"no mac", Event{Action: Commit, Family: IPv4, IP: ip4}, NoMACEmpty},
		{"infiniband's 20 octets", Event{Action: Commit, Family: IPv4, IP: ip4, MAC: strings.Repeat("a:", 19) + "a"}, NoMACNotSixByte},
		{"v6 DUID-LL", Event{Action: Commit, Family: IPv6, IP: ip6, MAC: "0:3:0:1:0:16:3e:0:0:1"}, ""},
		{"v6 DUID-UUID", Event{Action: Commit, Family: IPv6, IP: ip6, MAC: "0:4" + strings.Repeat(":7", 16)}, NoMACDUID},
		{"v6 no DUID", Event{Action: Expiry, Family: IPv6, IP: ip6}, NoMACEmpty},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev
			if err := ev.Normalize(); err != nil {
				t.Fatal(err)
			}
			again := ev
			if err := again.Normalize(); err != nil || again != ev {
				t.Fatalf("Normalize is not idempotent: %+v then %+v (%v)", ev, again, err)
			}
			err := ev.Deliverable()
			var ne *NoMACError
			switch {
			case tc.kind == "" && err != nil:
				t.Fatalf("Deliverable: %v", err)
			case tc.kind != "" && (!errors.As(err, &ne) || ne.Kind != tc.kind || !errors.Is(err, ErrNoMAC)):
				t.Fatalf("Deliverable = %v, want a %s NoMACError", err, tc.kind)
			}
			if err != nil {
				t.Logf("%s: %v", tc.kind, err)
			}
		})
	}
}

// TestLeaseTimeClamp: the region's lease_time column is 32-bit signed.
func TestLeaseTimeClamp(t *testing.T) {
	ev := Event{Action: Commit, Family: IPv4, IP: netip.MustParseAddr("203.0.113.5"), MAC: "0:16:3e:0:0:1", LeaseTime: 1 << 32}
	if it := ev.Item(); it.LeaseTime != 2147483647 {
		t.Errorf("Item().LeaseTime = %d before Normalize", it.LeaseTime)
	}
	if err := ev.Normalize(); err != nil || ev.LeaseTime != 2147483647 {
		t.Errorf("Normalize: lease_time %d, %v", ev.LeaseTime, err)
	}
	ev.LeaseTime = 2147483647
	if err := ev.Normalize(); err != nil || ev.LeaseTime != 2147483647 {
		t.Errorf("Normalize changed the largest lease_time: %d, %v", ev.LeaseTime, err)
	}
}

func TestItem(t *testing.T) {
	e := Event{Action: Release, Family: IPv4, MAC: "00:16:3e:00:00:01", IP: netip.MustParseAddr("203.0.113.5"), Timestamp: 7, Reason: "x", Source: SourceFile}
	want := RegionItem{Action: "release", Family: "ipv4", Hostname: "", MAC: "00:16:3e:00:00:01", IP: "203.0.113.5", Timestamp: 7}
	if diff := cmp.Diff(want, e.Item()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// FuzzParseDatagram: whatever a hook sends, an accepted event is in
// canonical form (Normalize changes nothing more), its region item never
// carries a lease_time the region's column cannot hold, and Deliverable
// decides without failing.
func FuzzParseDatagram(f *testing.F) {
	f.Add(`{"action":"commit","mac":"2:0:0:a:b:C","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1,"lease_time":99999999999}`)
	f.Add(`{"action":"commit","mac":"0:1:0:1:32:9f:17:c6:26:88:1f:ef:28:30","ip_family":"ipv6","ip":"2001:db8::5","timestamp":1}`)
	f.Add(`{"action":"expiry","mac":"","ip_family":"ipv6","ip":"2001:db8::5","timestamp":1}`)
	f.Fuzz(func(t *testing.T, in string) {
		ev, err := ParseDatagram([]byte(in), SourceHook)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		again := ev
		if err := again.Normalize(); err != nil || again != ev {
			t.Fatalf("not canonical: %+v then %+v (%v)", ev, again, err)
		}
		if it := ev.Item(); it.LeaseTime > MaxLeaseTime || it.LeaseTime < 0 {
			t.Fatalf("lease_time %d", it.LeaseTime)
		}
		if err := ev.Deliverable(); err == nil && strings.Count(ev.MAC, ":") != 5 {
			t.Fatalf("deliverable with mac %q", ev.MAC)
		}
	})
}

// TestRegionHostname pins what the region can take, as MAAS's
// coerce_to_valid_hostname (maascommon/utils/network.py) makes it and
// update_dynamic_hostname (maasservicelayer/services/dnsresources.py)
// asserts: a name that coerces to nothing or to more than 64 characters
// would fail the whole batch with 500, so it is sent as "".
func TestRegionHostname(t *testing.T) {
	for in, want := range map[string]string{
		"node-1":                      "node-1",
		"Node_1":                      "node-1",
		"web01.example.com":           "web01-example-com",
		"  spaced  name ":             "spaced-name",
		"nul\x00in\x00it":             "nul-in-it",
		"ctl\x01\x1f\x7fchars\n":      "ctl-chars",
		"ünïcode":                     "n-code",
		"(none)":                      "",
		"":                            "",
		"   ":                         "",
		"---":                         "",
		"!!!":                         "",
		strings.Repeat("a", 64):       strings.Repeat("a", 64),
		strings.Repeat("a", 65):       "",
		"-" + strings.Repeat("b", 64): strings.Repeat("b", 64),
		strings.Repeat("x.", 200):     "",
		// Leading dashes are trimmed before the length counts, as MAAS
		// trims them (a review: the early cut made this "").
		strings.Repeat("-", 300) + "abc_": "abc",
	} {
		if got := RegionHostname(in); got != want {
			t.Errorf("RegionHostname(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRegionReady: a name regionReady passes is one coerceHostname
// leaves as it is (RegionHostname returns it without a copy).
func TestRegionReady(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const alphabet = "az09-AZ.( )_é"
	ready := 0
	for range 200_000 {
		n := r.IntN(70)
		if r.IntN(4) == 0 {
			n = 63 + r.IntN(3)
		}
		b := make([]byte, 0, n)
		for len(b) < n {
			if r.IntN(8) == 0 {
				b = append(b, alphabet[r.IntN(len(alphabet))])
			} else {
				b = append(b, "abcxyz0189-"[r.IntN(11)])
			}
		}
		h := string(b)
		if regionReady(h) {
			ready++
			if got := coerceHostname(h); got != h {
				t.Fatalf("regionReady(%q), but coerceHostname makes it %q", h, got)
			}
		}
		if got, want := RegionHostname(h), coerceHostname(h); got != want {
			t.Fatalf("RegionHostname(%q) = %q, coerceHostname %q", h, got, want)
		}
	}
	if ready < 1000 {
		t.Fatalf("only %d ready names generated", ready)
	}
}
