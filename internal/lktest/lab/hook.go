package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ModuleRoot is the directory holding the project's go.mod, found from
// the test's working directory (its package directory).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("lab: no go.mod above the working directory")
		}
		dir = parent
	}
}

// GoTool is the go command: the one on PATH, else where the README's
// machines have it.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := "/usr/local/go/bin/go"; fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// BuildHook builds leasekeeper-hook as make build does (static, without
// the race detector: dhcpd runs it and its start-up is part of what tests
// see) into a directory of the test's and returns its path. The go
// command's build cache makes every build after the first a link.
func BuildHook(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leasekeeper-hook")
	cmd := exec.Command(GoTool(), "build", "-trimpath", "-o", bin, "./hook")
	cmd.Dir = ModuleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./hook: %v\n%s", err, out)
	}
	return bin
}

// hookCall is how the shipped snippet names the hook, once per on-block.
const hookCall = `"/usr/sbin/leasekeeper-hook", "notify",`

// HookSnippet is the shipped dhcpd.conf snippet
// (packaging/dhcpd/leasekeeper.conf) running hook with the given socket
// and spool instead of the installed paths.
func HookSnippet(t testing.TB, hook, sock, spool string) string {
	t.Helper()
	return snippet(t, "packaging/dhcpd/leasekeeper.conf", hook, sock, spool)
}

// HookSnippet6 is HookSnippet for dhcpd -6: the shipped
// packaging/dhcpd/leasekeeper6.conf, which passes the client's DUID as
// --mac.
func HookSnippet6(t testing.TB, hook, sock, spool string) string {
	t.Helper()
	return snippet(t, "packaging/dhcpd/leasekeeper6.conf", hook, sock, spool)
}

func snippet(t testing.TB, rel, hook, sock, spool string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(ModuleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), hookCall); n != 3 {
		t.Fatalf("%s: %d execute calls of the form %s, want 3: update lab.HookSnippet", rel, n, hookCall)
	}
	return strings.ReplaceAll(string(raw), hookCall,
		fmt.Sprintf("%q, \"notify\", \"--socket\", %q, \"--spool\", %q,", hook, sock, spool)) + "\n"
}
