package maascheck

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/config"
)

// MAASLeasesFiles and MAASLeasesFiles6 are the leases files MAAS's dhcpd
// and dhcpd -6 write, the deb's and the snap's: the layouts the agent's
// configuration takes a MAAS rack's paths from (config.MAASLeasesFiles).
var MAASLeasesFiles, MAASLeasesFiles6 = config.MAASLeasesFiles()

// leasesKind says which dhcpd a leases-file check is about: its key in
// [dhcpd], its check's name, and how to name it and its MAAS unit.
type leasesKind struct {
	key, check, dhcpd, family, unit string
	six                             bool // dhcpd -6
}

var (
	kind4 = leasesKind{key: "leases", check: "leases-file", dhcpd: "dhcpd", family: "DHCPv4", unit: "maas-dhcpd"}
	kind6 = leasesKind{key: "leases6", check: "leases-file6", dhcpd: "dhcpd -6", family: "DHCPv6", unit: "maas-dhcpd6", six: true}
)

// dhcpdProc is a running dhcpd (-4 or -6) as /proc shows it.
type dhcpdProc struct {
	PID int
	// Leases is the leases file dhcpd has open, as the kernel names it
	// (/proc/PID/fd): that is where it writes, whatever set it (-lf,
	// lease-file-name in dhcpd.conf, PATH_DHCPD_DB, the built-in
	// default). "" when the descriptors cannot be read (not root) and
	// the command line names no absolute -lf either.
	Leases string
	// FromArgs: Leases is the -lf of its command line, its descriptors
	// being unreadable; lease-file-name in dhcpd.conf would override it.
	FromArgs bool
	// Deleted: the file it writes was removed or replaced under it; what
	// it writes reaches nobody until dhcpd next rewrites the file.
	Deleted bool
}

// runningDHCPD lists the dhcpd processes under procRoot (/proc) of one
// family (six: `dhcpd -6`; else DHCPv4's), leaving out `dhcpd -t`/`-T`
// (a configuration test, as MAAS runs before it writes dhcpd.conf). The
// flags are dhcpd's own
// (server/dhcpd.c, main); dhcpd holds its leases file open from start
// to exit (db_file, server/db.c), so that descriptor, not an argument,
// says where it writes.
func runningDHCPD(procRoot string, six bool) []dhcpdProc {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	var out []dhcpdProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "dhcpd" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if slices.Contains(argv, "-6") != six || slices.Contains(argv, "-t") || slices.Contains(argv, "-T") {
			continue
		}
		lf := ""
		if i := slices.Index(argv, "-lf"); i >= 0 && i+1 < len(argv) {
			lf = argv[i+1]
		}
		p := dhcpdProc{PID: pid}
		p.Leases, p.Deleted = openLeases(dir, lf)
		if p.Leases == "" && filepath.IsAbs(lf) {
			p.Leases, p.FromArgs = lf, true
		}
		out = append(out, p)
	}
	return out
}

// openLeases finds the leases file among the descriptors under dir/fd:
// the regular files dhcpd has open, less its stdout and stderr (a log
// file, under the lab's and systemd's redirections). When more than one
// is left, the one the command line's -lf names (lf), else one named
// *.leases.
func openLeases(dir, lf string) (path string, deleted bool) {
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return "", false
	}
	var std []os.FileInfo
	for _, n := range []string{"1", "2"} {
		if fi, err := os.Stat(filepath.Join(dir, "fd", n)); err == nil {
			std = append(std, fi)
		}
	}
	var cands []string
	for _, fd := range fds {
		n, err := strconv.Atoi(fd.Name())
		if err != nil || n <= 2 {
			continue
		}
		link := filepath.Join(dir, "fd", fd.Name())
		fi, err := os.Stat(link)
		if err != nil || !fi.Mode().IsRegular() || slices.ContainsFunc(std, func(s os.FileInfo) bool { return os.SameFile(s, fi) }) {
			continue
		}
		target, err := os.Readlink(link)
		if err != nil || !filepath.IsAbs(target) {
			continue
		}
		cands = append(cands, target)
	}
	pick := func(c string) (string, bool) {
		if p, ok := strings.CutSuffix(c, " (deleted)"); ok {
			return p, true
		}
		return c, false
	}
	switch {
	case len(cands) == 0:
		return "", false
	case len(cands) == 1:
		return pick(cands[0])
	}
	for _, c := range cands {
		if p, _ := pick(c); lf != "" && p == lf {
			return pick(c)
		}
	}
	for _, c := range cands {
		if p, _ := pick(c); strings.HasSuffix(p, ".leases") {
			return pick(c)
		}
	}
	return pick(cands[0])
}

// sameFile says whether a and b name one file (a symlink, a bind mount).
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// leasesFile checks that dhcpd.leases names the file the running dhcpd
// writes: a path naming another file (the Debian default on a MAAS rack,
// whose dhcpd writes /var/lib/maas/dhcp/dhcpd.leases) leaves the agent
// following a file nothing writes, and reads as a quiet network.
func (r *Report) leasesFile(c *config.Config, procs []dhcpdProc, maas []string, now time.Time) {
	want := c.DHCPD.Leases
	if want == "" {
		fix := kind4.set(config.Default().DHCPD.Leases)
		if len(maas) > 0 {
			fix = kind4.set(maas[0])
		}
		r.add(Problem, "leases-file", "dhcpd.leases is not set: the agent does not start.", fix)
		return
	}
	r.followed(kind4, want, procs, maas, now)
}

// leasesFile6 is leasesFile for dhcpd.leases6 and the running dhcpd -6,
// when dhcpd.leases6 is set.
func (r *Report) leasesFile6(c *config.Config, procs []dhcpdProc, maas []string, now time.Time) {
	if c.DHCPD.Leases6 != "" {
		r.followed(kind6, c.DHCPD.Leases6, procs, maas, now)
	}
}

func (k leasesKind) set(p string) string {
	return fmt.Sprintf("set [dhcpd] %s = %q in leasekeeper.toml", k.key, p)
}

// followed checks want, dhcpd.<k.key>, against the files procs, the
// running dhcpd of k's family, write, and MAAS's files of that family.
func (r *Report) followed(k leasesKind, want string, procs []dhcpdProc, maas []string, now time.Time) {
	set, key := k.set, "dhcpd."+k.key
	var known, unknown []string
	first := "" // the first file a running dhcpd writes: the fix
	for _, p := range procs {
		switch {
		case p.Leases == "":
			unknown = append(unknown, strconv.Itoa(p.PID))
		case sameFile(p.Leases, want) && p.Deleted:
			r.add(Problem, k.check, fmt.Sprintf("%s (pid %d) writes %s, but that file was deleted or replaced under it: what it writes now reaches no reader, the agent included, until dhcpd rewrites the file (at its next start, or an hour after its last rewrite).", k.dhcpd, p.PID, want),
				fmt.Sprintf("restart %s (MAAS: systemctl restart %s), which writes a new file from what it holds", k.dhcpd, k.unit))
			return
		case sameFile(p.Leases, want):
			how := ""
			if p.FromArgs {
				how = " (its command line's -lf: run as root to read which file it has open)"
			}
			names := "the file " + key + " names"
			if p.Leases != want {
				names = "which " + key + " names as " + want
			}
			r.add(OK, k.check, fmt.Sprintf("%s (pid %d) writes %s%s, %s.", k.dhcpd, p.PID, p.Leases, how, names), "")
			return
		default:
			known = append(known, fmt.Sprintf("%s (pid %d) writes %s", k.dhcpd, p.PID, p.Leases))
			if first == "" {
				first = p.Leases
			}
		}
	}
	if len(known) > 0 {
		r.add(Problem, k.check, fmt.Sprintf("%s names %s, but no running %s writes it: %s. The agent would follow a file that never changes and report nothing.", key, want, k.dhcpd, strings.Join(known, "; ")),
			set(first))
		return
	}
	if len(unknown) > 0 {
		r.add(Note, k.check, fmt.Sprintf("cannot tell which file %s (pid %s) writes: its open files cannot be read here and its command line names no -lf.", k.dhcpd, strings.Join(unknown, ", ")),
			"run check-maas as root")
		return
	}
	fi, err := os.Stat(want)
	if err == nil {
		r.add(Note, k.check, fmt.Sprintf("no %s dhcpd runs now; %s exists (last written %s ago). MAAS starts %s when DHCP is enabled on a VLAN this rack serves.", k.family, want, now.Sub(fi.ModTime()).Round(time.Second), k.dhcpd), "")
		return
	}
	for _, m := range maas {
		if m != want && fileExists(m) {
			r.add(Problem, k.check, fmt.Sprintf("%s names %s, which does not exist, while MAAS's %s writes %s: the agent would follow a file nothing writes.", key, want, k.dhcpd, m), set(m))
			return
		}
	}
	r.add(Note, k.check, fmt.Sprintf("no %s dhcpd runs now and %s does not exist yet: %s creates it when it starts (MAAS: when DHCP is enabled on a VLAN this rack serves); until then the agent warns that it is missing.", k.family, want, k.dhcpd), "")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
