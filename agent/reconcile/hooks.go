package reconcile

// Which mode the rack is in: what dhcpd.conf's hooks run, and so who
// tells the region about the events they report. See the package
// documentation ("Modes") for what each mode does and why unsure
// detection picks complement.

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/safefile"
)

// Mode is how the reconciler shares the work with dhcpd's hooks.
type Mode string

const (
	// ModeAuto detects the mode from dhcpd.conf (reconcile.mode's default).
	ModeAuto Mode = "auto"
	// ModeReplacement: the hooks run leasekeeper-hook, so they reach the
	// agent. The file fills in, after the grace, what a hook missed.
	ModeReplacement Mode = "replacement"
	// ModeComplement: the hooks run another program (MAAS's own
	// maas-dhcp-helper), which tells the region itself. The file adds
	// only what no hook ever reports: leases a rewrite dropped.
	ModeComplement Mode = "complement"
	// ModeHookless: no hook runs; every event comes from the file at once.
	ModeHookless Mode = "hookless"
)

// Modes lists the values reconcile.mode accepts.
var Modes = []Mode{ModeAuto, ModeReplacement, ModeComplement, ModeHookless}

// ParseMode checks a reconcile.mode value; "" is ModeAuto.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeAuto, nil
	}
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("%q is not auto, replacement, complement or hookless", s)
}

// Kind is what a hook program was identified as.
type Kind string

const (
	KindLeasekeeper Kind = "leasekeeper-hook" // this project's hook: it reaches the agent
	KindMAAS        Kind = "maas-dhcp-helper" // MAAS's own helper: it reaches MAAS
	KindOther       Kind = "other"            // anything else (a wrapper script, another tool)
	KindUnknown     Kind = "unknown"          // could not be read
)

// Hook is one execute() in dhcpd.conf that reports lease events.
type Hook struct {
	Program string `json:"program"`          // as written in execute()
	At      string `json:"at"`               // file:line of the execute()
	Socket  string `json:"socket,omitempty"` // its --socket argument, when a literal
	// Path is the file dhcpd executes, symbolic links resolved; "" when
	// there is none.
	Path     string `json:"path,omitempty"`
	Runnable bool   `json:"runnable"`
	Kind     Kind   `json:"kind,omitempty"` // of a runnable program
	// Snap: the program lies in a snap's read-only tree (MAAS installed
	// as a snap): it cannot be replaced.
	Snap      bool       `json:"snap,omitempty"`
	Diversion *Diversion `json:"diversion,omitempty"` // dpkg's diversion of Program, if any
	Why       string     `json:"why"`                 // how it was identified, or why it cannot run
}

// Diversion is one of dpkg's diversions (dpkg-divert --list): From is
// installed as To; Package is the package that made it ("" for a local
// diversion, dpkg-divert --local).
type Diversion struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Package string `json:"package,omitempty"`
}

// Detection is the mode and what it was decided from.
type Detection struct {
	Mode     Mode `json:"mode"`     // in force: never ModeAuto
	Detected Mode `json:"detected"` // what dhcpd.conf says (Mode unless forced)
	Forced   bool `json:"forced"`   // reconcile.mode set it
	// Unsure: detection could not tell and took the safe side,
	// complement (Why says what it could not tell).
	Unsure bool   `json:"unsure"`
	Why    string `json:"why"`
	// Unreadable: dhcpd.conf (or an include) could not be read; the
	// reconciler then keeps the mode it last detected for sure (Kept).
	Unreadable bool `json:"unreadable,omitempty"`
	// Kept: Mode is the last mode detected for sure, kept because
	// dhcpd.conf could not be read now.
	Kept  bool     `json:"kept,omitempty"`
	Conf  string   `json:"conf"`            // dhcpd.conf, "" when not set
	Files []string `json:"files,omitempty"` // dhcpd.conf and its includes, as read
	Hooks []Hook   `json:"hooks,omitempty"`
	// Others are programs dhcpd.conf executes that are not lease
	// reporters (file:line and program), ignored for the mode.
	Others []string `json:"others,omitempty"`
}

// DetectEnv is what detection reads besides dhcpd.conf.
type DetectEnv struct {
	// OurHooks are files known to be leasekeeper-hook; a program that is
	// the same file (after symbolic links) is ours. Besides these, any Go
	// binary whose build information names the hook's package is ours.
	OurHooks []string
	// Diversions lists dpkg's diversions (nil = none).
	Diversions func() ([]Diversion, error)
	// Path is dhcpd's PATH, for execute() of a bare name (dhcpd uses
	// execvp).
	Path string
	// SnapDir is where snaps are mounted, read-only ("/snap").
	SnapDir string
}

// DefaultDetectEnv is a Debian system's.
func DefaultDetectEnv() DetectEnv {
	return DetectEnv{
		OurHooks:   []string{"/usr/sbin/leasekeeper-hook"},
		Diversions: listDiversions,
		Path:       "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		SnapDir:    "/snap",
	}
}

// hookPackage is the main package of leasekeeper-hook, as Go's build
// information records it in the binary.
const hookPackage = "github.com/leasekeeper/leasekeeper/hook"

// reporterNames are the program names that report leases by their name:
// MAAS's helper and ours (dhcpd.conf also runs programs that have
// nothing to do with the region).
var reporterNames = []string{"maas-dhcp-helper", "leasekeeper-hook"}

// Detect decides the mode from the dhcpd.conf at conf (and its includes)
// and the programs its execute() statements run, unless forced is not
// ModeAuto. It never fails: what it cannot read makes it unsure, and
// unsure is complement. conf "" means dhcpd.conf is not known.
func Detect(conf string, forced Mode, env DetectEnv) Detection {
	d := detect(conf, env)
	d.Detected = d.Mode
	if forced != "" && forced != ModeAuto {
		d.Mode, d.Forced = forced, true
	}
	return d
}

func detect(conf string, env DetectEnv) Detection {
	d := Detection{Conf: conf}
	unsure := func(why string) Detection {
		d.Mode, d.Unsure, d.Why = ModeComplement, true, why+": complement mode, the safe side (nothing a hook may already have told the region is sent again)"
		return d
	}
	if conf == "" {
		return unsure("dhcpd.config is not set, so the hooks are unknown")
	}
	calls, files, err := scanConf(conf)
	d.Files = files
	if err != nil {
		d.Unreadable = true
		return unsure("cannot read dhcpd.conf (" + err.Error() + ")")
	}
	var divs []Diversion
	if env.Diversions != nil {
		divs, _ = env.Diversions() // none listed: none reported
	}
	for _, c := range calls {
		if !isReporter(c, env) {
			d.Others = append(d.Others, c.at+" "+c.prog)
			continue
		}
		d.Hooks = append(d.Hooks, identify(c, env, divs))
	}
	var ours, maas, other, unknown []Hook
	for _, h := range d.Hooks {
		if !h.Runnable {
			continue
		}
		switch h.Kind {
		case KindLeasekeeper:
			ours = append(ours, h)
		case KindMAAS:
			maas = append(maas, h)
		case KindOther:
			other = append(other, h)
		default:
			unknown = append(unknown, h)
		}
	}
	switch {
	case len(d.Hooks) == 0:
		d.Mode, d.Why = ModeHookless, "dhcpd.conf runs no lease hook"
	case len(ours)+len(maas)+len(other)+len(unknown) == 0:
		d.Mode, d.Why = ModeHookless, fmt.Sprintf("dhcpd.conf runs %s (%s), which dhcpd cannot run: %s", d.Hooks[0].Program, d.Hooks[0].At, d.Hooks[0].Why)
	case len(unknown) > 0:
		return unsure(fmt.Sprintf("cannot tell what %s (%s) is: %s", unknown[0].Program, unknown[0].At, unknown[0].Why))
	case len(maas) > 0 && len(ours) > 0:
		d.Mode, d.Why = ModeComplement, fmt.Sprintf("dhcpd.conf runs both leasekeeper-hook (%s) and MAAS's helper (%s): the leases MAAS's helper reports reach the region without the agent", ours[0].At, maas[0].At)
	case len(maas) > 0:
		to := "MAAS itself"
		if maas[0].Socket != "" {
			to += ", through " + maas[0].Socket
		}
		d.Mode, d.Why = ModeComplement, fmt.Sprintf("dhcpd.conf runs MAAS's own helper %s (%s; %s), which tells %s", maas[0].Program, maas[0].At, maas[0].Why, to)
	case len(other) > 0:
		d.Mode, d.Unsure = ModeComplement, true
		d.Why = fmt.Sprintf("dhcpd.conf runs %s (%s), which is not leasekeeper-hook (%s); assuming it tells the region itself: complement mode, the safe side", other[0].Program, other[0].At, other[0].Why)
	default:
		d.Mode, d.Why = ModeReplacement, fmt.Sprintf("dhcpd.conf runs %s (%s), which is leasekeeper-hook (%s)", ours[0].Program, ours[0].At, ours[0].Why)
	}
	return d
}

// isReporter reports whether an execute() reports lease events: it runs
// leasekeeper-hook (whatever its name), a program named like MAAS's
// helper or ours, or a program called with MAAS's notify protocol.
func isReporter(c execCall, env DetectEnv) bool {
	base := filepath.Base(c.prog)
	for _, n := range reporterNames {
		if strings.HasPrefix(base, n) {
			return true
		}
	}
	if len(c.args) > 0 && c.args[0] == "notify" && c.has("--action") {
		return true
	}
	if p, err := resolveProgram(c.prog, env.Path); err == nil {
		if k, _, _ := identity(p, env); k == KindLeasekeeper {
			return true
		}
	}
	return false
}

// identify resolves and identifies one hook program.
func identify(c execCall, env DetectEnv, divs []Diversion) Hook {
	h := Hook{Program: c.prog, At: c.at, Socket: c.flag("--socket")}
	for i := range divs {
		if divs[i].From == c.prog {
			h.Diversion = &divs[i]
		}
	}
	p, err := resolveProgram(c.prog, env.Path)
	if err != nil {
		h.Why = err.Error()
		return h
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	h.Path = p
	h.Snap = env.SnapDir != "" && (under(p, env.SnapDir) || under(c.prog, env.SnapDir))
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		h.Why = err.Error()
		return h
	case !fi.Mode().IsRegular():
		h.Why = p + " is not a regular file"
		return h
	case fi.Mode().Perm()&0o111 == 0:
		h.Why = fmt.Sprintf("%s is not executable (mode %04o)", p, fi.Mode().Perm())
		return h
	}
	h.Runnable = true
	h.Kind, h.Why, _ = identity(p, env)
	if h.Kind == KindMAAS && h.Snap {
		h.Why += "; in the snap's read-only tree, so it cannot be replaced"
	}
	if dv := h.Diversion; dv != nil {
		by := "locally"
		if dv.Package != "" {
			by = "by package " + dv.Package
		}
		if h.Kind == KindLeasekeeper {
			h.Why += fmt.Sprintf("; %s is diverted %s to %s", dv.From, by, dv.To)
		} else {
			h.Why += fmt.Sprintf("; %s is diverted %s to %s, yet what is there is not leasekeeper-hook", dv.From, by, dv.To)
		}
	}
	return h
}

// under reports whether path lies inside dir.
func under(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "../") && rel != ".."
}

// resolveProgram finds the file execvp runs for prog: a name without a
// slash in path's directories, a relative path from dhcpd's working
// directory (/ under systemd).
func resolveProgram(prog, path string) (string, error) {
	switch {
	case prog == "":
		return "", errors.New("empty program name")
	case filepath.IsAbs(prog):
		return prog, nil
	case strings.Contains(prog, "/"):
		return filepath.Join("/", prog), nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not in dhcpd's PATH (%s)", prog, path)
}

// identity tells leasekeeper-hook, MAAS's helper and other programs
// apart by what the file is, never by its name: the same file as a
// known leasekeeper-hook, a Go binary built from the hook's package, or
// a script that is MAAS's helper. sure is false when the file could not
// be read.
func identity(p string, env DetectEnv) (k Kind, why string, sure bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return KindUnknown, err.Error(), false
	}
	for _, ours := range env.OurHooks {
		if oi, err := os.Stat(ours); err == nil && os.SameFile(fi, oi) {
			return KindLeasekeeper, "the same file as " + ours, true
		}
	}
	f, err := safefile.Open(p, safefile.FollowLinks)
	if err != nil {
		return KindUnknown, "cannot read it: " + err.Error(), false
	}
	defer f.Close()
	if bi, err := buildinfo.Read(f); err == nil {
		if bi.Path == hookPackage {
			v := bi.Main.Version
			if v == "" || v == "(devel)" {
				v = "a development build"
			}
			return KindLeasekeeper, fmt.Sprintf("a Go binary built from %s, %s", hookPackage, v), true
		}
		return KindOther, "a Go binary built from " + bi.Path, true
	}
	head := make([]byte, 64<<10)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return KindUnknown, "cannot read it: " + err.Error(), false
	}
	head = head[:n]
	if bytes.HasPrefix(head, []byte("#!")) && maasHelperRe.Match(head) {
		// maas-dhcp-helper is a Python script whose notify sends to
		// MAAS's dhcpd.sock (package-files/usr/sbin/maas-dhcp-helper).
		return KindMAAS, "MAAS's Python helper (a script sending to MAAS's dhcpd.sock)", true
	}
	if bytes.HasPrefix(head, []byte("#!")) {
		line, _, _ := bytes.Cut(head, []byte("\n"))
		return KindOther, fmt.Sprintf("a script (%s)", bytes.TrimSpace(line)), true
	}
	return KindOther, "a program that is neither leasekeeper-hook nor MAAS's helper", true
}

var maasHelperRe = regexp.MustCompile(`maas-dhcpd|dhcpd\.sock`)

// listDiversions asks dpkg for its diversions (dpkg's database is not
// an interface: dpkg-divert is). No dpkg-divert, or one that fails or
// hangs, lists none.
func listDiversions() ([]Diversion, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dpkg-divert", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-divert --list: %w", err)
	}
	return parseDivertList(out), nil
}

// divertRe is a line of dpkg-divert --list: "diversion of FROM to TO by
// PACKAGE", or "local diversion of FROM to TO".
var divertRe = regexp.MustCompile(`^(local )?diversion of (\S+)(?: to (\S+))?(?: by (\S+))?$`)

// parseDivertList reads dpkg-divert --list's output; lines it does not
// know are skipped.
func parseDivertList(out []byte) []Diversion {
	var divs []Diversion
	for _, line := range strings.Split(string(out), "\n") {
		m := divertRe.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		d := Diversion{From: m[2], To: m[3], Package: m[4]}
		if d.To == "" {
			d.To = d.From + ".distrib"
		}
		if m[1] != "" {
			d.Package = ""
		}
		divs = append(divs, d)
	}
	return divs
}

// execCall is one execute() statement.
type execCall struct {
	prog string
	args []string // string literals as written; "" for an expression
	at   string   // file:line
}

func (c execCall) has(lit string) bool {
	for _, a := range c.args {
		if a == lit {
			return true
		}
	}
	return false
}

// flag returns the literal after name among the arguments.
func (c execCall) flag(name string) string {
	for i := 0; i+1 < len(c.args); i++ {
		if c.args[i] == name {
			return c.args[i+1]
		}
	}
	return ""
}

var (
	executeRe = regexp.MustCompile(`(?i)\bexecute\s*\(`)
	includeRe = regexp.MustCompile(`(?i)(?:^|[;{}\s])include\s+"([^"]*)"\s*;`)
)

// scanConf reads the dhcpd.conf at path and the files it includes for
// execute() statements. It reads the raw text (with comments removed)
// rather than parsing: the configuration parser skips on-blocks whole,
// and this only needs the programs and their literal arguments. Relative
// include paths are taken relative to the including file's directory
// (dhcpd uses its working directory, which is / under systemd; absolute
// paths are the rule).
func scanConf(path string) ([]execCall, []string, error) {
	var calls []execCall
	var files []string
	seen := map[string]bool{}
	var walk func(p string, depth int) error
	walk = func(p string, depth int) error {
		if depth > 10 {
			return fmt.Errorf("%s: includes nested more than 10 deep", p)
		}
		if seen[p] {
			return nil
		}
		seen[p] = true
		raw, err := safefile.ReadFile(p, safefile.FollowLinks, 64<<20)
		if err != nil {
			return err
		}
		files = append(files, p)
		text := stripComments(raw)
		for _, loc := range executeRe.FindAllIndex(text, -1) {
			args, ok := execArgs(text[loc[1]:])
			if !ok || len(args) == 0 || args[0] == "" {
				continue // not a call with a literal program
			}
			line := 1 + bytes.Count(text[:loc[0]], []byte("\n"))
			calls = append(calls, execCall{prog: args[0], args: args[1:], at: fmt.Sprintf("%s:%d", p, line)})
		}
		for _, m := range includeRe.FindAllSubmatch(text, -1) {
			inc := string(m[1])
			if !filepath.IsAbs(inc) {
				inc = filepath.Join(filepath.Dir(p), inc)
			}
			if err := walk(inc, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return calls, files, walk(path, 0)
}

// execArgs reads execute()'s arguments from just after its "(" to the
// matching ")": string literals unquoted (\" and \\ unescaped), other
// expressions as "". ok is false when the text ends first.
func execArgs(b []byte) (args []string, ok bool) {
	depth, inStr, lit, expr := 0, false, false, false
	var cur strings.Builder
	end := func() {
		if lit && !expr {
			args = append(args, cur.String())
		} else {
			args = append(args, "")
		}
		cur.Reset()
		lit, expr = false, false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr:
			switch {
			case c == '\\' && i+1 < len(b):
				i++
				if depth == 0 {
					cur.WriteByte(b[i])
				}
			case c == '"':
				inStr = false
			case depth == 0:
				cur.WriteByte(c)
			}
		case c == '"':
			inStr = true
			if depth == 0 {
				if lit {
					expr = true // two strings in one argument: not a plain literal
				}
				lit = true
			}
		case c == '(':
			depth++
			expr = true
		case c == ')' && depth > 0:
			depth--
		case c == ')':
			end()
			return args, true
		case c == ',' && depth == 0:
			end()
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			if depth == 0 {
				expr = true
			}
		}
	}
	return nil, false
}

// stripComments blanks '#' comments outside strings (keeping newlines),
// so a commented-out execute() does not count.
func stripComments(b []byte) []byte {
	out := bytes.Clone(b)
	inStr, comment := false, false
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case comment:
			if c == '\n' {
				comment = false
			} else {
				out[i] = ' '
			}
		case inStr:
			if c == '\\' && i+1 < len(out) {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '#':
			comment = true
			out[i] = ' '
		}
	}
	return out
}
