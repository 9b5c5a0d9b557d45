package reconcile

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// maasBlock is MAAS's "Notify MAAS" on commit (maasserver/templates/
// dhcp/dhcpd.conf.template, 3.5 to 3.8) with helper and socket filled in.
func maasBlock(helper, socket string) string {
	return `on commit {
   set clhw = binary-to-ascii(16, 8, ":", substring(hardware, 1, 6));
   set clip = binary-to-ascii(10, 8, ".", leased-address);
   set cllt = binary-to-ascii(10, 32, "", encode-int(lease-time, 32));
   set clht = pick-first-value(option host-name, "(none)");
   execute(
       "` + helper + `", "notify",
       "--action", "commit", "--mac", clhw,
       "--ip-family", "ipv4", "--ip", clip,
       "--lease-time", cllt, "--hostname", clht,
       "--socket", "` + socket + `");
}
`
}

// maasHelperScript stands in for MAAS's Python helper: what identity
// looks at is a script that talks to dhcpd.sock.
const maasHelperScript = `#!/usr/bin/env python3
"""Utility script used by maas-dhcpd and maas-dhcpd6."""
default="/var/lib/maas/dhcpd.sock"
`

// TestDetect: the mode from dhcpd.conf fixtures and fake programs.
// Programs are told apart by what they are (the same file as a known
// leasekeeper-hook, Go build information, a script talking to MAAS's
// socket), never by name; what cannot be told is complement.
func TestDetect(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(target, name string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Installed leasekeeper-hook (a fake: OurHooks names it), and MAAS's
	// helper diverted to it the way README.Debian says.
	ours := write("usr/sbin/leasekeeper-hook", "#!/bin/true\n", 0o755)
	diverted := link(ours, "usr/sbin/maas-dhcp-helper")
	write("usr/sbin/maas-dhcp-helper.distrib", maasHelperScript, 0o755)
	divs := func() ([]Diversion, error) {
		return parseDivertList([]byte("diversion of /usr/share/man/man1/perf.1.gz to /usr/share/man/man1/perf.wrapper.1.gz by linux-perf\n" +
			"local diversion of " + diverted + " to " + diverted + ".distrib\n")), nil
	}
	// MAAS's helper, undiverted, as a deb installs it and inside a snap.
	maasDeb := write("deb/usr/sbin/maas-dhcp-helper", maasHelperScript, 0o755)
	maasSnap := write("snap/maas/40000/usr/sbin/maas-dhcp-helper", maasHelperScript, 0o755)
	// Named like ours, but a wrapper script: not ours.
	wrapper := write("wrap/leasekeeper-hook", "#!/bin/sh\nexec /usr/sbin/leasekeeper-hook \"$@\"\n", 0o755)
	// A real leasekeeper-hook under another name, known by its build
	// information only.
	built := filepath.Join(dir, "opt/lease-reporter")
	if err := os.MkdirAll(filepath.Dir(built), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(lab.BuildHook(t), built); err != nil {
		t.Fatal(err)
	}
	noexec := write("noexec/maas-dhcp-helper", maasHelperScript, 0o644)
	pathDir := filepath.Dir(ours) // for a bare program name

	write("hooks.conf", maasBlock(diverted, "/var/lib/maas/dhcpd.sock"), 0o644)
	write("loop.conf", `include "loop.conf";`+"\n", 0o644)
	subnet := "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.20; }\n"

	env := DetectEnv{OurHooks: []string{ours}, Diversions: divs, Path: pathDir, SnapDir: filepath.Join(dir, "snap")}
	tests := []struct {
		name   string
		conf   string // "" = dhcpd.config not set
		forced Mode
		want   Mode
		unsure bool
		why    string // in Why
		hooks  []string
		others int
	}{
		{name: "no hook at all", conf: subnet, want: ModeHookless, why: "runs no lease hook"},
		{name: "a program that reports nothing", conf: `on commit { execute("/usr/bin/logger", "-t", "dhcp", "commit"); }` + "\n" + subnet,
			want: ModeHookless, others: 1},
		{name: "commented out", conf: "# " + strings.ReplaceAll(strings.TrimSpace(maasBlock(maasDeb, "/var/lib/maas/dhcpd.sock")), "\n", "\n# ") + "\n" + subnet,
			want: ModeHookless},
		{name: "MAAS deb, helper not diverted", conf: maasBlock(maasDeb, "/var/lib/maas/dhcpd.sock") + subnet, want: ModeComplement,
			why: "MAAS's own helper", hooks: []string{"maas-dhcp-helper runnable socket=/var/lib/maas/dhcpd.sock"}},
		{name: "MAAS snap", conf: maasBlock(maasSnap, "/var/snap/maas/common/maas/dhcpd.sock") + subnet, want: ModeComplement,
			why: "cannot be replaced", hooks: []string{"maas-dhcp-helper runnable snap socket=/var/snap/maas/common/maas/dhcpd.sock"}},
		{name: "MAAS deb, helper diverted to leasekeeper-hook", conf: maasBlock(diverted, "/var/lib/maas/dhcpd.sock") + subnet, want: ModeReplacement,
			why: "the same file as", hooks: []string{"leasekeeper-hook runnable diverted socket=/var/lib/maas/dhcpd.sock"}},
		{name: "through a relative include", conf: `include "hooks.conf";` + "\n" + subnet, want: ModeReplacement,
			hooks: []string{"leasekeeper-hook runnable diverted socket=/var/lib/maas/dhcpd.sock"}},
		{name: "the packaging snippet, a bare name in dhcpd's PATH", conf: `on commit { execute("leasekeeper-hook", "notify", "--action", "commit"); }` + "\n",
			want: ModeReplacement, hooks: []string{"leasekeeper-hook runnable"}},
		{name: "leasekeeper-hook under another name, by build info", conf: `on release { execute("` + built + `", "notify", "--action", "release"); }` + "\n",
			want: ModeReplacement, why: "built from " + hookPackage, hooks: []string{"leasekeeper-hook runnable"}},
		{name: "named leasekeeper-hook, but a wrapper script", conf: `on commit { execute("` + wrapper + `", "notify"); }` + "\n",
			want: ModeComplement, unsure: true, why: "not leasekeeper-hook", hooks: []string{"other runnable"}},
		{name: "ours and MAAS's", conf: maasBlock(maasDeb, "/var/lib/maas/dhcpd.sock") + "subnet 203.0.113.0 netmask 255.255.255.0 {\n" + strings.ReplaceAll(maasBlock(ours, ""), `"--socket", ""`, `"--spool", "/x"`) + "}\n",
			want: ModeComplement, why: "both", hooks: []string{"maas-dhcp-helper runnable socket=/var/lib/maas/dhcpd.sock", "leasekeeper-hook runnable"}},
		{name: "not executable: dhcpd cannot run it", conf: maasBlock(noexec, "/s") + subnet, want: ModeHookless, why: "not executable",
			hooks: []string{"- socket=/s"}},
		{name: "missing program", conf: maasBlock(filepath.Join(dir, "nope/maas-dhcp-helper"), "/s") + subnet, want: ModeHookless, why: "no such file",
			hooks: []string{"- socket=/s"}},
		{name: "bare name not in PATH", conf: `on commit { execute("maas-dhcp-helper-x", "notify", "--action", "commit"); }` + "\n",
			want: ModeHookless, why: "not in dhcpd's PATH", hooks: []string{"-"}},
		{name: "dhcpd.config not set", conf: "", want: ModeComplement, unsure: true, why: "not set"},
		{name: "missing include: cannot tell", conf: `include "nope.conf";` + "\n", want: ModeComplement, unsure: true, why: "cannot read dhcpd.conf"},
		{name: "include loop", conf: `include "loop.conf";` + "\n", want: ModeHookless},
		{name: "forced: detection still reported", conf: maasBlock(maasDeb, "/s") + subnet, forced: ModeHookless, want: ModeHookless,
			hooks: []string{"maas-dhcp-helper runnable socket=/s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf := ""
			if tc.conf != "" {
				conf = write("dhcpd.conf", tc.conf, 0o644)
			}
			d := Detect(conf, tc.forced, env)
			if d.Mode != tc.want || d.Unsure != tc.unsure || !strings.Contains(strings.ToLower(d.Why), strings.ToLower(tc.why)) {
				t.Fatalf("Detect = %s (unsure %t): %s\nwant %s (unsure %t), why mentioning %q", d.Mode, d.Unsure, d.Why, tc.want, tc.unsure, tc.why)
			}
			if tc.forced != "" && (!d.Forced || d.Detected != ModeComplement) {
				t.Errorf("forced %s: Forced %t, Detected %s; want the detection kept", tc.forced, d.Forced, d.Detected)
			}
			var got []string
			for _, h := range d.Hooks {
				s := "-"
				if h.Runnable {
					s = string(h.Kind) + " runnable"
				}
				if h.Snap {
					s += " snap"
				}
				if h.Diversion != nil {
					s += " diverted"
				}
				if h.Socket != "" {
					s += " socket=" + h.Socket
				}
				got = append(got, s)
				if !strings.Contains(h.At, "dhcpd.conf:") && !strings.Contains(h.At, "hooks.conf:") {
					t.Errorf("hook at %q, want file:line", h.At)
				}
			}
			if diff := cmp.Diff(tc.hooks, got); diff != "" {
				t.Errorf("hooks (-want +got):\n%s\n%+v", diff, d.Hooks)
			}
			if len(d.Others) != tc.others {
				t.Errorf("others = %q, want %d", d.Others, tc.others)
			}
			t.Logf("%s: %s", d.Mode, d.Why)
		})
	}
}

// TestDetectUnreadable: a program that cannot be read cannot be told
// apart, so the mode is complement, and says why.
func TestDetectUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every file")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "maas-dhcp-helper")
	if err := os.WriteFile(prog, []byte(maasHelperScript), 0o111); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "dhcpd.conf")
	if err := os.WriteFile(conf, []byte(maasBlock(prog, "/s")), 0o644); err != nil {
		t.Fatal(err)
	}
	d := Detect(conf, ModeAuto, DetectEnv{})
	if d.Mode != ModeComplement || !d.Unsure || !strings.Contains(d.Why, "cannot tell") {
		t.Fatalf("Detect = %s (unsure %t): %s", d.Mode, d.Unsure, d.Why)
	}
}

func TestExecArgs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		ok   bool
	}{
		{`"/p", "notify", "--socket", "/s");`, []string{"/p", "notify", "--socket", "/s"}, true},
		{`"/p", clhw, binary-to-ascii(16, 8, ":", x), "a\"b") ;`, []string{"/p", "", "", `a"b`}, true},
		{`"/p", "x" "y")`, []string{"/p", ""}, true},
		{`"/p", "unterminated`, nil, false},
	}
	for _, tc := range tests {
		got, ok := execArgs([]byte(tc.in))
		if ok != tc.ok || !cmp.Equal(got, tc.want) {
			t.Errorf("execArgs(%q) = %q, %t; want %q, %t", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"", "auto", "replacement", "complement", "hookless"} {
		if _, err := ParseMode(s); err != nil {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
	}
	if _, err := ParseMode("replace"); err == nil {
		t.Error("ParseMode(replace) accepted")
	}
}

// TestParseDivertList: dpkg-divert --list's lines (dpkg's
// src/divertcmd.c, diversion_describe), package and local.
func TestParseDivertList(t *testing.T) {
	got := parseDivertList([]byte("diversion of /usr/sbin/maas-dhcp-helper to /usr/sbin/maas-dhcp-helper.distrib by leasekeeper\n" +
		"local diversion of /usr/bin/x to /usr/bin/x.real\n" +
		"something else\n\n"))
	want := []Diversion{
		{From: "/usr/sbin/maas-dhcp-helper", To: "/usr/sbin/maas-dhcp-helper.distrib", Package: "leasekeeper"},
		{From: "/usr/bin/x", To: "/usr/bin/x.real"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := exec.LookPath("dpkg-divert"); err == nil {
		if _, err := listDiversions(); err != nil {
			t.Errorf("listDiversions on this system: %v", err)
		}
	}
}
