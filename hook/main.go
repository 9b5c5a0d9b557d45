package main

import (
	"errors"
	"syscall"
	"unsafe"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit statuses. dhcpd only logs a non-zero status, so 1 is reserved for
// the one case where the event is really lost.
const (
	exitOK    = 0 // sent, or spooled
	exitLost  = 1 // neither the socket nor the spool took the event
	exitUsage = 2 // invalid arguments: nothing was sent or spooled
)

func main() {
	args, err := readArgs()
	if err != nil {
		writeString(2, "leasekeeper-hook: event lost: cannot read the arguments: "+err.Error()+"\n")
		syscall.Exit(exitLost)
	}
	syscall.Exit(run(args[1:], syscall.Getenv, 1, 2))
}

// readArgs returns the process's arguments from /proc/self/cmdline. The
// hook does without package os, whose initialisation (with that of time,
// internal/godebug and internal/poll under it) showed in every event's
// start-up, and os.Args is all the hook would use of it.
func readArgs() ([]string, error) {
	const path = "/proc/self/cmdline"
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, errors.New("open " + path + ": " + err.Error())
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, errors.New("read " + path + ": " + err.Error())
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	// Each argument ends in a NUL. One string holds them all.
	all := string(buf)
	n := 0
	for i := 0; i < len(all); i++ {
		if all[i] == 0 {
			n++
		}
	}
	args := make([]string, 0, n+1)
	for len(all) > 0 {
		i := 0
		for i < len(all) && all[i] != 0 {
			i++
		}
		args = append(args, all[:i])
		if i == len(all) {
			break
		}
		all = all[i+1:]
	}
	if len(args) == 0 {
		return nil, errors.New(path + " is empty")
	}
	return args, nil
}

// run is the whole hook: parse, encode, deliver. It returns the exit
// status, and writes at most one line to stderr (dhcpd logs it).
func run(args []string, getenv func(string) (string, bool), stdout, stderr int) int {
	cfg, err := parseArgs(args, getenv)
	switch {
	case err == errHelp:
		writeString(stdout, usage)
		return exitOK
	case err == errVersion:
		writeString(stdout, "leasekeeper-hook "+version+"\n")
		return exitOK
	case err != nil:
		writeString(stderr, "leasekeeper-hook: "+err.Error()+"\n")
		return exitUsage
	}
	sec, nsec := now()
	var buf [maxLine]byte
	line := appendEvent(buf[:0], &cfg.event, sec, nsec, syscall.Getpid())
	if err := deliver(line, cfg.socket, cfg.spool); err != nil {
		writeString(stderr, "leasekeeper-hook: event lost: "+err.Error()+"\n")
		return exitLost
	}
	return exitOK
}

// now returns the wall clock as epoch seconds and nanoseconds. It calls
// clock_gettime itself so the hook needs nothing from the time package.
func now() (sec, nsec int64) {
	var ts syscall.Timespec
	// CLOCK_REALTIME is 0; the call cannot fail with a valid pointer.
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 0, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Sec, ts.Sec*1e9 + ts.Nsec
}

// writeString writes s to fd, best effort: there is nobody to tell if
// dhcpd closed our stderr.
func writeString(fd int, s string) {
	b := []byte(s)
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		b = b[n:]
	}
}
