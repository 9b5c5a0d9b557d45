package lab

import (
	"fmt"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on a thread moved into ns, one of the lab's
// namespaces, and moves it back: for code that opens its netlink and
// packet sockets itself (the agent's ARP probe run as the rack, which is
// the server namespace). Sockets fn opens belong to ns for their life.
func (l *Lab) InNetns(ns string, fn func() error) error {
	if err := l.own(ns); err != nil {
		return err
	}
	runtime.LockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab: own netns: %w", err)
	}
	defer unix.Close(self)
	target, err := unix.Open(filepath.Join("/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab: netns %s: %w", ns, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab: enter netns %s: %w", ns, err)
	}
	ferr := fn()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with the goroutine, never
		// running anything else in the wrong namespace.
		return fmt.Errorf("lab: back from netns %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}
