package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

var addrEqual = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// render is a stable text form of parse results for golden files.
func render(f Format, ls []Lease, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "format: %s\n", f)
	for _, l := range ls {
		j, _ := json.Marshal(struct {
			Interface, Address, Server, ClientID, HWAddr, Expire string
			Never                                                bool
			Lifetime                                             string
			Line                                                 int
		}{l.Interface, l.Address.String(), l.Server.String(), fmt.Sprintf("%x", l.ClientID), l.HWAddr.String(),
			l.Expire.Format(time.RFC3339), l.Never, l.Lifetime.String(), l.Line})
		fmt.Fprintf(&b, "%s\n", j)
	}
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	return b.String()
}

// TestParseGolden parses every fixture (Parse detects the format) and
// compares all blocks, then the current ones, with testdata/NAME.golden.
func TestParseGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*")
	for _, path := range files {
		if strings.HasSuffix(path, ".golden") || strings.HasSuffix(path, ".conf") || strings.Contains(path, "fuzz") {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, ls, perr := Parse(bytes.NewReader(b))
			got := render(f, ls, perr) + "current:\n" + render(f, Current(ls), nil)
			lktest.Golden(t, path+".golden", []byte(got))
		})
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Format
	}{
		{"", FormatUnknown},
		{"# comment only\n\n", FormatUnknown},
		{"lease {\n", FormatDhclient},
		{"  lease{", FormatDhclient},
		{"default-duid \"x\";\n", FormatDhclient},
		{"lease6 {", FormatDhclient},
		{";\n ;; lease {", FormatDhclient},
		{"leases {", FormatUnknown},
		{"# This is private data. Do not parse.\nADDRESS=1.2.3.4\n", FormatNetworkd},
		{"address=1.2.3.4", FormatUnknown},
		{"{\"Address\":1}", FormatJSON},
		{"\x00\x01garbage", FormatUnknown},
	} {
		if got := Detect([]byte(tc.in)); got != tc.want {
			t.Errorf("Detect(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseDhclientErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, err string }{
		{"bad address", "lease { fixed-address 203.0.113.300; }", `line 1: fixed-address: "203.0.113.300" is not an IPv4 address`},
		{"v6 address", "lease { fixed-address 2001:db8::1; }", "not an IPv4 address"},
		{"no address", "lease {\n interface \"eth0\";\n}", "line 1: lease without a fixed-address"},
		{"unterminated string", "lease { interface \"eth0; }", "line 1: unterminated string"},
		{"missing semicolon", "lease { interface \"eth0\" }", `"interface": missing ';'`},
		{"bad expire", "lease { fixed-address 203.0.113.1; expire 1 2026/13/01 00:00:00; }", "expire: "},
		{"bad client id", "lease { fixed-address 203.0.113.1; option dhcp-client-identifier 1:zz; }", "dhcp-client-identifier"},
		{"stray brace", "}", "unexpected '}'"},
		{"unclosed", "lease {\n fixed-address 203.0.113.1;\n", "lease not closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDhclient(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// TestParseDhclientEmptyStatements: a lone ';' is an empty statement,
// skipped wherever it stands; it must not swallow the statement after
// it or report an error at the wrong line.
func TestParseDhclientEmptyStatements(t *testing.T) {
	lease := func(addr string, line int) Lease {
		return Lease{Interface: "eth0", Address: netip.MustParseAddr(addr), Server: netip.MustParseAddr("203.0.113.1"), Never: true, Line: line}
	}
	for _, tc := range []struct {
		name, in string
		want     []Lease
		err      string
	}{
		{"alone", ";", nil, ""},
		{"before a lease", ";\nlease { interface \"eth0\"; fixed-address 203.0.113.5; option dhcp-server-identifier 203.0.113.1; expire never; }",
			[]Lease{lease("203.0.113.5", 2)}, ""},
		{"after a lease", "lease { interface \"eth0\"; fixed-address 203.0.113.5; option dhcp-server-identifier 203.0.113.1; expire never; };\n;;\n",
			[]Lease{lease("203.0.113.5", 1)}, ""},
		{"inside a lease", "lease {\n ; interface \"eth0\";; fixed-address 203.0.113.5;\n option dhcp-server-identifier 203.0.113.1; expire never; ; }",
			[]Lease{lease("203.0.113.5", 1)}, ""},
		{"then a stray brace", ";\n;\n}", nil, "line 3: unexpected '}'"},
		{"then a bad lease", ";\nlease {\n fixed-address nope;\n}", nil, `line 3: fixed-address: "nope" is not an IPv4 address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDhclient(strings.NewReader(tc.in))
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got, addrEqual); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	conf := ";\nsend dhcp-client-identifier 1:2:3;\n;\ninterface \"eth1\" { ; send dhcp-client-identifier \"x\"; };\n"
	ids, err := ParseDhclientConf(strings.NewReader(conf))
	want := map[string]ConfClientID{"": {Bytes: []byte{1, 2, 3}}, "eth1": {Bytes: []byte("x")}}
	if diff := cmp.Diff(want, ids); err != nil || diff != "" {
		t.Errorf("dhclient.conf with empty statements: error %v, (-want +got):\n%s", err, diff)
	}
}

func TestParseNetworkdErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, err string }{
		{"no address", "SERVER_ADDRESS=203.0.113.1\n", "no ADDRESS"},
		{"bad address", "ADDRESS=nope\n", "line 1: ADDRESS:"},
		{"bad client id", "ADDRESS=203.0.113.5\nCLIENTID=xyz\n", "line 2: CLIENTID:"},
		{"bad lifetime", "ADDRESS=203.0.113.5\nLIFETIME=-1\n", "line 2: LIFETIME:"},
		{"not key=value", "ADDRESS=203.0.113.5\njunk\n", "line 2: want KEY=VALUE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNetworkd(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestParseDhclientConf(t *testing.T) {
	f, err := os.Open("testdata/dhclient.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseDhclientConf(f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ConfClientID{
		"":     {Bytes: []byte{1, 2, 0, 0, 0, 0, 1}},
		"eth1": {Bytes: []byte("node-7")},
		"eth2": {Hardware: true},
		"eth3": {Unknown: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := ParseDhclientConf(strings.NewReader(`interface "eth0" { send dhcp-client-identifier 1:;`)); err == nil {
		t.Error("bad conf: no error")
	}
}

// TestExpiry: only an end the file records is one; a networkd lease's
// LIFETIME counts from no time the file holds (see Expiry).
func TestExpiry(t *testing.T) {
	at := time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		l    Lease
		want time.Time
		ok   bool
	}{
		{"absolute", Lease{Expire: at, Lifetime: time.Minute}, at, true},
		{"never", Lease{Never: true, Lifetime: time.Minute}, time.Time{}, false},
		{"a lifetime alone", Lease{Lifetime: time.Hour}, time.Time{}, false},
		{"unknown", Lease{}, time.Time{}, false},
	} {
		got, ok := tc.l.Expiry()
		if !got.Equal(tc.want) || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPlan(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	ifaces := map[string]Iface{
		"eth0": {Name: "eth0", MAC: mac, Prefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.100/24")}},
		"eth1": {Name: "eth1", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.20/24")}},
		"eth2": {Name: "eth2", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 3}, Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.30/24")}},
		"ib0":  {Name: "ib0", MAC: make(net.HardwareAddr, 20), Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.40/24")}},
		"eth4": {Name: "eth4", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 5}, Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.70/24")}},
		"br0":  {Name: "br0", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 4}, Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.60/24")}},
	}
	a := netip.MustParseAddr
	srv := a("203.0.113.1")
	conf := map[string]ConfClientID{"": {Bytes: []byte("all")}, "eth2": {Hardware: true}, "eth4": {Unknown: true}}
	sources := []Source{
		{Path: "dh", Format: FormatDhclient, ClientIDs: conf, Leases: []Lease{
			{Interface: "eth0", Address: a("203.0.113.100"), Server: srv, Expire: now.Add(time.Hour)},
			{Interface: "eth1", Address: a("198.51.100.20"), Server: a("198.51.100.2"), Expire: now.Add(-time.Second)},
			{Interface: "eth2", Address: a("198.51.100.30"), Server: a("198.51.100.2"), Never: true},
			{Interface: "eth3", Address: a("198.51.100.50"), Server: srv},
			{Interface: "ib0", Address: a("198.51.100.40"), Server: srv},
			// An identifier only dhclient can work out: none, not the
			// global one.
			{Interface: "eth4", Address: a("198.51.100.70"), Server: srv, Never: true},
		}},
		{Path: "nd", Format: FormatNetworkd, Iface: "eth0", Leases: []Lease{
			// The same lease, ending later: this file's wins.
			{Address: a("203.0.113.100"), Server: srv, ClientID: []byte{0xff, 1}, Lifetime: 2 * time.Hour},
		}},
		{Path: "stale", Format: FormatNetworkd, Iface: "eth0", Leases: []Lease{{Address: a("203.0.113.7"), Server: srv}}},
		{Path: "nm", Format: FormatNetworkd, Iface: "eth1", Leases: []Lease{{Address: a("198.51.100.20")}}},
		{Path: "anon", Format: FormatNetworkd, Leases: []Lease{{Address: a("203.0.113.100"), Server: srv}}},
		// Unknown expiry, but no server: the releasable one above wins.
		{Path: "nm0", Format: FormatNetworkd, Iface: "eth0", Leases: []Lease{{Address: a("203.0.113.100")}}},
		// dhcpcd's ACK records the client's address when it leased, a
		// bridge's since changed: the release carries the lease's, as
		// dhcpd compares chaddr with the lease's hardware address
		// (ISC dhcp server/dhcp.c, dhcprelease).
		{Path: "dc", Format: FormatDhcpcd, Iface: "br0", Leases: []Lease{{Address: a("198.51.100.60"), Server: srv, HWAddr: net.HardwareAddr{2, 0, 0, 0, 0, 9}}}},
	}
	type row struct {
		Iface, Addr, Source string
		Verdict             Verdict
		ClientID, MAC       string
	}
	var got []row
	for _, x := range Plan(sources, ifaces, nil, now) {
		got = append(got, row{x.Iface, x.Lease.Address.String(), x.Source, x.Verdict, fmt.Sprintf("%x", x.ClientID), x.MAC.String()})
	}
	want := []row{
		{"", "203.0.113.100", "anon", SkipNoInterface, "", ""},
		{"br0", "198.51.100.60", "dc", Release, "", "02:00:00:00:00:09"},
		{"eth0", "203.0.113.7", "stale", SkipNotConfigured, "", "02:00:00:00:00:01"},
		{"eth0", "203.0.113.100", "nd", Release, "ff01", "02:00:00:00:00:01"},
		{"eth1", "198.51.100.20", "nm", SkipNoServer, "", "02:00:00:00:00:02"}, // unknown expiry counts as later
		{"eth2", "198.51.100.30", "dh", Release, "01020000000003", "02:00:00:00:00:03"},
		{"eth3", "198.51.100.50", "dh", SkipNoInterface, "", ""},
		{"eth4", "198.51.100.70", "dh", Release, "", "02:00:00:00:00:05"},
		{"ib0", "198.51.100.40", "dh", SkipNotEthernet, "616c6c", "00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Plan (-want +got):\n%s", diff)
	}
	only := Plan(sources[:1], ifaces, []string{"eth1"}, now)
	if len(only) != 1 || only[0].Verdict != SkipExpired || only[0].Iface != "eth1" {
		t.Errorf("--interface eth1: %+v", only)
	}
	if n := len(Plan(sources, ifaces, []string{"eth9"}, now)); n != 0 {
		t.Errorf("--interface eth9: %d actions", n)
	}
}

func TestPacket(t *testing.T) {
	l := Lease{Address: netip.MustParseAddr("203.0.113.100"), Server: netip.MustParseAddr("203.0.113.1")}
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	xid := dhcpv4.TransactionID{1, 2, 3, 4}
	p, err := Packet(l, mac, []byte{1, 2, 0, 0, 0, 0, 1}, xid)
	if err != nil {
		t.Fatal(err)
	}
	// What goes on the wire, decoded again.
	q, err := dhcpv4.FromBytes(p.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	if q.OpCode != dhcpv4.OpcodeBootRequest || q.MessageType() != dhcpv4.MessageTypeRelease ||
		!q.ClientIPAddr.Equal(net.ParseIP("203.0.113.100")) || q.ClientHWAddr.String() != mac.String() ||
		q.HWType.String() != "Ethernet" || !q.ServerIdentifier().Equal(net.ParseIP("203.0.113.1")) ||
		q.TransactionID != xid || q.IsBroadcast() || !q.YourIPAddr.IsUnspecified() ||
		!bytes.Equal(q.Options.Get(dhcpv4.OptionClientIdentifier), []byte{1, 2, 0, 0, 0, 0, 1}) ||
		q.Options.Has(dhcpv4.OptionRequestedIPAddress) {
		t.Errorf("decoded packet wrong:\n%s", q.Summary())
	}
	if got, want := Describe(q), "DHCPRELEASE xid 0x01020304 ciaddr 203.0.113.100 chaddr 02:00:00:00:00:01 server-id 203.0.113.1 client-id 01:02:00:00:00:00:01"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	p, err = Packet(l, mac, nil, xid)
	if err != nil || p.Options.Has(dhcpv4.OptionClientIdentifier) {
		t.Errorf("no client id: %v, options %v", err, p.Options)
	}
	for name, bad := range map[string]func() error{
		"no server": func() error { _, err := Packet(Lease{Address: l.Address}, mac, nil, xid); return err },
		"v6": func() error {
			_, err := Packet(Lease{Address: netip.MustParseAddr("2001:db8::1"), Server: l.Server}, mac, nil, xid)
			return err
		},
		"not ether":   func() error { _, err := Packet(l, make(net.HardwareAddr, 20), nil, xid); return err },
		"huge client": func() error { _, err := Packet(l, mac, make([]byte, 256), xid); return err },
	} {
		if bad() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNmIface(t *testing.T) {
	for in, want := range map[string]string{
		"internal-0f8d3b52-6d6e-4c8a-9d8f-5c1b6bb7c2a1-eth0.lease":      "eth0",
		"dhclient-0f8d3b52-6d6e-4c8a-9d8f-5c1b6bb7c2a1-enp0s31f6.lease": "enp0s31f6",
		"internal-0f8d3b52-6d6e-4c8a-9d8f-5c1b6bb7c2a1-br-ex.lease":     "br-ex",
		"internal-short-eth0.lease":                                     "",
		"dhclient.eth0.leases":                                          "",
		"2":                                                             "",
	} {
		if got := nmIface(in); got != want {
			t.Errorf("nmIface(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNeighVerdict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state int
		want  neighState
	}{
		{"none", netlink.NUD_NONE, neighPending},
		{"incomplete", netlink.NUD_INCOMPLETE, neighPending},
		{"reachable", netlink.NUD_REACHABLE, neighGone},
		{"stale", netlink.NUD_STALE, neighGone},
		{"delay", netlink.NUD_DELAY, neighGone},
		{"probe", netlink.NUD_PROBE, neighGone},
		{"permanent", netlink.NUD_PERMANENT, neighGone},
		{"failed", netlink.NUD_FAILED, neighFailed},
		{"noarp", netlink.NUD_NOARP, neighUnresolvable},
	} {
		if got := neighVerdict(tc.state); got != tc.want {
			t.Errorf("%s (%#x): %v, want %v", tc.name, tc.state, got, tc.want)
		}
	}
}

// TestRunNoLeases: nothing where the clients keep leases is not an
// error, and says where it looked.
func TestRunNoLeases(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	res, err := Run(context.Background(), Options{Globs: []string{filepath.Join(dir, "*.leases")}, Stdout: &out, Stderr: &errb})
	if err != nil || len(res.Actions) != 0 || !strings.Contains(out.String(), "no DHCPv4 leases found (looked in "+dir) {
		t.Errorf("err %v, actions %d, stdout %q, stderr %q", err, len(res.Actions), out.String(), errb.String())
	}
}

// TestRunOddFiles: found files that are not lease files are warned
// about and skipped; the run still succeeds, and reads the good ones.
func TestRunOddFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.leases"), []byte("\x00\x01 binary junk"), 0o644)
	os.Mkdir(filepath.Join(dir, "b.leases"), 0o755)
	os.WriteFile(filepath.Join(dir, "c.leases"), []byte("lease {\n interface \"lk-nosuch0\";\n fixed-address 203.0.113.9;\n option dhcp-server-identifier 203.0.113.1;\n expire never;\n}\n"), 0o644)
	// A file being written (networkd's ".#…" temporary) is no lease:
	// not read, not warned about.
	os.WriteFile(filepath.Join(dir, ".#c.leasesXYZ.leases"), []byte("ADDRESS=203.0.113.10\n"), 0o644)
	var out, errb bytes.Buffer
	res, err := Run(context.Background(), Options{Globs: []string{filepath.Join(dir, "*.leases")}, DhclientConf: "-", Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("err %v", err)
	}
	if res.Skipped != 1 || !strings.Contains(out.String(), "lk-nosuch0: skipped 203.0.113.9: no interface lk-nosuch0 on this node") || strings.Contains(out.String()+errb.String(), "203.0.113.10") {
		t.Errorf("stdout %q, stderr %q", out.String(), errb.String())
	}
	for _, want := range []string{"a.leases: unknown lease file: not a dhclient", "b.leases: not a regular file"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
	}
}

// runBounded runs Run and fails the test if it has not returned within
// bound. A run blocked opening a FIFO is set free by opening the FIFOs
// for writing, so a regression fails instead of hanging the test.
func runBounded(t *testing.T, o Options, bound time.Duration, fifos ...string) (Result, error) {
	t.Helper()
	type ret struct {
		res Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := Run(context.Background(), o)
		done <- ret{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-time.After(bound):
		for len(done) == 0 {
			for _, f := range fifos {
				if fd, err := syscall.Open(f, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					syscall.Close(fd)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("Run did not return within %v (blocked opening a FIFO?)", bound)
		return Result{}, nil
	}
}

// TestRunFIFO: a FIFO where a lease file or dhclient.conf is expected,
// named or found by a glob, is refused at once with the reason, instead
// of blocking the run (and shutdown) until something writes to it.
func TestRunFIFO(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		return p
	}
	named, globbed, conf := mk("named.leases"), mk("dhclient.eth0.leases"), mk("dhclient.conf")
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("lease {\n interface \"lk-nosuch0\";\n fixed-address 203.0.113.9;\n option dhcp-server-identifier 203.0.113.1;\n expire never;\n}\n"), 0o644)
	link := filepath.Join(dir, "link.leases")
	if err := os.Symlink(named, link); err != nil {
		t.Fatal(err)
	}
	goodLink := filepath.Join(dir, "good-link.leases") // followed: a regular file
	if err := os.Symlink(good, goodLink); err != nil {
		t.Fatal(err)
	}

	t.Run("named", func(t *testing.T) {
		var out, errb bytes.Buffer
		res, err := runBounded(t, Options{LeaseFiles: []string{named, link, goodLink}, DhclientConf: conf, Timeout: time.Second, Stdout: &out, Stderr: &errb}, 10*time.Second, named, conf)
		if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "2 named lease file(s) unusable") {
			t.Errorf("err %v, want ErrFailed for 2 named files", err)
		}
		for _, want := range []string{
			named + ": not a regular file (a FIFO)",
			link + ": not a regular file (a FIFO)",
			conf + ": not a regular file (a FIFO) (client identifiers from it not used)",
		} {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("stderr %q lacks %q", errb.String(), want)
			}
		}
		if res.Skipped != 1 || !strings.Contains(out.String(), "lk-nosuch0: skipped 203.0.113.9") {
			t.Errorf("the good file was not handled: stdout %q", out.String())
		}
	})
	t.Run("glob", func(t *testing.T) {
		var out, errb bytes.Buffer
		_, err := runBounded(t, Options{Globs: []string{filepath.Join(dir, "dhclient.*.leases")}, DhclientConf: conf, Timeout: time.Second, Stdout: &out, Stderr: &errb}, 10*time.Second, globbed, conf)
		if err != nil {
			t.Errorf("err %v; a found odd file is only warned about", err)
		}
		if want := globbed + ": not a regular file (a FIFO)"; !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
		if !strings.Contains(out.String(), "no DHCPv4 leases found") {
			t.Errorf("stdout %q", out.String())
		}
	})
}

// formatDhclient writes leases back in dhclient's format.
func formatDhclient(ls []Lease) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString("lease {\n")
		if l.Interface != "" {
			fmt.Fprintf(&b, "  interface %s;\n", quote(l.Interface))
		}
		fmt.Fprintf(&b, "  fixed-address %s;\n", l.Address)
		if l.Server.IsValid() {
			fmt.Fprintf(&b, "  option dhcp-server-identifier %s;\n", l.Server)
		}
		if len(l.ClientID) > 0 {
			fmt.Fprintf(&b, "  option dhcp-client-identifier %s;\n", colonHex(l.ClientID))
		}
		if l.Lifetime > 0 {
			fmt.Fprintf(&b, "  option dhcp-lease-time %d;\n", int64(l.Lifetime/time.Second))
		}
		switch {
		case l.Never:
			b.WriteString("  expire never;\n")
		case !l.Expire.IsZero():
			fmt.Fprintf(&b, "  expire epoch %d;\n", l.Expire.Unix())
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c > 0x7e {
			fmt.Fprintf(&b, "\\%03o", c)
		} else {
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// normalise drops what formatDhclient does not write back.
func normalise(ls []Lease) []Lease {
	out := make([]Lease, len(ls))
	for i, l := range ls {
		l.Line = 0
		if len(l.ClientID) == 0 {
			l.ClientID = nil
		}
		if !l.Expire.IsZero() {
			l.Expire = l.Expire.Truncate(time.Second).UTC()
		}
		out[i] = l
	}
	return out
}

// FuzzParseDhclient: any input either fails or yields IPv4 leases that
// survive a write-and-read round trip unchanged; Current keeps one per
// interface.
func FuzzParseDhclient(f *testing.F) {
	for _, p := range []string{"testdata/dhclient.leases", "testdata/dhclient-torn.leases", "testdata/dhclient-semicolons.leases", "testdata/dhclient.conf"} {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Add([]byte("lease { fixed-address 203.0.113.1; expire epoch 0; }"))
	f.Fuzz(func(t *testing.T, in []byte) {
		ls, err := ParseDhclient(bytes.NewReader(in))
		for _, l := range ls {
			if !l.Address.Is4() || l.Server.IsValid() && !l.Server.Is4() {
				t.Fatalf("lease with a bad address: %+v", l)
			}
		}
		if err != nil {
			return
		}
		back := formatDhclient(ls)
		ls2, err := ParseDhclient(strings.NewReader(back))
		if err != nil {
			t.Fatalf("re-reading %q: %v", back, err)
		}
		if diff := cmp.Diff(normalise(ls), normalise(ls2), addrEqual); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s\n%s", diff, back)
		}
		seen := map[string]bool{}
		for _, l := range Current(ls) {
			if l.Interface != "" && seen[l.Interface] {
				t.Fatalf("Current: %s twice", l.Interface)
			}
			seen[l.Interface] = true
		}
		_, _ = ParseDhclientConf(bytes.NewReader(in))
	})
}

// FuzzParseNetworkd: a parsed lease has an IPv4 address and survives a
// round trip through the KEY=VALUE form.
func FuzzParseNetworkd(f *testing.F) {
	for _, p := range []string{"testdata/networkd-252", "testdata/internal-0f8d3b52-6d6e-4c8a-9d8f-5c1b6bb7c2a1-eth0.lease"} {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := ParseNetworkd(bytes.NewReader(in))
		if err != nil {
			return
		}
		if !l.Address.Is4() {
			t.Fatalf("bad address %v", l.Address)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "ADDRESS=%s\n", l.Address)
		if l.Server.IsValid() {
			fmt.Fprintf(&b, "SERVER_ADDRESS=%s\n", l.Server)
		}
		if len(l.ClientID) > 0 {
			fmt.Fprintf(&b, "CLIENTID=%x\n", l.ClientID)
		}
		if l.Lifetime > 0 {
			fmt.Fprintf(&b, "LIFETIME=%d\n", int64(l.Lifetime/time.Second))
		}
		l2, err := ParseNetworkd(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("re-reading %q: %v", b.String(), err)
		}
		l.Line, l2.Line = 0, 0
		if len(l.ClientID) == 0 {
			l.ClientID = nil
		}
		if diff := cmp.Diff(l, l2, addrEqual); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// TestExplainPrivileges: EACCES or EPERM from setting up the socket
// means release is not root, not that the way to the server is barred.
func TestExplainPrivileges(t *testing.T) {
	server := netip.MustParseAddr("203.0.113.1")
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "udp4", Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"bind EACCES", dial(os.NewSyscallError("bind", syscall.EACCES)), "binding UDP port 68 needs root (CAP_NET_BIND_SERVICE)"},
		{"bind EPERM", dial(os.NewSyscallError("bind", syscall.EPERM)), "binding UDP port 68 needs root"},
		{"bind to device", dial(os.NewSyscallError("setsockopt SO_BINDTODEVICE", syscall.EPERM)), "needs root (CAP_NET_RAW)"},
		{"connect EACCES", dial(os.NewSyscallError("connect", syscall.EACCES)), "prohibited here (a prohibit route or a firewall)"},
		{"write EPERM", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPERM)}, "prohibited here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explain(tc.err, server)
			if !strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err) {
				t.Errorf("explain = %v, want it to say %q and wrap the error", got, tc.want)
			}
		})
	}
}

// TestRunNoSuchInterface: an --interface the node does not have stops
// the run before anything is read or sent.
func TestRunNoSuchInterface(t *testing.T) {
	var out, errb bytes.Buffer
	_, err := Run(context.Background(), Options{Interfaces: []string{"lk-nosuch0"}, LeaseFiles: []string{filepath.Join(t.TempDir(), "none")}, Stdout: &out, Stderr: &errb})
	if !errors.Is(err, ErrNoSuchInterface) || !strings.Contains(err.Error(), "--interface lk-nosuch0") || out.Len() != 0 || errb.Len() != 0 {
		t.Errorf("err %v, stdout %q, stderr %q; want ErrNoSuchInterface and nothing printed", err, out.String(), errb.String())
	}
}

// TestRunDhclientConfNamed: a dhclient.conf named but missing is warned
// about (the default one may be missing without a word).
func TestRunDhclientConfNamed(t *testing.T) {
	dir := t.TempDir()
	lease := filepath.Join(dir, "dhclient.leases")
	os.WriteFile(lease, []byte("lease {\n interface \"lk-nosuch0\";\n fixed-address 203.0.113.9;\n option dhcp-server-identifier 203.0.113.1;\n expire never;\n}\n"), 0o644)
	missing := filepath.Join(dir, "missing.conf")
	for _, tc := range []struct {
		conf, want string
	}{
		{missing, missing + ": open " + missing + ": no such file or directory (client identifiers from it not used)"},
		{"-", ""},
	} {
		var out, errb bytes.Buffer
		_, err := Run(context.Background(), Options{LeaseFiles: []string{lease}, DhclientConf: tc.conf, DryRun: true, Stdout: &out, Stderr: &errb})
		if err != nil || !strings.Contains(errb.String(), tc.want) || tc.want == "" && errb.Len() != 0 {
			t.Errorf("--dhclient-conf %s: err %v, stderr %q; want %q", tc.conf, err, errb.String(), tc.want)
		}
	}
}

// TestRunNamedFileInterface: which interface a named networkd-format
// file is for, with --interface. A single --interface wins over the
// file's name (an index of another namespace or boot); with several,
// the name says, and a named file with no lease for an interface asked
// for is reported, its leases skipped with the reason, and fails the
// run instead of "no DHCPv4 leases found". Runs in a lab namespace with
// interfaces br0 (203.0.113.1/24), n0 and n1; dry runs, nothing sent.
func TestRunNamedFileInterface(t *testing.T) {
	l := lab.New(t)
	if err := l.IP(l.NS,
		[]string{"link", "add", "n0", "type", "veth", "peer", "name", "n1"},
		[]string{"link", "set", "n0", "up"},
		[]string{"link", "set", "n1", "up"},
	); err != nil {
		t.Fatal(err)
	}
	idx := map[string]string{}
	if err := l.InNetns(l.NS, func() error {
		for _, n := range []string{"br0", "n0", "n1"} {
			ifc, err := net.InterfaceByName(n)
			if err != nil {
				return err
			}
			idx[n] = strconv.Itoa(ifc.Index)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	const networkd = "ADDRESS=203.0.113.1\nSERVER_ADDRESS=203.0.113.2\nLIFETIME=600\n"
	dhclient := ""
	for _, n := range []string{"br0", "n0", "n1"} {
		dhclient += "lease {\n interface \"" + n + "\";\n fixed-address 203.0.113.1;\n option dhcp-server-identifier 203.0.113.2;\n expire never;\n}\n"
	}
	for _, tc := range []struct {
		name, file, body string
		ifaces           []string
		want             []string // in stdout
		fail             bool     // ErrFailed
	}{
		{"one --interface, name of another", idx["n0"], networkd, []string{"br0"},
			[]string{"br0: would release 203.0.113.1"}, false},
		{"one --interface, name of none", "999", networkd, []string{"br0"},
			[]string{"br0: would release 203.0.113.1"}, false},
		{"one --interface, NetworkManager name of another", "internal-0f8d3b52-6d6e-4c8a-9d8f-5c1b6bb7c2a1-eth7.lease", networkd, []string{"br0"},
			[]string{"br0: would release 203.0.113.1"}, false},
		{"several, name of one of them", idx["br0"], networkd, []string{"n0", "br0"},
			[]string{"br0: would release 203.0.113.1"}, false},
		{"several, name of another", idx["n1"], networkd, []string{"br0", "n0"},
			[]string{"n1: skipped 203.0.113.1: the lease is for n1, not --interface br0, n0"}, true},
		{"several, name of none", "lease", networkd, []string{"br0", "n0"},
			[]string{"(unknown interface): skipped 203.0.113.1: the file does not say which interface it is for"}, true},
		{"dhclient, one asked for", "dhclient.leases", dhclient, []string{"br0"},
			[]string{"br0: would release 203.0.113.1", "n0: skipped 203.0.113.1: the lease is for n0, not --interface br0"}, false},
		{"dhclient, none asked for", "dhclient.leases", dhclient[:strings.Index(dhclient, "}")+2], []string{"n0", "n1"},
			[]string{"br0: skipped 203.0.113.1: the lease is for br0, not --interface n0, n1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(file, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			var err error
			if lerr := l.InNetns(l.NS, func() error {
				_, err = Run(context.Background(), Options{LeaseFiles: []string{file}, Interfaces: tc.ifaces, DhclientConf: "-", DryRun: true, Stdout: &out, Stderr: &errb})
				return nil
			}); lerr != nil {
				t.Fatal(lerr)
			}
			if errors.Is(err, ErrFailed) != tc.fail || err != nil && !tc.fail {
				t.Errorf("err %v, want failure %v", err, tc.fail)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s%s", w, out.String(), errb.String())
				}
			}
		})
	}
}
