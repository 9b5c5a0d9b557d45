package dhcpdconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
	"github.com/leasekeeper/leasekeeper/parser"
)

// confTestBase is the BaseDir of the table tests; their include files are
// keyed relative to it.
const confTestBase = "/etc/dhcp"

var confCmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

// confOpenMap opens files from a map keyed by paths relative to base.
func confOpenMap(base string, files map[string]string) func(string) (io.ReadCloser, error) {
	return func(path string) (io.ReadCloser, error) {
		rel, err := filepath.Rel(base, path)
		if err == nil {
			if s, ok := files[rel]; ok {
				return io.NopCloser(strings.NewReader(s)), nil
			}
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
}

func confParseString(src string, files map[string]string) (*Config, error) {
	return Parse(strings.NewReader(src), Options{
		BaseDir: confTestBase,
		Open:    confOpenMap(confTestBase, files),
		Name:    "test.conf",
	})
}

// lines joins its arguments as lines, so line N of a case is argument N.
func lines(l ...string) string { return strings.Join(l, "\n") + "\n" }

func at(line int) Pos { return Pos{File: "test.conf", Line: line} }

func atFile(file string, line int) Pos { return Pos{File: file, Line: line} }

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func r4(first, last, subnet string, line int) Range {
	return Range{Kind: RangeKindRange, Family: parser.IPv4, First: a(first), Last: a(last), Subnet: pfx(subnet), Pos: at(line)}
}

func r6(kind RangeKind, first, last, subnet string, line int) Range {
	return Range{Kind: kind, Family: parser.IPv6, First: a(first), Last: a(last), Subnet: pfx(subnet), Pos: at(line)}
}

type confCase struct {
	name string
	// dhcpd is the family flag ("-4" or "-6") under which the real dhcpd
	// must agree with the case: accept it when want is set, reject it when
	// err is set. "" leaves dhcpd out (mixed families, limits of ours).
	dhcpd string
	src   string
	files map[string]string // include files, relative to confTestBase
	want  *Config
	err   string // substring of the error
	errAt string // position the error starts with
}

var confValidCases = []confCase{
	{
		name:  "single address range",
		dhcpd: "-4",
		src: lines(
			"subnet 203.0.113.0 netmask 255.255.255.0 {",
			"  range 203.0.113.5;",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(1)}},
			Ranges:  []Range{r4("203.0.113.5", "203.0.113.5", "203.0.113.0/24", 2)},
		},
	},
	{
		name:  "dynamic-bootp and a high-to-low range",
		dhcpd: "-4",
		src: lines(
			"subnet 203.0.113.0 netmask 255.255.255.128 {",
			"  range dynamic-bootp 203.0.113.20 203.0.113.10;",
			"  range 203.0.113.30 203.0.113.40;",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/25"), Pos: at(1)}},
			Ranges: []Range{
				func() Range {
					r := r4("203.0.113.10", "203.0.113.20", "203.0.113.0/25", 2)
					r.DynamicBootp = true
					return r
				}(),
				r4("203.0.113.30", "203.0.113.40", "203.0.113.0/25", 3),
			},
		},
	},
	{
		name:  "pools in a shared-network with failover",
		dhcpd: "-4",
		src: lines(
			`failover peer "fo-a" {`,
			"  primary; address 203.0.113.2; peer address 203.0.113.3;",
			"  mclt 3600; split 128; max-response-delay 60;",
			"}",
			"failover peer fo-b {",
			"  secondary; address 203.0.113.2; port 647; peer address 203.0.113.4; peer port 847; max-response-delay 60;",
			"}",
			`shared-network "vlan 1" {`,
			`  failover peer "fo-a";`,
			"  subnet 203.0.113.0 netmask 255.255.255.0 {",
			"    pool { range 203.0.113.10 203.0.113.19; }",
			`    pool { range 203.0.113.20 203.0.113.29; failover peer "fo-b"; }`,
			"    range 203.0.113.30 203.0.113.39;",
			`    pool { failover peer "fo-a"; range 203.0.113.40 203.0.113.49; }`,
			"  }",
			"  subnet 198.51.100.0 netmask 255.255.255.0 { }",
			"  subnet 198.51.100.0 netmask 255.255.255.128 { }",
			"  pool {",
			"    no failover peer # dhcpd 4.4 rejects a ';' here",
			"    range 198.51.100.10 198.51.100.19;",
			"  }",
			"}",
		),
		want: &Config{
			FailoverPeers: []FailoverPeer{
				{Name: "fo-a", Role: "primary", Pos: at(1)},
				{Name: "fo-b", Role: "secondary", Pos: at(5)},
			},
			Subnets: []Subnet{
				{Prefix: pfx("203.0.113.0/24"), SharedNetwork: "vlan 1", Pos: at(10)},
				{Prefix: pfx("198.51.100.0/24"), SharedNetwork: "vlan 1", Pos: at(16)},
				{Prefix: pfx("198.51.100.0/25"), SharedNetwork: "vlan 1", Pos: at(17)},
			},
			Ranges: []Range{
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.10"), Last: a("203.0.113.19"),
					Subnet: pfx("203.0.113.0/24"), SharedNetwork: "vlan 1", Pool: 1, Failover: "fo-a", Pos: at(11)},
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.20"), Last: a("203.0.113.29"),
					Subnet: pfx("203.0.113.0/24"), SharedNetwork: "vlan 1", Pool: 2, Failover: "fo-b", Pos: at(12)},
				// A range outside any pool gets an anonymous pool: no failover.
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.30"), Last: a("203.0.113.39"),
					Subnet: pfx("203.0.113.0/24"), SharedNetwork: "vlan 1", Pos: at(13)},
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.40"), Last: a("203.0.113.49"),
					Subnet: pfx("203.0.113.0/24"), SharedNetwork: "vlan 1", Pool: 3, Failover: "fo-a", Pos: at(14)},
				// The most specific earlier subnet holding the range.
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("198.51.100.10"), Last: a("198.51.100.19"),
					Subnet: pfx("198.51.100.0/25"), SharedNetwork: "vlan 1", Pool: 4, Pos: at(20)},
			},
		},
	},
	{
		name:  "failover peer declared in a shared-network is its default",
		dhcpd: "-4",
		src: lines(
			"shared-network lab {",
			"  failover peer lab-fo { secondary; address 203.0.113.2; peer address 203.0.113.3; max-response-delay 60; }",
			"  subnet 203.0.113.0 netmask 255.255.255.0 {",
			"    pool { range 203.0.113.10 203.0.113.19; }",
			`    pool { failover peer "lab-fo"; range 203.0.113.20 203.0.113.29; } # dhcpd wants one explicit reference`,
			"  }",
			"}",
		),
		want: &Config{
			FailoverPeers: []FailoverPeer{{Name: "lab-fo", Role: "secondary", Pos: at(2)}},
			Subnets:       []Subnet{{Prefix: pfx("203.0.113.0/24"), SharedNetwork: "lab", Pos: at(3)}},
			Ranges: []Range{{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.10"), Last: a("203.0.113.19"),
				Subnet: pfx("203.0.113.0/24"), SharedNetwork: "lab", Pool: 1, Failover: "lab-fo", Pos: at(4)},
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.20"), Last: a("203.0.113.29"),
					Subnet: pfx("203.0.113.0/24"), SharedNetwork: "lab", Pool: 2, Failover: "lab-fo", Pos: at(5)}},
		},
	},
	{
		name:  "subnet6 with range6 in every form and prefix6",
		dhcpd: "-6",
		src: lines(
			"shared-network v6 {",
			"  subnet6 2001:db8:0:1::/64 {",
			"    range6 2001:db8:0:1::10 2001:db8:0:1::20;",
			"    range6 2001:db8:0:1:1::/80;",
			"    range6 2001:db8:0:1:2::/80 temporary;",
			"    range6 2001:db8:0:1:: temporary;",
			"    prefix6 2001:db8:100:: 2001:db8:100:f00:: /56;",
			"    pool6 {",
			"      range6 2001:db8:0:1::200 2001:db8:0:1::2ff;",
			"      prefix6 2001:db8:200:: 2001:db8:200:: /48;",
			"    }",
			"  }",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("2001:db8:0:1::/64"), SharedNetwork: "v6", Pos: at(2)}},
			Ranges: func() []Range {
				rs := []Range{
					r6(RangeKindRange, "2001:db8:0:1::10", "2001:db8:0:1::20", "2001:db8:0:1::/64", 3),
					r6(RangeKindRange6Prefix, "2001:db8:0:1:1::", "2001:db8:0:1:1:ffff:ffff:ffff", "2001:db8:0:1::/64", 4),
					r6(RangeKindRange6Prefix, "2001:db8:0:1:2::", "2001:db8:0:1:2:ffff:ffff:ffff", "2001:db8:0:1::/64", 5),
					r6(RangeKindRange6Prefix, "2001:db8:0:1::", "2001:db8:0:1:ffff:ffff:ffff:ffff", "2001:db8:0:1::/64", 6),
					r6(RangeKindPrefix6, "2001:db8:100::", "2001:db8:100:f00::", "2001:db8:0:1::/64", 7),
					r6(RangeKindRange, "2001:db8:0:1::200", "2001:db8:0:1::2ff", "2001:db8:0:1::/64", 9),
					r6(RangeKindPrefix6, "2001:db8:200::", "2001:db8:200::", "2001:db8:0:1::/64", 10),
				}
				rs[2].Temporary = true
				rs[3].Temporary = true
				rs[4].PrefixLen = 56
				rs[5].Pool, rs[6].Pool = 1, 1
				rs[6].PrefixLen = 48
				for i := range rs {
					rs[i].SharedNetwork = "v6"
				}
				return rs
			}(),
		},
	},
	{
		// Not run through dhcpd: the absolute path would escape its test
		// directory; includes.conf covers the same ground for dhcpd.
		name: "include at top level, in a subnet and in a pool",
		src: lines(
			`include "top.conf";`,
			"subnet 203.0.113.0 netmask 255.255.255.0 {",
			`  include "/etc/dhcp/inc/subnet.conf";`,
			"  pool {",
			`    include "inc/pool.conf";`,
			"    range 203.0.113.50 203.0.113.59;",
			"  }",
			"}",
		),
		files: map[string]string{
			"top.conf": lines("default-lease-time 600;", `include "inc/nested.conf";`),
			"inc/nested.conf": lines("# relative to BaseDir, not to inc/",
				"host h1 { hardware ethernet 2:0:0:a:b:c; fixed-address 203.0.113.9; }"),
			"inc/subnet.conf": lines("range 203.0.113.10 203.0.113.19;", "pool { range 203.0.113.20 203.0.113.29; }"),
			"inc/pool.conf":   lines(`option domain-name "pool";`, "host h2 { }"),
		},
		want: &Config{
			Hosts: []Host{
				{Name: "h1", HardwareType: "ethernet", HardwareAddr: parser.HardwareAddr{2, 0, 0, 0xa, 0xb, 0xc},
					FixedAddresses: []string{"203.0.113.9"}, Pos: atFile("/etc/dhcp/inc/nested.conf", 2)},
				{Name: "h2", Pos: atFile("/etc/dhcp/inc/pool.conf", 2)},
			},
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(2)}},
			Ranges: []Range{
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.10"), Last: a("203.0.113.19"),
					Subnet: pfx("203.0.113.0/24"), Pos: atFile("/etc/dhcp/inc/subnet.conf", 1)},
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.20"), Last: a("203.0.113.29"),
					Subnet: pfx("203.0.113.0/24"), Pool: 1, Pos: atFile("/etc/dhcp/inc/subnet.conf", 2)},
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.50"), Last: a("203.0.113.59"),
					Subnet: pfx("203.0.113.0/24"), Pool: 2, Pos: at(6)},
			},
		},
	},
	{
		name:  "strings and comments holding braces, semicolons and hashes",
		dhcpd: "-4",
		src: lines(
			`option domain-name "a { b } ; c # d";  # } { ;`,
			`option root-path "\"}\";#";`,
			"# subnet 192.0.2.0 netmask 255.255.255.0 { range 192.0.2.1; }",
			`subnet 203.0.113.0 netmask 255.255.255.0 { # {`,
			`  option domain-name "}";`,
			"  range 203.0.113.1 203.0.113.2; # ; }",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(4)}},
			Ranges:  []Range{r4("203.0.113.1", "203.0.113.2", "203.0.113.0/24", 6)},
		},
	},
	{
		name:  "key with a semicolon after its brace, zone, class and subclass",
		dhcpd: "-4",
		src: lines(
			"key k1 {",
			"  algorithm hmac-md5;",
			`  secret "c2VjcmV0";`,
			"};",
			"zone example.org. { primary 127.0.0.1; key k1; }",
			`class "c1" { match if option vendor-class-identifier = "x;}"; }`,
			`class "c2" { match pick-first-value (option dhcp-client-identifier, hardware); }`,
			`subclass "c2" 1:2:3:4:5:6;`,
			`subclass "c2" "{;" { option domain-name "sub"; }`,
			"subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.3 203.0.113.4; }",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(10)}},
			Ranges:  []Range{r4("203.0.113.3", "203.0.113.4", "203.0.113.0/24", 10)},
		},
	},
	{
		name:  "if elsif else with parentheses, strings and comparisons",
		dhcpd: "-4",
		src: lines(
			`if (exists agent.circuit-id and (option agent.circuit-id = "{x;}")) {`,
			`  if known { set k = "yes"; } else { set k = "no"; }`,
			`} elsif substring(option vendor-class-identifier, 0, 3) = "PXE" {`,
			`  filename "pxelinux.0";`,
			"} else {",
			`  log(info, concat("no # match ", "};"));`,
			"}",
			"subnet 203.0.113.0 netmask 255.255.255.0 {",
			`  if option host-name = "range" { option domain-name "range 1.2.3.4;"; }`,
			"  range 203.0.113.5 203.0.113.6;",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(8)}},
			Ranges:  []Range{r4("203.0.113.5", "203.0.113.6", "203.0.113.0/24", 10)},
		},
	},
	{
		name:  "on commit with execute, MAAS style",
		dhcpd: "-4",
		src: lines(
			"on commit {",
			`  set clhw = binary-to-ascii(16, 8, ":", substring(hardware, 1, 6));`,
			`  set clip = binary-to-ascii(10, 8, ".", leased-address);`,
			`  set cllt = binary-to-ascii(10, 32, "", encode-int(lease-time, 32));`,
			`  set clht = pick-first-value(option host-name, "(none)");`,
			`  execute("/usr/sbin/maas-dhcp-helper", "notify", "--action", "commit", "--mac", clhw,`,
			`    "--ip-family", "ipv4", "--ip", clip, "--lease-time", cllt, "--hostname", clht);`,
			"}",
			`on expiry { execute("/bin/echo", "{;}", "#"); }`,
			`on release { if exists host-name { execute("/bin/true"); } }`,
			"subnet 203.0.113.0 netmask 255.255.255.0 {",
			`  on commit { execute("/bin/echo", "subnet } {"); }`,
			"  range 203.0.113.5 203.0.113.6;",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(11)}},
			Ranges:  []Range{r4("203.0.113.5", "203.0.113.6", "203.0.113.0/24", 13)},
		},
	},
	{
		name:  "hosts are global wherever written",
		dhcpd: "-4",
		src: lines(
			"host top { hardware ethernet 00:16:3E:AA:BB:CC; fixed-address 203.0.113.10, node.example.org, 203.0.113.11; }",
			"group {",
			"  host in-group { hardware fddi 1:2:3:4:5:6; }",
			"  group named { host nested-group.example.org { hardware ethernet; } }",
			"}",
			"shared-network s {",
			"  host in-shared { fixed-address in-shared.example.org; }",
			"  subnet 203.0.113.0 netmask 255.255.255.0 {",
			"    host in-subnet { hardware unknown-32 1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14; }",
			"    pool { host in-pool { } range 203.0.113.100; }",
			"  }",
			"}",
		),
		want: &Config{
			Hosts: []Host{
				{Name: "top", HardwareType: "ethernet", HardwareAddr: parser.HardwareAddr{0, 0x16, 0x3e, 0xaa, 0xbb, 0xcc},
					FixedAddresses: []string{"203.0.113.10", "node.example.org", "203.0.113.11"}, Pos: at(1)},
				{Name: "in-group", HardwareType: "fddi", HardwareAddr: parser.HardwareAddr{1, 2, 3, 4, 5, 6}, Pos: at(3)},
				{Name: "nested-group.example.org", HardwareType: "ethernet", HardwareAddr: parser.HardwareAddr{}, Pos: at(4)},
				{Name: "in-shared", FixedAddresses: []string{"in-shared.example.org"}, Pos: at(7)},
				{Name: "in-subnet", HardwareType: "unknown-32", HardwareAddr: parser.HardwareAddr{
					1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0x10, 0x11, 0x12, 0x13, 0x14}, Pos: at(9)},
				{Name: "in-pool", Pos: at(10)},
			},
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), SharedNetwork: "s", Pos: at(8)}},
			Ranges: []Range{{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.100"), Last: a("203.0.113.100"),
				Subnet: pfx("203.0.113.0/24"), SharedNetwork: "s", Pool: 1, Pos: at(10)}},
		},
	},
	{
		name:  "fixed-address6 list",
		dhcpd: "-6",
		src: lines(
			"host v6 {",
			"  host-identifier option dhcp6.client-id 00:01:00:01:aa:bb:cc:dd:00:16:3e:aa:bb:cc;",
			"  fixed-address6 2001:db8::10, 2001:DB8::11;",
			"}",
		),
		want: &Config{
			Hosts: []Host{{Name: "v6", FixedAddresses: []string{"2001:db8::10", "2001:DB8::11"}, Pos: at(1)}},
		},
	},
	{
		name:  "subnets in groups and keywords in any case",
		dhcpd: "-4",
		src: lines(
			"Group {",
			"  SUBNET 203.0.113.0 NetMask 255.255.255.0 { RANGE Dynamic-BOOTP 203.0.113.010 203.0.113.011; }",
			"}",
			"shared-network s {",
			"  subnet 198.51.100.0 netmask 255.255.255.0 { }",
			"  group { subnet 198.51.100.0 netmask 255.255.255.128 { } }",
			"  POOL { range 198.51.100.1 198.51.100.2; }",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{
				{Prefix: pfx("203.0.113.0/24"), Pos: at(2)},
				{Prefix: pfx("198.51.100.0/24"), SharedNetwork: "s", Pos: at(5)},
				// A group's subnet never joins the shared-network around it.
				{Prefix: pfx("198.51.100.0/25"), Pos: at(6)},
			},
			Ranges: []Range{
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.10"), Last: a("203.0.113.11"),
					DynamicBootp: true, Subnet: pfx("203.0.113.0/24"), Pos: at(2)},
				{Kind: RangeKindRange, Family: parser.IPv4, First: a("198.51.100.1"), Last: a("198.51.100.2"),
					Subnet: pfx("198.51.100.0/24"), SharedNetwork: "s", Pool: 1, Pos: at(7)},
			},
		},
	},
	{
		name:  "statements spanning lines and empty statements",
		dhcpd: "-4",
		src: lines(
			"option domain-name-servers 203.0.113.2,",
			"    203.0.113.3;",
			"subnet 203.0.113.0",
			"    netmask 255.255.255.0",
			"{",
			"  range",
			"    203.0.113.5",
			"    203.0.113.6",
			"  ;",
			"}",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(3)}},
			Ranges:  []Range{r4("203.0.113.5", "203.0.113.6", "203.0.113.0/24", 6)},
		},
	},
	{
		// dhcpd rejects a stray ';' (except after key and option-definition
		// blocks); skipping it is harmless.
		name: "stray semicolons are empty statements",
		src: lines(
			"; subnet 203.0.113.0 netmask 255.255.255.0 { ; range 203.0.113.5; ; } ;",
			"key k { secret \"x\"; };",
		),
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(1)}},
			Ranges:  []Range{r4("203.0.113.5", "203.0.113.5", "203.0.113.0/24", 1)},
		},
	},
	{
		name: "absolute include path ignores BaseDir",
		src:  lines("subnet 203.0.113.0 netmask 255.255.255.0 {", `  include "/srv/r.conf";`, "}"),
		files: map[string]string{
			"../../srv/r.conf": "range 203.0.113.5;\n",
		},
		want: &Config{
			Subnets: []Subnet{{Prefix: pfx("203.0.113.0/24"), Pos: at(1)}},
			Ranges: []Range{{Kind: RangeKindRange, Family: parser.IPv4, First: a("203.0.113.5"), Last: a("203.0.113.5"),
				Subnet: pfx("203.0.113.0/24"), Pos: atFile("/srv/r.conf", 1)}},
		},
	},
	{
		name:  "empty file",
		dhcpd: "-4",
		src:   "# nothing\n",
		want:  &Config{},
	},
}

var confErrorCases = []confCase{
	{name: "unclosed brace", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  range 203.0.113.5;"),
		err:   "'{' of line 1 is not closed",
		errAt: "test.conf:3:"},
	{name: "unclosed brace in a skipped block", dhcpd: "-4",
		src:   lines("on commit {", "  if known {", `    execute("/bin/true");`, "}"),
		err:   "'{' of line 1 is not closed",
		errAt: "test.conf:5:"},
	{name: "stray closing brace", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 { }", "}"),
		err:   "unexpected '}'",
		errAt: "test.conf:2:"},
	{name: "unterminated string", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", `  option domain-name "abc;`, "}"),
		err:   "unterminated string",
		errAt: "test.conf:2:"},
	{name: "missing semicolon at end of file", dhcpd: "-4",
		src:   "authoritative",
		err:   "has no ';'",
		errAt: "test.conf:1:"},
	{name: "bad address in range", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  range 203.0.113.5 203.0.113.256;", "}"),
		err:   `bad IPv4 address "203.0.113.256"`,
		errAt: "test.conf:2:"},
	{name: "host name in range", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  range pool.example.org;", "}"),
		err:   "bad IPv4 address",
		errAt: "test.conf:2:"},
	{name: "range outside its subnet", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.128 {", "  range 203.0.113.100 203.0.113.200;", "}"),
		err:   "address 203.0.113.200 not in subnet 203.0.113.0/25",
		errAt: "test.conf:2:"},
	{name: "range missing its semicolon", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  range 203.0.113.1 203.0.113.2", "}"),
		err:   "expected ';'",
		errAt: "test.conf:3:"},
	{name: "subnet with host bits", dhcpd: "-4",
		src:   lines("subnet 203.0.113.1 netmask 255.255.255.0 { }"),
		err:   "bad subnet number/mask combination",
		errAt: "test.conf:1:"},
	{name: "subnet without netmask", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 { }"),
		err:   "expected netmask",
		errAt: "test.conf:1:"},
	{name: "non-contiguous netmask", // dhcpd accepts these; we cannot represent them
		src:   lines("subnet 203.0.113.0 netmask 255.0.255.0 { }"),
		err:   "non-contiguous netmask",
		errAt: "test.conf:1:"},
	{name: "subnet6 with host bits", dhcpd: "-6",
		src:   lines("subnet6 2001:db8::1/64 { }"),
		err:   "host bits set",
		errAt: "test.conf:1:"},
	{name: "range at top level", dhcpd: "-4",
		src:   lines("range 203.0.113.1 203.0.113.2;"),
		err:   "range declaration not allowed here",
		errAt: "test.conf:1:"},
	{name: "range directly in a shared-network", dhcpd: "-4",
		src: lines("shared-network s {", "  subnet 203.0.113.0 netmask 255.255.255.0 { }",
			"  range 203.0.113.1 203.0.113.2;", "}"),
		err:   "range declaration not allowed here",
		errAt: "test.conf:3:"},
	{name: "range in a group in a subnet", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  group { range 203.0.113.1; }", "}"),
		err:   "range declaration not allowed here",
		errAt: "test.conf:2:"},
	{name: "pool within pool", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  pool { range 203.0.113.1; pool { range 203.0.113.2; } }", "}"),
		err:   "pool declared within pool",
		errAt: "test.conf:2:"},
	{name: "pool at top level", dhcpd: "-4",
		src:   lines("pool { range 203.0.113.1; }"),
		err:   "pool declared outside",
		errAt: "test.conf:1:"},
	{name: "shared-network pool before its subnet", dhcpd: "-4",
		src: lines("shared-network s {", "  pool { range 203.0.113.1; }",
			"  subnet 203.0.113.0 netmask 255.255.255.0 { }", "}"),
		err:   "address range not on network s",
		errAt: "test.conf:2:"},
	{name: "subnet in a group is not in the shared-network around it", dhcpd: "-4",
		src: lines("shared-network s {", "  subnet 198.51.100.0 netmask 255.255.255.128 { }",
			"  group { subnet 198.51.100.128 netmask 255.255.255.128 { } }",
			"  pool { range 198.51.100.130 198.51.100.140; }", "}"),
		err:   "address range not on network s",
		errAt: "test.conf:4:"},
	{name: "pool without range", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  pool { allow unknown-clients; }", "}"),
		err:   "pool declaration with no address range",
		errAt: "test.conf:2:"},
	{name: "empty shared-network", dhcpd: "-4",
		src:   lines("shared-network s { }"),
		err:   "empty shared-network",
		errAt: "test.conf:1:"},
	{name: "range in an include in a pool", dhcpd: "-4",
		src: lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  pool {",
			`    include "r.conf";`, "    range 203.0.113.1;", "  }", "}"),
		files: map[string]string{"r.conf": lines("# dhcpd rejects this", "range 203.0.113.5;")},
		err:   "/etc/dhcp/r.conf:2: range declaration not allowed here",
		errAt: "test.conf:3:"},
	{name: "failover reference in an include in a pool", dhcpd: "-4",
		src: lines(`failover peer "f" { primary; address 203.0.113.2; peer address 203.0.113.3; mclt 60; split 128; max-response-delay 60; }`,
			"subnet 203.0.113.0 netmask 255.255.255.0 {", "  pool {",
			`    include "f.conf";`, "    range 203.0.113.1;", "  }", "}"),
		files: map[string]string{"f.conf": lines(`failover peer "f";`)},
		err:   "failover peers may only be defined",
		errAt: "test.conf:4:"},
	{name: "hardware in an include in a host", dhcpd: "-4",
		src:   lines("host h {", `  include "h.conf";`, "}"),
		files: map[string]string{"h.conf": lines("hardware ethernet 1:2:3:4:5:6;")},
		err:   "hardware not allowed here",
		errAt: "test.conf:2:"},
	{name: "missing semicolon swallowing a range", dhcpd: "-4",
		src: lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  option routers 203.0.113.1",
			"  range 203.0.113.10 203.0.113.20;", "}"),
		err:   `missing ';' before "range"`,
		errAt: "test.conf:3:"},
	{name: "include cycle",
		src:   lines(`include "a.conf";`),
		files: map[string]string{"a.conf": lines(`include "b.conf";`), "b.conf": lines(`include "/etc/dhcp/a.conf";`)},
		err:   "include cycle",
		errAt: "test.conf:1:"},
	{name: "include of the main file",
		src:   lines(`include "test.conf";`),
		files: map[string]string{"test.conf": "# never read: the main file is already open\n"},
		err:   "include cycle",
		errAt: "test.conf:1:"},
	{name: "missing include", dhcpd: "-4",
		src:   lines("", `include "nope.conf";`),
		err:   `include "nope.conf": open /etc/dhcp/nope.conf: file does not exist`,
		errAt: "test.conf:2:"},
	{name: "include without a string", dhcpd: "-4",
		src:   lines(`include nope.conf;`),
		err:   "expected a file name string",
		errAt: "test.conf:1:"},
	{name: "unbalanced include", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", `  include "u.conf";`, "}"),
		files: map[string]string{"u.conf": lines("range 203.0.113.1;", "}")},
		err:   "/etc/dhcp/u.conf:2: unexpected '}'",
		errAt: "test.conf:2:"},
	{name: "unknown failover peer", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", `  pool { failover peer "x"; range 203.0.113.1; }`, "}"),
		err:   "unknown failover peer x",
		errAt: "test.conf:2:"},
	{name: "failover reference in a pool needs a string", dhcpd: "-4",
		src: lines("failover peer f { primary; address 203.0.113.2; peer address 203.0.113.3; mclt 60; split 128; max-response-delay 60; }",
			"subnet 203.0.113.0 netmask 255.255.255.0 {", "  pool { failover peer f; range 203.0.113.1; }", "}"),
		err:   "expected a name",
		errAt: "test.conf:3:"},
	{name: "dynamic-bootp in a failover pool", dhcpd: "-4",
		src: lines("failover peer f { primary; address 203.0.113.2; peer address 203.0.113.3; mclt 60; split 128; max-response-delay 60; }",
			"subnet 203.0.113.0 netmask 255.255.255.0 {", `  pool { failover peer "f"; range dynamic-bootp 203.0.113.1; }`, "}"),
		err:   "dynamic-bootp is not permitted",
		errAt: "test.conf:3:"},
	{name: "failover peer redeclared", dhcpd: "-4",
		src: lines("failover peer f { primary; address 203.0.113.2; peer address 203.0.113.3; mclt 60; split 128; max-response-delay 60; }",
			"failover peer f { secondary; address 203.0.113.2; peer address 203.0.113.3; max-response-delay 60; }"),
		err:   "redeclaration of failover peer f",
		errAt: "test.conf:2:"},
	{name: "two fixed-address statements", dhcpd: "-4",
		src:   lines("host h {", "  fixed-address 203.0.113.5;", "  fixed-address 203.0.113.6;", "}"),
		err:   "only one fixed address declaration per host",
		errAt: "test.conf:3:"},
	{name: "fixed-address outside a host", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 { fixed-address 203.0.113.5; }"),
		err:   "fixed-address not allowed here",
		errAt: "test.conf:1:"},
	{name: "bad fixed-address6", dhcpd: "-6",
		src:   lines("host h { fixed-address6 2001:db8::zz; }"),
		err:   `bad IPv6 address "2001:db8::zz"`,
		errAt: "test.conf:1:"},
	{name: "bad hardware address", dhcpd: "-4",
		src:   lines("host h { hardware ethernet 1:2:3:4:5:100; }"),
		err:   "bad hardware address",
		errAt: "test.conf:1:"},
	{name: "unknown hardware type", dhcpd: "-4",
		src:   lines("host h { hardware wifi 1:2:3:4:5:6; }"),
		err:   `unknown hardware type "wifi"`,
		errAt: "test.conf:1:"},
	{name: "quoted host name", dhcpd: "-4",
		src:   lines(`host "h" { }`),
		err:   "host: unexpected",
		errAt: "test.conf:1:"},
	{name: "host in a host", dhcpd: "-4",
		src:   lines("host a { host b { } }"),
		err:   "host declaration not allowed here",
		errAt: "test.conf:1:"},
	{name: "subnet in a subnet", dhcpd: "-4",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  subnet 203.0.113.0 netmask 255.255.255.128 { }", "}"),
		err:   "subnet declaration not allowed here",
		errAt: "test.conf:2:"},
	{name: "range6 outside its subnet6", dhcpd: "-6",
		src:   lines("subnet6 2001:db8:0:1::/64 {", "  range6 2001:db8:0:1::10 2001:db8:0:2::10;", "}"),
		err:   "end address 2001:db8:0:2::10 is outside subnet 2001:db8:0:1::/64",
		errAt: "test.conf:2:"},
	{name: "range6 range with temporary", dhcpd: "-6",
		src:   lines("subnet6 2001:db8:0:1::/64 {", "  range6 2001:db8:0:1::10 2001:db8:0:1::20 temporary;", "}"),
		err:   "expected ';'",
		errAt: "test.conf:2:"},
	{name: "range6 prefix shorter than its subnet6", dhcpd: "-6",
		src:   lines("subnet6 2001:db8:0:1::/64 {", "  range6 2001:db8::/48;", "}"),
		err:   "start address 2001:db8:: is outside subnet",
		errAt: "test.conf:2:"},
	{name: "range6 prefix with host bits", dhcpd: "-6",
		src:   lines("subnet6 2001:db8:0:1::/64 {", "  range6 2001:db8:0:1::1/80;", "}"),
		err:   "host bits set",
		errAt: "test.conf:2:"},
	{name: "range6 in a v4 subnet",
		src:   lines("subnet 203.0.113.0 netmask 255.255.255.0 {", "  range6 2001:db8::1 2001:db8::2;", "}"),
		err:   "is outside subnet 203.0.113.0/24",
		errAt: "test.conf:2:"},
	{name: "range in a subnet6",
		src:   lines("subnet6 2001:db8::/64 {", "  range 203.0.113.1;", "}"),
		err:   "not in subnet 2001:db8::/64",
		errAt: "test.conf:2:"},
	{name: "misaligned prefix6", dhcpd: "-6",
		src:   lines("subnet6 2001:db8:0:1::/64 {", "  prefix6 2001:db8:100:: 2001:db8:100:1:: /56;", "}"),
		err:   "is not a /56 network address",
		errAt: "test.conf:2:"},
	{name: "prefix6 without bits", dhcpd: "-6",
		src:   lines("subnet6 2001:db8:0:1::/64 {", "  prefix6 2001:db8:100:: 2001:db8:100:f00::;", "}"),
		err:   "expected '/'",
		errAt: "test.conf:2:"},
	{name: "pool6 without range6", dhcpd: "-6",
		src:   lines("subnet6 2001:db8:0:1::/64 {", "  pool6 { allow unknown-clients; }", "}"),
		err:   "pool6 declaration with no range6 or prefix6",
		errAt: "test.conf:2:"},
	{name: "range6 in an include in a pool6", dhcpd: "-6",
		src: lines("subnet6 2001:db8:0:1::/64 {", "  pool6 {",
			`    include "r6.conf";`, "    range6 2001:db8:0:1::1 2001:db8:0:1::2;", "  }", "}"),
		files: map[string]string{"r6.conf": lines("range6 2001:db8:0:1::5 2001:db8:0:1::6;")},
		err:   "range6 declaration not allowed here",
		errAt: "test.conf:3:"},
}

func TestParseConfig(t *testing.T) {
	for _, tc := range confValidCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := confParseString(tc.src, tc.files)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, confCmpOpts); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range confErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := confParseString(tc.src, tc.files)
			if err == nil {
				t.Fatalf("Parse succeeded, want error containing %q; got %+v", tc.err, got)
			}
			if got != nil {
				t.Errorf("Parse returned a Config with its error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.err) || !strings.HasPrefix(msg, tc.errAt+" ") {
				t.Errorf("error = %q, want it to start with %q and contain %q", msg, tc.errAt, tc.err)
			}
			if msg != strings.ToLower(msg[:1])+msg[1:] {
				t.Errorf("error %q does not start lower-case", msg)
			}
		})
	}
}

func TestParseConfigIncludesAndLimits(t *testing.T) {
	t.Run("cycle is ErrIncludeCycle", func(t *testing.T) {
		_, err := confParseString(`include "self.conf";`, map[string]string{"self.conf": `include "self.conf";`})
		if !errors.Is(err, ErrIncludeCycle) {
			t.Errorf("err = %v, want ErrIncludeCycle", err)
		}
	})
	t.Run("depth", func(t *testing.T) {
		files := map[string]string{}
		for i := 0; i <= MaxIncludeDepth; i++ {
			files[filepath.Join("deep", string(rune('a'+i))+".conf")] = `include "deep/` + string(rune('a'+i+1)) + `.conf";`
		}
		_, err := confParseString(`include "deep/a.conf";`, files)
		if !errors.Is(err, ErrIncludeDepth) {
			t.Errorf("err = %v, want ErrIncludeDepth", err)
		}
	})
	t.Run("nesting", func(t *testing.T) {
		src := strings.Repeat("group {\n", maxNesting+1) + strings.Repeat("}\n", maxNesting+1)
		_, err := confParseString(src, nil)
		if err == nil || !strings.Contains(err.Error(), "nested more than") {
			t.Errorf("err = %v, want a nesting error", err)
		}
		src = strings.Repeat("group {\n", maxNesting) + strings.Repeat("}\n", maxNesting)
		if _, err := confParseString(src, nil); err != nil {
			t.Errorf("%d nested groups: %v", maxNesting, err)
		}
	})
	t.Run("no opener", func(t *testing.T) {
		_, err := Parse(strings.NewReader(`include "x.conf";`), Options{Name: "test.conf"})
		if !errors.Is(err, ErrNoOpener) {
			t.Errorf("err = %v, want ErrNoOpener", err)
		}
	})
	t.Run("open error is wrapped", func(t *testing.T) {
		_, err := confParseString(`include "missing.conf";`, nil)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want fs.ErrNotExist in its chain", err)
		}
	})
	t.Run("relative paths without BaseDir stay relative", func(t *testing.T) {
		var opened []string
		open := func(path string) (io.ReadCloser, error) {
			opened = append(opened, path)
			if path == "sub/b.conf" {
				return io.NopCloser(strings.NewReader("")), nil
			}
			return io.NopCloser(strings.NewReader(`include "sub/b.conf";`)), nil
		}
		if _, err := Parse(strings.NewReader(`include "./a.conf";`), Options{Open: open}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a.conf", "sub/b.conf"}, opened); diff != "" {
			t.Errorf("opened (-want +got):\n%s", diff)
		}
	})
}

// TestParseConfigLineEndings checks that CRLF files parse exactly like LF
// files, strings included.
func TestParseConfigLineEndings(t *testing.T) {
	src := lines(
		`shared-network "multi`,
		`line" {`,
		"  subnet 203.0.113.0 netmask 255.255.255.0 { # comment\r",
		"    range 203.0.113.1 203.0.113.2;",
		"  }",
		"}",
	)
	want, err := confParseString(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := want.Subnets[0].SharedNetwork; got != "multi\nline" {
		t.Errorf("SharedNetwork = %q, want %q", got, "multi\nline")
	}
	crlf := strings.ReplaceAll(strings.ReplaceAll(src, "\r", ""), "\n", "\r\n")
	got, err := confParseString(crlf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, confCmpOpts); diff != "" {
		t.Errorf("CRLF parse differs (-LF +CRLF):\n%s", diff)
	}
}

func TestConfStringEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"plain"`, "plain"},
		{`"q\"q"`, `q"q`},
		{`"\t\r\n\b"`, "\t\r\n\b"},
		{`"\101\060x"`, "A0x"},
		{`"\x41\x4a\x4Bz"`, "AJKz"},
		{`"\\ \{ \;"`, `\ { ;`},
		{`"a;b{c}#d"`, "a;b{c}#d"},
	} {
		lx := newLexer([]byte(tc.in), "")
		tok, err := lx.next()
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if tok.kind != tokString || tok.text != tc.want {
			t.Errorf("%s: got %v %q, want string %q", tc.in, tok.kind, tok.text, tc.want)
		}
	}
}

// confFixtures lists testdata/conf/*.conf; their includes live under inc/.
func confFixtures(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "conf", "*.conf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	return files
}

func confParseFixture(t *testing.T, file string) (*Config, error) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Parse(f, Options{
		BaseDir: filepath.Dir(file),
		Open:    func(path string) (io.ReadCloser, error) { return os.Open(path) },
		Name:    file,
	})
}

// TestParseConfigGolden compares each fixture's Config, as indented JSON,
// with its .golden file; -update rewrites them.
func TestParseConfigGolden(t *testing.T) {
	for _, file := range confFixtures(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cfg, err := confParseFixture(t, file)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := json.MarshalIndent(cfg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			lktest.Golden(t, strings.TrimSuffix(file, ".conf")+".golden", got)
		})
	}
}

// confDhcpdFlag reads the "# dhcpd: -4" or "# dhcpd: -6" marker on a
// fixture's first line.
func confDhcpdFlag(src []byte) string {
	first, _, _ := bytes.Cut(src, []byte("\n"))
	flag, ok := strings.CutPrefix(strings.TrimSpace(string(first)), "# dhcpd:")
	if !ok {
		return ""
	}
	return strings.TrimSpace(flag)
}

// confDhcpd returns a function running "dhcpd -t" (config test mode) on a
// directory, or skips the test when dhcpd cannot run here.
func confDhcpd(t *testing.T) func(dir, flag string) (ok bool, out string) {
	t.Helper()
	bin := "/usr/sbin/dhcpd"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("ISC dhcpd not installed (%s: %v); apt-get install isc-dhcp-server to run this test", bin, err)
	}
	run := func(dir, flag string) (bool, string) {
		cmd := exec.Command(bin, "-t", flag, "-cf", "test.conf", "-lf", "/dev/null", "-pf", filepath.Join(dir, "pid"))
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return err == nil, string(out)
	}
	// A config dhcpd must accept: if it fails, the environment (AppArmor,
	// missing libraries, …) is at fault, not the fixtures.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "test.conf"), []byte("subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.20; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, out := run(dir, "-4"); !ok {
		t.Skipf("dhcpd -t fails on a trivial config here, so it cannot judge fixtures:\n%s", out)
	}
	return run
}

func confWriteTree(t *testing.T, dir, main string, files map[string]string) {
	t.Helper()
	write := func(name, body string) {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("test.conf", main)
	for name, body := range files {
		write(name, body)
	}
}

// TestParseConfigDhcpdAgrees runs the real dhcpd in config test mode over
// the fixtures and the table cases: what we accept it accepts, what we
// reject it rejects, so the fixtures are real dhcpd syntax.
func TestParseConfigDhcpdAgrees(t *testing.T) {
	dhcpd := confDhcpd(t)
	for _, file := range confFixtures(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			flag := confDhcpdFlag(src)
			if flag == "" {
				t.Skip("fixture has no '# dhcpd: -4|-6' marker")
			}
			files := map[string]string{}
			incs, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "inc", "*"))
			for _, inc := range incs {
				b, err := os.ReadFile(inc)
				if err != nil {
					t.Fatal(err)
				}
				files[filepath.Join("inc", filepath.Base(inc))] = string(b)
			}
			dir := t.TempDir()
			confWriteTree(t, dir, string(src), files)
			if ok, out := dhcpd(dir, flag); !ok {
				t.Errorf("dhcpd -t %s rejects %s:\n%s", flag, file, out)
			}
		})
	}
	for _, tc := range append(append([]confCase{}, confValidCases...), confErrorCases...) {
		if tc.dhcpd == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			confWriteTree(t, dir, tc.src, tc.files)
			ok, out := dhcpd(dir, tc.dhcpd)
			switch {
			case tc.want != nil && !ok:
				t.Errorf("we accept, dhcpd -t %s rejects:\n%s\n%s", tc.dhcpd, tc.src, out)
			case tc.want == nil && ok:
				t.Errorf("we reject (%s), dhcpd -t %s accepts:\n%s", tc.err, tc.dhcpd, tc.src)
			}
		})
	}
}

// BenchmarkParseConfig parses the MAAS-style fixture.
func BenchmarkParseConfig(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "conf", "maas.conf"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(src), Options{Name: "maas.conf"}); err != nil {
			b.Fatal(err)
		}
	}
}
