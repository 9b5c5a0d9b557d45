package outbox

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

var codecCases = []event.Event{
	{},
	{Action: event.Commit, Family: event.IPv4, MAC: "02:00:00:0a:0b:0c",
		IP: netip.MustParseAddr("203.0.113.7"), Hostname: "node-7", Timestamp: 1_700_000_000,
		LeaseTime: 600, TimestampNS: 1_700_000_000_123_456_789, Source: event.SourceHook},
	{Action: event.Expiry, Family: event.IPv6, MAC: "02:00:00:0a:0b:0c",
		IP: netip.MustParseAddr("2001:db8::1"), Timestamp: -1, LeaseTime: -5,
		Source: event.SourceFile, Reason: "vanished"},
	{Action: event.Release, Family: event.IPv4, MAC: "02:00:00:0a:0b:0c",
		IP: netip.MustParseAddr("198.51.100.1"), Hostname: strings.Repeat("h\uFFFD", event.MaxHostname/4)},
}

func TestEventRecordRoundTrip(t *testing.T) {
	for _, e := range codecCases {
		got, err := decodeEvent(encodeEvent(&e))
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", e, err)
		}
		if diff := cmp.Diff(e, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
		h, err := decodeHead(encodeEvent(&e))
		if err != nil || h.commit != (e.Action == event.Commit) || h.mac != e.MAC || h.ip != e.IP {
			t.Errorf("head of %+v = %+v, %v", e, h, err)
		}
	}
}

func TestDeadLetterRecordRoundTrip(t *testing.T) {
	d := DeadLetter{Seq: 42, Event: codecCases[1], Reason: "422 Unprocessable Entity: bad mac",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	got, err := decodeDeadLetter(42, encodeDeadLetter(&d))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestEventRecordRejects(t *testing.T) {
	good := encodeEvent(&codecCases[1])
	for name, b := range map[string][]byte{
		"empty":         nil,
		"version 2":     append([]byte{2}, good[1:]...),
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"huge length":   {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad ip length": {1, 0, 0, 0, 3, 1, 2, 3},
	} {
		if _, err := decodeEvent(b); !errors.Is(err, errRecord) {
			t.Errorf("%s: err = %v, want errRecord", name, err)
		}
	}
}

// FuzzDecodeEvent: a record that decodes re-encodes to a record that
// decodes to the same event (and its head agrees with it).
func FuzzDecodeEvent(f *testing.F) {
	for _, e := range codecCases {
		f.Add(encodeEvent(&e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEvent(b)
		if err != nil {
			return
		}
		again := encodeEvent(&e)
		e2, err := decodeEvent(again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !bytes.Equal(again, encodeEvent(&e2)) {
			t.Fatalf("encoding not stable: %+v vs %+v", e, e2)
		}
		h, err := decodeHead(b)
		if err != nil || h.commit != (e.Action == event.Commit) || h.mac != e.MAC || h.ip != e.IP {
			t.Fatalf("head %+v, %v disagrees with %+v", h, err, e)
		}
	})
}

// TestEventRecordLayout pins the record's bytes, which queued events an
// older agent wrote must keep: the address as netip's MarshalBinary
// writes it (4 bytes, 16, 16 and the zone), whichever way it is appended.
// encodeEvents (one buffer for a round's events) writes the same records
// as encodeEvent, each with its capacity ending where it does.
func TestEventRecordLayout(t *testing.T) {
	evs := []event.Event{
		codecCases[1],
		{Action: event.Commit, Family: event.IPv6, MAC: "02:00:00:0a:0b:0c", IP: netip.MustParseAddr("fe80::1%eth0")},
		{Action: event.Commit, Family: event.IPv4, MAC: "02:00:00:0a:0b:0c", IP: netip.MustParseAddr("::ffff:203.0.113.9")},
	}
	want := []string{
		"0106636f6d6d697404697076341130323a30303a30303a30613a30623a306304cb007107066e6f64652d3780c49fd50cb009aab4aed8c7bfce972f0100",
		"0106636f6d6d697404697076361130323a30303a30303a30613a30623a306314fe80000000000000000000000000000165746830000000000000",
		"0106636f6d6d697404697076341130323a30303a30303a30613a30623a30631000000000000000000000ffffcb007109000000000000",
	}
	recs := encodeEvents(evs)
	for i := range evs {
		if got := hex.EncodeToString(encodeEvent(&evs[i])); got != want[i] {
			t.Errorf("encodeEvent(%v) = %s, want %s", evs[i].IP, got, want[i])
		}
		if got := hex.EncodeToString(recs[i]); got != want[i] {
			t.Errorf("encodeEvents: record %d = %s, want %s", i, got, want[i])
		}
		if cap(recs[i]) != len(recs[i]) {
			t.Errorf("encodeEvents: record %d has room past its end (%d of %d): an append would write into the next", i, len(recs[i]), cap(recs[i]))
		}
		if ip, _ := evs[i].IP.MarshalBinary(); !bytes.Contains(recs[i], ip) {
			t.Errorf("record %d does not hold %v as MarshalBinary writes it", i, evs[i].IP)
		}
	}
}
