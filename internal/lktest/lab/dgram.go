package lab

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// UnixgramQlen creates a bound unix datagram socket at path whose receive
// queue holds at most qlen datagrams, whatever the host's
// net.unix.max_dgram_qlen says (a rack with leasekeeper installed has 512;
// the kernel's default is 10). The limit is taken from the sysctl of the
// network namespace the socket is created in, at creation, so the socket
// is made on a thread of its own in a fresh, unnamed network namespace
// with the sysctl set there: the host's setting is neither read nor
// changed, and nothing is left behind (the namespace goes with the socket
// and the thread, which exits). The socket's path is on the filesystem,
// so senders in any namespace reach it. It has SO_PASSCRED set and mode
// 0622, as systemd's leasekeeper.socket makes it. Needs CAP_SYS_ADMIN.
func UnixgramQlen(path string, qlen int) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, now in another namespace, ends
		// with this goroutine instead of going back to the pool.
		runtime.LockOSThread()
		f, err := unixgramHere(path, qlen)
		done <- result{f, err}
	}()
	r := <-done
	return r.f, r.err
}

func unixgramHere(path string, qlen int) (*os.File, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("a network namespace for the socket: unshare: %w", err)
	}
	// /proc/thread-self/net is this thread's namespace; /proc/sys/net
	// resolves against the caller's namespace, which is this thread's.
	const knob = "/proc/sys/net/unix/max_dgram_qlen"
	if err := os.WriteFile(knob, []byte(strconv.Itoa(qlen)), 0); err != nil {
		return nil, fmt.Errorf("net.unix.max_dgram_qlen in the socket's namespace: %w", err)
	}
	if b, err := os.ReadFile(knob); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(qlen) {
		return nil, fmt.Errorf("net.unix.max_dgram_qlen in the socket's namespace reads %q (%v), want %d", b, err, qlen)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	err = errors.Join(
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1),
		unix.Bind(fd, &unix.SockaddrUnix{Name: path}),
	)
	if err == nil {
		err = os.Chmod(path, 0o622)
	}
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("unix datagram socket %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}
