package release

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Source is one lease file as read, ready for Plan.
type Source struct {
	Path   string
	Format Format
	// Iface is the interface the file's name or the command line says
	// the file belongs to, for formats that do not record it.
	Iface  string
	Named  bool    // named on the command line, not found by a glob
	Leases []Lease // the current leases (Current applied)
	// ClientIDs are the identifiers the dhclient.conf that goes with the
	// file sends, by interface ("" for all); nil if none.
	ClientIDs map[string]ConfClientID
}

// Iface is what a release needs to know about a local interface.
type Iface struct {
	Name     string
	MAC      net.HardwareAddr
	Prefixes []netip.Prefix // its IPv4 addresses with their prefix lengths
}

func (i Iface) has(a netip.Addr) bool {
	for _, p := range i.Prefixes {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

// Verdict is what to do with a lease.
type Verdict int

const (
	Release           Verdict = iota
	SkipExpired               // the lease has ended: the server has already freed it
	SkipNotConfigured         // the address is not on the interface (a stale file)
	SkipNoServer              // the file records no server identifier
	SkipNoInterface           // no such interface, or the file does not say which
	SkipNotEthernet           // the interface has no 6-byte hardware address
	SkipNotAsked              // a named file's lease for an interface not asked for
)

// Action is one lease and what Plan decided for it.
type Action struct {
	Iface    string
	Lease    Lease
	Source   string // the lease file
	Format   Format
	MAC      net.HardwareAddr
	ClientID []byte // option 61 to send, nil for none
	Expires  time.Time
	Verdict  Verdict
	Reason   string // why it is skipped
}

// Plan decides, for every lease the sources hold, whether to release it:
// a lease is released when its interface exists and has an Ethernet
// address, the lease has not ended, its address is still configured on
// the interface (a DHCPRELEASE must come from the address it gives
// back, and an address the node no longer holds may by now be another
// lease of the same MAC's), and the file names the server. When only is
// not empty, leases on other interfaces are left out, except those of
// named files (Source.Named), which are reported skipped with the reason:
// someone asked for that file. A lease found in
// several files (interface and address equal) is planned once: from a
// file that allows the release if any does, else from the file whose
// lease ends last (unknown counting as last), else from the file written
// last (Lease.Written: dhcpcd's files of one wireless interface, one a
// network, may name one address from two servers). Actions are ordered
// by interface and address.
func Plan(sources []Source, ifaces map[string]Iface, only []string, now time.Time) []Action {
	type key struct {
		iface string
		addr  netip.Addr
	}
	seen := map[key]int{}
	var out []Action
	for _, s := range sources {
		for _, l := range s.Leases {
			name := leaseIface(s, l)
			if len(only) > 0 && !slices.Contains(only, name) {
				if s.Named {
					out = append(out, notAsked(s, l, name, only))
				}
				continue
			}
			a := Action{Iface: name, Lease: l, Source: s.Path, Format: s.Format, Verdict: Release}
			a.Expires, _ = l.Expiry()
			if i, dup := seen[key{name, l.Address}]; dup {
				d := decide(a, s, ifaces, now)
				old := out[i]
				same := (d.Verdict == Release) == (old.Verdict == Release)
				if d.Verdict == Release && old.Verdict != Release ||
					same && later(d.Expires, old.Expires) ||
					same && d.Expires.Equal(old.Expires) && d.Lease.Written.After(old.Lease.Written) {
					out[i] = d
				}
				continue
			}
			seen[key{name, l.Address}] = len(out)
			out = append(out, decide(a, s, ifaces, now))
		}
	}
	slices.SortStableFunc(out, func(x, y Action) int {
		return cmp.Or(cmp.Compare(x.Iface, y.Iface), x.Lease.Address.Compare(y.Lease.Address))
	})
	return out
}

// leaseIface is the interface a lease is for: the one its file records,
// else the one the file's name or the command line gives ("" if none).
func leaseIface(s Source, l Lease) string {
	if l.Interface != "" {
		return l.Interface
	}
	return s.Iface
}

// notAsked is the action for a named file's lease on an interface other
// than those asked for.
func notAsked(s Source, l Lease, name string, only []string) Action {
	a := Action{Iface: name, Lease: l, Source: s.Path, Format: s.Format, Verdict: SkipNotAsked}
	if name == "" {
		a.Verdict = SkipNoInterface
		a.Reason = "the file does not say which interface it is for, and of several --interface none is assumed (name its interface as the only --interface)"
		return a
	}
	a.Reason = fmt.Sprintf("the lease is for %s, not --interface %s", name, strings.Join(only, ", "))
	return a
}

// later reports whether expiry a is after b, zero meaning never or
// unknown (which counts as latest).
func later(a, b time.Time) bool {
	if b.IsZero() {
		return false
	}
	return a.IsZero() || a.After(b)
}

func decide(a Action, s Source, ifaces map[string]Iface, now time.Time) Action {
	skip := func(v Verdict, format string, args ...any) Action {
		a.Verdict, a.Reason = v, fmt.Sprintf(format, args...)
		return a
	}
	if a.Iface == "" {
		return skip(SkipNoInterface, "the file does not say which interface it is for (name one with --interface)")
	}
	ifc, ok := ifaces[a.Iface]
	if !ok {
		return skip(SkipNoInterface, "no interface %s on this node", a.Iface)
	}
	a.MAC = ifc.MAC
	if len(a.Lease.HWAddr) == 6 {
		// The address the client leased with: dhcpd ignores a release
		// whose chaddr is not the lease's (server/dhcp.c, dhcprelease).
		a.MAC = a.Lease.HWAddr
	}
	a.ClientID = a.Lease.ClientID
	if a.ClientID == nil {
		id, ok := s.ClientIDs[a.Iface]
		if !ok {
			id, ok = s.ClientIDs[""]
		}
		switch {
		case ok && id.Unknown:
			// An expression only dhclient evaluates: none sent.
		case ok && id.Hardware && len(ifc.MAC) > 0:
			a.ClientID = append([]byte{1}, ifc.MAC...)
		case ok:
			a.ClientID = id.Bytes
		}
	}
	if !a.Expires.IsZero() && !a.Expires.After(now) {
		return skip(SkipExpired, "the lease expired at %s", a.Expires.UTC().Format(time.RFC3339))
	}
	if !ifc.has(a.Lease.Address) {
		return skip(SkipNotConfigured, "%s is not configured on %s (a stale lease, or the address is already gone)", a.Lease.Address, a.Iface)
	}
	if !a.Lease.Server.IsValid() {
		return skip(SkipNoServer, "the lease file records no server identifier")
	}
	if len(a.MAC) != 6 {
		return skip(SkipNotEthernet, "%s has no Ethernet hardware address", a.Iface)
	}
	return a
}
