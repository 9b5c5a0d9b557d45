package reconcile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestScanHooks(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "leasekeeper-hook")
	if err := os.WriteFile(exe, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(dir, "maas-dhcp-helper")
	if err := os.WriteFile(noexec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("hooks.conf", `on commit { execute("`+exe+`", "notify", "--action", "commit"); }`+"\n")
	write("loop.conf", `include "loop.conf";`+"\n")
	tests := []struct {
		name      string
		conf      string
		hooked    bool
		programs  int
		wantError bool
	}{
		{"no hook at all", "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.20; }\n", false, 0, false},
		{"the packaging snippet, inline", `on commit { set clhw = "x"; execute("` + exe + `", "notify"); }` + "\n", true, 1, false},
		{"commented out", `# on commit { execute("` + exe + `", "notify"); }` + "\n", false, 0, false},
		{"a string holding #", `option domain-name "a#b"; on commit { execute ( "` + exe + `" ); }` + "\n", true, 1, false},
		{"another program", `on commit { execute("/usr/local/bin/notify-something", "x"); }` + "\n", false, 0, false},
		{"not executable", `on commit { execute("` + noexec + `", "notify"); }` + "\n", false, 1, false},
		{"relative path: assumed runnable", `on commit { execute("leasekeeper-hook", "notify"); }` + "\n", true, 1, false},
		{"through a relative include", "include \"hooks.conf\";\n", true, 1, false},
		{"include loop", "include \"loop.conf\";\n", false, 0, false},
		{"missing include", "include \"nope.conf\";\n", false, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := write("dhcpd.conf", tc.conf)
			h, err := scanHooks(p)
			if (err != nil) != tc.wantError {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				return
			}
			if h.Hooked() != tc.hooked || len(h.Programs) != tc.programs {
				t.Fatalf("scan = %+v; want hooked %t with %d programs", h, tc.hooked, tc.programs)
			}
		})
	}
}
