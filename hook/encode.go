package main

import (
	"strconv"
	"unicode/utf8"
)

// maxHostname bounds the JSON-encoded host name (the bytes between its
// quotes). 255 is the longest host-name option a DHCPv4 client can send
// in one option, so a name that is not hostile always fits whole. The
// bound keeps every IPv4 datagram under 512 bytes, which matters to
// MAAS's Go rack agent (see doc.go).
const maxHostname = 255

// maxLine is a buffer size that holds any event: the fixed keys,
// a 130-byte DUID (389 characters), an IPv6 address, the host name and
// the numbers come to under 900 bytes.
const maxLine = 1024

// appendEvent appends the event's JSON object to b, without a newline.
// Keys come in maas-dhcp-helper's order; lease_time and hostname only on
// commit, as it sends them; timestamp_ns and pid are leasekeeper's own.
// Every value but the host name is validated ASCII that needs no
// escaping; the MAC and the address are normalised here.
func appendEvent(b []byte, e *event, sec, nsec int64, pid int) []byte {
	b = append(b, `{"action":"`...)
	b = append(b, e.action...)
	b = append(b, `","mac":"`...)
	b = appendMAC(b, e.mac)
	b = append(b, `","ip_family":"`...)
	b = append(b, e.family...)
	b = append(b, `","ip":"`...)
	b = appendIP(b, e.family, e.ip)
	b = append(b, `","timestamp":`...)
	b = strconv.AppendInt(b, sec, 10)
	if e.action == "commit" {
		b = append(b, `,"lease_time":`...)
		b = strconv.AppendUint(b, uint64(e.leaseTime), 10)
		b = append(b, `,"hostname":`...)
		b = appendHostname(b, e.hostname)
	}
	b = append(b, `,"timestamp_ns":`...)
	b = strconv.AppendInt(b, nsec, 10)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(pid), 10)
	return append(b, '}')
}

// noHostname reports whether dhcpd passed no name: MAAS's snippet passes
// "(none)" when the client sent none, and MAAS's region ignores that, the
// empty string and blank names alike (maasservicelayer/services/
// leases.py _is_valid_hostname, with Python's str.isspace).
func noHostname(s string) bool {
	if s == "(none)" {
		return true
	}
	for _, r := range s {
		if !isSpace(r) {
			return false
		}
	}
	return true
}

// isSpace is Python's str.isspace for one character: Unicode White_Space
// plus the information separators U+001C to U+001F. (The hook does
// without the unicode package: its tables are start-up time.)
func isSpace(r rune) bool {
	switch {
	case r <= 0xa0:
		return '\t' <= r && r <= '\r' || 0x1c <= r && r <= ' ' || r == 0x85 || r == 0xa0
	case 0x2000 <= r && r <= 0x200a:
		return true
	}
	switch r {
	case 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return false
}

// appendHostname appends s as a JSON string that is valid whatever s
// holds: '"' and '\' escaped, control characters as \u00XX, each byte
// that is not part of valid UTF-8 replaced by U+FFFD, other characters
// as they are. The encoded content is cut to maxHostname bytes at a
// character boundary, never inside an escape. No name gives "".
func appendHostname(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	if noHostname(s) {
		return append(b, '"')
	}
	n := 0 // encoded bytes so far
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				if n+2 > maxHostname {
					return append(b, '"')
				}
				b = append(b, '\\', c)
				n += 2
			case c < 0x20:
				if n+6 > maxHostname {
					return append(b, '"')
				}
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
				n += 6
			default:
				if n+1 > maxHostname {
					return append(b, '"')
				}
				b = append(b, c)
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if n+3 > maxHostname {
				return append(b, '"')
			}
			b = append(b, "\uFFFD"...)
			n += 3
		} else {
			if n+size > maxHostname {
				return append(b, '"')
			}
			b = append(b, s[i:i+size]...)
			n += size
		}
		i += size
	}
	return append(b, '"')
}
