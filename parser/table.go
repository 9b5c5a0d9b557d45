package parser

import (
	"cmp"
	"net/netip"
	"slices"
)

// Table is the effective content of a leases file, built the way dhcpd
// builds its own on start: the last block for an address wins, the last
// host statement of a name wins and a deleted one removes it, and blocks
// dhcpd refuses (Refused) change nothing but what dhcpd changes.
//
// IPv6 follows dhcpd's IAs (parse_ia_*_declaration, cleanup_lease6): an
// IA's block replaces the IA's previous block, so an address or prefix
// the new block no longer lists is gone; an address bound to one IA moves
// when another IA's block binds it, and stays when another IA's block
// only reports it unbound. Unlike dhcpd, which keeps only bound (active
// and abandoned) addresses in memory, the table keeps the expired,
// released and free ones its blocks list, as the file says, until the
// IA's next block: the agent must see an address leave the active state.
type Table struct {
	// list holds the leases in order of first appearance; the maps index
	// it, IPv4 on a cheap key. Replacing a lease keeps its slot; removing
	// one leaves a nil (dead counts them).
	list []*Lease
	// at holds, for each slot, where its lease's block is in the file:
	// its ordinal among the blocks (Blocks when it was applied) and how
	// many failover state records came before it (EachInFileOrder).
	at         []blockAt
	dead       int
	v4         map[uint32]int32
	v6         map[netip.Prefix]int32
	ias        map[string][]netip.Prefix // an IA's addresses in its last block
	hosts      map[string]*HostEntry
	failover   map[string]*FailoverState
	foLog      []*FailoverState
	refused    []*Refused
	unknown    []*Unknown // the first maxUnknown
	unknownN   int
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
		ias:      make(map[string][]netip.Prefix),
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
		t.applyIA(s)
	case *Refused:
		t.refused = append(t.refused, s)
		if s.IA != nil {
			t.takeBack(s.IA)
		}
	case *HostEntry:
		if s.Deleted {
			delete(t.hosts, s.Name)
		} else {
			t.hosts[s.Name] = s
		}
	case *Unknown:
		t.unknownN++
		if len(t.unknown) < maxUnknown {
			t.unknown = append(t.unknown, s)
		}
	case *ServerDUID:
		t.ServerDUID = s
	case *ByteOrder:
		t.ByteOrder = s
	case *FailoverState:
		t.failover[s.Peer] = s
		t.foLog = append(t.foLog, s)
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
	at := blockAt{block: int32(t.Blocks), records: int32(len(t.foLog))}
	if ok {
		t.list[i], t.at[i] = l, at
	} else {
		t.list, t.at = append(t.list, l), append(t.at, at)
	}
}

// blockAt is where a lease's block is in the file (Table.at).
type blockAt struct{ block, records int32 }

// EachInFileOrder calls fn for every lease in the order of its block in
// the file (the last one for its address: the one in effect), with the
// number of failover state records (FailoverLog) before that block: a
// reader can replay the file's blocks and records as dhcpd wrote them,
// a lease under the states in force when it was written.
func (t *Table) EachInFileOrder(fn func(l *Lease, recordsBefore int)) {
	idx := make([]int32, 0, t.Len())
	for i, l := range t.list {
		if l != nil {
			idx = append(idx, int32(i))
		}
	}
	slices.SortFunc(idx, func(a, b int32) int { return cmp.Compare(t.at[a].block, t.at[b].block) })
	for _, i := range idx {
		fn(t.list[i], int(t.at[i].records))
	}
}

// iaKey identifies an IA as dhcpd does: type, IAID and DUID.
func iaKey(ia *IA) string {
	var b [4]byte
	b[0], b[1], b[2], b[3] = byte(ia.IAID>>24), byte(ia.IAID>>16), byte(ia.IAID>>8), byte(ia.IAID)
	return ia.Type + string(b[:]) + string(ia.DUID)
}

// bound6 reports whether dhcpd keeps an IPv6 address in an IA: only
// active and abandoned ones (parse_ia_*_declaration).
func bound6(s State) bool { return s == StateActive || s == StateAbandoned }

// applyIA applies an IA's block: its addresses, then the removal of the
// addresses its previous block had and this one does not list.
func (t *Table) applyIA(ia *IA) {
	id := iaKey(ia)
	for _, l := range ia.Leases {
		t.Blocks++
		if old, ok := t.Lookup(l.Key()); ok && old.IA != nil && bound6(old.State) && !bound6(l.State) && iaKey(old.IA) != id {
			// cleanup_lease6: an IA that no longer binds an address does
			// not take it from the IA that does.
			continue
		}
		t.put(l)
	}
	keys := make([]netip.Prefix, len(ia.Leases))
	for i, l := range ia.Leases {
		keys[i] = l.Key()
	}
	for _, k := range t.ias[id] {
		if cur, ok := t.Lookup(k); ok && cur.IA != nil && cur.IA != ia && iaKey(cur.IA) == id {
			t.remove(k)
		}
	}
	if len(keys) > 0 {
		t.ias[id] = keys
	} else {
		delete(t.ias, id)
	}
}

// takeBack applies what dhcpd did while reading a refused IA, before it
// gave up: each address it read was taken from the IA that had it bound
// (cleanup_lease6), if this IA binds it and the other was another IA, or
// if this IA unbinds it and the other was the same IA. The refused IA
// itself binds nothing.
func (t *Table) takeBack(ia *IA) {
	id := iaKey(ia)
	for _, l := range ia.Leases {
		old, ok := t.Lookup(l.Key())
		if !ok || old.IA == nil || !bound6(old.State) {
			continue
		}
		if (iaKey(old.IA) == id) != bound6(l.State) {
			t.remove(l.Key())
		}
	}
}

// remove deletes the lease for an address, leaving its slot empty.
func (t *Table) remove(k netip.Prefix) {
	var i int32
	if k.Addr().Is4() && k.Bits() == 32 {
		kk := v4key(k.Addr())
		i = t.v4[kk]
		delete(t.v4, kk)
	} else {
		i = t.v6[k]
		delete(t.v6, k)
	}
	t.list[i] = nil
	t.dead++
}

// Refused returns the blocks dhcpd refuses, in file order.
func (t *Table) Refused() []*Refused { return t.refused }

// maxUnknown bounds what Unknown keeps: a wrong file given as the leases
// file can hold any number of them.
const maxUnknown = 100

// Unknown returns the first 100 top-level statements dhcpd does not read
// in a leases file (Unknown), in file order.
func (t *Table) Unknown() []*Unknown { return t.unknown }

// UnknownCount is how many statements Unknown would return, unbounded.
func (t *Table) UnknownCount() int { return t.unknownN }

func v4key(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Len is the number of distinct leases.
func (t *Table) Len() int { return len(t.list) - t.dead }

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
		if l != nil {
			fn(l)
		}
	}
}

// Leases returns the leases sorted by family, then address, then prefix
// length.
func (t *Table) Leases() []*Lease {
	out := make([]*Lease, 0, t.Len())
	for _, l := range t.list {
		if l != nil {
			out = append(out, l)
		}
	}
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

// FailoverLog returns every failover state record, in file order: the
// states a server went through since the file was written, where
// Failover keeps the last of each peer.
func (t *Table) FailoverLog() []*FailoverState { return t.foLog }

// Failover returns the failover peer states, sorted by peer name.
func (t *Table) Failover() []*FailoverState {
	out := make([]*FailoverState, 0, len(t.failover))
	for _, f := range t.failover {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *FailoverState) int { return cmp.Compare(a.Peer, b.Peer) })
	return out
}
