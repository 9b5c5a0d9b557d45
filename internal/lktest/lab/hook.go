package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// BuildHook builds leasekeeper-hook as make build does (static, without
// the race detector: dhcpd runs it and its start-up is part of what tests
// see) into a directory of the test's and returns its path.
func BuildHook(t testing.TB) string {
	t.Helper()
	return lktest.BuildT(t, "hook")
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
	raw, err := os.ReadFile(filepath.Join(lktest.ModuleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), hookCall); n != 3 {
		t.Fatalf("%s: %d execute calls of the form %s, want 3: update lab.HookSnippet", rel, n, hookCall)
	}
	return strings.ReplaceAll(string(raw), hookCall,
		fmt.Sprintf("%q, \"notify\", \"--socket\", %q, \"--spool\", %q,", hook, sock, spool)) + "\n"
}
