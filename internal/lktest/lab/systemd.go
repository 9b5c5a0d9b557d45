package lab

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// UserManager is a real systemd (the distribution's binary) running as a
// user manager in a private mount namespace, for tests of units: its
// D-Bus API is on Socket (the manager's private socket), it loads units
// from UnitDir, and Stop shuts it down the way a machine's shutdown
// does — every started unit is stopped, running its ExecStop.
//
// systemd runs a user manager only on a host booted with systemd, which
// it tells by /run/systemd/system; the mount namespace gets its own empty
// /run/systemd, so nothing of the host changes and no host systemd is
// needed.
type UserManager struct {
	Socket  string
	UnitDir string // absolute

	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

// StartUserManager starts a user manager in the host's network namespace.
// It skips the test when not root or systemd is not installed.
func StartUserManager(t testing.TB) *UserManager {
	return startUserManager(t, exec.Command)
}

// StartUserManager starts a user manager inside namespace ns, so the
// units it runs see that namespace's network.
// It enters only the network namespace (nsenter), not `ip netns exec`'s
// remounted /sys, which lacks the cgroup file systems systemd needs.
func (l *Lab) StartUserManager(t testing.TB, ns string) *UserManager {
	if ns == "" {
		panic("lab: StartUserManager with an empty namespace")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter not installed (Debian package util-linux)")
	}
	return startUserManager(t, func(name string, args ...string) *exec.Cmd {
		return exec.Command(nsenter, append([]string{"--net=/run/netns/" + ns, "--", name}, args...)...)
	})
}

const systemdBin = "/lib/systemd/systemd"

func startUserManager(t testing.TB, command func(string, ...string) *exec.Cmd) *UserManager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a private mount namespace for a real systemd)")
	}
	if _, err := os.Stat(systemdBin); err != nil {
		t.Skip("systemd not installed (Debian package systemd)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not installed (Debian package util-linux)")
	}
	lock := lockUserManagers(t)
	dir := t.TempDir()
	run, cfg := filepath.Join(dir, "run"), filepath.Join(dir, "config")
	for _, d := range []string{run, cfg} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	m := &UserManager{
		Socket:  filepath.Join(run, "systemd", "private"),
		UnitDir: filepath.Join(cfg, "systemd", "user"),
		done:    make(chan struct{}),
	}
	script := `set -e
mount -t tmpfs -o mode=0755 leasekeeper-lab /run/systemd
mkdir /run/systemd/system
exec "$0" --user --log-target=console --log-level=notice`
	// unshare execs sh, which execs systemd: the pid is systemd's.
	m.cmd = command(unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", script, systemdBin)
	m.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir, "XDG_RUNTIME_DIR=" + run, "XDG_CONFIG_HOME=" + cfg}
	w := lockedWriter{&m.mu, &m.log}
	m.cmd.Stdout, m.cmd.Stderr = w, w
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		lock.Close()
		t.Fatal(err)
	}
	go func() { m.cmd.Wait(); close(m.done); lock.Close() }()
	t.Cleanup(func() {
		select {
		case <-m.done:
		default:
			m.cmd.Process.Kill()
			<-m.done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The socket file comes (bind) before the manager listens on
		// it: a client dialling at once was refused on a busy machine.
		// Once it listens, a client's connection waits in its backlog
		// until the manager serves it.
		if c, err := net.Dial("unix", m.Socket); err == nil {
			c.Close()
			return m
		}
		select {
		case <-m.done:
			t.Skipf("systemd user manager exited at start here: %s", m.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Skipf("systemd user manager did not come up here: %s", m.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// userManagerLock names the abstract socket that lets one user manager
// run at a time, across the test processes of one machine: root's user
// managers started outside a session share the cgroup they start in, so
// two managers' units of the same name share a cgroup too, and one
// manager stopping its unit kills the other's ExecStop (seen as an
// ExecStop that wrote nothing). One process at a time can bind the
// name; the kernel frees it with the process, so nothing is left behind.
const userManagerLock = "@leasekeeper-lab-user-manager"

// lockUserManagers waits, at most two minutes, for no other user manager
// of these tests to run, and returns the lock; closing it lets the next
// one start.
func lockUserManagers(t testing.TB) *net.UnixListener {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: userManagerLock, Net: "unix"})
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("another test's systemd user manager still runs after 2 minutes (%v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log is what the manager printed.
func (m *UserManager) Log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.String()
}

// Stop shuts the manager down as at a machine's shutdown: SIGTERM makes
// it start exit.target, stopping every unit, then exit.
func (m *UserManager) Stop(t testing.TB) {
	t.Helper()
	m.cmd.Process.Signal(syscall.SIGTERM)
	m.Wait(t)
}

// Wait waits for the manager to exit by itself (a target that ends it
// was started), for at most 30 s.
func (m *UserManager) Wait(t testing.TB) {
	t.Helper()
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		m.cmd.Process.Kill()
		<-m.done
		t.Fatalf("systemd did not exit within 30 s; log:\n%s", m.Log())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
