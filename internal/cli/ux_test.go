package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/hooksock"
	"github.com/leasekeeper/leasekeeper/internal/sockgroup"
)

// TestUsageExitStatus: bad invocations cobra finds itself exit 2, as every
// command's help promises, not 1 (check's "problems found").
func TestUsageExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // substring of stdout
	}{
		{[]string{"bogus"}, 2, ""},
		{[]string{"check", "--leases", "testdata/dhcpd.leases"}, 2, ""},
		{[]string{"pools", "--config", "testdata/dhcpd.conf"}, 2, ""},
		{[]string{"help", "nosuch"}, 2, ""},
		{[]string{"help", "deadletter", "nosuch"}, 2, ""},
		{[]string{"help", "leases"}, 0, "leasekeeper leases"},
		{[]string{"help", "deadletter", "list"}, 0, "deadletter list"},
		{[]string{"help"}, 0, "Available Commands"},
		{[]string{"install-shutdown-unit", "--root", "rootfs", "--release-timeout", "-5s"}, 2, ""},
		{[]string{"install-shutdown-unit", "--root", "rootfs", "--release-timeout", "0s"}, 2, ""},
	} {
		out, stderr, code := run(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%q: exit %d, want %d; stdout %q (want %q in it); stderr %q", tc.args, code, tc.code, out, tc.out, stderr)
		}
	}
}

// TestCheckNotLeases: a file that is not a leases file (dhcpd.conf given
// for it, a word dhcpd does not read, a file with no statement at all) is
// unreadable, exit 1, never "ok: 0 leases" (a cold review).
func TestCheckNotLeases(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want string }{
		{"dhcpd.conf", "subnet 203.0.113.0 netmask 255.255.255.0 {\n  range 203.0.113.10 203.0.113.20;\n}\n", "line 1: subnet is not a statement of a leases file"},
		{"a word", "garbage here;\n", "line 1: garbage is not a statement of a leases file"},
		{"no statement", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n", "no statement before it: not a leases file"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := run(t, "check", "--leases", path, "--config", "testdata/dhcpd.conf")
		if code != 1 || strings.Contains(out, "ok:") || !strings.Contains(out, "unreadable: "+path+":") || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and an unreadable line saying %q", tc.name, code, out, stderr, tc.want)
		}
	}
}

// TestShownNotLeases: leases and pools given a file that is not a leases
// file exit 1 saying so, where they printed an empty table and exited 0
// (a cold review); an empty leases file, or one of comments, is an empty
// table.
func TestShownNotLeases(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		code       int
		want       string
	}{
		{"dhcpd.conf", "subnet 203.0.113.0 netmask 255.255.255.0 {\n  range 203.0.113.10 203.0.113.20;\n}\n", 1, "not a leases file"},
		{"no statement", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n", 1, "not a leases file"},
		// More than the 100 unknown statements the table keeps (a
		// rack's dhcpd.conf has hundreds).
		{"a long dhcpd.conf", strings.Repeat("option domain-name \"maas\";\n", 150), 1, "not a leases file"},
		{"empty", "", 0, ""},
		{"comments", "# The format of this file is documented in the dhcpd.leases(5) manual page.\n# This lease file was written by isc-dhcp-4.4.3-P1\n\n", 0, ""},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"leases", path}, {"pools", "--leases", path, "--config", "testdata/dhcpd.conf"}} {
			_, stderr, code := run(t, args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s: %q: exit %d, stderr %q; want %d and %q", tc.name, args[0], code, stderr, tc.code, tc.want)
			}
		}
	}
}

// TestCheckRefused: a block dhcpd refuses when it loads the file is a
// problem, exit 1, never "ok": dhcpd's next start loses it (and on a
// fatal one does not start at all). A cold review found "ok: 0 leases"
// for such a file.
func TestCheckRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want string }{
		{"unknown statement", "lease 203.0.113.10 {\n  starts 3 2026/01/07 10:00:00;\n  binding state free;\n  frobnicate;\n}\n",
			"lease 203.0.113.10: dhcpd refuses the whole block: unknown statement \"frobnicate\""},
		{"timestamp", "lease 203.0.113.10 {\n  starts 3 2026/01/07 10:00:00;\n  timestamp 3 2026/01/07 10:00:00;\n  binding state free;\n}\n",
			"dhcpd 4.4 does not start on this file"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := run(t, "check", "--leases", path, "--config", "testdata/dhcpd.conf")
		if code != 1 || strings.Contains(out, "ok:") || !strings.Contains(out, "refused: "+path+":") || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and a refused line saying %q", tc.name, code, out, stderr, tc.want)
		}
		out, _, _ = run(t, "check", "--json", "--leases", path, "--config", "testdata/dhcpd.conf")
		if !strings.Contains(out, `"ip": "203.0.113.10"`) {
			t.Errorf("%s: the JSON problem does not name the address: %s", tc.name, out)
		}
	}
}

// TestCheckUnreadable: a leases file check could not read whole (garbage,
// or not a leases file) is a problem, exit 1, never "ok".
func TestCheckUnreadable(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "dhcpd.leases")
	if err := os.WriteFile(bad, []byte("lease 203.0.113.5 {\n  starts 4 2026/11/26 10:00:00;\n}\n\x07\x1b[2J \"unterminated\nsubnet 203.0.113.0 netmask 255.255.255.0 { }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, "check", "--json", "--leases", bad, "--config", "testdata/dhcpd.conf")
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr %s", code, stderr)
	}
	var got CheckJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	n := 0
	for _, p := range got.Problems {
		if p.Kind == "unreadable" {
			n++
			if !strings.Contains(p.Detail, bad) {
				t.Errorf("problem %+v does not name the file", p)
			}
		}
	}
	if n == 0 {
		t.Errorf("no unreadable problem in %+v", got.Problems)
	}
	out, _, code = run(t, "check", "--leases", bad, "--config", "testdata/dhcpd.conf")
	if code != 1 || strings.Contains(out, "ok:") || !strings.Contains(out, "unreadable: ") {
		t.Errorf("text: exit %d, output %q; want 1 and an unreadable line, no ok", code, out)
	}
}

// TestNotRunningMessage: the advice names what the operator configured:
// the control socket, or the TCP listener.
func TestNotRunningMessage(t *testing.T) {
	sock := (&notRunningError{URL: controlBase + "/status", Err: errors.New("dial unix /run/leasekeeper/control.sock: connect: no such file or directory")}).Error()
	if strings.Contains(sock, "leasekeeper-control") || strings.Contains(sock, "metrics.listen") || !strings.Contains(sock, "control.socket") || !strings.Contains(sock, "/run/leasekeeper/control.sock") {
		t.Errorf("control socket: %q", sock)
	}
	tcp := (&notRunningError{URL: "http://127.0.0.1:9742/status", Err: errors.New("connection refused")}).Error()
	if !strings.Contains(tcp, "127.0.0.1:9742") || !strings.Contains(tcp, "metrics.listen") {
		t.Errorf("tcp: %q", tcp)
	}
}

// TestDeadLetterStateDirMissing: a --state-dir that does not exist is an
// error; one without an outbox lists nothing, and says where it looked
// (TestDeadLetterNoOutbox).
func TestDeadLetterStateDirMissing(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := run(t, "deadletter", "list", "--state-dir", filepath.Join(dir, "typo"))
	if code != 1 || !strings.Contains(stderr, "typo") {
		t.Errorf("missing --state-dir: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
	out, stderr, code := run(t, "deadletter", "list", "--state-dir", dir)
	if code != 0 || !strings.Contains(out, "no dead letters") || !strings.Contains(stderr, filepath.Join(dir, "outbox.db")) {
		t.Errorf("empty --state-dir: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestConfigMissingNamed: the operator commands take a missing config
// file at the default path for the defaults (an agent run without one),
// but a --config naming no file is an error, not the default agent's
// answer given for it (a cold review: "deadletter list --config typo"
// said "no dead letters").
func TestConfigMissingNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo.toml")
	for _, args := range [][]string{
		{"deadletter", "list", "--config", missing},
		{"status", "--config", missing},
		{"orphans", "--config", missing},
	} {
		out, stderr, code := run(t, args...)
		if code != 1 || out != "" || !strings.Contains(stderr, missing+": no such file") || !strings.Contains(stderr, "--config names no file") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1, an error naming the file", args, code, out, stderr)
		}
	}
}

// TestStatusRandomPort: a metrics.listen of port 0 names no port status
// could dial; it says so and asks for --url.
func TestStatusRandomPort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lk.toml")
	if err := os.WriteFile(path, []byte("[metrics]\nlisten = \"127.0.0.1:0\"\n[control]\nsocket = \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, "status", "--config", path)
	if code != 1 || out != "" || !strings.Contains(stderr, "127.0.0.1:0: the agent listens on a port of the kernel's choosing") || !strings.Contains(stderr, "--url") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1, the port's explanation", code, out, stderr)
	}
}

// TestExitConfig: the exit statuses of configuration errors, which the
// packaged unit does not restart on (RestartPreventExitStatus=78): the
// file's, hook.socket not the socket systemd passed, found by the
// running agent's hook task (the real path is TestActivatedPath's), and
// a socket group the agent is not in (TestSocketGroupNotMember's), or
// that does not exist (TestLookupUnknownGroup's).
func TestExitConfig(t *testing.T) {
	var stderr bytes.Buffer
	mismatch := fmt.Errorf("hooksock: %w", &hooksock.SocketMismatchError{Configured: "/run/a.sock", Passed: "/run/b.sock"})
	for _, tc := range []struct {
		err  error
		want int
	}{
		{configError{errors.New("config x: bad")}, ExitConfig},
		{mismatch, ExitConfig},
		{fmt.Errorf("control.socket: %w", &sockgroup.NotMemberError{Key: "control.group", Group: "adm", GID: 4, UID: 999}), ExitConfig},
		{fmt.Errorf("control.socket: %w", &sockgroup.UnknownGroupError{Key: "control.group", Group: "nosuchgrp"}), ExitConfig},
		{errors.New("outbox: disk full"), 1},
	} {
		if got := ExitCode(tc.err, &stderr); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestConfigTooLarge: a device or a huge file given as the configuration
// is refused after a bounded read, not read until memory runs out.
func TestConfigTooLarge(t *testing.T) {
	if _, err := config.Decode(bytes.NewReader(make([]byte, 2<<20)), "/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a leasekeeper configuration") {
		t.Errorf("2 MiB of zeros: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		_, stderr, code := run(t, "agent", "--print-config", "--config", "/dev/zero")
		if code != ExitConfig || !strings.Contains(stderr, "not a leasekeeper configuration") {
			t.Errorf("--config /dev/zero: exit %d, stderr %q", code, stderr)
		}
	}
}

// signalChildEnv makes the test binary run Main on the arguments after
// "--" (TestStopSignalChild), as the leasekeeper binary would.
const signalChildEnv = "LEASEKEEPER_TEST_SIGNAL_CHILD"

func TestStopSignalChild(t *testing.T) {
	if os.Getenv(signalChildEnv) == "" {
		t.Skip("run by TestStopSignal")
	}
	for i, a := range os.Args {
		if a == "--" {
			os.Args = append([]string{"leasekeeper"}, os.Args[i+1:]...)
			break
		}
	}
	os.Exit(Main(Env{Version: "test"}))
}

// TestStopSignal: a command blocked where it does not watch its context
// (here `leases` reading a FIFO no one writes) still ends on SIGINT,
// stopGrace later, with 128 + the signal's number; the agent, which
// stops on its own, is not ended that way (ownsStop, TestRunAgentSignals).
func TestStopSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	fifo := filepath.Join(t.TempDir(), "leases.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStopSignalChild$", "--", "leases", fifo)
	cmd.Env = append(os.Environ(), signalChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The child has the FIFO open for reading once a writer's
	// non-blocking open succeeds (ENXIO before): it is past Main's
	// signal handling then, and blocked in its read. (A fixed sleep here
	// signalled a race-built child still starting, once Go's default
	// action for SIGINT.) The write end stays open and silent.
	var w *os.File
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			w = f
			break
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("the child never opened the FIFO: %v; stderr %s", err, stderr.String())
		}
	}
	defer w.Close()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
			t.Errorf("exit %v, want status %d; stderr %s", err, 128+int(syscall.SIGINT), stderr.String())
		}
		if !strings.Contains(stderr.String(), "stopped by interrupt") {
			t.Errorf("stderr %q, want it to say it was stopped", stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("still running 30 s after SIGINT (a liveness bound, not a timing): %s", stderr.String())
	}
}

// TestNoRanges: a dhcpd.conf with no range (a typo such as "rang", or
// another file) is named in a warning, not shown only as empty pools.
func TestNoRanges(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "dhcpd.conf")
	if err := os.WriteFile(conf, []byte("subnet 203.0.113.0 netmask 255.255.255.0 {\n  rang 203.0.113.10 203.0.113.20;\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"pools", "check"} {
		_, stderr, _ := run(t, cmd, "--leases", "testdata/dhcpd.leases", "--config", conf)
		if !strings.Contains(stderr, conf+": no range or range6 statement found") {
			t.Errorf("%s: stderr %q, want a warning naming %s", cmd, stderr, conf)
		}
	}
	if _, stderr, _ := run(t, "pools", "--leases", "testdata/dhcpd.leases", "--config", "testdata/dhcpd.conf"); strings.Contains(stderr, "no range") {
		t.Errorf("a configuration with ranges: %q", stderr)
	}
}
