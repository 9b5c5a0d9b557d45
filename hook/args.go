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
	mac       string // lower-case, zero-padded, ':'-separated; "" for none
	family    string // ipv4 or ipv6
	ip        string // canonical text form
	leaseTime uint32 // seconds; sent on commit only
	hostname  string // raw bytes as dhcpd passed them; encoded on output
}

// config is what one invocation does.
type config struct {
	event
	socket string // agent's unix datagram socket
	spool  string // spool directory
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
func parseArgs(args []string, getenv func(string) (string, bool)) (config, error) {
	var cfg config
	if len(args) == 0 {
		return cfg, errors.New("missing command: want notify or clean")
	}
	switch args[0] {
	case "notify":
	case "-h", "--help", "help":
		return cfg, errHelp
	case "--version", "version":
		return cfg, errVersion
	default:
		return cfg, errors.New("unknown command " + quote(args[0]) + ": want notify or clean")
	}

	var val [nFlags]string
	var set [nFlags]bool
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "-h" || a == "--help" {
			return cfg, errHelp
		}
		if len(a) < 3 || a[0] != '-' || a[1] != '-' {
			return cfg, errors.New("unexpected argument " + quote(a))
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
			return cfg, errors.New("unknown flag " + quote("--"+name))
		}
		if !hasValue {
			// The next argument is the value whatever it looks like: a
			// client may well call itself "--socket".
			if i+1 == len(args) {
				return cfg, errors.New("--" + name + " needs a value")
			}
			i++
			v = args[i]
		}
		// Like argparse (maas-dhcp-helper), a repeated flag's last value wins.
		val[f], set[f] = v, true
	}

	for _, f := range []int{fAction, fMAC, fFamily, fIP} {
		if !set[f] {
			return cfg, errors.New("missing --" + flagNames[f])
		}
	}
	e := &cfg.event
	switch a := val[fAction]; a {
	case "commit", "expiry", "release":
		e.action = a
	default:
		return cfg, errors.New("--action " + quote(a) + ": want commit, expiry or release")
	}
	switch f := val[fFamily]; f {
	case "ipv4", "ipv6":
		e.family = f
	default:
		return cfg, errors.New("--ip-family " + quote(f) + ": want ipv4 or ipv6")
	}
	ip, err := parseIP(val[fIP], e.family)
	if err != nil {
		return cfg, err
	}
	e.ip = ip
	mac, ok := normaliseMAC(val[fMAC])
	if !ok {
		return cfg, errors.New("--mac " + quote(val[fMAC]) + ": want 1 to 130 hex bytes separated by ':' or '-' (e.g. 2:0:0:a:b:c)")
	}
	e.mac = mac
	if set[fLeaseTime] {
		n, err := strconv.ParseUint(val[fLeaseTime], 10, 32)
		if err != nil {
			return cfg, errors.New("--lease-time " + quote(val[fLeaseTime]) + ": want whole seconds from 0 to 4294967295")
		}
		e.leaseTime = uint32(n)
	}
	e.hostname = val[fHostname]

	cfg.socket, err = pathSetting(val[fSocket], set[fSocket], "--socket", envSocket, defaultSocket, getenv)
	if err != nil {
		return cfg, err
	}
	if len(cfg.socket) > maxSocketPath {
		return cfg, errors.New("socket path " + quote(cfg.socket) + " is longer than 107 bytes")
	}
	cfg.spool, err = pathSetting(val[fSpool], set[fSpool], "--spool", envSpool, defaultSpool, getenv)
	if err != nil {
		return cfg, err
	}
	return cfg, nil
}

func lookupFlag(name string) int {
	for i, n := range flagNames {
		if n == name {
			return i
		}
	}
	return -1
}

// pathSetting picks the flag, else the environment variable (if set and
// not empty), else the default, and requires an absolute path: dhcpd's
// working directory is nothing to rely on.
func pathSetting(flagVal string, flagSet bool, flag, env, def string, getenv func(string) (string, bool)) (string, error) {
	p, from := def, ""
	if flagSet {
		p, from = flagVal, flag
	} else if v, ok := getenv(env); ok && v != "" {
		p, from = v, "$"+env
	}
	if p == "" || p[0] != '/' {
		return "", errors.New(from + " " + quote(p) + ": want an absolute path")
	}
	return p, nil
}

// parseIP checks that s is an address of the family and returns its
// canonical form (RFC 5952 for IPv6: dhcpd6's binary-to-ascii writes
// every group, "2001:db8:0:0:0:0:0:5"). An IPv4 address written as IPv6
// (::ffff:203.0.113.5) and a zone (fe80::1%eth0) are not leased
// addresses and are refused.
func parseIP(s, family string) (string, error) {
	if family == "ipv4" {
		if _, ok := parseIPv4(s); !ok {
			if _, ok6 := parseIPv6(s); ok6 {
				return "", errors.New("--ip " + quote(s) + " is not an IPv4 address (--ip-family ipv4)")
			}
			return "", errors.New("--ip " + quote(s) + ": not an IP address")
		}
		return s, nil // a valid dotted quad is canonical
	}
	ip, ok := parseIPv6(s)
	if !ok {
		if _, ok4 := parseIPv4(s); ok4 {
			return "", errors.New("--ip " + quote(s) + " is not an IPv6 address (--ip-family ipv6)")
		}
		return "", errors.New("--ip " + quote(s) + ": not an IP address")
	}
	if isV4Mapped(ip) {
		return "", errors.New("--ip " + quote(s) + " is not an IPv6 address (--ip-family ipv6)")
	}
	return formatIPv6(ip), nil
}

// normaliseMAC accepts hex bytes of one or two digits separated by ':'
// (what dhcpd's binary-to-ascii writes, "2:0:0:a:b:c") or '-', and
// returns them lower-case, zero-padded and ':'-separated, the form MAAS's
// region stores (maascommon/fields.py normalise_macaddress). The empty
// string stays empty: a client without a hardware address (InfiniBand
// over DHCPv4) still has leases, and MAAS's region takes "" as "no MAC".
func normaliseMAC(s string) (string, bool) {
	if s == "" {
		return "", true
	}
	var buf [3 * maxHWBytes]byte
	out := buf[:0]
	var sep byte
	for i, n := 0, 0; ; n++ {
		j := i
		for j < len(s) && j-i < 3 && isHex(s[j]) {
			j++
		}
		if j == i || j-i > 2 || n == maxHWBytes {
			return "", false
		}
		if n > 0 {
			out = append(out, ':')
		}
		if j-i == 1 {
			out = append(out, '0')
		}
		for k := i; k < j; k++ {
			out = append(out, s[k]|0x20) // hex digits: lower-case letters, digits unchanged
		}
		if j == len(s) {
			return string(out), true
		}
		c := s[j]
		if c != ':' && c != '-' || sep != 0 && c != sep || j+1 == len(s) {
			return "", false
		}
		sep, i = c, j+1
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// quote quotes a value for an error message: one line whatever it holds,
// and not much of it.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}
