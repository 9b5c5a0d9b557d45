package main

import (
	"net/netip"
	"testing"
)

// parseIPReference is parseIP written with net/netip, which the hook
// does without for start-up time.
func parseIPReference(s, family string) (string, bool) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || a.Zone() != "":
		return "", false
	case family == "ipv4" && !a.Is4():
		return "", false
	case family == "ipv6" && (!a.Is6() || a.Is4In6()):
		return "", false
	}
	return a.String(), true
}

var ipSeeds = []string{
	"203.0.113.5", "0.0.0.0", "255.255.255.255", "256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.04", "1..3.4", "1.2.3.4 ",
	"2001:db8:0:0:0:0:0:5", "2001:db8::5", "::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8",
	"1:2:3:4:5:6:7:8:9", "1::2::3", "1:2:3:4:5:6:7:8::", "::1:2:3:4:5:6:7:8", "12345::", "2001:DB8::A", "0:0:1:0:0:0:1:0",
	"1:0:0:1:0:0:0:1", "1:0:0:2:0:0:3:0", "::ffff:203.0.113.5", "::203.0.113.5", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:1.2.3.4",
	"::1.2.3.04", "fe80::1%eth0", "fe80::1%", ":1", "1:", ":::", "1:::2", "0001:0002::", "::ffff:0:0", "",
}

func TestParseIPMatchesNetip(t *testing.T) {
	for _, s := range ipSeeds {
		for _, fam := range []string{"ipv4", "ipv6"} {
			want, wantOK := parseIPReference(s, fam)
			got, err := parseIP(s, fam)
			if (err == nil) != wantOK || got != want {
				t.Errorf("parseIP(%q, %s) = %q, %v; net/netip says %q, %v", s, fam, got, err, want, wantOK)
			}
		}
	}
}

func FuzzParseIP(f *testing.F) {
	for _, s := range ipSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, fam := range []string{"ipv4", "ipv6"} {
			want, wantOK := parseIPReference(s, fam)
			got, err := parseIP(s, fam)
			if (err == nil) != wantOK || got != want {
				t.Fatalf("parseIP(%q, %s) = %q, %v; net/netip says %q, %v", s, fam, got, err, want, wantOK)
			}
		}
	})
}
