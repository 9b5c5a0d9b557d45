package maascheck

import (
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// fakeProc is a /proc of made-up processes: comm, cmdline and fd/N
// symlinks to real files, as the kernel shows a process's descriptors.
type fakeProc struct {
	t    *testing.T
	root string
	dir  string // where the processes' files are
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir(), dir: t.TempDir()}
}

// file makes a file in f.dir and returns its path.
func (f *fakeProc) file(name string) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte("# dhcpd\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// proc adds a process: its comm, argv, fd 1 and 2 on a log file (where
// dhcpd -d logs), and fds from 5 on the given files (skipped when fds is
// nil, as for a process of another user).
func (f *fakeProc) proc(pid int, comm string, argv []string, fds ...string) {
	f.t.Helper()
	d := filepath.Join(f.root, strconv.Itoa(pid))
	must := func(err error) {
		if err != nil {
			f.t.Fatal(err)
		}
	}
	must(os.MkdirAll(d, 0o755))
	must(os.WriteFile(filepath.Join(d, "comm"), []byte(comm+"\n"), 0o644))
	must(os.WriteFile(filepath.Join(d, "cmdline"), []byte(strings.Join(argv, "\x00")+"\x00"), 0o644))
	if fds == nil {
		return
	}
	must(os.Mkdir(filepath.Join(d, "fd"), 0o755))
	log := f.file("dhcpd.log")
	must(os.Symlink(log, filepath.Join(d, "fd", "1")))
	must(os.Symlink(log, filepath.Join(d, "fd", "2")))
	must(os.Symlink("socket:[1234]", filepath.Join(d, "fd", "3")))
	for i, p := range fds {
		must(os.Symlink(p, filepath.Join(d, "fd", strconv.Itoa(5+i))))
	}
}

// dhcpdArgv is MAAS's dhcpd command line (debian/maas-dhcp.maas-dhcpd.service
// in MAAS's source), with lf as its -lf ("" for none) and more flags.
func dhcpdArgv(lf string, more ...string) []string {
	argv := []string{"dhcpd", "-user", "dhcpd", "-group", "dhcpd", "-f", "-q", "-4", "-pf", "/run/maas-dhcp/dhcpd.pid", "-cf", "/var/lib/maas/dhcpd.conf"}
	if lf != "" {
		argv = append(argv, "-lf", lf)
	}
	return append(append(argv, more...), "eth0")
}

// TestLeasesFile: dhcpd.leases against the file the running dhcpd
// writes, found from its open descriptors as /proc shows them; and
// dhcpd.leases6 against the running dhcpd -6's, not the DHCPv4 dhcpd's,
// with nothing said when it is not set (six).
func TestLeasesFile(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeProc) (want string, maas []string) // the configured path, MAAS's files
		check string                                         // "severity" of the leases-file finding; "" for none
		words []string                                       // in its message or fix
		six   bool                                           // dhcpd.leases6 and dhcpd -6
	}{
		{"dhcpd writes the file", func(f *fakeProc) (string, []string) {
			l := f.file("dhcpd.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l), l)
			return l, nil
		}, OK, []string{"pid 100", "writes "}, false},
		{"through a symlink", func(f *fakeProc) (string, []string) {
			l := f.file("dhcpd.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l), l)
			link := filepath.Join(f.dir, "link.leases")
			if err := os.Symlink(l, link); err != nil {
				t.Fatal(err)
			}
			return link, nil
		}, OK, []string{"pid 100", "names as DIR/link.leases"}, false},
		{"the Debian default while MAAS's dhcpd writes its own", func(f *fakeProc) (string, []string) {
			maas := f.file("maas.leases")
			f.proc(100, "dhcpd", dhcpdArgv(maas), maas)
			return f.file("debian.leases"), nil
		}, Problem, []string{"no running dhcpd writes it", "pid 100", `leases = "` + filepath.Join("DIR", "maas.leases")}, false},
		{"lease-file-name in dhcpd.conf overrides -lf", func(f *fakeProc) (string, []string) {
			real := f.file("named-in-conf.leases")
			f.proc(100, "dhcpd", dhcpdArgv(filepath.Join(f.dir, "argv.leases")), real)
			return filepath.Join(f.dir, "argv.leases"), nil
		}, Problem, []string{`leases = "` + filepath.Join("DIR", "named-in-conf.leases")}, false},
		{"more open files: the one -lf names", func(f *fakeProc) (string, []string) {
			l := f.file("dhcpd.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l), f.file("backup.leases"), l)
			return l, nil
		}, OK, []string{"pid 100"}, false},
		{"deleted under dhcpd", func(f *fakeProc) (string, []string) {
			l := f.file("dhcpd.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l), f.file("dhcpd.leases (deleted)"))
			return l, nil
		}, Problem, []string{"deleted or replaced", "restart dhcpd"}, false},
		{"not root: the command line's -lf", func(f *fakeProc) (string, []string) {
			l := f.file("dhcpd.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l))
			return l, nil
		}, OK, []string{"command line's -lf"}, false},
		{"not root, no -lf", func(f *fakeProc) (string, []string) {
			f.proc(100, "dhcpd", dhcpdArgv(""))
			return f.file("dhcpd.leases"), nil
		}, Note, []string{"cannot tell", "pid 100", "as root"}, false},
		{"dhcpd -t, dhcpd -6 and other programs are not the server", func(f *fakeProc) (string, []string) {
			other := f.file("other.leases")
			f.proc(100, "dhcpd", dhcpdArgv(other, "-t"), other)
			f.proc(101, "dhcpd", append(dhcpdArgv(other), "-6"), other)
			f.proc(102, "dhclient", []string{"dhclient", "-lf", other}, other)
			return f.file("dhcpd.leases"), nil
		}, Note, []string{"no DHCPv4 dhcpd runs now", "exists"}, false},
		{"no dhcpd, only MAAS's file exists", func(f *fakeProc) (string, []string) {
			return filepath.Join(f.dir, "debian.leases"), []string{filepath.Join(f.dir, "snap.leases"), f.file("maas.leases")}
		}, Problem, []string{"does not exist", `leases = "` + filepath.Join("DIR", "maas.leases")}, false},
		{"no dhcpd, no file yet", func(f *fakeProc) (string, []string) {
			return filepath.Join(f.dir, "dhcpd.leases"), []string{filepath.Join(f.dir, "maas.leases")}
		}, Note, []string{"does not exist yet", "warns"}, false},
		{"unset", func(f *fakeProc) (string, []string) { return "", []string{"/var/lib/maas/dhcp/dhcpd.leases"} }, Problem, []string{"not set", `"/var/lib/maas/dhcp/dhcpd.leases"`}, false},
		{"6: dhcpd -6 writes the file", func(f *fakeProc) (string, []string) {
			l4, l6 := f.file("dhcpd.leases"), f.file("dhcpd6.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l4), l4)
			f.proc(200, "dhcpd", dhcpd6Argv(l6), l6)
			return l6, nil
		}, OK, []string{"dhcpd -6 (pid 200) writes", "dhcpd.leases6 names"}, true},
		{"6: the DHCPv4 dhcpd's file", func(f *fakeProc) (string, []string) {
			l4, l6 := f.file("dhcpd.leases"), f.file("dhcpd6.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l4), l4)
			f.proc(200, "dhcpd", dhcpd6Argv(l6), l6)
			return l4, nil
		}, Problem, []string{"dhcpd.leases6 names DIR/dhcpd.leases, but no running dhcpd -6 writes it", `leases6 = "DIR/dhcpd6.leases"`}, true},
		{"6: no dhcpd -6, only MAAS's file exists", func(f *fakeProc) (string, []string) {
			l4 := f.file("dhcpd.leases")
			f.proc(100, "dhcpd", dhcpdArgv(l4), l4)
			return filepath.Join(f.dir, "debian6.leases"), []string{f.file("maas6.leases")}
		}, Problem, []string{"MAAS's dhcpd -6 writes", `leases6 = "DIR/maas6.leases"`}, true},
		{"6: no dhcpd -6, no file yet", func(f *fakeProc) (string, []string) {
			return filepath.Join(f.dir, "dhcpd6.leases"), nil
		}, Note, []string{"no DHCPv6 dhcpd runs now", "dhcpd -6 creates it"}, true},
		{"6: unset: nothing said", func(f *fakeProc) (string, []string) {
			l6 := f.file("dhcpd6.leases")
			f.proc(200, "dhcpd", dhcpd6Argv(l6), l6)
			return "", nil
		}, "", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProc(t)
			want, maas := tc.setup(f)
			cfg := config.Default()
			r := &Report{}
			kind := kind4
			if tc.six {
				kind, cfg.DHCPD.Leases6 = kind6, want
				r.leasesFile6(cfg, runningDHCPD(f.root, true), maas, time.Now())
			} else {
				cfg.DHCPD.Leases = want
				r.leasesFile(cfg, runningDHCPD(f.root, false), maas, time.Now())
			}
			if tc.check == "" {
				if len(r.Findings) != 0 {
					t.Errorf("want no finding, got %+v", r.Findings)
				}
				return
			}
			if len(r.Findings) != 1 {
				t.Fatalf("want one finding, got %+v", r.Findings)
			}
			got := r.Findings[0]
			text := strings.ReplaceAll(got.Message+" | "+got.Fix, f.dir, "DIR")
			t.Logf("%s %s: %s", got.Severity, got.Check, text)
			if got.Check != kind.check || got.Severity != tc.check {
				t.Errorf("got %s %s, want %s %s", got.Severity, got.Check, tc.check, kind.check)
			}
			for _, w := range tc.words {
				if !strings.Contains(text, w) {
					t.Errorf("the finding lacks %q", w)
				}
			}
			if got.Severity == Problem && got.Fix == "" {
				t.Errorf("a problem without a fix")
			}
		})
	}
}

// TestLeasesFileRealDhcpd: a real dhcpd in a namespace of the test's, and
// the real /proc. Other dhcpd processes may run beside it (other tests):
// the check must find this one and judge by it.
func TestLeasesFileRealDhcpd(t *testing.T) {
	lab.Require(t, "dhcpd")
	l := lab.New(t)
	d := l.StartDhcpd(t, lab.DhcpdConfig{Conf: "ping-check false;\nauthoritative;\n" +
		"subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.100 203.0.113.150; }\n"})
	pid := strconv.Itoa(d.Pid())
	check := func(want string) Finding {
		t.Helper()
		cfg := config.Default()
		cfg.DHCPD.Leases = want
		r := &Report{}
		r.leasesFile(cfg, runningDHCPD("/proc", false), []string{}, time.Now())
		if len(r.Findings) != 1 {
			t.Fatalf("want one finding, got %+v", r.Findings)
		}
		return r.Findings[0]
	}
	// dhcpd's open file is its -lf; its log (the lab's -d output on fd
	// 1 and 2) is not taken for it.
	if f := check(d.LeasesPath()); f.Severity != OK || !strings.Contains(f.Message, "pid "+pid+")") {
		t.Errorf("dhcpd writes the configured file: got %+v", f)
	}
	other := filepath.Join(t.TempDir(), "dhcpd.leases")
	f := check(other)
	if f.Severity != Problem || !strings.Contains(f.Message, "dhcpd (pid "+pid+") writes "+d.LeasesPath()) {
		t.Errorf("dhcpd writes another file: got %+v", f)
	}
}

// dhcpd6Argv is MAAS's dhcpd -6 command line
// (debian/maas-dhcp.maas-dhcpd6.service in MAAS's source before it
// dropped its debian packaging), with lf as its -lf.
func dhcpd6Argv(lf string) []string {
	return []string{"dhcpd", "-user", "dhcpd", "-group", "dhcpd", "-f", "-6", "-pf", "/run/maas-dhcp/dhcpd6.pid",
		"-cf", "/var/lib/maas/dhcpd6.conf", "-lf", lf, "eth0"}
}

// TestLeasesFile6RealDhcpd: a real dhcpd -6 in a namespace of the
// test's, found by its open leases file in the real /proc.
func TestLeasesFile6RealDhcpd(t *testing.T) {
	lab.Require(t, "dhcpd")
	l := lab.New(t, lab.WithIPv6(netip.MustParsePrefix("2001:db8:1::1/64")))
	d := l.StartDhcpd(t, lab.DhcpdConfig{Family: 6, Conf: "default-lease-time 600;\n" +
		l.Subnet6Conf("  range6 2001:db8:1::100 2001:db8:1::1ff;")})
	cfg := config.Default()
	cfg.DHCPD.Leases6 = d.LeasesPath()
	r := &Report{}
	r.leasesFile6(cfg, runningDHCPD("/proc", true), []string{}, time.Now())
	if len(r.Findings) != 1 || r.Findings[0].Severity != OK || !strings.Contains(r.Findings[0].Message, "dhcpd -6 (pid "+strconv.Itoa(d.Pid())+")") {
		t.Errorf("dhcpd -6 writes the configured file: got %+v", r.Findings)
	}
}
