package deliver

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// TestBatchBodyIsMarshal: the hand-written body is byte for byte what
// json.Marshal makes of the batch's items, for normalized events and for
// strings that need escaping (which take json.Marshal's path).
func TestBatchBodyIsMarshal(t *testing.T) {
	ev := func(action, family, mac, ip, host string, ts, lt int64) event.Queued {
		return event.Queued{Seq: 1, Event: event.Event{Action: action, Family: family, MAC: mac,
			IP: netip.MustParseAddr(ip), Hostname: host, Timestamp: ts, LeaseTime: lt}}
	}
	cases := map[string][]event.Queued{
		"empty": {},
		"one":   {ev(event.Commit, event.IPv4, "02:00:00:00:00:01", "198.18.0.1", "bench-1", 1764547200, 3600)},
		"several": {
			ev(event.Commit, event.IPv4, "02:00:00:00:00:01", "198.18.0.1", "", 1764547200, 3600),
			ev(event.Expiry, event.IPv4, "02:00:00:00:00:02", "10.0.0.2", "(none)", -1, 0),
			ev(event.Release, event.IPv6, "", "2001:db8::1", "Ünïcode Host.example", 0, 1<<40),
		},
		"needs escaping": {
			ev(event.Commit, event.IPv4, "02:00:00:00:00:01", "198.18.0.1", "a", 1, 1),
			ev("com\"mit<&>", "ipv4\\", "\x01\u00e9", "198.18.0.2", "x", 2, 2),
		},
		"del":        {ev(event.Commit, "ipv4\x7f", "", "198.18.0.3", "", 3, 3)},
		"zone":       {ev(event.Commit, event.IPv6, "", "fe80::1%e\"th0", "", 4, 4)},
		"no address": {{Seq: 1, Event: event.Event{Action: event.Commit, Family: event.IPv4, Timestamp: 5}}},
		"hostnames": {
			ev(event.Commit, event.IPv4, "", "10.0.0.1", "-lead", 1, 1),
			ev(event.Commit, event.IPv4, "", "10.0.0.1", "trail-", 1, 1),
			ev(event.Commit, event.IPv4, "", "10.0.0.1", "a--b", 1, 1),
			ev(event.Commit, event.IPv4, "", "10.0.0.1", "none", 1, 1),
			ev(event.Commit, event.IPv4, "", "10.0.0.1", "(none)", 1, 1),
			ev(event.Commit, event.IPv4, "", "10.0.0.1", strings.Repeat("x", 64), 1, 1),
			ev(event.Commit, event.IPv4, "", "10.0.0.1", strings.Repeat("x", 65), 1, 1),
			ev(event.Commit, event.IPv4, "", "10.0.0.1", "UPPER", 1, 1),
		},
	}
	r := rand.New(rand.NewPCG(1, 2))
	var many []event.Queued
	for i := range 500 {
		host := make([]byte, r.IntN(80))
		for j := range host {
			host[j] = byte(0x20 + r.IntN(0x60))
		}
		many = append(many, ev(event.Commit, event.IPv4, "02:00:00:00:00:03", netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String(), string(host), r.Int64(), r.Int64N(1<<33)))
	}
	cases["random hostnames"] = many
	for name, batch := range cases {
		got, err := batchBody(batch)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := marshalItems(batch)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(batch) == 0 {
			want = []byte("[]") // json.Marshal of an empty, non-nil slice
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: not JSON: %s", name, got)
		}
	}
}
