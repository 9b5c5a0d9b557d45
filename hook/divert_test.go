package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MAAS's helper, where maas-rack-controller installs it in MAAS 3.5 to
// 3.8 (debian/maas-rack-controller.install: package-files/usr/sbin/
// maas-dhcp-helper usr/sbin) and where maas-dhcpd.service and
// maas-dhcpd6.service run it (debian/maas-dhcp.maas-dhcpd{,6}.service).
const maasHelperPath = "/usr/sbin/maas-dhcp-helper"

// The replacement recipe README.Debian gives, and its undo.
var (
	divertCmd   = "dpkg-divert --package leasekeeper --rename --add " + maasHelperPath
	linkCmd     = "ln -s " + installedHook + " " + maasHelperPath
	undoRmCmd   = "rm " + maasHelperPath
	undivertCmd = "dpkg-divert --package leasekeeper --rename --remove " + maasHelperPath
	// What earlier versions of README.Debian said.
	localDivertCmd = "dpkg-divert --local --rename --add " + maasHelperPath
)

func TestReadmeDiversionRecipe(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "debian", "README.Debian"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{divertCmd, linkCmd, undoRmCmd, undivertCmd} {
		if !strings.Contains(string(b), "\n    "+cmd+"\n") {
			t.Errorf("README.Debian lacks the command line %q", cmd)
		}
	}
}

// TestPrermUndivertsMAASHelper runs debian/leasekeeper.prerm against a
// dpkg database and /usr/sbin in a scratch root (DPKG_ROOT, which
// dpkg-divert and the script honour): removing leasekeeper puts MAAS's
// helper back when the diversion is leasekeeper's (the README's recipe,
// or the local one of earlier versions), and leaves anything else alone.
func TestPrermUndivertsMAASHelper(t *testing.T) {
	dpkgDivert, err := exec.LookPath("dpkg-divert")
	if err != nil {
		t.Skip("dpkg-divert not installed")
	}
	prerm, err := filepath.Abs(filepath.Join("..", "debian", "leasekeeper.prerm"))
	if err != nil {
		t.Fatal(err)
	}
	const maasScript = "#!/usr/bin/env python3\n# MAAS's helper\n"
	type state struct {
		helper   string // what is at the helper's path: "link", "maas", "other" or ""
		distrib  bool   // maas-dhcp-helper.distrib exists
		diverted string // dpkg-divert --listpackage: "leasekeeper", "LOCAL" or ""
	}
	for _, tc := range []struct {
		name   string
		setup  []string // "maas", "divert", "local-divert", "link", "other"
		action string   // prerm's argument
		want   state
		warn   string
	}{
		{name: "README recipe", setup: []string{"maas", "divert", "link"}, action: "remove", want: state{helper: "maas"}},
		{name: "earlier local recipe", setup: []string{"maas", "local-divert", "link"}, action: "remove", want: state{helper: "maas"}},
		{name: "MAAS removed meanwhile", setup: []string{"maas", "divert", "link", "no-distrib"}, action: "remove", want: state{}},
		{name: "upgrade keeps it", setup: []string{"maas", "divert", "link"}, action: "upgrade", want: state{helper: "link", distrib: true, diverted: "leasekeeper"}},
		{name: "not diverted", setup: []string{"maas"}, action: "remove", want: state{helper: "maas"}},
		{name: "no MAAS at all", action: "remove", want: state{}},
		{name: "someone else's local diversion", setup: []string{"maas", "local-divert", "other"}, action: "remove", want: state{helper: "other", distrib: true, diverted: "LOCAL"}},
		{
			name: "our diversion, path replaced by hand", setup: []string{"maas", "divert", "other"}, action: "remove",
			want: state{helper: "other", distrib: true, diverted: "leasekeeper"}, warn: "is not the link to leasekeeper-hook",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"var/lib/dpkg", "usr/sbin"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			env := append(os.Environ(), "DPKG_ROOT="+root)
			helper := filepath.Join(root, maasHelperPath)
			dpkg := func(args ...string) string {
				t.Helper()
				cmd := exec.Command(dpkgDivert, args...)
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("dpkg-divert %q: %v\n%s", args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			for _, step := range tc.setup {
				switch step {
				case "maas":
					write(t, helper, maasScript, 0o755)
				case "divert":
					dpkg(strings.Fields(divertCmd)[1:]...)
				case "local-divert":
					dpkg(strings.Fields(localDivertCmd)[1:]...)
				case "link":
					if err := os.Symlink(installedHook, helper); err != nil {
						t.Fatal(err)
					}
				case "other":
					write(t, helper, "#!/bin/sh\n# someone's own\n", 0o755)
				case "no-distrib":
					os.Remove(helper + ".distrib")
				}
			}

			cmd := exec.Command("/bin/sh", prerm, tc.action)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("prerm %s: %v\n%s", tc.action, err, out)
			}
			if tc.warn != "" && !strings.Contains(string(out), tc.warn) {
				t.Errorf("prerm said %q, want %q", out, tc.warn)
			}

			var got state
			if target, err := os.Readlink(helper); err == nil {
				if target == installedHook {
					got.helper = "link"
				} else {
					got.helper = "link to " + target
				}
			} else if b, err := os.ReadFile(helper); err == nil {
				got.helper = "other"
				if string(b) == maasScript {
					got.helper = "maas"
				}
			}
			_, err = os.Lstat(helper + ".distrib")
			got.distrib = err == nil
			got.diverted = dpkg("--listpackage", maasHelperPath)
			if got != tc.want {
				t.Errorf("after prerm %s: %+v, want %+v\nprerm said: %s", tc.action, got, tc.want, out)
			}
		})
	}
}
