package main

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
	environ = runtimeEnvs() // here, first: start.go
	args := runtimeArgs()
	if len(args) == 0 { // execve with no argv[0], which Linux before 5.18 allows
		args = []string{""}
	}
	rest := args[1:]
	if isMAASHelper(args[0]) && len(rest) > 0 && rest[0] == "notify" {
		rest = dropSocketFlag(rest)
	}
	exit(run(rest, lookupEnv, 1, 2))
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
// It filters args in place.
func dropSocketFlag(args []string) []string {
	out := args[:0]
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

// run is the whole hook: parse, encode, deliver (or clean, runClean). It
// returns the exit status, and writes at most one line to stderr (dhcpd
// or systemd logs it).
func run(args []string, getenv func(string) (string, bool), stdout, stderr int) int {
	if len(args) > 0 && args[0] == "clean" {
		return runClean(args[1:], stdout, stderr)
	}
	cfg := &theConfig
	err := parseArgs(cfg, args, getenv)
	switch {
	case err == errHelp:
		writeString(stdout, usage)
		return exitOK
	case err == errVersion:
		writeString(stdout, "leasekeeper-hook "+version+"\n")
		return exitOK
	case err != nil:
		complain(stderr, "", err)
		return exitUsage
	}
	sec, nsec := now()
	line := appendEvent(lineBuf[:0], &cfg.event, sec, nsec, getpid())
	if err := deliver(line, cfg.socket, cfg.spool); err != nil {
		complain(stderr, "event lost: ", err)
		return exitLost
	}
	if cfg.ignored != "" {
		warnIgnored(stderr, cfg.ignored)
	}
	return exitOK
}

// warnIgnored names the unknown flag notify skipped, after the event
// went out. Not inlined, as complain.
//
//go:noinline
func warnIgnored(stderr int, flag string) {
	writeString(stderr, "leasekeeper-hook: ignored the unknown flag "+quote(flag)+" (a dhcpd.conf newer than this hook? upgrade leasekeeper); the event was still sent\n")
}

// complain writes the hook's one line to stderr. Not inlined: its
// strings stay out of run's frame (TestStartStack).
//
//go:noinline
func complain(stderr int, what string, err error) {
	writeString(stderr, "leasekeeper-hook: "+what+err.Error()+"\n")
}

// now returns the wall clock as epoch seconds and nanoseconds, from the
// runtime (sys.go), so the hook needs nothing from the time package.
func now() (sec, nsec int64) {
	s, ns, _ := timeNow()
	return s, s*1e9 + int64(ns)
}

// writeString writes s to fd, best effort: there is nobody to tell if
// dhcpd closed our stderr.
func writeString(fd int, s string) {
	b := []byte(s)
	for len(b) > 0 {
		n, err := rawWrite(fd, b)
		if err == _EINTR {
			continue
		}
		if err != 0 || n <= 0 {
			return
		}
		b = b[n:]
	}
}
