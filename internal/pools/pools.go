// Package pools relates a lease table to the ranges of a dhcpd.conf: usage
// per range (what dhcpd-pools reports) and the inconsistencies an operator
// must act on (what `leasekeeper check` reports). It is pure: parsed
// values and a clock reading in, values out.
package pools

import (
	"net/netip"
	"slices"

	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// Usage counts the leases of one range.
type Usage struct {
	Family        string `json:"family"`
	First         string `json:"first"`
	Last          string `json:"last"`
	Subnet        string `json:"subnet"`
	SharedNetwork string `json:"shared_network"`
	Failover      string `json:"failover,omitempty"`
	// Size is the number of addresses (prefix6: of delegated prefixes),
	// exact: 2^64 for a /64 (see Count for the JSON).
	Size    Count `json:"size"`
	Active  int64 `json:"active"`
	Backup  int64 `json:"backup"`
	Touched int64 `json:"touched"` // free, expired, released, abandoned
	Free    Count `json:"free"`    // Size - Active, as dhcpd-pools defines it

	first, last netip.Addr
}

// Totals sums ranges (a shared network, or everything).
type Totals struct {
	Name    string `json:"name,omitempty"`
	Size    Count  `json:"size"`
	Active  int64  `json:"active"`
	Backup  int64  `json:"backup"`
	Touched int64  `json:"touched"`
	Free    Count  `json:"free"`
}

func (t *Totals) add(u *Usage) {
	t.Size = t.Size.Add(u.Size)
	t.Active += u.Active
	t.Backup += u.Backup
	t.Touched += u.Touched
	t.Free = t.Free.Add(u.Free)
}

// Report is the usage of every range.
type Report struct {
	Ranges         []Usage  `json:"ranges"`
	SharedNetworks []Totals `json:"shared_networks"`
	Summary        Totals   `json:"summary"`
	// Failover: the failover peers the ranges use and their states
	// (Pairs); empty when dhcpd runs on its own.
	Failover []Pair `json:"failover"`
}

// Summarize counts, per range, the leases whose address it contains, by
// the binding state dhcpd would load (see parser.Lease.Binding). A lease
// inside overlapping ranges counts in each, and leases outside every range
// count nowhere, as with dhcpd-pools. Ranges are listed in configuration
// order; shared networks in order of first appearance.
func Summarize(cfg *dhcpdconf.Config, t *parser.Table, now parser.Time) Report {
	rep := Report{Ranges: make([]Usage, len(cfg.Ranges))}
	for i, r := range cfg.Ranges {
		u := &rep.Ranges[i]
		*u = Usage{
			Family: r.Family.String(), First: r.First.String(), Last: r.Last.String(),
			Subnet: r.Subnet.String(), SharedNetwork: r.SharedNetwork, Failover: r.Failover,
			Size: size(r), first: r.First, last: r.Last,
		}
		if r.Kind == dhcpdconf.RangeKindPrefix6 {
			u.First = netip.PrefixFrom(r.First, r.PrefixLen).String()
			u.Last = netip.PrefixFrom(r.Last, r.PrefixLen).String()
		}
	}
	idx := newIndex(cfg.Ranges)
	t.Each(func(l *parser.Lease) {
		st := l.Binding(now)
		idx.each(l.IP, l.PrefixLen > 0, func(i int) {
			u := &rep.Ranges[i]
			switch {
			case st == parser.StateActive:
				u.Active++
			case st == parser.StateBackup:
				u.Backup++
			case st.Touched():
				u.Touched++
			}
		})
	})
	byName := map[string]int{}
	for i := range rep.Ranges {
		u := &rep.Ranges[i]
		u.Free = u.Size.Sub(CountOf(u.Active))
		rep.Summary.add(u)
		if u.SharedNetwork == "" {
			continue
		}
		k, ok := byName[u.SharedNetwork]
		if !ok {
			k = len(rep.SharedNetworks)
			byName[u.SharedNetwork] = k
			rep.SharedNetworks = append(rep.SharedNetworks, Totals{Name: u.SharedNetwork})
		}
		rep.SharedNetworks[k].add(u)
	}
	if rep.SharedNetworks == nil {
		rep.SharedNetworks = []Totals{}
	}
	rep.Failover = Pairs(cfg, t, rep)
	return rep
}

// index finds the ranges containing an address: ranges sorted by first
// address, with the running maximum of last addresses so that a lookup
// walks back only over ranges that can still contain it.
type index struct {
	order   []int // range indexes sorted by first
	first   []netip.Addr
	last    []netip.Addr
	maxLast []netip.Addr
	pd      []bool // prefix6: holds delegated prefixes, not addresses
}

func newIndex(rs []dhcpdconf.Range) *index {
	x := &index{order: make([]int, len(rs))}
	for i := range rs {
		x.order[i] = i
	}
	slices.SortStableFunc(x.order, func(a, b int) int { return rs[a].First.Compare(rs[b].First) })
	for k, i := range x.order {
		x.first = append(x.first, rs[i].First)
		x.last = append(x.last, rs[i].Last)
		x.pd = append(x.pd, rs[i].Kind == dhcpdconf.RangeKindPrefix6)
		m := rs[i].Last
		if k > 0 && x.maxLast[k-1].Compare(m) > 0 {
			m = x.maxLast[k-1]
		}
		x.maxLast = append(x.maxLast, m)
	}
	return x
}

// each calls fn with the index of every range containing ip: address
// ranges for addresses, prefix6 ranges for delegated prefixes (pd).
// Addresses of different families never match (netip orders all IPv4
// before IPv6).
func (x *index) each(ip netip.Addr, pd bool, fn func(int)) {
	// k: the number of ranges whose first <= ip.
	k, _ := slices.BinarySearchFunc(x.first, ip, func(f, ip netip.Addr) int {
		if f.Compare(ip) <= 0 {
			return -1
		}
		return 1
	})
	for j := k - 1; j >= 0 && x.maxLast[j].Compare(ip) >= 0; j-- {
		if x.last[j].Compare(ip) >= 0 && x.first[j].BitLen() == ip.BitLen() && x.pd[j] == pd {
			fn(x.order[j])
		}
	}
}

// contains reports whether any range holds the lease's address or prefix.
func (x *index) contains(l *parser.Lease) bool {
	found := false
	x.each(l.IP, l.PrefixLen > 0, func(int) { found = true })
	return found
}
