package chaos

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// TestFailoverTimers: the lab's short timers by default, and with
// PairMAASTimers the lines MAAS's template writes for each role
// (src/maasserver/templates/dhcp/dhcpd.conf.template: mclt and split in
// the primary's statement only, no auto-partner-down).
func TestFailoverTimers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maas    bool
		primary bool
		want    []string
	}{
		{"lab primary", false, true, []string{"max-response-delay 5;", "max-unacked-updates 10;", "load balance max seconds 3;", "auto-partner-down 1;", "mclt 10;", "split 255;"}},
		{"lab secondary", false, false, []string{"max-response-delay 5;", "max-unacked-updates 10;", "load balance max seconds 3;", "auto-partner-down 1;"}},
		{"maas primary", true, true, []string{"max-response-delay 60;", "max-unacked-updates 10;", "load balance max seconds 3;", "mclt 3600;", "split 255;"}},
		{"maas secondary", true, false, []string{"max-response-delay 60;", "max-unacked-updates 10;", "load balance max seconds 3;"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &rack{run: &run{opts: Options{PairMAASTimers: tc.maas}}}
			var got []string
			for l := range strings.Lines(k.failoverTimers(tc.primary)) {
				got = append(got, strings.TrimSpace(l))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("failoverTimers(%v) =\n%s\nwant\n%s", tc.primary, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestPartnerConf: with PairPartners, rack a is VLAN 5001's primary and
// VLAN 5002's secondary, rack c VLAN 5002's primary, each peer of 5002
// on its own port (one dhcpd's two peers must not share one), its pool
// in the relayed subnet; c declares the bridge's subnet with no pool and
// not authoritative, so that it neither offers nor refuses VLAN 5001's
// clients; b knows nothing of 5002. (MAAS: a failover peer per HA VLAN,
// src/maasserver/dhcp.py make_failover_peer_config.)
func TestPartnerConf(t *testing.T) {
	l := &lab.Lab{Addr: netip.MustParsePrefix("203.0.113.1/24")}
	conf := func(i int) string {
		o := Options{Pair: true, PairPartners: true, Lease: 20, Snippet: "../../packaging/dhcpd/leasekeeper.conf", HookBin: "/hook"}
		k := &rack{run: &run{opts: o, tb: &lab.ProgramTB{Prog: "test"}, lab: l, sock: "/s", spool: "/sp"}, i: i}
		return k.conf(ranges[0])
	}
	peer5002 := func(role, self, peer string) string {
		return "failover peer \"failover-vlan-5002\" {\n  " + role + ";\n  address " + self + ";\n  port 5647;\n  peer address " + peer + ";\n  peer port 5647;\n"
	}
	pool5002 := "subnet 198.51.100.0 netmask 255.255.255.0 {\n  pool {\n    failover peer \"failover-vlan-5002\";\n    range 198.51.100.10 198.51.100.109;\n  }\n}\n"
	for _, tc := range []struct {
		rack      int
		want, not []string
	}{
		{0, []string{"failover peer \"failover-vlan-5001\" {\n  primary;\n  address 203.0.113.1;\n  peer address 203.0.113.2;\n",
			peer5002("secondary", "203.0.113.1", "203.0.113.4"), pool5002, "range 203.0.113.100 203.0.113.199;"}, nil},
		{1, []string{"failover peer \"failover-vlan-5001\" {\n  secondary;\n  address 203.0.113.2;\n  peer address 203.0.113.1;\n"},
			[]string{"5002", "198.51.100"}},
		{2, []string{peer5002("primary", "203.0.113.4", "203.0.113.1"), "mclt 10;", "split 255;", pool5002,
			"subnet 203.0.113.0 netmask 255.255.255.0 {\n  not authoritative;\n}\n"}, []string{"5001", "range 203.0.113."}},
	} {
		t.Run(pairRole[tc.rack], func(t *testing.T) {
			c := conf(tc.rack)
			for _, w := range tc.want {
				if !strings.Contains(c, w) {
					t.Errorf("conf lacks\n%s\nconf:\n%s", w, c)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(c, n) {
					t.Errorf("conf has %q\nconf:\n%s", n, c)
				}
			}
		})
	}
}

// TestInRangePartnerVLAN: VLAN 5002's addresses never leave a range
// (MergePair drops none of them at a rewrite); VLAN 5001's follow the
// range the file's dhcpd started on, except in rack c's file, which
// serves none.
func TestInRangePartnerVLAN(t *testing.T) {
	pf := &PairFiles{Ranges: [][][2]int{{{100, 149}}, {{100, 149}}, {{0, 255}}}}
	for _, tc := range []struct {
		f    int
		ip   string
		want bool
	}{
		{0, "203.0.113.120", true},
		{0, "203.0.113.160", false},
		{1, "203.0.113.160", false},
		{2, "203.0.113.160", true},
		{0, "198.51.100.50", true},
		{2, "198.51.100.50", true},
	} {
		if got := pf.InRange(tc.f, 0, tc.ip); got != tc.want {
			t.Errorf("InRange(%d, %s) = %v, want %v", tc.f, tc.ip, got, tc.want)
		}
	}
}
