package systemd

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listen makes a real unixgram socket, as systemd does, and points
// NOTIFY_SOCKET at it for the duration of the test.
func listen(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

// recv reads one datagram, failing the test after a while.
func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	s, ok := recvWithin(c, 5*time.Second)
	if !ok {
		t.Fatal("no datagram on the notify socket")
	}
	return s
}

func recvWithin(c *net.UnixConn, d time.Duration) (string, bool) {
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

func TestNotify(t *testing.T) {
	c := listen(t)
	n := NewNotifier()
	steps := []struct {
		send func() error
		want string
	}{
		{n.Ready, "READY=1"},
		{func() error { return n.Status("queue 12, dead letters 0") }, "STATUS=queue 12, dead letters 0"},
		{func() error { return n.Status("two\nlines\r") }, "STATUS=two lines "},
		{n.Stopping, "STOPPING=1"},
	}
	for _, s := range steps {
		if err := s.send(); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, c); got != s.want {
			t.Errorf("got %q, want %q", got, s.want)
		}
	}

	if err := n.Reloading(); err != nil {
		t.Fatal(err)
	}
	got := recv(t, c)
	first, usec, ok := strings.Cut(got, "\nMONOTONIC_USEC=")
	if !ok || first != "RELOADING=1" {
		t.Fatalf("reloading: got %q", got)
	}
	if v, err := strconv.ParseInt(usec, 10, 64); err != nil || v <= 0 {
		t.Errorf("MONOTONIC_USEC=%q", usec)
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := NewNotifier()
	for _, f := range []func() error{n.Ready, n.Stopping, n.Reloading, func() error { return n.Status("x") }} {
		if err := f(); err != nil {
			t.Error(err)
		}
	}
	if sent, err := n.Notify("READY=1"); sent || err != nil {
		t.Errorf("Notify = %v, %v; want false, nil", sent, err)
	}
}

func TestNotifyUnreachable(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone.sock"))
	err := NewNotifier().Ready()
	if err == nil || !strings.Contains(err.Error(), "sd_notify READY=1") {
		t.Errorf("err = %v", err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	n := NewNotifier()
	t.Setenv("WATCHDOG_USEC", "")
	if d, err := n.WatchdogInterval(); d != 0 || err != nil {
		t.Errorf("unset: %v, %v", d, err)
	}
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if d, err := n.WatchdogInterval(); d != 30*time.Second || err != nil {
		t.Errorf("ours: %v, %v", d, err)
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1))
	if d, err := n.WatchdogInterval(); d != 0 || err != nil {
		t.Errorf("another process's: %v, %v", d, err)
	}
}

// TestWatchdog checks pings come at half the interval while healthy, stop
// while not, and resume.
func TestWatchdog(t *testing.T) {
	c := listen(t)
	var healthy atomic.Bool
	healthy.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	const interval = 100 * time.Millisecond
	go func() { done <- NewNotifier().Watchdog(ctx, interval, healthy.Load) }()

	start := time.Now()
	for range 3 {
		if got := recv(t, c); got != "WATCHDOG=1" {
			t.Fatalf("got %q", got)
		}
	}
	// First ping at once, then two at interval/2: about one interval. No
	// upper bound: a busy machine may be slow, never early.
	if el := time.Since(start); el < interval-10*time.Millisecond {
		t.Errorf("3 pings in %v: faster than every interval/2", el)
	}

	healthy.Store(false)
	// Drain a ping that may have been sent before the flag flipped.
	recvWithin(c, interval)
	if got, ok := recvWithin(c, 3*interval); ok {
		t.Errorf("pinged %q while unhealthy", got)
	}

	healthy.Store(true)
	if got := recv(t, c); got != "WATCHDOG=1" {
		t.Errorf("after recovery got %q", got)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watchdog returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watchdog did not return after cancel")
	}
}

func TestWatchdogOff(t *testing.T) {
	err := NewNotifier().Watchdog(context.Background(), 0, func() bool { t.Error("healthy called"); return true })
	if err != nil {
		t.Error(err)
	}
}

func TestWatchdogPingError(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone.sock"))
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 10)
	n := &Notifier{OnPingError: func(err error) {
		select {
		case errs <- err:
		default:
		}
	}}
	done := make(chan struct{})
	go func() { n.Watchdog(ctx, time.Hour, func() bool { return true }); close(done) }()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "WATCHDOG=1") || errors.Unwrap(err) == nil {
			t.Errorf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("no ping error reported")
	}
	cancel()
	<-done
}

// TestBarrier: BARRIER=1 goes with the write end of a pipe, and Barrier
// returns once the receiver (systemd) closes it, having read what came
// before; a receiver that never does leaves Barrier to its timeout.
func TestBarrier(t *testing.T) {
	c := listen(t)
	n := NewNotifier()
	if _, err := n.Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan time.Time, 1)
	var before []string // what came before BARRIER=1
	go func() {
		buf, oob := make([]byte, 64), make([]byte, 64)
		for {
			k, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			if string(buf[:k]) != "BARRIER=1" {
				before = append(before, string(buf[:k]))
				continue
			}
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			fds, err := unix.ParseUnixRights(&msgs[0])
			if err != nil || len(fds) != 1 {
				t.Errorf("BARRIER=1 came with %v (%v), want one descriptor", fds, err)
				return
			}
			time.Sleep(100 * time.Millisecond) // systemd busy with earlier messages
			closed <- time.Now()
			unix.Close(fds[0])
			return
		}
	}()
	if err := n.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	default:
		t.Fatal("Barrier returned before the receiver closed the pipe")
	}
	if len(before) != 1 || before[0] != "READY=1" {
		t.Errorf("before the barrier came %q, want READY=1", before)
	}

	// A receiver that keeps the pipe open: the timeout.
	c2 := listen(t)
	hold := make(chan []int, 1)
	go func() {
		buf, oob := make([]byte, 64), make([]byte, 64)
		_, oobn, _, _, err := c2.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		fds, _ := unix.ParseUnixRights(&msgs[0])
		hold <- fds
	}()
	start := time.Now()
	if err := n.Barrier(200 * time.Millisecond); err == nil || time.Since(start) < 200*time.Millisecond {
		t.Errorf("Barrier with the pipe held open: %v after %v, want its timeout", err, time.Since(start))
	}
	for _, fd := range <-hold {
		unix.Close(fd)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := n.Barrier(time.Second); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
}
