package event

import (
	"errors"
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

func TestItem(t *testing.T) {
	e := Event{Action: Release, Family: IPv4, MAC: "00:16:3e:00:00:01", IP: netip.MustParseAddr("203.0.113.5"), Timestamp: 7, Reason: "x", Source: SourceFile}
	want := RegionItem{Action: "release", Family: "ipv4", Hostname: "", MAC: "00:16:3e:00:00:01", IP: "203.0.113.5", Timestamp: 7}
	if diff := cmp.Diff(want, e.Item()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
