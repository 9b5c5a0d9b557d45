package reconcile

import (
	"context"
	"math"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/parser"
)

func openStore(t testing.TB, dir string) *outbox.Store {
	t.Helper()
	s, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRecordCodecs(t *testing.T) {
	for _, l := range []Lease{
		{State: parser.StateActive, Family: "ipv4", MAC: macA, Hostname: "node-1", Starts: t0, Ends: t0 + 600},
		{State: parser.StateFree, Family: "ipv6", Starts: -5, Ends: math.MaxInt64},
		{State: parser.StateBackup, Family: "unknown", Hostname: "ünïcode\x00"},
	} {
		got, err := decodeLease(encodeLease(l))
		if err != nil || got != l {
			t.Errorf("lease %+v: got %+v, %v", l, got, err)
		}
	}
	for _, x := range []Told{
		{Action: event.Commit, MAC: macA, At: t0},
		{Action: event.Expiry, At: -1},
		{Action: event.Release, MAC: macB, At: math.MaxInt64},
		{Action: event.Release, MAC: macB, At: t0, Recorded: true},
		{Action: event.Commit, MAC: macA, At: t0, AtNS: t0*1e9 + 123456789},
		{Action: event.Expiry, MAC: macA, At: t0, AtNS: t0*1e9 + 1, Recorded: true},
		{Action: event.Commit, MAC: macA, At: t0, AtNS: t0*1e9 + 7, Ends: t0 + 600},
		{Action: event.Commit, MAC: macA, At: t0, Ends: t0 + 600, PeerOwns: true},
		{Action: event.Expiry, MAC: macA, At: t0, Recorded: true, PeerOwns: true},
		{Action: event.Commit, MAC: macA, At: t0, PeerOwns: true},
		{Action: event.Expiry, MAC: macA, At: t0, AtNS: t0*1e9 + 1, PeerOwns: true},
	} {
		got, err := decodeTold(encodeTold(x))
		if err != nil || got != x {
			t.Errorf("told %+v: got %+v, %v", x, got, err)
		}
	}
	// Truncated records are errors, never panics.
	full := encodeLease(Lease{State: parser.StateActive, MAC: macA, Hostname: "h"})
	for i := range len(full) {
		if _, err := decodeLease(full[:i]); err == nil {
			t.Errorf("lease cut at %d decoded", i)
		}
	}
	if _, err := decodeTold([]byte{1, 9, 0, 0}); err == nil {
		t.Error("unknown action decoded")
	}
	// A record without a fine time is written as an older agent wrote it
	// (version 1), so a downgrade reads it; one with a fine time cut short
	// is an error.
	if b := encodeTold(Told{Action: event.Commit, MAC: macA, At: t0, Recorded: true}); b[0] != 1 {
		t.Errorf("told without at_ns written as version %d, want 1", b[0])
	}
	fine := encodeTold(Told{Action: event.Commit, MAC: macA, At: t0, AtNS: t0*1e9 + 5})
	for i := range len(fine) {
		if _, err := decodeTold(fine[:i]); err == nil {
			t.Errorf("told cut at %d of %d decoded", i, len(fine))
		}
	}
}

// TestPersistRoundTrip writes a state built by the rules through the
// outbox and loads it back, incrementally: each commit writes only what
// changed, and the loaded state equals the one in memory.
func TestPersistRoundTrip(t *testing.T) {
	store := openStore(t, t.TempDir())
	defer store.Close()
	ctx := context.Background()
	s := NewState(grace)
	pos := &Position{Dev: 1, Ino: 2, Offset: 300, HeadLen: 300, Head: 7, TailLen: 300, Tail: 7}
	commit := func(pos *Position) {
		t.Helper()
		recs, err := records(s, s.TakeDirty(), pos)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Update(ctx, bucketName, func(b *bbolt.Bucket) ([]event.Event, error) { return nil, write(b, recs) }); err != nil {
			t.Fatal(err)
		}
	}
	check := func(wantPos *Position) {
		t.Helper()
		var got *State
		var gotPos *Position
		err := store.View(bucketName, func(b *bbolt.Bucket) error {
			var bad int
			var err error
			got, gotPos, bad, err = load(b, grace)
			if bad > 0 {
				t.Errorf("%d bad records", bad)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(s.File, got.File); diff != "" {
			t.Errorf("File (-memory +loaded):\n%s", diff)
		}
		if diff := cmp.Diff(s.Told, got.Told); diff != "" {
			t.Errorf("Told (-memory +loaded):\n%s", diff)
		}
		if diff := cmp.Diff(s.Pending, got.Pending, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("Pending (-memory +loaded):\n%s", diff)
		}
		if got.Baselined != s.Baselined {
			t.Errorf("Baselined %t, want %t", got.Baselined, s.Baselined)
		}
		if diff := cmp.Diff(wantPos, gotPos); diff != "" {
			t.Errorf("position (-want +got):\n%s", diff)
		}
	}

	check(nil) // nothing stored: an empty state
	tab, _ := table(t, block(ip1, "active", macA, t0-100, t0+500)+block(ip2, "active", macB, t0-100, t0+5000)+
		block("203.0.113.12", "free", macA, t0-900, t0-100))
	s.Snapshot(tab, true, t0)
	commit(pos)
	check(pos)

	// ip1 vanishes (an expiry pending at its end), ip2 is released.
	tab, _ = table(t, block(ip2, "active", macB, t0-100, t0+5000)+block("203.0.113.12", "free", macA, t0-900, t0-100))
	s.Snapshot(tab, true, t0+10)
	s.Appended(blocks(t, block(ip2, "released", macB, t0-100, t0+20)), t0+20)
	commit(nil)
	check(pos)
	if len(s.Pending) != 2 {
		t.Fatalf("pending %v, want ip1's expiry and ip2's release", s.Pending)
	}

	// Everything due is told; the pending entries go away on disk too.
	for _, ev := range s.Due(t0 + 600) {
		s.Hook(ev)
	}
	pos2 := *pos
	pos2.Offset = 900
	commit(&pos2)
	check(&pos2)
	if len(s.Pending) != 0 {
		t.Fatalf("pending left: %v", s.Pending)
	}
}

// TestPersistCost checks that a commit after one append writes one
// address, not the table.
func TestPersistCost(t *testing.T) {
	s := NewState(grace)
	var text string
	for i := range 250 {
		text += block(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}).String(), "active", macA, t0-100, t0+5000)
	}
	tab, _ := table(t, text)
	s.Snapshot(tab, true, t0)
	if recs, _ := records(s, s.TakeDirty(), nil); len(recs) != 3*250+3 { // + baselined, sure mode, pair
		t.Fatalf("baseline: %d records", len(recs))
	}
	s.Appended(blocks(t, block("203.0.113.7", "free", macA, t0-100, t0+20)), t0+20)
	if recs, _ := records(s, s.TakeDirty(), nil); len(recs) != 3 {
		t.Fatalf("one append: %d records, want 3 (file, told, pending of one address)", len(recs))
	}
}

// FuzzDecodeRecords: stored records never panic the loader, and what
// decodes encodes back to a record that decodes the same.
func FuzzDecodeRecords(f *testing.F) {
	f.Add(encodeLease(Lease{State: parser.StateActive, Family: "ipv4", MAC: macA, Hostname: "h", Starts: t0, Ends: t0 + 600}))
	f.Add(encodeTold(Told{Action: event.Expiry, MAC: macB, At: t0}))
	f.Add([]byte{1, 2, 4, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if l, err := decodeLease(b); err == nil {
			if got, err := decodeLease(encodeLease(l)); err != nil || got != l {
				t.Fatalf("lease %+v: round trip %+v, %v", l, got, err)
			}
		}
		if x, err := decodeTold(b); err == nil {
			if got, err := decodeTold(encodeTold(x)); err != nil || got != x {
				t.Fatalf("told %+v: round trip %+v, %v", x, got, err)
			}
		}
	})
}
