package outbox

import (
	"net/netip"
	"slices"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// Coalesce returns the events of q (in Seq order) that the region still
// needs, in the same order: what a compaction pass keeps when the outbox
// is full. The rule, per IP, is in the package documentation; in short the
// last commit, the last later event for that commit's MAC, and the last
// event; with no commit queued, the last event of each MAC. Events are
// only ever dropped, never moved, so the relative order of everything
// kept, across IPs too, is unchanged.
func Coalesce(q []event.Queued) []event.Queued {
	hs := make([]head, len(q))
	for i := range q {
		hs[i] = head{commit: q[i].Event.Action == event.Commit, mac: q[i].Event.MAC, ip: q[i].Event.IP}
	}
	keep := coalesceKeep(hs)
	out := make([]event.Queued, 0, len(q))
	for i, k := range keep {
		if k {
			out = append(out, q[i])
		}
	}
	return out
}

// ipRun is what coalesceKeep tracks per IP.
type ipRun struct {
	commit  int    // index of the IP's last commit; -1 when none is queued
	mac     string // that commit's MAC
	seen    bool   // backward scan: the IP's last event has been met
	keptMAC bool   // backward scan: the last event after commit for mac is kept
	macs    []string
	before  []string // backward scan: the MACs met before the last commit
}

// coalesceKeep decides, for events in queue order, which to keep.
//
// Why this rule: the region keys rows by IP. A commit(M) binds the IP to
// M whatever came before, so nothing before an IP's last commit matters,
// save another MAC's end that was that MAC's last event there: MAAS links
// an address to the new MAC's interfaces without unlinking the old one's
// (maasservicelayer/services/leases.py _commit_lease_info,
// services/interfaces.py link_ip), so the old client's end must come
// before the new client's commit, as it did in the queue.
// After it, an expiry or release for M frees the IP (the last one carries
// the final action) and one for another MAC changes nothing, or, if the
// region frees by IP alone, frees it too; keeping the IP's last event
// covers both readings. With no commit queued the region's state is
// unknown, so an expiry for each MAC that was queued must survive, or an
// IP the region still binds to that MAC would stay bound.
func coalesceKeep(hs []head) []bool {
	runs := make(map[netip.Addr]*ipRun)
	for i := range hs {
		r := runs[hs[i].ip]
		if r == nil {
			r = &ipRun{commit: -1}
			runs[hs[i].ip] = r
		}
		if hs[i].commit {
			r.commit, r.mac = i, hs[i].mac
		}
	}
	keep := make([]bool, len(hs))
	for i := len(hs) - 1; i >= 0; i-- {
		h := &hs[i]
		r := runs[h.ip]
		last := !r.seen
		r.seen = true
		switch {
		case last:
			keep[i] = true
			if r.commit < 0 {
				r.macs = append(r.macs, h.mac)
			} else if i > r.commit && h.mac == r.mac {
				r.keptMAC = true
			}
		case r.commit < 0:
			if !slices.Contains(r.macs, h.mac) {
				keep[i] = true
				r.macs = append(r.macs, h.mac)
			}
		case i == r.commit:
			keep[i] = true
		case i > r.commit && h.mac == r.mac && !r.keptMAC:
			keep[i] = true
			r.keptMAC = true
		case i < r.commit && !slices.Contains(r.before, h.mac):
			r.before = append(r.before, h.mac)
			keep[i] = !h.commit && h.mac != r.mac
		}
	}
	return keep
}
