package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const hookHelp = `Usage: leasekeeper-hook notify --action commit|expiry|release --mac MAC
                        --ip-family ipv4|ipv6 --ip IP

Hands one lease event to the agent.

  --action      commit, expiry or release
  --ip          the leased address

Exit status: 0 sent or spooled.
`

// TestGenerate writes every page and the completion, and has man(1) read
// each page with warnings on when it is installed.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	help := filepath.Join(dir, "hook-help.txt")
	if err := os.WriteFile(help, []byte(hookHelp), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SOURCE_DATE_EPOCH": "1767225600"} // 2026-01-01
	if err := run([]string{"-out", dir, "-version", "1.2.3", "-hook-help", help}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"leasekeeper.8", "leasekeeper-agent.8", "leasekeeper-leases.8", "leasekeeper-deadletter-list.8", "leasekeeper-hook.8"} {
		b, err := os.ReadFile(filepath.Join(dir, "man", name))
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		for _, want := range []string{".TH \"" + strings.ToUpper(strings.TrimSuffix(name, ".8")) + "\" \"8\" \"January 2026\" \"leasekeeper 1.2.3\"", ".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH SEE ALSO"} {
			if !strings.Contains(page, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "man", "leasekeeper-completion.8")); err == nil {
		t.Error("a page was written for cobra's completion command")
	}
	b, err := os.ReadFile(filepath.Join(dir, "bash-completion", "leasekeeper"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "complete -o default -F __start_leasekeeper leasekeeper") {
		t.Error("the bash completion does not complete leasekeeper")
	}

	man, err := exec.LookPath("man")
	if err != nil {
		t.Skip("man(1) not installed: pages not checked for roff warnings")
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "man", "*.8"))
	for _, p := range pages {
		cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", p)
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man --warnings %s: %v %s", filepath.Base(p), err, stderr.String())
		}
	}
}

func TestHookPageNeedsUsage(t *testing.T) {
	if _, err := hookPage("leasekeeper-hook: no usage here\n", header{}); err == nil {
		t.Error("a help text without a Usage paragraph gave a page")
	}
}
