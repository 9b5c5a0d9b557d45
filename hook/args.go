package main

import (
	"errors"
	"strconv"
)

// Defaults, and the environment variables that override them.
const (
	defaultSocket = "/run/leasekeeper/hook.sock"
	defaultSpool  = "/var/spool/leasekeeper"
	envSocket     = "LEASEKEEPER_SOCKET"
	envSpool      = "LEASEKEEPER_SPOOL"
)

// Limits on what the hook accepts.
const (
	// maxHWBytes is the longest --mac in bytes: a DHCPv6 DUID (2 bytes
	// of type and at most 128 of identifier, RFC 8415 §11.1), which the
	// dhcpd6 snippet passes where dhcpd4 passes the hardware address.
	maxHWBytes = 130
	// maxSocketPath is the longest path a sockaddr_un holds, without
	// its terminating NUL.
	maxSocketPath = 107
)

// usage is printed by --help. Keep it in step with doc.go.
const usage = `Usage: leasekeeper-hook notify --action commit|expiry|release --mac MAC
                        --ip-family ipv4|ipv6 --ip IP [--lease-time SECS]
                        [--hostname NAME] [--socket PATH] [--spool DIR]
       leasekeeper-hook clean LEASES_FILE

A drop-in replacement for MAAS's maas-dhcp-helper, both commands.

notify hands one lease event from ISC dhcpd (execute() in "on commit", "on
expiry" or "on release") to the leasekeeper agent: one JSON datagram to the
agent's unix socket, or one line appended to the spool directory when the
agent is unreachable.

  --action      commit, expiry or release
  --mac         hardware address (dhcpd4) or client DUID (dhcpd6): hex bytes
                separated by ':' or '-', padded or not (2:0:0:a:b:c); empty
                for none
  --ip-family   ipv4 or ipv6; --ip must be of that family
  --ip          the leased address
  --lease-time  seconds, 0 to 4294967295 (sent on commit only; default 0)
  --hostname    the client's host name, any bytes; "(none)", empty or blank
                means none (sent on commit only)
  --socket      the agent's datagram socket (default $LEASEKEEPER_SOCKET,
                else /run/leasekeeper/hook.sock); ignored when run by the
                name maas-dhcp-helper, whose --socket is MAAS's own
  --spool       the spool directory (default $LEASEKEEPER_SPOOL, else
                /var/spool/leasekeeper)

Flags take their value as the next argument or after '=' (--ip=203.0.113.5).
A flag notify does not know (a newer dhcpd.conf than this hook) is skipped
with its value (the next argument, unless given after '='), and named in
one warning line; the event is still sent.

clean removes the "host NAME { ... }" statements (hosts OMAPI added) from a
dhcpd leases file, so that dhcpd starts with the hosts of its dhcpd.conf
only. MAAS's maas-dhcpd and maas-dhcpd6 units run it under "sh -e" right
before dhcpd. The file is replaced atomically by a cleaned copy with the
same owner, group and mode, and only when it holds a host statement; lease
blocks and everything else stay byte for byte. A missing file is not an
error. A file that cannot be rewritten (read-only directory, symbolic link,
not a regular file) or that clean cannot read to its end (a broken quoted
string, a torn last statement) is left as it was, or cleaned up to that
point, with one warning line on stderr.

Exit status, notify: 0 sent or spooled; 1 the event was lost (neither the
socket nor the spool could take it); 2 invalid arguments (nothing was sent).
clean: 0 whenever dhcpd can start on the file, cleaned or not; 2 invalid
arguments.
`

var (
	errHelp    = errors.New("help requested")
	errVersion = errors.New("version requested")
)

// event is one validated, normalised lease event.
type event struct {
	action    string // commit, expiry or release
	mac       string // as passed, valid (validMAC); "" for none; normalised on output
	family    string // ipv4 or ipv6
	ip        string // as passed, valid for the family; canonical on output
	leaseTime uint32 // seconds; sent on commit only
	hostname  string // raw bytes as dhcpd passed them; encoded on output
}

// config is what one invocation does.
type config struct {
	event
	socket  string // agent's unix datagram socket
	spool   string // spool directory
	ignored string // the first flag skipped as unknown ("" for none)
}

// The flags notify takes, in the order usage lists them.
const (
	fAction = iota
	fMAC
	fFamily
	fIP
	fLeaseTime
	fHostname
	fSocket
	fSpool
	nFlags
)

var flagNames = [nFlags]string{"action", "mac", "ip-family", "ip", "lease-time", "hostname", "socket", "spool"}

// parseArgs parses and validates the arguments after the program name.
// Every error is one line, naming the flag and quoting the offending
// value safely (a hostile host name cannot add lines to dhcpd's log).
func parseArgs(cfg *config, args []string, getenv func(string) (string, bool)) error {
	if len(args) == 0 {
		return errors.New("missing command: want notify or clean")
	}
	switch args[0] {
	case "notify":
	case "-h", "--help", "help":
		return errHelp
	case "--version", "version":
		return errVersion
	default:
		return bad("unknown command ", args[0], ": want notify or clean")
	}

	var val [nFlags]string
	var set [nFlags]bool
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "-h" || a == "--help" {
			return errHelp
		}
		if !isFlag(a) {
			return bad("unexpected argument ", a, "")
		}
		name, v, hasValue := a[2:], "", false
		for j := 0; j < len(name); j++ {
			if name[j] == '=' {
				name, v, hasValue = name[:j], name[j+1:], true
				break
			}
		}
		f := lookupFlag(name)
		if f < 0 {
			// Not a flag this hook knows: a newer MAAS's dhcpd.conf may
			// pass one (the diversion keeps this hook under MAAS's new
			// template, which gives every flag a value). Refusing would
			// lose the event: skip the flag and its value, the next
			// argument whatever it looks like (a client may choose a
			// value such as "--ip=…"), and say so once the event is out.
			if !hasValue && i+1 < len(args) {
				i++
			}
			if cfg.ignored == "" {
				cfg.ignored = a[:2+len(name)]
			}
			continue
		}
		if !hasValue {
			// The next argument is the value whatever it looks like: a
			// client may well call itself "--socket".
			if i+1 == len(args) {
				return plain(a[:2+len(name)], " needs a value")
			}
			i++
			v = args[i]
		}
		// Like argparse (maas-dhcp-helper), a repeated flag's last value wins.
		val[f], set[f] = v, true
	}

	for f := fAction; f <= fIP; f++ { // the flags notify requires
		if !set[f] {
			return plain("missing --", flagNames[f])
		}
	}
	e := &cfg.event
	switch a := val[fAction]; a {
	case "commit", "expiry", "release":
		e.action = a
	default:
		return bad("--action ", a, ": want commit, expiry or release")
	}
	switch f := val[fFamily]; f {
	case "ipv4", "ipv6":
		e.family = f
	default:
		return bad("--ip-family ", f, ": want ipv4 or ipv6")
	}
	if err := checkIP(val[fIP], e.family); err != nil {
		return err
	}
	e.ip = val[fIP]
	if !validMAC(val[fMAC]) {
		return bad("--mac ", val[fMAC], ": want 1 to 130 hex bytes separated by ':' or '-' (e.g. 2:0:0:a:b:c)")
	}
	e.mac = val[fMAC]
	if set[fLeaseTime] {
		n, err := strconv.ParseUint(val[fLeaseTime], 10, 32)
		if err != nil {
			return bad("--lease-time ", val[fLeaseTime], ": want whole seconds from 0 to 4294967295")
		}
		e.leaseTime = uint32(n)
	}
	e.hostname = val[fHostname]

	var err error
	cfg.socket, err = pathSetting(val[fSocket], set[fSocket], "--socket", envSocket, defaultSocket, getenv)
	if err != nil {
		return err
	}
	if len(cfg.socket) > maxSocketPath {
		return bad("socket path ", cfg.socket, " is longer than 107 bytes")
	}
	cfg.spool, err = pathSetting(val[fSpool], set[fSpool], "--spool", envSpool, defaultSpool, getenv)
	if err != nil {
		return err
	}
	return nil
}

// bad is the error prefix + quote(v) + suffix, and plain a + b. Not
// inlined: the error paths' strings stay out of the frames of the paths
// that succeed (TestStartStack).
//
//go:noinline
func bad(prefix, v, suffix string) error { return errors.New(prefix + quote(v) + suffix) }

//go:noinline
func plain(a, b string) error { return errors.New(a + b) }

//go:noinline
func notAbsolute(from string, fromEnv bool, p string) error {
	if fromEnv {
		from = "$" + from
	}
	return errors.New(from + " " + quote(p) + ": want an absolute path")
}

// isFlag reports whether a looks like a flag ("--" and a name).
func isFlag(a string) bool { return len(a) > 2 && a[0] == '-' && a[1] == '-' }

func lookupFlag(name string) int {
	for i := range flagNames {
		if flagNames[i] == name {
			return i
		}
	}
	return -1
}

// pathSetting picks the flag, else the environment variable (if set and
// not empty), else the default, and requires an absolute path: dhcpd's
// working directory is nothing to rely on.
func pathSetting(flagVal string, flagSet bool, flag, env, def string, getenv func(string) (string, bool)) (string, error) {
	p, from, fromEnv := def, "", false
	if flagSet {
		p, from = flagVal, flag
	} else if v, ok := getenv(env); ok && v != "" {
		p, from, fromEnv = v, env, true
	}
	if p == "" || p[0] != '/' {
		return "", notAbsolute(from, fromEnv, p)
	}
	return p, nil
}

// checkIP checks that s is an address of the family. An IPv4 address
// written as IPv6 (::ffff:203.0.113.5) and a zone (fe80::1%eth0) are not
// leased addresses and are refused.
func checkIP(s, family string) error {
	if family == "ipv4" {
		if _, ok := parseIPv4(s); !ok {
			if _, ok6 := parseIPv6(s); ok6 {
				return bad("--ip ", s, " is not an IPv4 address (--ip-family ipv4)")
			}
			return bad("--ip ", s, ": not an IP address")
		}
		return nil
	}
	ip, ok := parseIPv6(s)
	if !ok {
		if _, ok4 := parseIPv4(s); ok4 {
			return bad("--ip ", s, " is not an IPv6 address (--ip-family ipv6)")
		}
		return bad("--ip ", s, ": not an IP address")
	}
	if isV4Mapped(ip) {
		return bad("--ip ", s, " is not an IPv6 address (--ip-family ipv6)")
	}
	return nil
}

// appendIP appends s, valid for the family (checkIP), in its canonical
// form: a valid dotted quad is one already; IPv6 as RFC 5952 has it
// (dhcpd6's binary-to-ascii writes every group, "2001:db8:0:0:0:0:0:5").
func appendIP(b []byte, family, s string) []byte {
	if family == "ipv4" {
		return append(b, s...)
	}
	ip, _ := parseIPv6(s)
	return appendIPv6(b, ip)
}

// parseIP is checkIP and appendIP in one, for tests.
func parseIP(s, family string) (string, error) {
	if err := checkIP(s, family); err != nil {
		return "", err
	}
	return string(appendIP(nil, family, s)), nil
}

// validMAC accepts hex bytes of one or two digits separated by ':'
// (what dhcpd's binary-to-ascii writes, "2:0:0:a:b:c") or '-', one
// separator throughout, at most maxHWBytes of them. The empty string is
// valid: a client without a hardware address (InfiniBand over DHCPv4)
// still has leases, and MAAS's region takes "" as "no MAC".
func validMAC(s string) bool {
	var sep byte
	for i, n := 0, 0; i < len(s); n++ {
		j := i
		for j < len(s) && j-i < 3 && isHex(s[j]) {
			j++
		}
		if j == i || j-i > 2 || n == maxHWBytes {
			return false
		}
		if j == len(s) {
			return true
		}
		c := s[j]
		if c != ':' && c != '-' || sep != 0 && c != sep || j+1 == len(s) {
			return false
		}
		sep, i = c, j+1
	}
	return true
}

// appendMAC appends s, valid (validMAC), in the form MAAS's region
// stores: lower-case, zero-padded, ':'-separated (maascommon/fields.py
// normalise_macaddress).
func appendMAC(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && isHex(s[j]) {
			j++
		}
		if i > 0 {
			b = append(b, ':')
		}
		if j-i == 1 {
			b = append(b, '0')
		}
		for k := i; k < j; k++ {
			b = append(b, s[k]|0x20) // hex digits: lower-case letters, digits unchanged
		}
		i = j + 1
	}
	return b
}

// normaliseMAC is validMAC and appendMAC in one, for tests.
func normaliseMAC(s string) (string, bool) {
	if !validMAC(s) {
		return "", false
	}
	return string(appendMAC(nil, s)), true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// quote quotes a value for an error message: one line whatever it holds,
// and not much of it. Not inlined: error paths stay out of the frames of
// the paths that succeed (TestStartStack).
//
//go:noinline
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}
