package parser

import (
	"cmp"
	"net/netip"
	"slices"
)

// Table is the effective content of a leases file, built the way dhcpd
// builds its own on start: the last block for an address wins (IPv6: per
// address or delegated prefix), the last host statement of a name wins
// and a deleted one removes it.
type Table struct {
	// list holds the leases in order of first appearance; the maps index
	// it, IPv4 on a cheap key. Replacing a lease keeps its slot.
	list       []*Lease
	v4         map[uint32]int32
	v6         map[netip.Prefix]int32
	hosts      map[string]*HostEntry
	failover   map[string]*FailoverState
	ServerDUID *ServerDUID
	ByteOrder  *ByteOrder
	// Blocks counts the lease blocks applied (before last-wins).
	Blocks int
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{
		v4:       make(map[uint32]int32),
		v6:       make(map[netip.Prefix]int32),
		hosts:    make(map[string]*HostEntry),
		failover: make(map[string]*FailoverState),
	}
}

// Apply folds one statement into the table.
func (t *Table) Apply(s Statement) {
	switch s := s.(type) {
	case *Lease:
		t.Blocks++
		t.put(s)
	case *IA:
		for _, l := range s.Leases {
			t.Blocks++
			t.put(l)
		}
	case *HostEntry:
		if s.Deleted {
			delete(t.hosts, s.Name)
		} else {
			t.hosts[s.Name] = s
		}
	case *ServerDUID:
		t.ServerDUID = s
	case *ByteOrder:
		t.ByteOrder = s
	case *FailoverState:
		t.failover[s.Peer] = s
	}
}

func (t *Table) put(l *Lease) {
	var (
		i  int32
		ok bool
	)
	if l.IP.Is4() {
		k := v4key(l.IP)
		if i, ok = t.v4[k]; !ok {
			i = int32(len(t.list))
			t.v4[k] = i
		}
	} else {
		k := l.Key()
		if i, ok = t.v6[k]; !ok {
			i = int32(len(t.list))
			t.v6[k] = i
		}
	}
	if ok {
		t.list[i] = l
	} else {
		t.list = append(t.list, l)
	}
}

func v4key(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Len is the number of distinct leases.
func (t *Table) Len() int { return len(t.list) }

// Lookup returns the lease for an address (or delegated prefix).
func (t *Table) Lookup(key netip.Prefix) (*Lease, bool) {
	var (
		i  int32
		ok bool
	)
	if key.Addr().Is4() && key.Bits() == 32 {
		i, ok = t.v4[v4key(key.Addr())]
	} else {
		i, ok = t.v6[key]
	}
	if !ok {
		return nil, false
	}
	return t.list[i], true
}

// Each calls fn for every lease, in order of first appearance.
func (t *Table) Each(fn func(*Lease)) {
	for _, l := range t.list {
		fn(l)
	}
}

// Leases returns the leases sorted by family, then address, then prefix
// length.
func (t *Table) Leases() []*Lease {
	out := slices.Clone(t.list)
	slices.SortFunc(out, func(a, b *Lease) int {
		if c := a.IP.Compare(b.IP); c != 0 {
			return c
		}
		return cmp.Compare(a.PrefixLen, b.PrefixLen)
	})
	return out
}

// Hosts returns the host statements still in effect, sorted by name.
func (t *Table) Hosts() []*HostEntry {
	out := make([]*HostEntry, 0, len(t.hosts))
	for _, h := range t.hosts {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *HostEntry) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Failover returns the failover peer states, sorted by peer name.
func (t *Table) Failover() []*FailoverState {
	out := make([]*FailoverState, 0, len(t.failover))
	for _, f := range t.failover {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *FailoverState) int { return cmp.Compare(a.Peer, b.Peer) })
	return out
}
