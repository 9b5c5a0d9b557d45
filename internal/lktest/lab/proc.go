package lab

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is a process the lab started and owns. Its output goes to a log
// file, not a pipe, so Wait never blocks on a grandchild (a dhcpd hook)
// holding the pipe open, and the log survives in the test's directory.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid once done is closed
}

// startProc starts cmd with stdout and stderr appended to logPath.
func startProc(cmd *exec.Cmd, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = f, f
	// Die with the test binary even if it is killed before its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits up to grace, then kills. It reports a process
// that needed the kill or could not be reaped.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	if p.exited() {
		return nil
	}
	// os.Process signals through a pidfd: never another process that
	// reused the pid.
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("pid %d ignored %v for %v; killed", p.pid(), sig, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pid %d survived SIGKILL for 10s", p.pid())
	}
}

// readFrom returns the content of path from offset on ("" if unreadable).
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// apparmorEnabled reports whether the kernel enforces AppArmor, in which
// case Debian's profiles confine /usr/sbin/dhcpd and /sbin/dhclient.
func apparmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && bytes.HasPrefix(b, []byte("Y"))
}

// runnable returns the path to execute name from: the system binary, or
// when confined a copy under dir. AppArmor profiles attach by executable
// path, and the copy's path matches none, so it may read and write the
// test's temporary files.
func runnable(name, dir string, confined bool) (string, error) {
	src, err := LookBin(name)
	if err != nil || !confined {
		return src, err
	}
	dst := filepath.Join(dir, "bin", name)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	if err := copyFile(dst, src, 0o755); err != nil {
		return "", fmt.Errorf("copy %s out of AppArmor's reach: %w", src, err)
	}
	return dst, nil
}

func copyFile(dst, src string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// trueBin is true(1), the script the lab's DHCP clients run: they
// configure nothing through it (the lab adds the address itself, or the
// client does), and the host's files stay untouched.
func trueBin() string {
	if p, err := exec.LookPath("true"); err == nil {
		return p
	}
	return "/bin/true"
}
