// Package maascheck finds out how leasekeeper sits on a MAAS rack and what
// is in its way, for `leasekeeper check-maas`: which mode the reconciler
// is in and why (the dhcpd.conf lines, the program they run, diverted or
// not, deb or snap), whether MAAS's helper has anyone to send to, whether
// the agent's user can read what detection needs, whether dhcpd.leases
// names the file the running dhcpd writes, and whether the region
// can be reached as MAAS requires (port 5242, mutual TLS with the rack's
// certificate, MAAS's CA, server name "maas"). It reads files and makes
// one TLS connection; it changes nothing and sends no events.
package maascheck

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
)

// Severities of a Finding.
const (
	OK      = "ok"      // as it should be
	Note    = "note"    // fine, but worth knowing (what a mode means)
	Problem = "problem" // something to fix; check-maas exits 1
)

// Finding is one thing check-maas says.
type Finding struct {
	Severity string `json:"severity"`
	Check    string `json:"check"` // mode, hook, helper-socket, leases-file, agent-access, socket-group, region-url, certificates, region, dhcpv6
	Message  string `json:"message"`
	Fix      string `json:"fix,omitempty"` // what to do, for problems
}

// Report is everything check-maas found.
type Report struct {
	Mode     reconcile.Detection  `json:"mode"`            // dhcpd.config's
	Mode6    *reconcile.Detection `json:"mode6,omitempty"` // dhcpd.config6's, when set
	Findings []Finding            `json:"findings"`
	Problems int                  `json:"problems"`
}

// Options say what to check.
type Options struct {
	Config *config.Config
	// FileProblems is what reading Config's file found wrong (unknown
	// keys, values of the wrong type: config.DecodePartial's problems),
	// Config holding the rest; nil when nothing is.
	FileProblems error
	// NoFile is the path of an agent configuration that does not exist,
	// Config being the defaults the agent runs on without one.
	NoFile string
	// Detect is what mode detection reads; the zero value means
	// reconcile.DefaultDetectEnv.
	Detect *reconcile.DetectEnv
	// AgentUser is the user the agent runs as (the Debian unit's
	// "leasekeeper"); "" skips the check that it can read dhcpd.conf.
	AgentUser string
	// ServerName overrides region.server_name, the name verified in the
	// region's certificate (tests).
	ServerName string
	Timeout    time.Duration // for the region; 0 = 5s
	// Port is the port region.url must name; "" = MAASPort (tests run
	// the region elsewhere).
	Port string
	// Credentials lists the credential names systemd passes the agent's
	// unit (LoadCredential=NAME:PATH); nil asks systemctl.
	Credentials func() []string
	// Capabilities lists the capabilities the agent's unit grants it
	// (AmbientCapabilities=, lower case: "cap_dac_read_search"); nil asks
	// systemctl.
	Capabilities func() []string
	// SupplementaryGroups lists the groups the agent's unit adds to its
	// user's (SupplementaryGroups=); nil asks systemctl.
	SupplementaryGroups func() []string
	// Statx makes one statx(2) call, which leasekeeper-hook makes for
	// every stat (Linux 4.11 or later, and allowed by any seccomp
	// filter); nil stats "/".
	Statx func() error
	// ProcRoot is where running dhcpd processes are looked for; "" =
	// /proc.
	ProcRoot string
	// MAASLeases and MAASLeases6 are the leases files MAAS's dhcpd and
	// dhcpd -6 write; nil = MAASLeasesFiles, MAASLeasesFiles6.
	MAASLeases, MAASLeases6 []string
}

// unitCredentials asks systemd for the names of the credentials
// leasekeeper.service gets (LoadCredential=); none when it cannot tell.
func unitCredentials() []string {
	var names []string
	for _, cred := range unitProperty("LoadCredential") {
		name, _, _ := strings.Cut(cred, ":")
		names = append(names, name)
	}
	return names
}

// unitCapabilities asks systemd for the capabilities leasekeeper.service
// is granted (AmbientCapabilities=; the Debian package's maas-rack.conf
// grants cap_dac_read_search); none when it cannot tell.
func unitCapabilities() []string {
	var caps []string
	for _, c := range unitProperty("AmbientCapabilities") {
		caps = append(caps, strings.ToLower(c))
	}
	return caps
}

// unitProperty is the words of leasekeeper.service's property, as
// systemctl shows it; none when it cannot tell.
func unitProperty(name string) []string {
	out, err := exec.Command("systemctl", "show", "--property="+name, "leasekeeper.service").Output()
	if err != nil {
		return nil
	}
	var words []string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+"="); ok {
			words = append(words, strings.Fields(v)...)
		}
	}
	return words
}

// readsAny returns the capability of caps that lets a process read every
// file and search every directory whatever their modes, or "".
func readsAny(caps []string) string {
	for _, c := range []string{"cap_dac_read_search", "cap_dac_override"} {
		if slices.Contains(caps, c) {
			return c
		}
	}
	return ""
}

// MAASPort is the only port MAAS serves its internal API on.
const MAASPort = config.MAASRegionPort

// leasesPath is the internal API's leases endpoint.
const leasesPath = config.MAASLeasesPath

// Run makes every check.
func Run(ctx context.Context, o Options) *Report {
	r := &Report{Findings: []Finding{}}
	env := reconcile.DefaultDetectEnv()
	if o.Detect != nil {
		env = *o.Detect
	}
	c := o.Config
	if o.NoFile != "" {
		r.add(Note, "config", fmt.Sprintf("no configuration file at %s: checked with the defaults (and what a MAAS rack gives), as the agent runs without one.", o.NoFile), "")
	}
	r.fileProblems(o.FileProblems)
	r.config(c)
	mode, _ := reconcile.ParseMode(c.Reconcile.Mode)
	r.Mode = reconcile.Detect(c.DHCPD.Config, mode, env)
	r.mode(r.Mode, "dhcpd.config")
	statx := o.Statx
	if statx == nil {
		statx = statxRoot
	}
	r.hooks(r.Mode, statx)
	procRoot, maas, maas6 := o.ProcRoot, o.MAASLeases, o.MAASLeases6
	if procRoot == "" {
		procRoot = "/proc"
	}
	if maas == nil {
		maas = MAASLeasesFiles
	}
	if maas6 == nil {
		maas6 = MAASLeasesFiles6
	}
	r.leasesFile(c, runningDHCPD(procRoot, false), maas, time.Now())
	r.leasesFile6(c, runningDHCPD(procRoot, true), maas6, time.Now())
	creds, caps := o.Credentials, o.Capabilities
	if creds == nil {
		creds = unitCredentials
	}
	if caps == nil {
		caps = unitCapabilities
	}
	if c.DHCPD.Config6 != "" {
		d := reconcile.Detect(c.DHCPD.Config6, reconcile.ModeAuto, env)
		r.Mode6 = &d
	}
	r.agentAccess(o.AgentUser, r.Mode, r.Mode6, c, creds, caps)
	supp := o.SupplementaryGroups
	if supp == nil {
		supp = func() []string { return unitProperty("SupplementaryGroups") }
	}
	r.socketGroups(o.AgentUser, c, supp)
	r.failover(c.DHCPD.Config, c.Pair)
	r.dhcpv6(c, r.Mode6)
	r.rack(c)
	r.region(ctx, o)
	for _, f := range r.Findings {
		if f.Severity == Problem {
			r.Problems++
		}
	}
	return r
}

// fileProblems reports what reading the file found wrong: the agent
// refuses such a file at start (exit 78), and the other checks ran on
// what it had right. Each problem is a finding, so that --json tells
// them too; check-maas used to stop at them with no report (a cold
// review).
func (r *Report) fileProblems(err error) {
	if err == nil {
		return
	}
	var ps config.Problems
	if !errors.As(err, &ps) {
		r.add(Problem, "config", err.Error()+": the agent does not start.", "correct the configuration file (leasekeeper agent --print-config checks it)")
		return
	}
	for _, p := range ps {
		r.add(Problem, "config", p.Error()+": the agent does not start.", "correct it in the configuration file (leasekeeper agent --print-config checks the whole file)")
	}
}

// config reports what the agent's own validation refuses: such a file
// stops the agent at start (exit 78) whatever the other checks find.
// region.url's problems are the region-url check's.
func (r *Report) config(c *config.Config) {
	var ps config.Problems
	if err := c.Validate(); !errors.As(err, &ps) {
		if err != nil {
			r.add(Problem, "config", err.Error()+": the agent does not start.", "correct the configuration file (leasekeeper agent --print-config checks it)")
		}
		return
	}
	for _, p := range ps {
		if p.Key == "region.url" {
			continue
		}
		r.add(Problem, "config", p.Error()+": the agent does not start.", "correct it in the configuration file (leasekeeper agent --print-config checks the whole file)")
	}
}

func (r *Report) add(sev, check, msg, fix string) {
	r.Findings = append(r.Findings, Finding{Severity: sev, Check: check, Message: msg, Fix: fix})
}

// mode says which mode is in force and what it means.
func (r *Report) mode(d reconcile.Detection, key string) {
	what := map[reconcile.Mode]string{
		reconcile.ModeReplacement: "dhcpd's hooks run leasekeeper-hook: every event reaches the agent (or its spool while it is down), and the agent adds from dhcpd.leases what a hook missed",
		reconcile.ModeComplement:  "dhcpd's hooks tell the region through another program (MAAS's own helper): MAAS delivers what they report, and the agent adds only what no hook ever reports — the expiry of a lease a dhcpd restart dropped (its range shrank), at the lease's end",
		reconcile.ModeHookless:    "dhcpd runs no hook: the agent delivers every event from dhcpd.leases as soon as dhcpd writes it",
	}[d.Mode]
	msg := fmt.Sprintf("%s — %s. Why: %s.", d.Mode, what, d.Why)
	switch {
	case d.Forced && d.Unsure:
		// Detection read no hooks it could judge: nothing contradicts
		// reconcile.mode, which is what leasekeeper.toml advises when
		// the agent cannot read dhcpd.conf.
		why := "detection could not tell what dhcpd.conf's hooks run"
		switch {
		case d.Conf == "":
			why = "dhcpd.conf could not be read (dhcpd.config is not set)"
		case d.Unreadable:
			why = "dhcpd.conf could not be read"
		}
		r.add(Note, "mode", msg+fmt.Sprintf(" reconcile.mode forces %s, which is used as set because %s; check-maas cannot confirm it.", d.Mode, why),
			"make sure it is what dhcpd's hooks run: replacement only if they run leasekeeper-hook (or maas-dhcp-helper diverted to it)")
	case d.Forced && d.Detected == reconcile.ModeComplement && d.Mode == reconcile.ModeHookless && noReceiver(d):
		// MAAS 3.6 after 3.6.5 starts no receiver for its helper
		// (maas-agent's DHCP service is gone: LP: #2134485), and a snap's
		// helper cannot be diverted: hookless is then the way to have
		// every event delivered, and no first copy exists.
		r.add(OK, "mode", msg+" reconcile.mode forces hookless, and nothing receives MAAS's helper's events: the agent's, from dhcpd.leases, are the only copies.", "")
	case d.Forced && d.Detected == reconcile.ModeComplement && d.Mode != reconcile.ModeComplement:
		r.add(Problem, "mode", msg+fmt.Sprintf(" reconcile.mode forces %s, but dhcpd.conf's hooks tell the region themselves", d.Mode),
			"remove reconcile.mode (or set it to \"auto\"): with MAAS's helper in place the agent would send second copies of hooked events, and a late copy overwrites newer news in the region")
	case d.Forced && d.Detected != d.Mode:
		r.add(Note, "mode", msg+fmt.Sprintf(" reconcile.mode forces it; detection says %s.", d.Detected), "")
	case d.Unsure:
		fix := "make " + key + " name the dhcpd.conf dhcpd reads (MAAS deb: /var/lib/maas/dhcpd.conf; snap: /var/snap/maas/common/maas/dhcpd.conf), readable by the agent, or set [reconcile] mode in leasekeeper.toml to what this rack really does"
		r.add(Problem, "mode", msg, fix)
	default:
		r.add(OK, "mode", msg, "")
	}
}

// statxRoot is statx(2) of "/".
func statxRoot() error {
	var st unix.Statx_t
	return unix.Statx(unix.AT_FDCWD, "/", 0, unix.STATX_BASIC_STATS, &st)
}

// hooks explains each hook program and what is wrong with it; statx
// tries the system call leasekeeper-hook needs.
func (r *Report) hooks(d reconcile.Detection, statx func() error) {
	var ours, maas bool
	for _, h := range d.Hooks {
		where := fmt.Sprintf("%s runs %s", h.At, h.Program)
		if h.Path != "" && h.Path != h.Program {
			where += " (" + h.Path + ")"
		}
		if !h.Runnable {
			r.add(Problem, "hook", fmt.Sprintf("%s, which dhcpd cannot run: %s. Those events are lost to any hook; the agent takes them from dhcpd.leases.", where, h.Why),
				"install the program or make it executable, or remove the execute() from dhcpd.conf")
			continue
		}
		switch h.Kind {
		case reconcile.KindLeasekeeper:
			ours = true
			msg := where + ": leasekeeper-hook (" + h.Why + ")"
			if h.Socket != "" && strings.HasPrefix(filepath.Base(h.Program), "maas-dhcp-helper") {
				msg += "; run by MAAS's name it ignores --socket " + h.Socket + " and sends to the agent's socket"
			}
			r.add(OK, "hook", msg+".", "")
		case reconcile.KindMAAS:
			maas = true
			if h.Snap {
				r.add(Note, "hook", where+": MAAS's own helper, inside the MAAS snap ("+h.Why+"). A snap's files are read-only, so it cannot be diverted: complement is the mode for a snap-installed MAAS, or hookless where nothing receives the helper's events.", "")
				r.helperSocket(h, d)
				break
			}
			if d.Forced && d.Mode == reconcile.ModeHookless {
				r.add(Note, "hook", where+": MAAS's own helper, not diverted ("+h.Why+"); reconcile.mode forces hookless: the agent delivers every event from dhcpd.leases, right only where nothing receives the helper's events.", "")
			} else {
				r.add(Note, "hook", where+": MAAS's own helper, not diverted ("+h.Why+"). That is complement mode, and fine: MAAS delivers its hooks' events; but an event is lost whenever MAAS's receiver is down (the helper exits 1 and nothing keeps it).",
					"to have leasekeeper deliver every event instead (spooled while the agent is down), divert the helper to leasekeeper-hook as README.Debian says; the agent then runs in replacement mode")
			}
			r.helperSocket(h, d)
		default:
			r.add(Note, "hook", where+": "+h.Why+". leasekeeper does not know this program and assumes it tells the region itself (complement mode, the safe side).",
				"if it does not, set [reconcile] mode = \"hookless\"; if it ends up running leasekeeper-hook, run leasekeeper-hook directly")
		}
	}
	if ours {
		if err := statx(); errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) {
			r.add(Problem, "hook", fmt.Sprintf("this kernel refuses statx(2) (%v), which leasekeeper-hook makes for every stat: it cannot spool an event while the agent is down, nor clean a leases file. It needs Linux 4.11 or later, with statx allowed by any seccomp filter dhcpd runs under.", err),
				"run a kernel of Linux 4.11 or later (Debian 10 and Ubuntu 18.04 on), or allow statx in dhcpd's seccomp filter")
		}
	}
	if ours && maas {
		r.add(Problem, "hook", "dhcpd.conf runs both leasekeeper-hook and MAAS's helper: the leases each reports reach the region by different paths, in no common order.",
			"run one program in every on-block: divert maas-dhcp-helper to leasekeeper-hook, or keep MAAS's helper everywhere")
	}
	for _, o := range d.Others {
		r.add(Note, "hook", "dhcpd.conf also runs "+o+", which reports no leases (ignored).", "")
	}
}

// helperSocket checks that something receives MAAS's helper's
// datagrams: rackd's lease socket service up to MAAS 3.5, maas-agent's
// DHCP service from 3.6. Connecting a datagram socket sends nothing.
// helperSocketOf is where MAAS's helper run by h sends.
func helperSocketOf(h reconcile.Hook) string {
	if h.Socket != "" {
		return h.Socket
	}
	return "/var/lib/maas/dhcpd.sock" // the helper's default
}

// dialHelper tries MAAS's helper's socket: nil when something receives.
func dialHelper(sock string) error {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err == nil {
		c.Close()
	}
	return err
}

// noReceiver reports whether dhcpd.conf runs MAAS's helper and nothing
// receives on any socket it sends to.
func noReceiver(d reconcile.Detection) bool {
	seen := false
	for _, h := range d.Hooks {
		if h.Kind != reconcile.KindMAAS || !h.Runnable {
			continue
		}
		seen = true
		if err := dialHelper(helperSocketOf(h)); !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return false
		}
	}
	return seen
}

func (r *Report) helperSocket(h reconcile.Hook, d reconcile.Detection) {
	sock := helperSocketOf(h)
	err := dialHelper(sock)
	hookless := d.Forced && d.Mode == reconcile.ModeHookless
	fix := "start MAAS's rack services (maas-rackd / maas-agent), or divert maas-dhcp-helper to leasekeeper-hook so the agent delivers every event"
	if h.Snap {
		fix = "start the MAAS snap's rack services; where nothing will receive them (MAAS 3.6 after 3.6.5 starts no receiver, LP: #2134485) and the snap's helper cannot be diverted, set [reconcile] mode = \"hookless\": the agent then delivers every event from dhcpd.leases"
	}
	switch {
	case err == nil:
		r.add(OK, "helper-socket", "something receives MAAS's helper's events on "+sock+" (rackd up to MAAS 3.5, maas-agent from 3.6).", "")
	case (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)) && hookless:
		r.add(Note, "helper-socket", fmt.Sprintf("nothing receives MAAS's helper's events on %s (%v): reconcile.mode = \"hookless\" has the agent deliver every event from dhcpd.leases instead.", sock, err), "")
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		r.add(Problem, "helper-socket", fmt.Sprintf("nothing receives MAAS's helper's events on %s (%v): the helper exits 1 for each one and the event is lost; in complement mode leasekeeper does not resend them.", sock, err), fix)
	default:
		r.add(Note, "helper-socket", fmt.Sprintf("cannot tell whether anything receives MAAS's helper's events on %s: %v.", sock, err), "run check-maas as root")
	}
}

// failover reports the failover peers dhcpd.conf's pools use, where
// they are several: MAAS declares one per HA VLAN (src/maasserver/dhcp.py,
// make_failover_peer_config), each with its own role and partner rack,
// and the agent follows each address's own (its subnet's pools' peer).
// With the pair channel on, pair.peer's agent orders the news of every
// peer pair.partners does not name, and each partner's agent that of the
// peers it names: which check-maas lists, with a note where several
// peers all go to pair.peer's agent (right only if one rack is the
// partner on every HA VLAN) or pair.partners names a peer dhcpd.conf's
// pools do not use. An unreadable dhcpd.conf is the mode check's to
// report.
func (r *Report) failover(conf string, p config.Pair) {
	if conf == "" {
		return
	}
	ps, err := reconcile.PeersIn(conf)
	if err != nil {
		return
	}
	partners, perr := p.PartnerList()
	if p.On() && perr == nil && len(partners) > 0 {
		used := map[string]bool{ps.Lead.Peer: ps.Lead.InPair()}
		for _, o := range ps.Others {
			used[o.Peer] = true
		}
		for _, pt := range partners {
			for _, n := range pt.FailoverPeers {
				if !used[n] {
					r.add(Note, "failover-partners", fmt.Sprintf("pair.partners names failover peer %q for the agent at %s, but %s's pools use no such peer (a VLAN whose DHCP HA is off, or a misspelt name): that channel orders nothing.", n, pt.Peer, conf), "")
				}
			}
		}
	}
	if len(ps.Others) == 0 {
		return
	}
	names := []string{ps.Lead.Peer + " (" + ps.Lead.Role + ")"}
	for _, o := range ps.Others {
		names = append(names, o.Peer+" ("+o.Role+")")
	}
	r.add(OK, "failover", fmt.Sprintf("%s's pools use %d failover peers: %s. Each address follows the pair of its subnet's pools.", conf, len(names), strings.Join(names, ", ")), "")
	if !p.On() || perr != nil {
		return
	}
	if len(partners) == 0 {
		r.add(Note, "failover-channel", fmt.Sprintf("the pair channel orders every peer's addresses with the agent at %s (pair.peer): right where that rack is the partner on every HA VLAN. Where another rack is the partner on some (MAAS sets a primary and a secondary rack per VLAN), name those peers in pair.partners, or their addresses reach the region in no order with that partner's (docs/failover.md).", p.Peer), "")
		return
	}
	// Each agent (pair.peer's first, then the partners' in order) with
	// the peers whose addresses it orders.
	agents := []string{p.Peer}
	for _, pt := range partners {
		agents = append(agents, pt.Peer)
	}
	to := make([][]string, len(agents))
	for _, o := range append([]reconcile.Pair{ps.Lead}, ps.Others...) {
		i := 0
		for j, pt := range partners {
			if slices.Contains(pt.FailoverPeers, o.Peer) {
				i = j + 1
			}
		}
		to[i] = append(to[i], o.Peer)
	}
	var parts []string
	for i, a := range agents {
		if len(to[i]) > 0 {
			parts = append(parts, fmt.Sprintf("%s with the agent at %s", strings.Join(to[i], ", "), a))
		}
	}
	r.add(OK, "failover-channel", fmt.Sprintf("the pair channel orders %s.", strings.Join(parts, "; ")), "")
}

// agentAccess checks that the agent's user can read what mode detection
// reads: MAAS writes its dhcpd.conf readable by root only (0640,
// maas-write-file), and then the agent cannot tell the mode. A unit that
// grants CAP_DAC_READ_SEARCH (the package's maas-rack.conf, linked on a
// MAAS rack) reads them all, whatever their modes.
func (r *Report) agentAccess(name string, d reconcile.Detection, d6 *reconcile.Detection, c *config.Config, creds, caps func() []string) {
	if name == "" {
		return
	}
	u, err := user.Lookup(name)
	if err != nil {
		// The package makes its user; a name this machine lacks is a
		// typo or a broken install, and skipping in silence read as
		// "every file readable" (a cold review).
		r.add(Problem, "agent-access", fmt.Sprintf("cannot check what the agent may read: no user %s here (%v).", name, err),
			"pass --agent-user with the user the agent's unit runs as (systemctl show -p User leasekeeper; the package's is leasekeeper), or --agent-user \"\" to skip these checks")
		return
	}
	if c := readsAny(caps()); c != "" {
		r.add(OK, "agent-access", fmt.Sprintf("the agent runs as %s and its unit grants it %s (the package's maas-rack.conf grants CAP_DAC_READ_SEARCH): it reads MAAS's files whatever their modes.", name, strings.ToUpper(c)), "")
		return
	}
	uid, _ := strconv.Atoi(u.Uid)
	var gids []int
	if gs, err := u.GroupIds(); err == nil {
		for _, g := range gs {
			n, _ := strconv.Atoi(g)
			gids = append(gids, n)
		}
	}
	for _, f := range []string{c.Region.CertFile, c.Region.KeyFile, c.Region.CAFile} {
		if f == "" {
			continue
		}
		why := unreadable(f, uid, gids)
		switch {
		case why == "":
		case slices.Contains(creds(), filepath.Base(f)):
			r.add(OK, "agent-access", fmt.Sprintf("the agent runs as %s, which cannot read %s, but systemd hands it a copy (LoadCredential=%s:…).", name, f, filepath.Base(f)), "")
		default:
			r.add(Problem, "agent-access", fmt.Sprintf("the agent runs as %s, which cannot read %s (%s): it cannot connect to the region.", name, f, why),
				fmt.Sprintf("have systemd pass it a copy: systemctl edit leasekeeper, [Service] LoadCredential=%s:%s (README.Debian, section 1)", filepath.Base(f), f))
		}
	}
	if c.Rack != nil && slices.Contains(c.RackKeys, "region.url") {
		if why := unreadable(c.Rack.RackdConf, uid, gids); why != "" {
			r.add(Problem, "agent-access", fmt.Sprintf("the agent runs as %s, which cannot read %s (%s): it takes the region from there and stops without it.", name, c.Rack.RackdConf, why),
				"set [region] url (and other_urls) in leasekeeper.toml, or let the agent read MAAS's files (the package's maas-rack.conf drop-in; README.Debian, section 1)")
		}
	}
	for _, l := range []string{c.DHCPD.Leases, c.DHCPD.Leases6} {
		if l == "" || !fileExists(l) {
			continue
		}
		if why := unreadable(l, uid, gids); why != "" {
			r.add(Problem, "agent-access", fmt.Sprintf("the agent runs as %s, which cannot read %s (%s): it cannot follow dhcpd's leases, and synthesises nothing.", name, l, why),
				fmt.Sprintf("let %s read it and search its directory (MAAS's maas-dhcpd.service and maas-dhcpd6.service make the file 0664 in a 0775 directory)", name))
		}
	}
	r.confAccess(name, d, uid, gids, fmt.Sprintf("set [reconcile] mode = %%q in leasekeeper.toml (what dhcpd.conf says, as read here), or let %s read the file", name))
	if d6 != nil && d6.Conf != "" {
		// No key forces dhcpd.leases6's mode: the file must be read.
		r.confAccess(name, *d6, uid, gids, fmt.Sprintf("let %s read the file (dhcpd.leases6's mode is detected from dhcpd.config6 alone)", name))
	}
}

// socketGroups checks the groups the agent gives its sockets
// (control.group, hook.socket_group) as the agent does when it binds
// them (internal/sockgroup): a group this machine lacks, or one the
// agent's user (name) is not a member of, by its own groups or the
// unit's SupplementaryGroups=, stops every start (exit 78). Without
// CAP_CHOWN a process gives a file it owns only to a group it is in
// (chown(2)); root may give it to any.
func (r *Report) socketGroups(name string, c *config.Config, supp func() []string) {
	groups := c.SocketGroups()
	if len(groups) == 0 {
		return
	}
	// The user and the unit are asked once (supp runs systemctl).
	var u *user.User
	var gids, added []string
	if name != "" {
		if v, err := user.Lookup(name); err == nil && v.Uid != "0" {
			u = v // else no user to check (agent-access says why), or root
			gids, _ = u.GroupIds()
			added = supp()
		}
	}
	for _, g := range groups {
		grp, err := user.LookupGroup(g.Group)
		if err != nil {
			r.add(Problem, "socket-group", fmt.Sprintf("%s %q: no such group on this machine (%v): the agent does not start.", g.Key, g.Group, err),
				fmt.Sprintf("correct the name, make the group (groupadd %s, then add the agent's user to it), or set %s = \"\"", g.Group, g.Key))
			continue
		}
		if u == nil {
			continue
		}
		if u.Gid == grp.Gid || slices.Contains(gids, grp.Gid) || slices.Contains(added, grp.Name) || slices.Contains(added, grp.Gid) {
			r.add(OK, "socket-group", fmt.Sprintf("%s %q: the agent's user %s is a member, and gives its socket to it.", g.Key, g.Group, name), "")
			continue
		}
		r.add(Problem, "socket-group", fmt.Sprintf("%s %q: the agent runs as %s, which is not a member of group %s, so it cannot give its socket to that group: the agent does not start.", g.Key, g.Group, name, g.Group),
			fmt.Sprintf("systemctl edit leasekeeper: [Service] SupplementaryGroups=%s (or usermod -aG %s %s), or set %s = \"\"", g.Group, g.Group, name, g.Key))
	}
}

// confAccess checks that the agent's user (uid, gids) can read what
// detection d read: the dhcpd.conf, its includes and the hook programs.
// fix is the finding's fix, given the mode detected here when it has a
// %q.
func (r *Report) confAccess(name string, d reconcile.Detection, uid int, gids []int, fix string) {
	if d.Conf == "" || d.Forced {
		return
	}
	files := append([]string{}, d.Files...)
	if len(files) == 0 {
		files = []string{d.Conf}
	}
	for _, h := range d.Hooks {
		if h.Runnable && h.Path != "" {
			files = append(files, h.Path)
		}
	}
	for _, f := range files {
		if why := unreadable(f, uid, gids); why != "" {
			det := d.Detected
			if d.Unsure {
				det = "the mode this report would show if run as root"
			}
			if strings.Contains(fix, "%q") {
				fix = fmt.Sprintf(fix, det)
			}
			r.add(Problem, "agent-access", fmt.Sprintf("the agent runs as %s, which cannot read %s (%s): it cannot tell the mode and takes complement, the safe side.", name, f, why), fix)
			return
		}
	}
}

// unreadable says why uid (with gids) cannot read path, or "".
func unreadable(path string, uid int, gids []int) string {
	can := func(p string, want os.FileMode) (bool, string) {
		fi, err := os.Stat(p)
		if err != nil {
			return false, err.Error()
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return true, ""
		}
		mode := fi.Mode().Perm()
		desc := fmt.Sprintf("%s is owned by uid %d, gid %d, mode %04o", p, st.Uid, st.Gid, mode)
		switch {
		case uid == 0:
			return true, ""
		case int(st.Uid) == uid:
			return mode&(want<<6) != 0, desc
		case contains(gids, int(st.Gid)):
			return mode&(want<<3) != 0, desc
		default:
			return mode&want != 0, desc
		}
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if ok, desc := can(dir, 0o1); !ok {
			return desc
		}
		if dir == "/" || dir == "." {
			break
		}
	}
	if ok, desc := can(path, 0o4); !ok {
		return desc
	}
	return ""
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// dhcpv6 says what happens to DHCPv6 leases, given dhcpd.config6's
// detection (nil: dhcpd.config6 is not set).
func (r *Report) dhcpv6(c *config.Config, d6 *reconcile.Detection) {
	if d6 == nil {
		if c.DHCPD.Leases6 != "" {
			r.add(Problem, "dhcpv6", "dhcpd.leases6 is set, dhcpd.config6 is not: the agent refuses this configuration (dhcpd.leases6's mode is detected from dhcpd.config6).",
				`set [dhcpd] config6 to dhcpd -6's configuration (MAAS deb: "/var/lib/maas/dhcpd6.conf"; snap: "/var/snap/maas/common/maas/dhcpd6.conf")`)
		}
		return
	}
	d := *d6
	if c.DHCPD.Leases6 == "" {
		r.add(Problem, "dhcpv6", fmt.Sprintf("dhcpd.config6 (%s) is set, dhcpd.leases6 is not: the agent does not follow DHCPv6 leases, and MAAS's dhcpd6.conf runs no hook, so no DHCPv6 lease reaches the region.", c.DHCPD.Config6),
			`set [dhcpd] leases6 to dhcpd -6's leases file (MAAS deb: "/var/lib/maas/dhcp/dhcpd6.leases"; snap: "/var/snap/maas/common/maas/dhcp/dhcpd6.leases")`)
		return
	}
	msg := fmt.Sprintf("dhcpd.config6 (%s): the agent follows dhcpd.leases6 (%s) in %s mode (detected from dhcpd.config6 alone; reconcile.mode is dhcpd.config's): %s.", c.DHCPD.Config6, c.DHCPD.Leases6, d.Mode, d.Why)
	msg += " MAAS's dhcpd6.conf runs no hook at all, and MAAS's helper has no DHCPv6 path; the region wants a six-octet MAC, which leasekeeper takes from the client's DUID (DUID-LLT, DUID-LL) and otherwise keeps the event back."
	r.add(Note, "dhcpv6", msg, "")
}

// rack says what the MAAS rack on this host gave the configuration
// (config.ParseOn), and whether a region.url the file sets is one of the
// region controllers rackd.conf names.
func (r *Report) rack(c *config.Config) {
	rk := c.Rack
	if rk == nil {
		return
	}
	r.add(OK, "maas-rack", rk.Describe(c.RackKeys)+".", "")
	if slices.Contains(c.RackKeys, "region.url") || rk.RegionErr != nil || c.Region.URL == "" {
		return
	}
	ours := map[string]bool{}
	for _, raw := range rk.RegionURLs {
		if u, err := url.Parse(raw); err == nil {
			ours[strings.ToLower(u.Hostname())] = true
		}
	}
	for _, raw := range append([]string{c.Region.URL}, c.Region.OtherURLs...) {
		if u, err := url.Parse(raw); err == nil && !ours[strings.ToLower(u.Hostname())] {
			r.add(Note, "maas-rack", fmt.Sprintf("region.url or other_urls names %s, a host that %s's maas_url does not (%s): a name of its own for the same region, or another region than this rack's?", u.Hostname(), rk.RackdConf, strings.Join(rk.RegionURLs, ", ")),
				"leave url and other_urls out of [region] to deliver where rackd.conf says, as MAAS's own agent does")
		}
	}
}

// region checks [region]: the URL, the certificates, and one TLS
// connection with a GET (never a POST: no event is sent).
func (r *Report) region(ctx context.Context, o Options) {
	c := &o.Config.Region
	if c.URL == "" {
		msg := "region.url is not set: the agent does not start."
		if rk := o.Config.Rack; rk != nil && rk.RegionErr != nil {
			msg = "region.url is not set, and " + rk.RegionErr.Error() + ": the agent does not start."
		}
		r.add(Problem, "region-url", msg, "set [region] url = \"https://REGION:5242"+leasesPath+"\"")
		return
	}
	u, err := url.Parse(c.URL)
	if err != nil || u.Host == "" {
		r.add(Problem, "region-url", fmt.Sprintf("region.url %q is not a URL.", c.URL), "set [region] url = \"https://REGION:5242"+leasesPath+"\"")
		return
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	want := o.Port
	if want == "" {
		want = MAASPort
	}
	// One URL mends every finding below: each names all of it.
	fixed := "use https://" + net.JoinHostPort(u.Hostname(), want) + leasesPath
	urlOK := true
	if u.Scheme != "https" {
		urlOK = false
		r.add(Problem, "region-url", fmt.Sprintf("region.url %s is %s: MAAS's internal API takes only mutual TLS.", c.URL, u.Scheme), fixed)
	}
	if port != want {
		urlOK = false
		r.add(Problem, "region-url", fmt.Sprintf("region.url uses port %s: MAAS serves its internal leases API only on port %s (5240 and 5443 are the public API, which answers 400 or 404 there).", port, want), fixed)
	}
	if u.Path != leasesPath {
		urlOK = false
		r.add(Problem, "region-url", fmt.Sprintf("region.url's path is %q: MAAS's leases endpoint is %s.", u.Path, leasesPath), fixed)
	}
	if urlOK {
		r.add(OK, "region-url", "region.url "+c.URL+" is MAAS's internal leases endpoint.", "")
	}
	if c.TokenFile != "" {
		r.add(Problem, "certificates", "region.token_file is set: MAAS's internal API takes no bearer token, only the rack's client certificate.", "remove token_file; set cert_file, key_file and ca_file")
	}
	if err := agent.CheckRegion(o.Config); err != nil {
		r.add(Problem, "region-url", "the agent would refuse to start: "+err.Error()+".", "fix [region] in leasekeeper.toml; leasekeeper agent --print-config checks it")
	}
	if hint := o.Config.AwaitedCerts(); hint != "" {
		r.add(Problem, "certificates", hint+".", "register the rack with its region (maas-rack register on a deb rack, maas init rack on the snap); the running agent delivers from then on")
		return
	}
	tc, ok := r.certificates(c.CertFile, c.KeyFile, c.CAFile)
	if !ok || u.Scheme != "https" {
		return
	}
	// As the agent does: region.server_name, else the URL's host.
	tc.ServerName = c.ServerName
	if o.ServerName != "" {
		tc.ServerName = o.ServerName
	}
	if tc.ServerName == "" {
		tc.ServerName = u.Hostname()
		if u.Hostname() != config.MAASServerName {
			r.add(Note, "region-url", fmt.Sprintf("region.server_name is empty, so the region's certificate must name %s; MAAS's names only %q.", u.Hostname(), config.MAASServerName),
				fmt.Sprintf("set region.server_name = %q", config.MAASServerName))
		}
	}
	r.connect(ctx, u, tc, o.Timeout)
	// The other region controllers (region.other_urls): the same
	// endpoint on each, the same certificates.
	for _, raw := range c.OtherURLs {
		ou, err := url.Parse(raw)
		if err != nil || ou.Hostname() == "" {
			continue // CheckRegion said so
		}
		oport := ou.Port()
		if oport == "" {
			oport = map[string]string{"https": "443", "http": "80"}[ou.Scheme]
		}
		if ou.Scheme != "https" || oport != want || ou.Path != leasesPath {
			r.add(Problem, "region-url", fmt.Sprintf("region.other_urls names %s: MAAS's internal leases endpoint is https://CONTROLLER:%s%s.", raw, want, leasesPath),
				"use https://"+net.JoinHostPort(ou.Hostname(), want)+leasesPath)
			continue
		}
		otc := tc.Clone()
		if c.ServerName == "" && o.ServerName == "" {
			otc.ServerName = ou.Hostname()
		}
		r.connect(ctx, ou, otc, o.Timeout)
	}
}

// certificates checks the client certificate, its key and the CA, as the
// rack's maas-agent has them, and returns the TLS configuration.
func (r *Report) certificates(certFile, keyFile, caFile string) (*tls.Config, bool) {
	fix := "set region.cert_file, key_file and ca_file to the rack's certificate, key and MAAS's CA, as maas-agent uses them (3.8+: agent.crt, agent.key, ca.pem; 3.6 and 3.7: cluster.pem, cluster.key, cacerts.pem; deb: /var/lib/maas/certificates, snap: /var/snap/maas/current/certificates, from 3.8 possibly /var/snap/maas/common/var/lib/maas/certificates), readable by the agent's user (README.Debian, section 1)"
	var missing []string
	for k, v := range map[string]string{"cert_file": certFile, "key_file": keyFile, "ca_file": caFile} {
		if v == "" {
			missing = append(missing, "region."+k)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		r.add(Problem, "certificates", strings.Join(missing, ", ")+" not set: MAAS's internal API takes only mutual TLS (no client certificate: MAAS 3.8 answers 403 \"Client certificate required.\", 3.6 and 3.7 end the TLS handshake; no CA: the region's self-signed chain cannot be verified).", fix)
		return nil, false
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		r.add(Problem, "certificates", "cannot use region.cert_file and key_file: "+err.Error()+".", fix)
		return nil, false
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		r.add(Problem, "certificates", "cannot read region.ca_file: "+err.Error()+".", fix)
		return nil, false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		r.add(Problem, "certificates", "region.ca_file "+caFile+" holds no PEM certificate.", fix)
		return nil, false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		r.add(Problem, "certificates", "region.cert_file does not parse: "+err.Error()+".", fix)
		return nil, false
	}
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		r.add(Problem, "certificates", fmt.Sprintf("the client certificate %s expired on %s.", certFile, leaf.NotAfter.UTC().Format(time.RFC3339)), "renew the rack's certificate (maas-agent init)")
		return nil, false
	case now.Before(leaf.NotBefore):
		r.add(Problem, "certificates", fmt.Sprintf("the client certificate %s is valid only from %s (is the clock right?).", certFile, leaf.NotBefore.UTC().Format(time.RFC3339)), "check the rack's clock")
		return nil, false
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		r.add(Problem, "certificates", fmt.Sprintf("the client certificate %s (CN %q) does not chain to region.ca_file %s for client use: %v; the region refuses it.", certFile, leaf.Subject.CommonName, caFile, err), fix)
		return nil, false
	}
	r.add(OK, "certificates", fmt.Sprintf("client certificate CN %q, valid until %s, chains to %s.", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format("2006-01-02"), caFile), "")
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, RootCAs: pool}, true
}

// connect makes one TLS connection to the region and a GET on the leases
// endpoint: MAAS answers 405 there when it took the client certificate
// (only POST is routed) and 403 "Client certificate required." when not.
func (r *Report) connect(ctx context.Context, u *url.URL, tc *tls.Config, timeout time.Duration) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hostport := u.Host
	if u.Port() == "" {
		hostport = net.JoinHostPort(u.Hostname(), "443")
	}
	fix := "check that regiond runs and that port " + MAASPort + " on " + u.Hostname() + " is reachable from the rack"
	tr := &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		r.add(Problem, "region", err.Error(), fix)
		return
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		var ue x509.UnknownAuthorityError
		var he x509.HostnameError
		var ce *tls.CertificateVerificationError
		switch {
		case errors.As(err, &he):
			r.add(Problem, "region", fmt.Sprintf("the region at %s has a certificate for %v, not %q: %v.", hostport, he.Certificate.DNSNames, tc.ServerName, err),
				fmt.Sprintf("set region.server_name to the name in the region's certificate (MAAS: %q)", config.MAASServerName))
		case errors.As(err, &ue), errors.As(err, &ce):
			r.add(Problem, "region", fmt.Sprintf("the region's certificate at %s does not chain to region.ca_file: %v.", hostport, err), "set region.ca_file to MAAS's CA")
		case errors.Is(err, syscall.ECONNREFUSED):
			msg := fmt.Sprintf("the region refuses connections on %s.", hostport)
			if u.Port() == MAASPort {
				msg += " MAAS 3.5 and older have no internal API (nor port 5242): leasekeeper delivers to MAAS 3.6 and later."
			}
			r.add(Problem, "region", msg, fix)
		default:
			r.add(Problem, "region", fmt.Sprintf("cannot reach the region at %s: %v.", hostport, err), fix)
		}
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	answer := strings.TrimSpace(string(body))
	state := resp.TLS
	peer := ""
	if state != nil && len(state.PeerCertificates) > 0 {
		peer = fmt.Sprintf(" (its certificate: CN %q)", state.PeerCertificates[0].Subject.CommonName)
	}
	switch {
	case resp.StatusCode == http.StatusForbidden:
		r.add(Problem, "region", fmt.Sprintf("the region at %s%s refused the client certificate: HTTP 403 %s.", hostport, peer, answer),
			"use the rack's maas-agent certificate and key, issued by MAAS's CA")
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest:
		r.add(Problem, "region", fmt.Sprintf("the region at %s%s answered HTTP %d to %s: no internal leases API there (a public API port?).", hostport, peer, resp.StatusCode, u.Path),
			"use https://"+net.JoinHostPort(u.Hostname(), MAASPort)+leasesPath)
	case resp.StatusCode >= 500:
		r.add(Problem, "region", fmt.Sprintf("the region at %s%s answered HTTP %d: it is not serving (regiond down?); the agent keeps events queued meanwhile.", hostport, peer, resp.StatusCode), fix)
	default:
		r.add(OK, "region", fmt.Sprintf("the region at %s%s took the TLS connection and the client certificate (GET %s: HTTP %d, as expected: only POST is served there).", hostport, peer, u.Path, resp.StatusCode), "")
	}
}
