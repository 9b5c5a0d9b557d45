package parser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Statement is one complete top-level statement of a leases file:
// *Lease (IPv4), *IA (IPv6 ia-na/ia-ta/ia-pd), *HostEntry, *ServerDUID,
// *ByteOrder, *FailoverState or *ClassEntry. Statements dhcpd writes but
// that carry nothing a lease table needs (group, db-time-format, unknown
// keywords) are skipped without a value.
type Statement interface {
	// StartLine is the 1-based line the statement starts on.
	StartLine() int
}

// On is the set of events a lease carries pending statements for.
type On uint8

const (
	OnCommit On = 1 << iota
	OnExpiry
	OnRelease
)

// Var is a `set NAME = VALUE;` binding or an `option NAME VALUE;` line.
// A set value is what dhcpd holds and writes back: a quoted string or hex
// octets (a1:b2) as their bytes, true or false in lower case, %DECIMAL as
// written. An option value is decoded if quoted, else kept as written.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Lease is one lease: an IPv4 `lease` block, or one `iaaddr`/`iaprefix`
// of an IPv6 IA (IA points at the IA it belongs to). Fields are ordered to
// keep the struct small: a big file holds one per address.
type Lease struct {
	Family Family
	// State is the `binding state` as written, StateNone when absent;
	// use Binding for dhcpd's inference.
	State       State
	NextState   State
	RewindState State
	Reserved    bool
	Bootp       bool
	On          On    // pending on commit/expiry/release statements
	PrefixLen   uint8 // iaprefix only: the delegated prefix length; 0 for addresses

	IP netip.Addr

	Starts, Ends, Tstp, Tsfp, Atsfp, Cltt Time

	HardwareType   string // "ethernet", "token-ring", …; "" when absent
	HardwareAddr   HardwareAddr
	UID            []byte
	ClientHostname string // bytes as dhcpd keeps them (not necessarily UTF-8)
	Options        []Var  // option agent.* and others
	// vars holds the `set NAME = VALUE;` bindings, each encoded as
	// uvarint length + name + uvarint length + value: one string instead
	// of a slice of pairs, because MAAS sets six on every lease. See Vars.
	vars string

	// IPv6 only.
	IA            *IA
	PreferredLife uint32
	MaxLife       uint32

	Line int

	// inline backs a short HardwareAddr (8 bytes) and UID (8), saving
	// two allocations per lease.
	inline [16]byte
}

// StartLine implements Statement.
func (l *Lease) StartLine() int { return l.Line }

// Vars returns the `set NAME = VALUE;` bindings in file order.
func (l *Lease) Vars() []Var {
	var out []Var
	l.eachVar(func(name, value string) bool {
		out = append(out, Var{Name: name, Value: value})
		return true
	})
	return out
}

// Var returns the value of the last `set NAME = …;` for name.
func (l *Lease) Var(name string) (value string, ok bool) {
	l.eachVar(func(n, v string) bool {
		if n == name {
			value, ok = v, true
		}
		return true
	})
	return value, ok
}

func (l *Lease) eachVar(fn func(name, value string) bool) {
	s := l.vars
	next := func() (string, bool) {
		n, k := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
		if k <= 0 || uint64(len(s)-k) < n {
			return "", false
		}
		v := s[k : k+int(n)]
		s = s[k+int(n):]
		return v, true
	}
	for len(s) > 0 {
		name, ok1 := next()
		value, ok2 := next()
		if !ok1 || !ok2 || !fn(name, value) {
			return
		}
	}
}

// Key identifies the lease in a table: the address, or for a delegated
// prefix the prefix.
func (l *Lease) Key() netip.Prefix {
	if l.PrefixLen > 0 {
		return netip.PrefixFrom(l.IP, int(l.PrefixLen))
	}
	return netip.PrefixFrom(l.IP, l.IP.BitLen())
}

// Binding is the binding state dhcpd uses for the block: the written
// state, or when none was written, active if the lease ends after now or
// carries on-expiry/on-release statements, else free (dhcpd's
// parse_lease_declaration).
func (l *Lease) Binding(now Time) State {
	if l.State != StateNone {
		return l.State
	}
	if (l.Ends.IsSet() && l.Ends > now) || l.On&(OnExpiry|OnRelease) != 0 {
		return StateActive
	}
	return StateFree
}

// NextBinding is the `next binding state`. Not written, it is the binding
// state itself, or free when the block has no binding state either (as
// dhcpd infers it).
func (l *Lease) NextBinding(now Time) State {
	switch {
	case l.NextState != StateNone:
		return l.NextState
	case l.State != StateNone:
		return l.State
	}
	return StateFree
}

// IA is an IPv6 identity association block with its addresses or prefixes.
type IA struct {
	Type   string // "ia-na", "ia-ta", "ia-pd"
	IAID   uint32
	DUID   []byte
	Cltt   Time
	Leases []*Lease
	Line   int
}

// StartLine implements Statement.
func (ia *IA) StartLine() int { return ia.Line }

// HostEntry is a `host` statement that OMAPI wrote into the leases file;
// Deleted marks a rubout of an earlier host of the same name.
type HostEntry struct {
	Name           string
	Dynamic        bool
	Deleted        bool
	HardwareType   string
	HardwareAddr   HardwareAddr
	UID            []byte
	FixedAddresses []string
	Line           int
}

// StartLine implements Statement.
func (h *HostEntry) StartLine() int { return h.Line }

// Unknown is a top-level statement whose first word is none dhcpd reads
// in its leases file: dhcpd's lease_file_subparse (server/confpars.c)
// logs "Corrupt lease file - possible data loss!" and skips it
// (skip_to_semi: to the next ';', or over one '{ … }'), as the decoder
// does. A leases file dhcpd wrote has none: it is another file given as
// one, or damage.
type Unknown struct {
	Line int
	What string // its first word, shown safely
}

// StartLine implements Statement.
func (u *Unknown) StartLine() int { return u.Line }

// ServerDUID is the `server-duid` line dhcpd appends right after a start.
type ServerDUID struct {
	DUID []byte
	Line int
}

// StartLine implements Statement.
func (s *ServerDUID) StartLine() int { return s.Line }

// ByteOrder is the `authoring-byte-order` statement.
type ByteOrder struct {
	BigEndian bool
	Line      int
}

// StartLine implements Statement.
func (b *ByteOrder) StartLine() int { return b.Line }

// FailoverState is a `failover peer NAME state { … }` block.
type FailoverState struct {
	Peer           string
	MyState        string
	MyStateAt      Time
	PartnerState   string
	PartnerStateAt Time
	MCLT           int
	Line           int
}

// StartLine implements Statement.
func (f *FailoverState) StartLine() int { return f.Line }

// ClassEntry is a `class` or `subclass` statement. Its `lease limit` is a
// limit, not a lease.
type ClassEntry struct {
	Subclass   bool
	Name       string
	Data       string // subclass match data as written
	LeaseLimit int    // -1 when absent
	Line       int
}

// StartLine implements Statement.
func (c *ClassEntry) StartLine() int { return c.Line }

// SyntaxError is a statement the decoder could not read. The decoder
// skips it and resumes at the next top-level statement.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// ErrIncomplete is wrapped by the error Close returns when the input ended
// inside a statement: a torn write, or a file still being appended.
var ErrIncomplete = errors.New("incomplete statement at end of input")

// IncompleteError reports an unterminated final statement.
type IncompleteError struct {
	Line int
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("line %d: %v", e.Line, ErrIncomplete)
}

// Unwrap returns ErrIncomplete.
func (e *IncompleteError) Unwrap() error { return ErrIncomplete }
