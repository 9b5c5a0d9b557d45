package pools

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/leasekeeper/leasekeeper/internal/lktest/leasegen"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

var now = parser.TimeOf(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))

func mustConfig(t *testing.T, conf string) *dhcpdconf.Config {
	t.Helper()
	cfg, err := dhcpdconf.Parse(strings.NewReader(conf), dhcpdconf.Options{Name: "test.conf"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustLeases(t *testing.T, leases string) *parser.Table {
	t.Helper()
	ls, err := parser.ParseLeases(strings.NewReader(leases))
	if err != nil || len(ls.Errors) > 0 || ls.Incomplete != nil {
		t.Fatalf("leases: %v %v %v", err, ls.Errors, ls.Incomplete)
	}
	return ls.Table
}

func lease(ip, state, mac string) string {
	s := "lease " + ip + " {\n  starts 1 2026/11/23 10:00:00;\n  ends 5 2027/01/01 00:00:00;\n"
	if state != "" {
		s += "  binding state " + state + ";\n"
	}
	if mac != "" {
		s += "  hardware ethernet " + mac + ";\n"
	}
	return s + "}\n"
}

const conf = `
failover peer "fo" { primary; address 203.0.113.1; port 647; peer address 203.0.113.2; peer port 847;
  max-response-delay 60; max-unacked-updates 10; mclt 3600; split 128; load balance max seconds 3; }
subnet 203.0.113.0 netmask 255.255.255.0 {
  range 203.0.113.10 203.0.113.19;
  range 203.0.113.15 203.0.113.24;   # overlaps the first
  range dynamic-bootp 203.0.113.30;
}
shared-network "office" {
  subnet 198.51.100.0 netmask 255.255.255.0 {
    pool { range 198.51.100.10 198.51.100.29; }
    pool { failover peer "fo"; range 198.51.100.100 198.51.100.149; }
  }
}
host fixed1 { hardware ethernet 00:16:3e:00:00:99; fixed-address 203.0.113.12, fixed.example.test; }
`

func TestSummarize(t *testing.T) {
	leases := lease("203.0.113.10", "active", "00:16:3e:00:00:01") +
		lease("203.0.113.11", "free", "") +
		lease("203.0.113.16", "active", "00:16:3e:00:00:02") + // in both overlapping ranges
		lease("203.0.113.17", "expired", "") +
		lease("203.0.113.18", "released", "") +
		lease("203.0.113.20", "abandoned", "") +
		lease("203.0.113.21", "", "") + // no state, ends in the future: active
		lease("203.0.113.30", "active", "") +
		lease("198.51.100.10", "active", "") + lease("198.51.100.10", "free", "") + // last wins
		lease("198.51.100.100", "backup", "") + lease("198.51.100.101", "backup", "") +
		lease("198.51.100.102", "reset", "") +
		lease("192.0.2.1", "active", "") // outside every range: counted nowhere
	rep := Summarize(mustConfig(t, conf), mustLeases(t, leases), now)
	type row struct {
		First                   string
		Size                    Count
		Active, Backup, Touched int64
		Shared                  string
	}
	var got []row
	for _, u := range rep.Ranges {
		got = append(got, row{u.First, u.Size, u.Active, u.Backup, u.Touched, u.SharedNetwork})
	}
	want := []row{
		{"203.0.113.10", CountOf(10), 2, 0, 3, ""},
		{"203.0.113.15", CountOf(10), 2, 0, 3, ""},
		{"203.0.113.30", CountOf(1), 1, 0, 0, ""},
		{"198.51.100.10", CountOf(20), 0, 0, 1, "office"},
		{"198.51.100.100", CountOf(50), 0, 2, 0, "office"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ranges (-want +got):\n%s", diff)
	}
	wantShared := []Totals{{Name: "office", Size: CountOf(70), Active: 0, Backup: 2, Touched: 1, Free: CountOf(70)}}
	if diff := cmp.Diff(wantShared, rep.SharedNetworks); diff != "" {
		t.Errorf("shared networks (-want +got):\n%s", diff)
	}
	wantSum := Totals{Size: CountOf(91), Active: 5, Backup: 2, Touched: 7, Free: CountOf(86)}
	if diff := cmp.Diff(wantSum, rep.Summary); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if rep.Ranges[4].Failover != "fo" {
		t.Errorf("failover = %q", rep.Ranges[4].Failover)
	}
}

func TestSummarizeIPv6(t *testing.T) {
	cfg := mustConfig(t, `
subnet6 2001:db8:1::/64 {
  range6 2001:db8:1::100 2001:db8:1::1ff;
  range6 2001:db8:1:0:1::/80;
  prefix6 2001:db8:100:: 2001:db8:1ff:: /48;
}`)
	tab := mustLeases(t, `
ia-na "\001\000\000\000\000\001" {
  iaaddr 2001:db8:1::100 { binding state active; ends never; }
  iaaddr 2001:db8:1::101 { binding state expired; ends never; }
}
ia-pd "\002\000\000\000\000\001" {
  iaprefix 2001:db8:100::/48 { binding state active; ends never; }
}`)
	rep := Summarize(cfg, tab, now)
	got := [][2]string{}
	for _, u := range rep.Ranges {
		got = append(got, [2]string{u.Size.String(), strconv.FormatInt(u.Active, 10)})
	}
	want := [][2]string{{"256", "1"}, {"281474976710656", "0"}, {"256", "1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if rep.Ranges[0].Touched != 1 {
		t.Errorf("touched = %d, want 1", rep.Ranges[0].Touched)
	}
}

func TestSize(t *testing.T) {
	a := func(s string) dhcpdconf.Range {
		f, l, _ := strings.Cut(s, "-")
		return dhcpdconf.Range{First: mustAddr(f), Last: mustAddr(l)}
	}
	tests := []struct {
		r    dhcpdconf.Range
		want string
	}{
		{a("10.0.0.1-10.0.0.1"), "1"},
		{a("10.0.0.0-10.0.255.255"), "65536"},
		{a("::-::ffff:ffff:ffff:ffff"), "18446744073709551616"}, // 2^64: a /64
		{a("2001:db8::-2001:db8::7fff:ffff:ffff:ffff"), "9223372036854775808"},
		{a("2001:db8::-2001:db8::ffff:ffff"), "4294967296"},
		{a("::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), "340282366920938463463374607431768211456"}, // 2^128
		{dhcpdconf.Range{Kind: dhcpdconf.RangeKindPrefix6, First: mustAddr("2001:db8:100::"), Last: mustAddr("2001:db8:1ff::"), PrefixLen: 48}, "256"},
		{dhcpdconf.Range{Kind: dhcpdconf.RangeKindPrefix6, First: mustAddr("2001:db8::"), Last: mustAddr("2001:db8:ffff:ffff::"), PrefixLen: 64}, "4294967296"},
	}
	for _, tc := range tests {
		if got := size(tc.r); got.String() != tc.want {
			t.Errorf("size(%v-%v) = %s, want %s", tc.r.First, tc.r.Last, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	leases := lease("203.0.113.10", "active", "00:16:3e:00:00:01") +
		lease("203.0.113.11", "active", "00:16:3e:00:00:01") + // same MAC twice
		lease("203.0.113.12", "active", "00:16:3e:00:00:03") + // a host's fixed address
		lease("203.0.113.13", "free", "00:16:3e:00:00:03") +
		lease("192.0.2.7", "active", "00:16:3e:00:00:07") + // orphan
		lease("192.0.2.8", "free", "00:16:3e:00:00:08") // inactive orphans do not matter
	problems, unresolved := Check(mustConfig(t, conf), mustLeases(t, leases), now)
	var got []string
	for _, p := range problems {
		got = append(got, fmt.Sprintf("%s %s %s %v %s", p.Kind, p.IP, p.MAC, p.IPs, p.Host))
	}
	want := []string{
		"duplicate-mac 203.0.113.10 00:16:3e:00:00:01 [203.0.113.10 203.0.113.11] ",
		"fixed-address 203.0.113.12 00:16:3e:00:00:03 [] fixed1",
		"orphan 192.0.2.7 00:16:3e:00:00:07 [] ",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"fixed1: fixed.example.test"}, unresolved); diff != "" {
		t.Errorf("unresolved (-want +got):\n%s", diff)
	}
	clean := lease("203.0.113.10", "active", "00:16:3e:00:00:01")
	if p, _ := Check(mustConfig(t, conf), mustLeases(t, clean), now); len(p) != 0 {
		t.Errorf("clean file: %v", p)
	}
}

// dhcpdPoolsRanges runs dhcpd-pools and returns its per-range counts keyed
// by "first-last": max, cur (active), touch, bu (backup). It reads the CSV
// format: exact integers, and the only machine format with backups.
func dhcpdPoolsRanges(t *testing.T, conf, leases string) map[string][4]int64 {
	t.Helper()
	out, err := exec.Command("dhcpd-pools", "-c", conf, "-l", leases, "-f", "c").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("dhcpd-pools: %v: %s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	section, _, _ := bytes.Cut(out, []byte("\n\n"))
	r := csv.NewReader(bytes.NewReader(section))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	res := map[string][4]int64{}
	for _, rec := range recs {
		if len(rec) < 10 || rec[0] == "shared net name" {
			continue
		}
		var v [4]int64
		for i, col := range []int{3, 4, 6, 9} {
			n, err := strconv.ParseFloat(rec[col], 64)
			if err != nil {
				t.Fatalf("dhcpd-pools column %d %q: %v", col, rec[col], err)
			}
			v[i] = int64(n)
		}
		res[rec[1]+"-"+rec[2]] = v
	}
	return res
}

func TestMatchesDhcpdPools(t *testing.T) {
	if _, err := exec.LookPath("dhcpd-pools"); err != nil {
		t.Skip("dhcpd-pools not installed (apt-get install dhcpd-pools; make test does)")
	}
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gen := func(o leasegen.Options) (string, string) {
		var c, l bytes.Buffer
		if err := leasegen.WriteConfig(&c, o); err != nil {
			t.Fatal(err)
		}
		if err := leasegen.WriteLeases(&l, o); err != nil {
			t.Fatal(err)
		}
		return c.String(), l.String()
	}
	handConf := conf
	handLeases := lease("203.0.113.10", "active", "00:16:3e:00:00:01") + lease("203.0.113.11", "free", "") +
		lease("203.0.113.16", "active", "") + lease("203.0.113.17", "expired", "") + lease("203.0.113.18", "released", "") +
		lease("203.0.113.20", "abandoned", "") + lease("203.0.113.30", "active", "") +
		lease("198.51.100.10", "active", "") + lease("198.51.100.10", "free", "") + lease("198.51.100.11", "free", "") +
		lease("198.51.100.11", "active", "") + lease("198.51.100.100", "backup", "") + lease("198.51.100.101", "backup", "") +
		lease("198.51.100.102", "active", "") + lease("192.0.2.1", "active", "")
	maasConf, maasLeases := gen(leasegen.Options{IPs: 20000, Versions: 3, MAAS: true, Failover: true, PerRange: 500})
	plainConf, plainLeases := gen(leasegen.Options{IPs: 30000, Versions: 2, PerRange: 1000})
	for _, tc := range []struct{ name, conf, leases string }{
		{"shared networks, pools, failover, overlaps", handConf, handLeases},
		{"generated MAAS-style", maasConf, maasLeases},
		{"generated plain", plainConf, plainLeases},
		// Written by a real failover pair (agent/reconcile's
		// TestLabFailoverPair, after partner-down and recovery):
		// free/backup split, expired and released leases, state records.
		{"real pair, primary", readTestdata(t, "pair-primary.conf"), readTestdata(t, "pair-primary.leases")},
		{"real pair, secondary", readTestdata(t, "pair-secondary.conf"), readTestdata(t, "pair-secondary.leases")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, lp := write("dhcpd.conf", tc.conf), write("dhcpd.leases", tc.leases)
			want := dhcpdPoolsRanges(t, cp, lp)
			rep := Summarize(mustConfig(t, tc.conf), mustLeases(t, tc.leases), now)
			got := map[string][4]int64{}
			for _, u := range rep.Ranges {
				n, ok := u.Size.Int64()
				if !ok {
					t.Fatalf("%s-%s: size %s", u.First, u.Last, u.Size)
				}
				got[u.First+"-"+u.Last] = [4]int64{n, u.Active, u.Touched, u.Backup}
			}
			if len(want) == 0 {
				t.Fatal("dhcpd-pools reported no ranges")
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("[size active touched backup] per range (-dhcpd-pools +leasekeeper):\n%s", diff)
			}
		})
	}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestSummarizeExactSizes: a /64 holds 2^64 addresses, and range, shared
// network and summary agree on it, in Go and in JSON.
func TestSummarizeExactSizes(t *testing.T) {
	cfg := mustConfig(t, `
shared-network "v6" {
  subnet6 2001:db8:1::/64 { range6 2001:db8:1::/64; }
  subnet6 2001:db8:2::/64 { range6 2001:db8:2::/64; }
}`)
	tab := mustLeases(t, `
ia-na "\001\000\000\000\000\001" {
  iaaddr 2001:db8:1::100 { binding state active; ends never; }
}`)
	rep := Summarize(cfg, tab, now)
	const twoTo64, twoTo65 = "18446744073709551616", "36893488147419103232"
	for _, c := range []struct {
		what string
		got  Count
		want string
	}{
		{"range 1 size", rep.Ranges[0].Size, twoTo64},
		{"range 1 free", rep.Ranges[0].Free, "18446744073709551615"},
		{"range 2 free", rep.Ranges[1].Free, twoTo64},
		{"shared network size", rep.SharedNetworks[0].Size, twoTo65},
		{"summary size", rep.Summary.Size, twoTo65},
		{"summary free", rep.Summary.Free, "36893488147419103231"},
	} {
		if c.got.String() != c.want {
			t.Errorf("%s = %s, want %s", c.what, c.got, c.want)
		}
	}
	b, err := json.Marshal(rep.Summary)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"size":36893488147419103232,"active":1,"backup":0,"touched":0,"free":36893488147419103231}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back Totals
	if err := json.Unmarshal(b, &back); err != nil || !back.Size.Equal(rep.Summary.Size) || !back.Free.Equal(rep.Summary.Free) {
		t.Errorf("JSON round trip: %+v, %v", back, err)
	}
}

// TestPairs: the failover peers the pools use, with the states the
// leases file last recorded — on the files a real pair wrote (both
// normal again after partner-down and recovery; dhcpd-pools shows only
// the backup counts, matched above) and on a survivor's file.
func TestPairs(t *testing.T) {
	at := func(s string) *time.Time {
		x, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &x
	}
	survivorLeases := `failover peer "fo" state {
  my state partner-down at 2 2026/12/01 12:00:00;
  partner state communications-interrupted at 2 2026/12/01 11:59:00;
  mclt 3600;
}
` + lease("198.51.100.100", "backup", "")
	for _, tc := range []struct {
		name, conf, leases string
		want               []Pair
	}{
		{"real pair, primary", readTestdata(t, "pair-primary.conf"), readTestdata(t, "pair-primary.leases"), []Pair{{
			Peer: "fo-vlan1", Role: "primary", MyState: "normal", MyStateAt: at("2026-12-01T12:27:25Z"),
			PartnerState: "normal", PartnerStateAt: at("2026-12-01T12:27:25Z"), Backup: 25}}},
		{"real pair, secondary", readTestdata(t, "pair-secondary.conf"), readTestdata(t, "pair-secondary.leases"), []Pair{{
			Peer: "fo-vlan1", Role: "secondary", MyState: "normal", MyStateAt: at("2026-12-01T12:27:24Z"),
			PartnerState: "normal", PartnerStateAt: at("2026-12-01T12:27:25Z"), MCLT: 10, Backup: 25}}},
		{"survivor", conf, survivorLeases, []Pair{{
			Peer: "fo", Role: "primary", MyState: "partner-down", MyStateAt: at("2026-12-01T12:00:00Z"),
			PartnerState: "communications-interrupted", PartnerStateAt: at("2026-12-01T11:59:00Z"), MCLT: 3600, Backup: 1}}},
		{"alone", "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.20; }", survivorLeases, []Pair{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Summarize(mustConfig(t, tc.conf), mustLeases(t, tc.leases), now)
			if diff := cmp.Diff(tc.want, rep.Failover); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
