package parser_test

// The differential harness: for every fixture in testdata/differential,
// real dhcpd loads the file and writes out what it loaded (it rewrites its
// leases file at every start), and that must be leasekeeper's table for
// the same file.
//
// dhcpd runs in a network namespace of the test's own (internal/lktest/lab; IPv6
// fixtures on a bridge made WithIPv6) and is stopped once it serves; its
// rewrite is cut at the server-duid line it appends right after the
// rename, so that what the running server appends later (IPv6 expiry
// timers) is not compared. Its start-up processing is applied to our
// table first: IPv4 leases whose time has come change state
// (rtAfterStart), a backup lease in a pool without a failover peer becomes
// free (lease_instantiate), a free lease nobody holds is written only when
// it has a tsfp (write_leases4). Fixture dates are in 2001 or 2037, so
// nothing depends on the day the test runs.
//
// The differences that remain are deliberate, and each is checked to be
// what it claims:
//
//   - A lease outside every range (IPv6: every pool) is in our table and
//     not in dhcpd's: dhcpd drops it at load, and that loss is what the
//     agent exists to report.
//   - An unfinished last statement (a torn tail) is not in our table: in a
//     live file it is a block dhcpd is still writing, which the agent reads
//     once it is whole; dhcpd, reading the file at start, keeps what it
//     read of it (checked: it has the address).
//   - IPv6 addresses in a state other than active or abandoned are in our
//     table and not in dhcpd's, which keeps only bound addresses in its
//     IAs: the agent must see an address leave the active state.
//
// No fixture may hold a statement the parser reports as a syntax error:
// those are outside what it promises to read as dhcpd does. And dhcpd must
// have complained about a line of every block we refuse.
//
// Fixtures: NAME.leases, with NAME.conf beside it or the default
// configuration for its family (v6-* files are IPv6). A line
// "# differential: dhcpd exits: TEXT" says dhcpd must refuse to start on
// the file, logging TEXT (checked with dhcpd -T). TestDifferentialGolden
// pins what the parser reads from the same fixtures where dhcpd is not
// installed.

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/leasekeeper/leasekeeper/internal/lktest"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

const diffDir = "testdata/differential"

// diffConf4 and diffConf6 are the default configurations, for the lab's
// bridge subnets.
const diffConf4 = `ping-check false;
default-lease-time 600;
max-lease-time 600;
class "limited" {
  match hardware;
  lease limit 2;
}
subnet 203.0.113.0 netmask 255.255.255.0 {
  range 203.0.113.100 203.0.113.199;
}
`

const diffConf6 = `default-lease-time 600;
max-lease-time 600;
subnet6 2001:db8:1::/64 {
  range6 2001:db8:1::100 2001:db8:1::1ff;
  range6 2001:db8:1:0:1::/80 temporary;
  prefix6 2001:db8:1:100:: 2001:db8:1:f00:: /56;
}
`

var diffAddr6 = netip.MustParsePrefix("2001:db8:1::1/64")

type diffFixture struct {
	name      string
	family    int
	leases    string
	conf      string
	dhcpdExit string // dhcpd must not start, logging this
}

var exitRe = regexp.MustCompile(`(?m)^# differential: dhcpd exits: (.+)$`)

func diffFixtures(t *testing.T) []diffFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(diffDir, "*.leases"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", diffDir, err)
	}
	var out []diffFixture
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fx := diffFixture{name: strings.TrimSuffix(filepath.Base(f), ".leases"), family: 4, leases: string(b), conf: diffConf4}
		if strings.HasPrefix(fx.name, "v6-") {
			fx.family, fx.conf = 6, diffConf6
		}
		if c, err := os.ReadFile(strings.TrimSuffix(f, ".leases") + ".conf"); err == nil {
			fx.conf = string(c)
		}
		if m := exitRe.FindStringSubmatch(fx.leases); m != nil {
			fx.dhcpdExit = m[1]
		}
		out = append(out, fx)
	}
	return out
}

// diffPools are the ranges a fixture's configuration declares: dhcpd
// loads no lease outside them.
type diffPools struct{ cfg *dhcpdconf.Config }

func (p diffPools) holds(l *parser.Lease) bool {
	for _, r := range p.cfg.Ranges {
		if r.Family != l.Family {
			continue
		}
		isPrefix := r.Kind == dhcpdconf.RangeKindPrefix6
		if isPrefix != (l.PrefixLen > 0) {
			continue
		}
		// Temporary addresses (ia-ta) come from temporary pools only.
		if l.IA != nil && !isPrefix && r.Temporary != (l.IA.Type == "ia-ta") {
			continue
		}
		if isPrefix && int(l.PrefixLen) != r.PrefixLen {
			continue
		}
		if l.IP.Compare(r.First) >= 0 && l.IP.Compare(r.Last) <= 0 {
			return true
		}
	}
	return false
}

// failover reports whether the range holding l has a failover peer.
func (p diffPools) failover(l *parser.Lease) bool {
	for _, r := range p.cfg.Ranges {
		if r.Family == l.Family && l.IP.Compare(r.First) >= 0 && l.IP.Compare(r.Last) <= 0 {
			return r.Failover != ""
		}
	}
	return false
}

// diffInstantiate is what dhcpd does to a lease it loaded before the
// start-up expiry (lease_instantiate): a backup lease in a pool without a
// failover peer becomes free.
func diffInstantiate(v rtView, failover bool) rtView {
	if v.Binding == parser.StateBackup && !failover {
		v.Binding, v.Next = parser.StateFree, parser.StateFree
	}
	return v
}

// diffRewrite is dhcpd's rewrite proper: the file up to and including
// the server-duid line dhcpd appends right after the rename (an IPv6
// rewrite may hold another, first, if the file it read had one). What
// follows was appended by the running server (IPv6 expiry timers).
func diffRewrite(text string) string {
	if i := strings.LastIndex(text, "\nserver-duid "); i >= 0 {
		if j := strings.IndexByte(text[i+1:], '\n'); j >= 0 {
			return text[:i+1+j+1]
		}
	}
	return text
}

// diffItem is one statement or error, in file order.
type diffItem struct {
	line int
	st   parser.Statement
	err  error
}

func diffDecode(text string) []diffItem {
	var items []diffItem
	d := parser.NewDecoder()
	h := func(s parser.Statement, err error) {
		it := diffItem{st: s, err: err}
		if s != nil {
			it.line = s.StartLine()
		} else if se, ok := err.(*parser.SyntaxError); ok {
			it.line = se.Line
		}
		items = append(items, it)
	}
	d.Feed([]byte(text), h)
	if err := d.Close(h); err != nil {
		items = append(items, diffItem{err: err})
	}
	return items
}

// complaintRe finds the lines dhcpd complained about in its log.
func complaintLines(log, path string) []int {
	re := regexp.MustCompile(regexp.QuoteMeta(path) + ` line (\d+):`)
	var lines []int
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		lines = append(lines, n)
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// TestDifferential runs real dhcpd on every fixture (in a network
// namespace of its own) and compares what it loaded with our table.
func TestDifferential(t *testing.T) {
	lab.Require(t, "dhcpd")
	for _, fx := range diffFixtures(t) {
		t.Run(fx.name, func(t *testing.T) {
			t.Parallel()
			ours, err := parser.ParseLeases(strings.NewReader(fx.leases))
			if err != nil {
				t.Fatal(err)
			}
			// A statement the parser cannot read is outside what it
			// promises to read as dhcpd does: no fixture may have one.
			for _, e := range ours.Errors {
				t.Errorf("parser: %v", e)
			}
			if fx.dhcpdExit != "" {
				diffExits(t, fx, ours)
				return
			}
			cfg, err := dhcpdconf.Parse(strings.NewReader(fx.conf), dhcpdconf.Options{Name: fx.name + ".conf"})
			if err != nil {
				t.Fatal(err)
			}
			var opts []lab.Option
			if fx.family == 6 {
				opts = append(opts, lab.WithIPv6(diffAddr6))
			}
			l := lab.New(t, opts...)
			now := parser.TimeOf(time.Now())
			d := l.StartDhcpd(t, lab.DhcpdConfig{Conf: fx.conf, Leases: fx.leases, Family: fx.family})
			if err := d.Stop(); err != nil {
				t.Fatal(err)
			}
			rewrite := diffRewrite(rtRead(t, d.LeasesPath()))
			theirs := rtParse(t, "dhcpd's rewrite", rewrite)
			if n := len(theirs.Refused()); n > 0 {
				t.Errorf("dhcpd's rewrite has %d blocks we refuse: %v", n, theirs.Refused())
			}
			pools := diffPools{cfg}
			if fx.family == 6 {
				diffCompare6(t, fx.leases, ours, theirs, pools)
			} else {
				diffCompare4(t, fx.leases, ours, theirs, pools, now)
			}
			diffComplaints(t, fx, ours, d.Logs(), filepath.Join(d.Dir, "dhcpd.leases"))
			if t.Failed() {
				t.Logf("dhcpd's rewrite:\n%s\ndhcpd's log:\n%s", rewrite, d.Logs())
			}
		})
	}
}

// diffExits: dhcpd must not start on the file, and we must say so.
func diffExits(t *testing.T, fx diffFixture, ours *parser.Leases) {
	c, err := lab.CheckLeaseFile(t, lab.DhcpdConfig{Conf: fx.conf, Leases: fx.leases, Family: fx.family})
	if err == nil || !strings.Contains(c.Output, fx.dhcpdExit) {
		t.Errorf("dhcpd -T: %v; want it to exit logging %q; its output:\n%s", err, fx.dhcpdExit, c.Output)
	}
	fatal := false
	for _, r := range ours.Refused() {
		fatal = fatal || r.Fatal
	}
	if !fatal {
		t.Errorf("no refusal of ours says dhcpd will not start: %v", ours.Refused())
	}
}

// diffTorn returns the key of the block an unfinished last statement
// would be, if it is a lease or an IA address we can name.
func diffTorn(text string, inc *parser.IncompleteError) []netip.Prefix {
	if inc == nil {
		return nil
	}
	lines := strings.Split(text, "\n")
	var keys []netip.Prefix
	for _, ln := range lines[inc.Line-1:] {
		f := strings.Fields(ln)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "lease", "iaaddr":
			if a, err := netip.ParseAddr(f[1]); err == nil {
				keys = append(keys, netip.PrefixFrom(a, a.BitLen()))
			}
		case "iaprefix":
			if p, err := netip.ParsePrefix(f[1]); err == nil {
				keys = append(keys, p)
			}
		}
	}
	return keys
}

func diffCompare4(t *testing.T, text string, ours, theirs *parser.Leases, pools diffPools, now parser.Time) {
	t.Helper()
	torn := diffTorn(text, ours.Incomplete)
	for _, l := range ours.Leases() {
		got, found := theirs.Lookup(l.Key())
		if !pools.holds(l) {
			if found {
				t.Errorf("%s is outside every range, yet dhcpd loaded it", l.IP)
			}
			continue
		}
		want, written := rtAfterStart(diffInstantiate(rtViewOf(l, now), pools.failover(l)), now)
		// write_leases4 also writes a free lease nobody holds when it
		// has a tsfp (failover); rtAfterStart models files without.
		written = written || (l.Tsfp.IsSet() && l.Tsfp != 0)
		switch {
		case slices.Contains(torn, l.Key()):
			// Deliberate: dhcpd read the torn block over this one.
		case !written && found:
			t.Errorf("%s: dhcpd loaded a lease we expected it to drop: %+v", l.IP, rtViewOf(got, now))
		case written && !found:
			t.Errorf("%s: missing from dhcpd's rewrite; we expected %+v", l.IP, want)
		case written:
			if diff := cmp.Diff(want, rtViewOf(got, now)); diff != "" {
				t.Errorf("%s: ours (after dhcpd's start-up) differs from dhcpd's (-ours +dhcpd):\n%s", l.IP, diff)
			}
		}
	}
	for _, l := range theirs.Leases() {
		if _, ok := ours.Lookup(l.Key()); !ok && !slices.Contains(torn, l.Key()) {
			t.Errorf("%s: dhcpd loaded it, our table has no lease for it", l.IP)
		}
	}
	if diff := cmp.Diff(rtHosts(ours), rtHosts(theirs)); diff != "" {
		t.Errorf("hosts (-ours +dhcpd):\n%s", diff)
	}
	for _, k := range torn {
		if _, ok := theirs.Lookup(k); !ok {
			t.Errorf("%s: the torn block was expected to be loaded by dhcpd (the documented difference); it was not", k)
		}
	}
}

// diffView6 is what dhcpd keeps of an IPv6 address.
type diffView6 struct {
	IA                     string
	State                  parser.State
	Ends, Cltt             parser.Time
	PreferredLife, MaxLife uint32
	Vars                   map[string]string
	On                     parser.On
}

func diffViewOf6(l *parser.Lease) diffView6 {
	v := diffView6{
		IA:    fmt.Sprintf("%s/%d/%s", l.IA.Type, l.IA.IAID, parser.HexString(l.IA.DUID)),
		State: l.State, Ends: l.Ends, Cltt: l.Cltt,
		PreferredLife: l.PreferredLife, MaxLife: l.MaxLife,
		On: l.On & (parser.OnExpiry | parser.OnRelease),
	}
	if vars := l.Vars(); len(vars) > 0 {
		v.Vars = make(map[string]string)
		for _, x := range vars {
			v.Vars[x.Name] = x.Value
		}
	}
	return v
}

func diffCompare6(t *testing.T, text string, ours, theirs *parser.Leases, pools diffPools) {
	t.Helper()
	torn := diffTorn(text, ours.Incomplete)
	for _, l := range ours.Leases() {
		got, found := theirs.Lookup(l.Key())
		bound := l.State == parser.StateActive || l.State == parser.StateAbandoned
		switch {
		case slices.Contains(torn, l.Key()):
		case !pools.holds(l):
			if found {
				t.Errorf("%s is outside every pool, yet dhcpd loaded it", l.Key())
			}
		case !bound:
			// Deliberate: dhcpd keeps only bound addresses.
			if found {
				t.Errorf("%s: %s, yet dhcpd kept it in an IA", l.Key(), l.State)
			}
		case !found:
			t.Errorf("%s: missing from dhcpd's rewrite; we have %+v", l.Key(), diffViewOf6(l))
		default:
			if diff := cmp.Diff(diffViewOf6(l), diffViewOf6(got)); diff != "" {
				t.Errorf("%s: ours differs from dhcpd's (-ours +dhcpd):\n%s", l.Key(), diff)
			}
		}
	}
	for _, l := range theirs.Leases() {
		if _, ok := ours.Lookup(l.Key()); !ok && !slices.Contains(torn, l.Key()) {
			t.Errorf("%s: dhcpd loaded it, our table has no lease for it", l.Key())
		}
	}
}

// diffComplaints: dhcpd complained about every block we refuse, on a
// line of that block, and we refused something wherever it logged a
// corrupt lease file.
func diffComplaints(t *testing.T, fx diffFixture, ours *parser.Leases, log, path string) {
	t.Helper()
	complaints := complaintLines(log, path)
	items := diffDecode(fx.leases)
	refused := 0
	for i, it := range items {
		r, ok := it.st.(*parser.Refused)
		if !ok || r.Swallowed {
			continue
		}
		refused++
		end := 1 << 30
		if i+1 < len(items) && items[i+1].line > 0 {
			end = items[i+1].line
		}
		if !slices.ContainsFunc(complaints, func(n int) bool { return n >= r.Line && n < end }) {
			t.Errorf("we refuse %s; dhcpd did not complain about lines %d to %d (it did about %v)", r, r.Line, end-1, complaints)
		}
	}
	corrupt := strings.Contains(log, "Corrupt lease file - possible data loss!") || strings.Contains(log, "possibly corrupt lease file")
	if corrupt && refused == 0 && len(ours.Unknown()) == 0 && ours.Incomplete == nil {
		t.Errorf("dhcpd found the file corrupt, we refused nothing and found no statement it does not read")
	}
}

// TestDifferentialGolden pins what the parser reads from the fixtures,
// dhcpd or not: statements, refusals and errors in order, then the table.
func TestDifferentialGolden(t *testing.T) {
	for _, fx := range diffFixtures(t) {
		t.Run(fx.name, func(t *testing.T) {
			var b strings.Builder
			w := bufio.NewWriter(&b)
			for _, it := range diffDecode(fx.leases) {
				switch {
				case it.err != nil:
					fmt.Fprintf(w, "error: %v\n", it.err)
				default:
					fmt.Fprintf(w, "%s\n", diffDescribe(it.st))
				}
			}
			ls, err := parser.ParseLeases(strings.NewReader(fx.leases))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(w, "-- table")
			for _, l := range ls.Leases() {
				fmt.Fprintf(w, "%s\n", diffDescribeLease(l))
			}
			w.Flush()
			lktest.Golden(t, filepath.Join(diffDir, fx.name+".golden"), []byte(b.String()))
		})
	}
}

func diffDescribe(s parser.Statement) string {
	switch s := s.(type) {
	case *parser.Lease:
		return diffDescribeLease(s)
	case *parser.IA:
		var b strings.Builder
		fmt.Fprintf(&b, "%s line=%d iaid=%d duid=%s", s.Type, s.Line, s.IAID, parser.HexString(s.DUID))
		for _, l := range s.Leases {
			b.WriteString("\n  " + diffDescribeLease(l))
		}
		return b.String()
	case *parser.Refused:
		return "refused " + s.String()
	case *parser.HostEntry:
		return fmt.Sprintf("host %q line=%d deleted=%t", s.Name, s.Line, s.Deleted)
	}
	return fmt.Sprintf("%T line=%d", s, s.StartLine())
}

func diffDescribeLease(l *parser.Lease) string {
	key := l.IP.String()
	if l.PrefixLen > 0 {
		key = l.Key().String()
	}
	s := fmt.Sprintf("%s line=%d state=%s next=%s ends=%s hw=%s uid=%s host=%q", key, l.Line, l.State, l.NextState,
		l.Ends, parser.HexString(l.HardwareAddr), parser.HexString(l.UID), l.ClientHostname)
	for _, v := range l.Vars() {
		s += fmt.Sprintf(" set:%s=%q", v.Name, v.Value)
	}
	if l.IA != nil {
		s += fmt.Sprintf(" ia=%s/%d", l.IA.Type, l.IA.IAID)
	}
	return s
}
