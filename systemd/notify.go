package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// Notifier sends state changes to systemd. The zero value is ready to
// use; every method is a no-op (returning nil) when NOTIFY_SOCKET is
// unset.
type Notifier struct {
	// OnPingError, if set, is told of each watchdog ping that failed
	// (Watchdog has no caller to return it to and keeps pinging).
	OnPingError func(error)
}

// NewNotifier returns a Notifier for the socket systemd named in
// NOTIFY_SOCKET (read at every send, as go-systemd does).
func NewNotifier() *Notifier { return &Notifier{} }

// Notify sends one raw state string (e.g. "READY=1"). It reports whether
// a notify socket is configured; sending to one that is configured but
// unreachable is an error.
func (n *Notifier) Notify(state string) (bool, error) {
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		return sent, fmt.Errorf("sd_notify %s: %w", firstLine(state), err)
	}
	return sent, nil
}

func (n *Notifier) send(state string) error {
	_, err := n.Notify(state)
	return err
}

// Ready says start-up is finished (or a reload is): READY=1.
func (n *Notifier) Ready() error { return n.send(daemon.SdNotifyReady) }

// Stopping says the service is shutting down: STOPPING=1.
func (n *Notifier) Stopping() error { return n.send(daemon.SdNotifyStopping) }

// Reloading says a configuration reload started; call Ready when it is
// done. It carries MONOTONIC_USEC, which Type=notify-reload requires.
func (n *Notifier) Reloading() error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return n.send(daemon.SdNotifyReloading)
	}
	usec := ts.Nano() / 1000
	return n.send(fmt.Sprintf("%s\nMONOTONIC_USEC=%d", daemon.SdNotifyReloading, usec))
}

// Status sets the one-line status systemctl status shows. Newlines would
// start new assignments, so they become spaces.
func (n *Notifier) Status(s string) error {
	return n.send("STATUS=" + strings.NewReplacer("\n", " ", "\r", " ").Replace(s))
}

// Barrier waits, up to timeout, until systemd has processed every message
// sent before it (sd_notify_barrier(3)): it sends BARRIER=1 with the write
// end of a pipe, which systemd closes once it got that far; one too old to
// know BARRIER=1 closes it all the same, having read the message. A
// process about to exit calls it, so that what it sent last is not taken
// for an exited process's. No-op when NOTIFY_SOCKET is unset.
func (n *Notifier) Barrier(timeout time.Duration) error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("sd_notify barrier: %w", err)
	}
	defer unix.Close(p[0])
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(p[1])
		return fmt.Errorf("sd_notify barrier: %w", err)
	}
	err = unix.Sendmsg(fd, []byte("BARRIER=1"), unix.UnixRights(p[1]), &unix.SockaddrUnix{Name: sock}, 0)
	unix.Close(fd)
	unix.Close(p[1]) // systemd holds the only other copy
	if err != nil {
		return fmt.Errorf("sd_notify barrier: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		fds := []unix.PollFd{{Fd: int32(p[0])}}
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("sd_notify barrier: systemd did not answer in time")
		}
		k, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return fmt.Errorf("sd_notify barrier: %w", err)
		case k > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0:
			return nil
		}
	}
}

// WatchdogInterval is WatchdogSec= of the unit (WATCHDOG_USEC, for this
// process per WATCHDOG_PID), or 0 when the watchdog is off.
func (n *Notifier) WatchdogInterval() (time.Duration, error) {
	return daemon.SdWatchdogEnabled(false)
}

// Watchdog pings systemd's watchdog (WATCHDOG=1) every interval/2, but
// only on ticks where healthy reports that the service is making progress:
// a wedged main loop stops the pings and systemd restarts the service
// after interval. The first ping is sent at once. It returns nil when ctx
// ends, or at once when interval is not positive (watchdog off). A failed
// ping goes to OnPingError and does not stop the pinging.
func (n *Notifier) Watchdog(ctx context.Context, interval time.Duration, healthy func() bool) error {
	if interval <= 0 {
		return nil
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		if healthy() {
			if err := n.send(daemon.SdNotifyWatchdog); err != nil && n.OnPingError != nil {
				n.OnPingError(err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
