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
	rest := args[1:]
	if isMAASHelper(args[0]) && len(rest) > 0 && rest[0] == "notify" {
		rest = dropSocketFlag(rest)
	}
	syscall.Exit(run(rest, syscall.Getenv, 1, 2))
}

// maasHelper is the name MAAS's generated dhcpd.conf runs its helper by.
// Installed in its place (a diversion, README.Debian), the hook is
// passed --socket with MAAS's own socket, which belongs to MAAS's rack
// daemon, not to the agent: run by that name the hook's notify ignores
// --socket and uses $LEASEKEEPER_SOCKET or its default. clean is the
// same under either name.
const maasHelper = "maas-dhcp-helper"

func isMAASHelper(argv0 string) bool {
	for i := len(argv0) - 1; i >= 0; i-- {
		if argv0[i] == '/' {
			argv0 = argv0[i+1:]
			break
		}
	}
	return argv0 == maasHelper
}

// dropSocketFlag removes "--socket VALUE" and "--socket=VALUE". Every
// notify flag takes a value, so a flag's value is skipped over whatever
// it says: a client calling itself "--socket" stays a host name.
func dropSocketFlag(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--socket":
			i++ // and its value
		case len(a) > 9 && a[:9] == "--socket=":
		case len(a) > 2 && a[:2] == "--" && !hasByte(a, '=') && i+1 < len(args):
			out = append(out, a, args[i+1])
			i++
		default:
			out = append(out, a)
		}
	}
	return out
}

func hasByte(s string, b byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return true
		}
	}
	return false
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

// run is the whole hook: parse, encode, deliver (or clean, runClean). It
// returns the exit status, and writes at most one line to stderr (dhcpd
// or systemd logs it).
func run(args []string, getenv func(string) (string, bool), stdout, stderr int) int {
	if len(args) > 0 && args[0] == "clean" {
		return runClean(args[1:], stdout, stderr)
	}
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
