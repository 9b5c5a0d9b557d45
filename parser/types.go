package parser

import (
	"fmt"
	"math"
	"time"
)

// Family is the address family of a lease or range.
type Family uint8

const (
	FamilyUnknown Family = iota
	IPv4
	IPv6
)

// String returns the names the region API uses: "ipv4" or "ipv6".
func (f Family) String() string {
	switch f {
	case IPv4:
		return "ipv4"
	case IPv6:
		return "ipv6"
	}
	return "unknown"
}

// MarshalText implements encoding.TextMarshaler.
func (f Family) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// State is a dhcpd binding state.
type State uint8

// Binding states in the order dhcpd's binding_state_names lists them,
// with StateNone for "not written".
const (
	StateNone State = iota
	StateFree
	StateActive
	StateExpired
	StateReleased
	StateAbandoned
	StateReset
	StateBackup
)

var stateNames = [...]string{"", "free", "active", "expired", "released", "abandoned", "reset", "backup"}

// String returns the keyword dhcpd writes for the state ("" for StateNone).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseState maps a dhcpd binding state keyword to a State.
func ParseState(s string) (State, bool) {
	for i, n := range stateNames {
		if i > 0 && n == s {
			return State(i), true
		}
	}
	return StateNone, false
}

// MarshalText writes the keyword; StateNone marshals as "".
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Touched reports whether dhcpd-pools counts the state as "touched": a lease
// that has been handed out once but is not currently bound.
func (s State) Touched() bool {
	return s == StateFree || s == StateExpired || s == StateReleased || s == StateAbandoned
}

// Time is a dhcpd date at one-second resolution, as Unix seconds.
// NoTime means the field was not written; Never is dhcpd's "never".
// Never compares after every real time, so "ends before now" needs no
// special case.
type Time int64

const (
	NoTime Time = math.MinInt64
	Never  Time = math.MaxInt64
)

// TimeOf converts a time.Time, truncating to the second.
func TimeOf(t time.Time) Time { return Time(t.Unix()) }

// IsSet reports whether the field was written (a date or never).
func (t Time) IsSet() bool { return t != NoTime }

// IsNever reports dhcpd's "never".
func (t Time) IsNever() bool { return t == Never }

// Time returns the UTC time; the zero time.Time for NoTime and Never.
func (t Time) Time() time.Time {
	if t == NoTime || t == Never {
		return time.Time{}
	}
	return time.Unix(int64(t), 0).UTC()
}

// Before reports whether t is set and strictly before u.
func (t Time) Before(u time.Time) bool { return t != NoTime && int64(t) < u.Unix() }

// String renders RFC 3339 UTC, "never", or "".
func (t Time) String() string {
	switch t {
	case NoTime:
		return ""
	case Never:
		return "never"
	}
	return t.Time().Format(time.RFC3339)
}

// MarshalJSON writes RFC 3339 UTC, or null for never and not written.
func (t Time) MarshalJSON() ([]byte, error) {
	if t == NoTime || t == Never {
		return []byte("null"), nil
	}
	return []byte(`"` + t.Time().Format(time.RFC3339) + `"`), nil
}

// HexString formats bytes as dhcpd's colon-separated, zero-padded,
// lower-case hex ("00:16:3e:0a:0b:0c"); "" for none.
func HexString(b []byte) string {
	const digits = "0123456789abcdef"
	if len(b) == 0 {
		return ""
	}
	out := make([]byte, 0, len(b)*3-1)
	for i, c := range b {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// HardwareAddr is a hardware address; it marshals as lower-case,
// zero-padded, colon-separated hex.
type HardwareAddr []byte

func (h HardwareAddr) String() string { return HexString(h) }

// MarshalText implements encoding.TextMarshaler.
func (h HardwareAddr) MarshalText() ([]byte, error) { return []byte(h.String()), nil }
