package event

import (
	"bytes"
	"encoding/json"
	"strings"
)

// scanDatagram reads the datagram the hooks send in the shape they send
// it (an object of plain keys whose values are strings without escapes,
// integers or null), without encoding/json, which costs the hook socket
// several microseconds a datagram. ok is false for anything else —
// escapes, non-ASCII or control bytes in a string, a float, a nested
// value, a repeated key, a key that differs from a known one only in
// case (encoding/json matches keys case-insensitively), trailing bytes —
// and the caller decodes it with encoding/json, so what is accepted and
// how it reads never depend on which of the two read it
// (FuzzScanDatagram).
func scanDatagram(b []byte) (d fields, ok bool) {
	s := scanner{b: b}
	s.space()
	if !s.byte('{') {
		return d, false
	}
	var seen uint8
	for first := true; ; first = false {
		s.space()
		if first && s.peek() == '}' {
			return d, false // {}: leave the error to encoding/json
		}
		key, ok := s.raw()
		if !ok {
			return d, false
		}
		s.space()
		if !s.byte(':') {
			return d, false
		}
		s.space()
		bit, field, num := datagramKey(key, &d)
		switch {
		case bit == 0:
			if knownKeyFold(key) || !s.skipScalar() {
				return d, false
			}
		case seen&bit != 0:
			return d, false
		case num != nil:
			v, ok := s.integer()
			if !ok {
				return d, false
			}
			*num = json.Number(v)
		case field == &d.Hostname:
			if s.literal("null") {
				break
			}
			v, ok := s.str()
			if !ok {
				return d, false
			}
			d.Hostname, d.hasHostname = v, true
		default:
			v, ok := s.raw()
			if !ok {
				return d, false
			}
			*field = intern(v)
		}
		seen |= bit
		s.space()
		if s.byte('}') {
			break
		}
		if !s.byte(',') {
			return d, false
		}
	}
	s.space()
	return d, s.i == len(s.b)
}

// datagramKey is the field a key fills: a bit for repeats, and where the
// value goes (a string or a number). bit is 0 for a key the datagram does
// not have.
func datagramKey(key []byte, d *fields) (bit uint8, str *string, num *json.Number) {
	switch string(key) {
	case "action":
		return 1, &d.Action, nil
	case "mac":
		return 2, &d.MAC, nil
	case "ip_family":
		return 4, &d.Family, nil
	case "ip":
		return 8, &d.IP, nil
	case "timestamp":
		return 16, nil, &d.Timestamp
	case "lease_time":
		return 32, nil, &d.LeaseTime
	case "hostname":
		return 64, &d.Hostname, nil
	case "timestamp_ns":
		return 128, nil, &d.TimestampNS
	}
	return 0, nil, nil
}

// knownKeyFold reports whether key is one of the datagram's keys in
// another case, which encoding/json would take as that key.
func knownKeyFold(key []byte) bool {
	for _, k := range [...]string{"action", "mac", "ip_family", "ip", "timestamp", "lease_time", "hostname", "timestamp_ns"} {
		if bytes.EqualFold(key, []byte(k)) {
			return true
		}
	}
	return false
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) byte(c byte) bool {
	if s.peek() == c && s.i < len(s.b) {
		s.i++
		return true
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	if strings.HasPrefix(string(s.b[s.i:]), lit) {
		s.i += len(lit)
		return true
	}
	return false
}

// intern returns the constant for the values most datagrams carry,
// which then cost no allocation.
func intern(b []byte) string {
	for _, c := range [...]string{Commit, Expiry, Release, IPv4, IPv6} {
		if string(b) == c {
			return c
		}
	}
	return string(b)
}

// str reads a string of printable ASCII without escapes.
func (s *scanner) str() (string, bool) {
	b, ok := s.raw()
	return string(b), ok
}

// raw is str without the copy: the string's bytes in s.b.
func (s *scanner) raw() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, true
		case c < 0x20 || c == '\\' || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// integer reads a JSON number that is an integer: -?(0|[1-9][0-9]*),
// not followed by a fraction or an exponent.
func (s *scanner) integer() (string, bool) {
	start := s.i
	s.byte('-')
	digits := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	switch n := s.i - digits; {
	case n == 0, n > 1 && s.b[digits] == '0':
		return "", false
	}
	switch s.peek() {
	case '.', 'e', 'E':
		return "", false
	}
	return string(s.b[start:s.i]), true
}

// skipScalar passes over the value of a key the datagram does not have:
// a string, an integer, true, false or null.
func (s *scanner) skipScalar() bool {
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.raw()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		_, ok := s.integer()
		return ok
	}
	return s.literal("true") || s.literal("false") || s.literal("null")
}
