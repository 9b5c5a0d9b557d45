package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// TestStartStack: notify runs within the 2 KiB stack a Go program's main
// goroutine starts with. Growing it copies the stack and unwinds it
// through tables nothing else reads, onto fresh pages: on a virtual
// machine one growth cost about 4 % of an empty Go program's run
// (perf stat, issue 16), paid by dhcpd on every lease. The hook built
// with stackcheck.go dies on its first growth; each delivery path runs
// it once.
func TestStartStack(t *testing.T) {
	dir := shortDir(t)
	bin := filepath.Join(dir, "hook-stackcheck")
	cmd := exec.Command(lktest.GoTool(), "build", "-trimpath", "-tags", "leasekeeper_stackcheck",
		"-ldflags", "-s -w -checklinkname=0", "-o", bin, lktest.Module+"/hook")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "hook.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	notify := []string{"notify", "--action", "commit", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv6",
		"--ip", "2001:db8:0:0:0:0:0:5", "--lease-time", "3600", "--hostname", strings.Repeat("\xff\"", 127)}
	// The spool directory exists (the package makes it); making it, once,
	// may take more stack.
	if err := os.Mkdir(filepath.Join(dir, "spool-b"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, socket, spool string
	}{
		{"agent listening", sock, filepath.Join(dir, "spool-a")},
		{"agent down: spooled", filepath.Join(dir, "none.sock"), filepath.Join(dir, "spool-b")},
		{"agent back: spooled behind the earlier event", sock, filepath.Join(dir, "spool-b")},
	} {
		cmd := exec.Command(bin, notify...)
		cmd.Env = []string{"LEASEKEEPER_SOCKET=" + c.socket, "LEASEKEEPER_SPOOL=" + c.spool}
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("%s: %v\n%s", c.name, err, out)
		}
	}
	// Both ways were taken: one datagram, two spooled lines.
	buf := make([]byte, 4096)
	if n, _, err := syscall.Recvfrom(fd, buf, syscall.MSG_DONTWAIT); err != nil || n == 0 {
		t.Errorf("no datagram: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "spool-b", spoolFile)); err != nil || strings.Count(string(b), "\n") != 2 {
		t.Errorf("spool: %v, %q", err, b)
	}
}
