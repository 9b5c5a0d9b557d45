// Package maasmodel is the region's record of DHCP leases as MAAS keeps
// it, for the region stub and the chaos oracle: the DISCOVERED
// StaticIPAddress rows and their links to the interfaces of the MACs
// that were given them, changed one lease event at a time as
// maasservicelayer/services/leases.py store_lease_info changes them,
// after its subnet and dynamic-range checks (those are the caller's).
// Pure: no clock, no I/O.
//
// What it mirrors (canonical/maas, src/maasservicelayer/):
//
//   - services/leases.py store_lease_info: a MAC MAAS has no interface
//     for gets one on a commit (create_unkwnown_interface); any other
//     action from it changes nothing. Then every DISCOVERED address linked
//     to the MAC's interfaces, in the event's family, whose IP is not the
//     event's, is deleted, whoever else it is linked to
//     (db/repositories/staticipaddress.py
//     get_discovered_ips_in_family_for_interfaces; a row whose IP is NULL
//     has no family, so it is never among them).
//   - A commit (_commit_lease_info) creates the address's row or updates
//     it in place (staticipaddress.py create_or_update: an upsert on ip
//     and alloc_type) and links it to the MAC's interfaces
//     (services/interfaces.py link_ip and add_ip,
//     db/repositories/interfaces.py add_ip: an insert, on conflict
//     nothing). Nothing unlinks the interfaces linked before: an address
//     committed to B while A's lease of it was never ended stays linked
//     to A as well, and A's next event of that family (an expiry or
//     release of it, or any news of another address) takes it from B too.
//   - An expiry or a release (_release_lease_info): the MAC's row for the
//     address, if it has one, loses its IP (set to NULL) for every
//     interface linked to it. A row without an IP is no address's lease,
//     and the model keeps none.
package maasmodel

import (
	"net/netip"
	"slices"
	"strings"
)

// Event is one lease event as store_lease_info takes it.
type Event struct {
	Action    string // commit, expiry or release
	IP        string
	MAC       string
	Hostname  string
	LeaseTime int64
	Timestamp int64
}

// Lease is an address's DISCOVERED row.
type Lease struct {
	IP   string
	MACs []string // the MACs of the interfaces linked to it, in link order
	// Hostname is the last commit's. MAAS keeps it in a DNS resource
	// (_commit_lease_info: update_dynamic_hostname, or nothing for an
	// invalid one, or release_dynamic_hostname for a node's name); that
	// is not modelled.
	Hostname  string
	LeaseTime int64
	// Timestamp is the last commit's event time. MAAS's "created" is
	// not: _commit_lease_info passes it, but
	// db/repositories/staticipaddress.py create_or_update sets created
	// and updated to the region's clock at the upsert.
	Timestamp int64
}

// MAC is the MAC holding the address, or, when the row is linked to more
// than one interface, their MACs joined by commas: a region view no
// client of MAAS should ever leave behind.
func (l Lease) MAC() string { return strings.Join(l.MACs, ",") }

// Region is MAAS's DISCOVERED addresses. The zero value is not usable;
// New returns one.
type Region struct {
	rows  map[string]*Lease          // by IP
	byMAC map[string]map[string]bool // MAC → IPs of the rows linked to it
	known map[string]bool            // MACs MAAS has an interface for
}

// New returns an empty region.
func New() *Region {
	return &Region{rows: map[string]*Lease{}, byMAC: map[string]map[string]bool{}, known: map[string]bool{}}
}

// Apply applies one event, as store_lease_info does.
func (r *Region) Apply(ev Event) {
	if !r.known[ev.MAC] {
		if ev.Action != "commit" {
			return
		}
		r.known[ev.MAC] = true
	}
	v4 := is4(ev.IP)
	for ip := range r.byMAC[ev.MAC] {
		if ip != ev.IP && is4(ip) == v4 {
			r.Delete(ip)
		}
	}
	if ev.Action != "commit" {
		if r.byMAC[ev.MAC][ev.IP] {
			r.Delete(ev.IP)
		}
		return
	}
	l := r.rows[ev.IP]
	if l == nil {
		l = &Lease{IP: ev.IP}
		r.rows[ev.IP] = l
	}
	l.Hostname, l.LeaseTime, l.Timestamp = ev.Hostname, ev.LeaseTime, ev.Timestamp
	if !slices.Contains(l.MACs, ev.MAC) {
		l.MACs = append(l.MACs, ev.MAC)
	}
	if r.byMAC[ev.MAC] == nil {
		r.byMAC[ev.MAC] = map[string]bool{}
	}
	r.byMAC[ev.MAC][ev.IP] = true
}

// Delete removes the address's row, for every interface linked to it
// (also API 2.0's ipaddresses op=release of a DISCOVERED address). It
// reports whether there was one.
func (r *Region) Delete(ip string) bool {
	l, ok := r.rows[ip]
	if !ok {
		return false
	}
	for _, mac := range l.MACs {
		delete(r.byMAC[mac], ip)
	}
	delete(r.rows, ip)
	return true
}

// Lease returns the address's row.
func (r *Region) Lease(ip string) (Lease, bool) {
	l, ok := r.rows[ip]
	if !ok {
		return Lease{}, false
	}
	c := *l
	c.MACs = slices.Clone(l.MACs)
	return c, true
}

// IPs returns the addresses that have a row, in no order.
func (r *Region) IPs() []string {
	out := make([]string, 0, len(r.rows))
	for ip := range r.rows {
		out = append(out, ip)
	}
	return out
}

// Len is how many addresses have a row.
func (r *Region) Len() int { return len(r.rows) }

func is4(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.Unmap().Is4()
}
