package systemd

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// userManager is a real systemd (the distribution's binary) running as a
// user manager in a private mount namespace. systemd only runs a user
// manager on a host booted with systemd, which it checks by the existence
// of /run/systemd/system; the namespace gets its own empty /run/systemd,
// so nothing of the host changes. Its D-Bus API is on its private socket.
type userManager struct {
	cmd     *exec.Cmd
	socket  string
	unitDir string // absolute
	log     *bytes.Buffer
}

func startUserManager(t *testing.T) *userManager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a private mount namespace for a real systemd)")
	}
	sd := "/lib/systemd/systemd"
	if _, err := os.Stat(sd); err != nil {
		t.Skip("systemd not installed")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not installed")
	}
	dir := t.TempDir()
	run, cfg := filepath.Join(dir, "run"), filepath.Join(dir, "config")
	for _, d := range []string{run, cfg} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	script := `set -e
mount -t tmpfs -o mode=0755 leasekeeper-test /run/systemd
mkdir /run/systemd/system
exec "$0" --user --log-target=console --log-level=notice`
	m := &userManager{
		socket:  filepath.Join(run, "systemd", "private"),
		unitDir: filepath.Join(cfg, "systemd", "user"),
		log:     new(bytes.Buffer),
	}
	// unshare execs sh, which execs systemd: the pid is systemd's.
	m.cmd = exec.Command(unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", script, sd)
	m.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir, "XDG_RUNTIME_DIR=" + run, "XDG_CONFIG_HOME=" + cfg}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m.cmd.ProcessState == nil {
			m.cmd.Process.Kill()
			m.cmd.Wait()
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(m.socket); err == nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Skipf("systemd user manager did not come up here (its log: %s)", m.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop shuts the manager down as at the end of a session or a machine's
// shutdown: SIGTERM makes it start exit.target, stopping every unit.
func (m *userManager) stop(t *testing.T) {
	t.Helper()
	m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		m.cmd.Process.Kill()
		<-done
		t.Fatalf("systemd did not stop within 30 s; log:\n%s", m.log)
	}
}

// TestInstallLive installs the unit on a running systemd over D-Bus
// (daemon-reload, enable, start) and shows that the manager's shutdown
// runs the unit's ExecStop: the release happens at shutdown.
func TestInstallLive(t *testing.T) {
	m := startUserManager(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "released")
	// Stands in for leasekeeper: records how ExecStop called it.
	bin := filepath.Join(dir, "fake-leasekeeper")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\" >> "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := ShutdownUnit{Binary: bin, ReleaseArgs: []string{"--timeout=5s"}}
	if err := u.Validate(); err != nil {
		t.Skipf("temp dir not usable in a unit: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mgr, err := DialManager(ctx, m.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	in := Installer{Root: "/", UnitDir: strings.TrimPrefix(m.unitDir, "/"), Unit: u, Enable: true, Manager: mgr}
	res, err := in.Install(ctx)
	if err != nil {
		t.Fatalf("install: %v\nsystemd log:\n%s", err, m.log)
	}
	if !res.Written || !res.Enabled || !res.Started || len(res.Links) != 1 {
		t.Fatalf("install result %+v", res)
	}
	wantLink := filepath.Join(m.unitDir, "multi-user.target.wants", ShutdownUnitName)
	if res.Links[0] != wantLink {
		t.Errorf("systemd made link %q, want %q", res.Links[0], wantLink)
	}
	state, err := mgr.conn.GetUnitPropertyContext(ctx, ShutdownUnitName, "ActiveState")
	if err != nil || state.Value.Value() != "active" {
		t.Fatalf("unit state %v %v", state, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("release ran at start")
	}

	// Again: nothing to write, nothing to enable, still started.
	res, err = in.Install(ctx)
	if err != nil || res.Written || len(res.Links) != 0 || !res.Started {
		t.Fatalf("second install: %+v %v", res, err)
	}

	m.stop(t)
	got, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("ExecStop did not run at shutdown: %v\nsystemd log:\n%s", err, m.log)
	}
	if string(got) != "release --timeout=5s\n" {
		t.Fatalf("ExecStop ran %q", got)
	}
}

func TestDialManagerNoSystemd(t *testing.T) {
	// A socket path that does not exist falls back to the system bus; on
	// a machine without one the error says what to do.
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := DialManager(ctx, filepath.Join(t.TempDir(), "nosock"))
	if err == nil || !strings.Contains(err.Error(), "--root") {
		t.Fatalf("err = %v", err)
	}
}
