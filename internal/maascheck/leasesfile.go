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

// MAASLeasesFiles are the leases files MAAS's dhcpd writes: the deb's
// maas-dhcpd.service (debian/maas-dhcp.maas-dhcpd.service in MAAS's
// source, `-lf /var/lib/maas/dhcp/dhcpd.leases`) and the snap's
// (snap/local/tree/usr/bin/run-dhcpd, $SNAP_COMMON/maas/dhcp/dhcpd.leases).
var MAASLeasesFiles = []string{
	"/var/lib/maas/dhcp/dhcpd.leases",
	"/var/snap/maas/common/maas/dhcp/dhcpd.leases",
}

// dhcpdProc is a running DHCPv4 dhcpd as /proc shows it.
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

// runningDHCPD lists the DHCPv4 dhcpd processes under procRoot (/proc),
// leaving out `dhcpd -t`/`-T` (a configuration test, as MAAS runs before
// it writes dhcpd.conf) and `dhcpd -6`. The flags are dhcpd's own
// (server/dhcpd.c, main); dhcpd holds its leases file open from start
// to exit (db_file, server/db.c), so that descriptor, not an argument,
// says where it writes.
func runningDHCPD(procRoot string) []dhcpdProc {
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
		if slices.Contains(argv, "-6") || slices.Contains(argv, "-t") || slices.Contains(argv, "-T") {
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
	set := func(p string) string { return fmt.Sprintf("set [dhcpd] leases = %q in leasekeeper.toml", p) }
	if want == "" {
		fix := set(config.Default().DHCPD.Leases)
		if len(maas) > 0 {
			fix = set(maas[0])
		}
		r.add(Problem, "leases-file", "dhcpd.leases is not set: the agent does not start.", fix)
		return
	}
	var known, unknown []string
	first := "" // the first file a running dhcpd writes: the fix
	for _, p := range procs {
		switch {
		case p.Leases == "":
			unknown = append(unknown, strconv.Itoa(p.PID))
		case sameFile(p.Leases, want) && p.Deleted:
			r.add(Problem, "leases-file", fmt.Sprintf("dhcpd (pid %d) writes %s, but that file was deleted or replaced under it: what it writes now reaches no reader, the agent included, until dhcpd rewrites the file (at its next start, or an hour after its last rewrite).", p.PID, want),
				"restart dhcpd (MAAS: systemctl restart maas-dhcpd), which writes a new file from what it holds")
			return
		case sameFile(p.Leases, want):
			how := ""
			if p.FromArgs {
				how = " (its command line's -lf: run as root to read which file it has open)"
			}
			names := "the file dhcpd.leases names"
			if p.Leases != want {
				names = "which dhcpd.leases names as " + want
			}
			r.add(OK, "leases-file", fmt.Sprintf("dhcpd (pid %d) writes %s%s, %s.", p.PID, p.Leases, how, names), "")
			return
		default:
			known = append(known, fmt.Sprintf("dhcpd (pid %d) writes %s", p.PID, p.Leases))
			if first == "" {
				first = p.Leases
			}
		}
	}
	if len(known) > 0 {
		r.add(Problem, "leases-file", fmt.Sprintf("dhcpd.leases names %s, but no running dhcpd writes it: %s. The agent would follow a file that never changes and report nothing.", want, strings.Join(known, "; ")),
			set(first))
		return
	}
	if len(unknown) > 0 {
		r.add(Note, "leases-file", fmt.Sprintf("cannot tell which file dhcpd (pid %s) writes: its open files cannot be read here and its command line names no -lf.", strings.Join(unknown, ", ")),
			"run check-maas as root")
		return
	}
	fi, err := os.Stat(want)
	if err == nil {
		r.add(Note, "leases-file", fmt.Sprintf("no DHCPv4 dhcpd runs now; %s exists (last written %s ago). MAAS starts dhcpd when DHCP is enabled on a VLAN this rack serves.", want, now.Sub(fi.ModTime()).Round(time.Second)), "")
		return
	}
	for _, m := range maas {
		if m != want && fileExists(m) {
			r.add(Problem, "leases-file", fmt.Sprintf("dhcpd.leases names %s, which does not exist, while MAAS's dhcpd writes %s: the agent would follow a file nothing writes.", want, m), set(m))
			return
		}
	}
	r.add(Note, "leases-file", fmt.Sprintf("no DHCPv4 dhcpd runs now and %s does not exist yet: dhcpd creates it when it starts (MAAS: when DHCP is enabled on a VLAN this rack serves); until then the agent warns that it is missing.", want), "")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
