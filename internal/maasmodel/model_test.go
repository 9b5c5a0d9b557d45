package maasmodel

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestApply: each case is a sequence of events and the region's rows
// after it (IP → linked MACs). The behaviour is canonical/maas
// src/maasservicelayer/services/leases.py store_lease_info,
// _commit_lease_info and _release_lease_info, with
// db/repositories/staticipaddress.py create_or_update (an upsert on ip
// and alloc_type) and get_discovered_ips_in_family_for_interfaces, and
// services/interfaces.py link_ip / db/repositories/interfaces.py add_ip
// (links are only ever added).
func TestApply(t *testing.T) {
	const (
		a, b, c = "02:00:00:00:00:0a", "02:00:00:00:00:0b", "02:00:00:00:00:0c"
		x, y    = "203.0.113.1", "203.0.113.2"
		x6      = "2001:db8::1"
	)
	ev := func(action, ip, mac string) Event { return Event{Action: action, IP: ip, MAC: mac} }
	tests := []struct {
		name   string
		events []Event
		want   map[string]string // IP → Lease.MAC()
	}{{
		name:   "a commit links the address to the MAC",
		events: []Event{ev("commit", x, a)},
		want:   map[string]string{x: a},
	}, {
		name:   "an expiry takes it away",
		events: []Event{ev("commit", x, a), ev("expiry", x, a)},
		want:   map[string]string{},
	}, {
		name:   "a MAC's news of another address deletes its old one",
		events: []Event{ev("commit", x, a), ev("commit", y, a)},
		want:   map[string]string{y: a},
	}, {
		name:   "... even an expiry of the other address",
		events: []Event{ev("commit", x, a), ev("commit", y, a), ev("commit", x, b), ev("expiry", y, a)},
		want:   map[string]string{x: b},
	}, {
		name:   "the other family is left alone",
		events: []Event{ev("commit", x, a), ev("commit", x6, a)},
		want:   map[string]string{x: a, x6: a},
	}, {
		name:   "an event from a MAC MAAS has no interface for, other than a commit, does nothing",
		events: []Event{ev("commit", x, a), ev("expiry", x, c), ev("release", y, c)},
		want:   map[string]string{x: a},
	}, {
		name:   "A's end told before B's commit: B alone holds it, and A's late release leaves it",
		events: []Event{ev("commit", x, a), ev("expiry", x, a), ev("commit", x, b), ev("release", x, a)},
		want:   map[string]string{x: b},
	}, {
		name:   "A's end never told: B's commit updates A's row in place and links B too",
		events: []Event{ev("commit", x, a), ev("commit", x, b)},
		want:   map[string]string{x: a + "," + b},
	}, {
		name:   "... B's renewals keep A linked",
		events: []Event{ev("commit", x, a), ev("commit", x, b), ev("commit", x, b)},
		want:   map[string]string{x: a + "," + b},
	}, {
		name:   "... A's late expiry takes the address from B",
		events: []Event{ev("commit", x, a), ev("commit", x, b), ev("expiry", x, a)},
		want:   map[string]string{},
	}, {
		name:   "... and so does A's next lease anywhere in the family",
		events: []Event{ev("commit", x, a), ev("commit", x, b), ev("commit", y, a)},
		want:   map[string]string{y: a},
	}, {
		name:   "... until B's next commit after that, which makes a row of B's alone",
		events: []Event{ev("commit", x, a), ev("commit", x, b), ev("expiry", x, a), ev("commit", x, b)},
		want:   map[string]string{x: b},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			for _, e := range tt.events {
				r.Apply(e)
			}
			got := map[string]string{}
			for _, ip := range r.IPs() {
				l, _ := r.Lease(ip)
				got[ip] = l.MAC()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			// byMAC mirrors the rows' links exactly.
			for mac, ips := range r.byMAC {
				for ip := range ips {
					if l, ok := r.rows[ip]; !ok || !slices.Contains(l.MACs, mac) {
						t.Errorf("byMAC[%s] holds %s, not linked to it", mac, ip)
					}
				}
			}
		})
	}
}

func TestDeleteAndCopies(t *testing.T) {
	r := New()
	r.Apply(Event{Action: "commit", IP: "203.0.113.1", MAC: "02:00:00:00:00:0a", Hostname: "n1", LeaseTime: 600, Timestamp: 100})
	l, ok := r.Lease("203.0.113.1")
	if !ok || l.Hostname != "n1" || l.LeaseTime != 600 || l.Timestamp != 100 {
		t.Fatalf("Lease: %+v %v", l, ok)
	}
	l.MACs[0] = "changed"
	if l2, _ := r.Lease("203.0.113.1"); l2.MAC() != "02:00:00:00:00:0a" {
		t.Errorf("Lease handed out the row's own slice: %q", l2.MAC())
	}
	if !r.Delete("203.0.113.1") || r.Delete("203.0.113.1") || r.Len() != 0 {
		t.Errorf("Delete: the row should go once")
	}
	// The MAC is known: its expiry of the deleted address does nothing.
	r.Apply(Event{Action: "expiry", IP: "203.0.113.1", MAC: "02:00:00:00:00:0a"})
	if r.Len() != 0 {
		t.Errorf("rows after an expiry of nothing: %v", r.IPs())
	}
}
