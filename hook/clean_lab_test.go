package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/parser"
)

// TestLabMAASDhcpdStart is the replacement setup on a deb rack: dhcpd
// started the way MAAS's maas-dhcpd.service starts it (debian/
// maas-dhcp.maas-dhcpd.service in MAAS 3.5 to 3.8: sh -ec, touch the
// leases file if missing, "/usr/sbin/maas-dhcp-helper clean
// $LEASES_FILE", chmod 664, exec dhcpd), with the hook installed under
// the helper's name as the diversion installs it (a link).
//
// First a control: dhcpd started on the leases file as it is treats its
// host statements as hosts (a client gets the fixed address of its
// host) and writes them back in its own rewrite. That file, hosts as
// dhcpd writes them, is the input of the MAAS-style start, which must
// bring dhcpd up on exactly the file minus its host statements (the
// lease blocks byte for byte: dhcpd keeps the file it read as
// dhcpd.leases~) and serve a client of a removed host from the range.
func TestLabMAASDhcpdStart(t *testing.T) {
	lab.Require(t, "dhcpd", "dhclient")
	maas := filepath.Join(t.TempDir(), "maas-dhcp-helper")
	if err := os.Symlink(hookBin, maas); err != nil {
		t.Fatal(err)
	}
	l := lab.New(t)
	c1, c2 := l.AddClient("c1"), l.AddClient("c2")
	conf := "ping-check false;\nauthoritative;\nddns-update-style none;\ndefault-lease-time 600;\nmax-lease-time 600;\n" +
		l.SubnetConf("  range 203.0.113.100 203.0.113.150;")
	fixed1, fixed2 := netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("203.0.113.8")
	leases := "authoring-byte-order little-endian;\n\n" +
		"lease 203.0.113.120 {\n  starts 1 2026/11/23 10:00:00;\n  ends 2 2036/11/25 10:00:00;\n  cltt 1 2026/11/23 10:00:00;\n" +
		"  binding state active;\n  next binding state free;\n  rewind binding state free;\n  hardware ethernet 02:00:00:00:01:20;\n" +
		"  uid \"\\001\\002\\000\\000\\000\\001 }\";\n  set clip = \"203.0.113.120\";\n  client-hostname \"a host {x}\";\n}\n" +
		"lease 203.0.113.121 {\n  starts 1 2026/11/23 10:00:00;\n  ends 1 2026/11/23 11:00:00;\n  tstp 1 2026/11/23 11:00:00;\n" +
		"  cltt 1 2026/11/23 10:00:00;\n  binding state free;\n  hardware ethernet 02:00:00:00:01:21;\n}\n" +
		fmt.Sprintf("host fixed-c1 {\n  dynamic;\n  hardware ethernet %s;\n  fixed-address %s;\n}\n", c1.MAC, fixed1) +
		fmt.Sprintf("host fixed-c2 {\n  dynamic;\n  hardware ethernet %s;\n  fixed-address %s;\n}\n", c2.MAC, fixed2) +
		"host gone {\n  dynamic;\n  deleted;\n}\n"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The control: no clean.
	d := l.StartDhcpd(t, lab.DhcpdConfig{Conf: conf, Leases: leases})
	if ip, err := c1.Dhclient(ctx); err != nil || ip != fixed1 {
		t.Fatalf("control: c1 got %v (%v), want its host's %v\ndhcpd:\n%s", ip, err, fixed1, d.Logs())
	}
	if err := c1.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(d.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	before, errs := statements(written)
	if errs != 0 || countHosts(before) < 2 {
		t.Fatalf("dhcpd's own file: %d errors, %d hosts, want 0 and at least 2:\n%s", errs, countHosts(before), written)
	}

	// As maas-dhcpd.service, with the hook as maas-dhcp-helper.
	prelude := fmt.Sprintf("[ -e \"$LEASES_FILE\" ] || touch \"$LEASES_FILE\"\n%s clean \"$LEASES_FILE\"\nchmod 664 \"$LEASES_FILE\"",
		maas)
	d2 := l.StartDhcpd(t, lab.DhcpdConfig{Conf: conf, Leases: string(written), Prelude: prelude})
	read, err := os.ReadFile(d2.LeasesPath() + "~") // the file dhcpd started on
	if err != nil {
		t.Fatal(err)
	}
	want := maasCleaned(written) // MAAS's own helper on dhcpd's own file
	if bytes.Equal(want, written) {
		t.Fatal("MAAS's expression removes nothing from dhcpd's file: the fixture tests nothing")
	}
	if d := cmp.Diff(string(want), string(read)); d != "" {
		t.Errorf("dhcpd started on (-MAAS's clean +leasekeeper's)\n%s", d)
	}
	after, errs := statements(read)
	if errs != 0 || countHosts(after) != 0 || len(after) != len(before)-countHosts(before) {
		t.Errorf("cleaned file: %d errors, %d hosts, %d statements; dhcpd's had %d with %d hosts",
			errs, countHosts(after), len(after), len(before), countHosts(before))
	}
	// Every line but the hosts', byte for byte and in order: dhcpd
	// writes a statement's first line and its closing "}" at column 0.
	var kept strings.Builder
	inHost := false
	for _, line := range strings.SplitAfter(string(written), "\n") {
		switch {
		case inHost:
			inHost = line != "}\n"
		case strings.HasPrefix(line, "host "):
			inHost = true
		default:
			kept.WriteString(line)
		}
	}
	if kept.String() != string(read) {
		t.Errorf("lease blocks changed:\n%s", cmp.Diff(kept.String(), string(read)))
	}
	if logs := d2.Logs(); strings.Contains(logs, "leasekeeper-hook") {
		t.Errorf("clean wrote to stderr:\n%s", logs)
	}
	// dhcpd knows the removed host no more: c2 gets a range address.
	ip, err := c2.Dhclient(ctx)
	if err != nil {
		t.Fatalf("c2: %v\ndhcpd:\n%s", err, d2.Logs())
	}
	lo, hi := netip.MustParseAddr("203.0.113.100"), netip.MustParseAddr("203.0.113.150")
	if ip.Less(lo) || hi.Less(ip) {
		t.Errorf("c2 got %v, want an address of the range 203.0.113.100-150 (its host statement was removed)", ip)
	}
	if !d2.Running() {
		t.Errorf("dhcpd is not running:\n%s", d2.Logs())
	}
}

func countHosts(ss []parser.Statement) int {
	n := 0
	for _, s := range ss {
		if _, ok := s.(*parser.HostEntry); ok {
			n++
		}
	}
	return n
}
