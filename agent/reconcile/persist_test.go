package reconcile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/parser"
)

func openStore(t testing.TB, dir string) *outbox.Store {
	t.Helper()
	return openStoreReg(t, dir, nil)
}

// openStoreReg opens the outbox in dir with its metrics in reg (nil: none).
func openStoreReg(t testing.TB, dir string, reg prometheus.Registerer) *outbox.Store {
	t.Helper()
	s, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{Logger: zerolog.Nop(), Registerer: reg})
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
		{Action: event.Expiry, MAC: macA, At: t0, Recorded: true, PeerOwns: true, Spoke: true},
		{Action: event.Release, MAC: macB, At: t0, Recorded: true, PeerOwns: true, Spoke: true, OwnAt: t0 - 30},
		{Action: event.Expiry, MAC: macA, At: t0, Recorded: true, Interrupted: true},
		{Action: event.Expiry, MAC: macA, At: t0, Recorded: true, PeerOwns: true, Interrupted: true, OwnAt: -1},
		{Action: event.Expiry, MAC: macA, At: t0, OwnDropped: true},
		{Action: event.Commit, MAC: macB, At: t0, Recorded: true, PeerOwns: true, OwnAt: t0 - 5, OwnAtNS: (t0-5)*1e9 + 3, OwnDropped: true},
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
// persisted is a State and what the store holds of it: commit writes
// what changed (records, write) as the reconciler does, check loads the
// store and compares.
type persisted struct {
	t     *testing.T
	store *outbox.Store
	s     *State
}

func (p persisted) commit(pos *Position) {
	p.t.Helper()
	recs, err := records(p.s, p.s.TakeDirty(), pos)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.store.Update(context.Background(), bucketName, func(b *bbolt.Bucket) ([]event.Event, error) { return nil, write(b, recs) }); err != nil {
		p.t.Fatal(err)
	}
}

func (p persisted) check(wantPos *Position) {
	t, s := p.t, p.s
	t.Helper()
	var got *State
	var gotPos *Position
	err := p.store.View(bucketName, func(b *bbolt.Bucket) error {
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
	if diff := cmp.Diff(s.Replays, got.Replays); diff != "" {
		t.Errorf("Replays (-memory +loaded):\n%s", diff)
	}
	if got.Baselined != s.Baselined {
		t.Errorf("Baselined %t, want %t", got.Baselined, s.Baselined)
	}
	if diff := cmp.Diff(s.Pairs(), got.Pairs()); diff != "" {
		t.Errorf("failover pairs (-memory +loaded):\n%s", diff)
	}
	if !peerSetEqual(s.peers, got.peers) {
		t.Errorf("failover peers %+v, loaded %+v", s.peers, got.peers)
	}
	if diff := cmp.Diff(wantPos, gotPos); diff != "" {
		t.Errorf("position (-want +got):\n%s", diff)
	}
}

func TestPersistRoundTrip(t *testing.T) {
	store := openStore(t, t.TempDir())
	defer store.Close()
	s := NewState(grace)
	pos := &Position{Dev: 1, Ino: 2, Offset: 300, HeadLen: 300, Head: 7, TailLen: 300, Tail: 7}
	p := persisted{t, store, s}
	commit, check := p.commit, p.check

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

	// A pair replay queued (the pair channel's, failover.go): a
	// restarted agent still knows the own news it is judged against.
	replayed := hook(event.Expiry, ip2, macB, t0+30)
	replayed.TimestampNS = (t0+30)*1e9 + 5e8
	own := hook(event.Commit, ip2, macB, t0+25)
	own.TimestampNS = (t0+25)*1e9 + 2e8
	s.queueReplay(replayed, own)
	commit(nil)
	check(pos)
	if got, ok := s.replayOwn(replayed); !ok || got.Timestamp != own.Timestamp || got.TimestampNS != own.TimestampNS {
		t.Fatalf("replayOwn = %+v, %t; want the own news %+v", got, ok, own)
	}
	if _, ok := s.replayOwn(hook(event.Expiry, ip2, macB, t0+31)); ok {
		t.Fatal("replayOwn answered for another end than the one queued")
	}

	// Several failover peers (MAAS: one per HA VLAN), one of them in
	// partner-down: a restarted agent resumes with each pair's states
	// and knows which subnet follows which.
	s.SetPeers(peersOf(t, threeVLANs))
	appendPair(t, s, fostateOf("failover-vlan-5002", "partner-down", "communications-interrupted"), t0+40)
	commit(nil)
	check(pos)
	if s.peers == nil || len(s.Pairs()) != 2 || !s.pairOf(netip.MustParseAddr("198.51.100.10")).Survivor() {
		t.Fatalf("pairs %+v, peers %+v", s.Pairs(), s.peers)
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

// TestPersistRandom: whatever happens to the state (file snapshots and
// appends, hook events, synthesised events told), a commit of only what
// changed leaves on disk exactly what is in memory.
func TestPersistRandom(t *testing.T) {
	store := openStore(t, t.TempDir())
	defer store.Close()
	s := NewState(grace)
	p := persisted{t, store, s}
	c := newChanges(t, s, 2026)
	p.commit(nil)
	p.check(nil)
	for i := range 400 {
		if !c.step() {
			continue // several changes in one commit
		}
		p.commit(nil)
		p.check(nil)
		if t.Failed() {
			t.Fatalf("after step %d", i)
		}
	}
}

// changes makes random changes to a state, the same for the same seed.
type changes struct {
	t   *testing.T
	s   *State
	rng *rand.Rand
	now int64
}

// newChanges starts s with a baseline.
func newChanges(t *testing.T, s *State, seed uint64) *changes {
	c := &changes{t: t, s: s, rng: rand.New(rand.NewPCG(16, seed)), now: t0}
	tab, _ := table(t, block(ip1, "active", macA, t0-100, t0+500))
	s.Snapshot(tab, true, t0)
	return c
}

// step makes one change and says whether to commit after it.
func (c *changes) step() bool {
	t, s, rng := c.t, c.s, c.rng
	ip := func() string { return fmt.Sprintf("203.0.113.%d", 10+rng.IntN(6)) }
	mac := func() string { return []string{macA, macB}[rng.IntN(2)] }
	state := func() string { return []string{"active", "active", "free", "expired", "released"}[rng.IntN(5)] }
	c.now += int64(rng.IntN(40))
	now := c.now
	switch rng.IntN(5) {
	case 0: // dhcpd's rewrite: a few addresses
		var text string
		for range rng.IntN(4) {
			text += block(ip(), state(), mac(), now-100, now+int64(rng.IntN(200)))
		}
		tab, _ := table(t, text)
		s.Snapshot(tab, true, now)
	case 1, 2: // appended blocks
		var text string
		for range 1 + rng.IntN(3) {
			text += block(ip(), state(), mac(), now-int64(rng.IntN(100)), now+int64(rng.IntN(200)))
		}
		s.Appended(blocks(t, text), now)
	case 3: // a hook event
		s.Hook(hook([]string{event.Commit, event.Expiry, event.Release}[rng.IntN(3)], ip(), mac(), now-int64(rng.IntN(5))))
	case 4: // what is due is told
		for _, ev := range s.Due(now) {
			s.Hook(ev)
		}
	}
	return rng.IntN(3) != 0
}

// TestPersistKill9Child is the writer of TestPersistKill9: it makes the
// changes and commits them, printing the number of each commit once it
// returned (on disk), until it is killed.
func TestPersistKill9Child(t *testing.T) {
	dir := os.Getenv("RECONCILE_KILL9_DIR")
	if dir == "" {
		t.Skip("run by TestPersistKill9")
	}
	store := openStore(t, dir)
	s := NewState(grace)
	p := persisted{t, store, s}
	c := newChanges(t, s, kill9Seed)
	p.commit(nil)
	fmt.Println("committed 0")
	for n := 1; ; {
		if c.step() {
			p.commit(nil)
			fmt.Printf("committed %d\n", n)
			n++
		}
	}
}

const kill9Seed = 99

// TestPersistKill9: a writer killed (SIGKILL) at a random moment leaves
// on disk the state of its last acknowledged commit, or of the one after
// it (in flight when it died): nothing acknowledged is lost, nothing is
// half written.
func TestPersistKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	rng := rand.New(rand.NewPCG(7, 9))
	for round := range 4 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestPersistKill9Child$")
		cmd.Env = append(os.Environ(), "RECONCILE_KILL9_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := make(chan int, 1)
		first := make(chan struct{})
		go func() {
			last := -1
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var n int
				if _, err := fmt.Sscanf(sc.Text(), "committed %d", &n); err == nil {
					last = n
					if n == 1 {
						close(first)
					}
				}
			}
			acked <- last
		}()
		// Killed at a random moment once it has acknowledged a commit
		// (a start under -race on a loaded machine can take longer than
		// any fixed delay).
		select {
		case <-first:
		case <-time.After(2 * time.Minute):
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		last := <-acked
		cmd.Wait()
		if last < 1 {
			t.Fatalf("round %d: the writer acknowledged %d commits before it was killed", round, last)
		}

		// The state on disk, and the states of commits last and last+1.
		store := openStore(t, dir)
		var got *State
		err = store.View(bucketName, func(b *bbolt.Bucket) error {
			var err error
			got, _, _, err = load(b, grace)
			return err
		})
		store.Close()
		if err != nil {
			t.Fatal(err)
		}
		s := NewState(grace)
		c := newChanges(t, s, kill9Seed)
		var want []string
		for n := 1; n <= last+1; {
			if c.step() {
				s.TakeDirty()
				if n >= last {
					want = append(want, stateText(s))
				}
				n++
			}
		}
		if g := stateText(got); g != want[0] && g != want[1] {
			t.Fatalf("round %d: killed after commit %d acknowledged; on disk:\n%s\nwant commit %d's:\n%s\nor commit %d's:\n%s",
				round, last, g, last, want[0], last+1, want[1])
		}
		t.Logf("round %d: killed after commit %d acknowledged, on disk as committed", round, last)
	}
}

// stateText is what a state persists, comparable.
func stateText(s *State) string {
	return fmt.Sprintf("file %v\ntold %v\npending %v", s.File, s.Told, s.Pending)
}

// TestPersistCost checks that a commit after one append writes one
// address, not the table, and that a hook event writes its address's
// told record alone.
func TestPersistCost(t *testing.T) {
	s := NewState(grace)
	var text string
	for i := range 250 {
		text += block(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}).String(), "active", macA, t0-100, t0+5000)
	}
	tab, _ := table(t, text)
	s.Snapshot(tab, true, t0)
	// Each address's block and what it told; + baselined, sure mode,
	// pair, peers.
	recs, _ := records(s, s.TakeDirty(), nil)
	if len(recs) != 2*250+4 {
		t.Fatalf("baseline: %d records", len(recs))
	}
	// In key order, sub-bucket by sub-bucket, as bbolt appends fastest.
	for i := 1; i < 2*250; i++ {
		a, b := recs[i-1], recs[i]
		if c := bytes.Compare(a.sub, b.sub); c > 0 || c == 0 && bytes.Compare(a.key, b.key) >= 0 {
			t.Fatalf("record %d (%s %v) after record %d (%s %v)", i, b.sub, b.key, i-1, a.sub, a.key)
		}
	}
	s.Appended(blocks(t, block("203.0.113.7", "free", macA, t0-100, t0+20)), t0+20)
	recs, _ = records(s, s.TakeDirty(), nil)
	if len(recs) == 0 || len(recs) > 3 {
		t.Fatalf("one append: %d records, want 1 to 3 (file, told, pending of one address)", len(recs))
	}
	for _, r := range recs {
		if netip.AddrFrom4([4]byte(r.key)) != netip.MustParseAddr("203.0.113.7") {
			t.Errorf("one append wrote %s's %s record", netip.AddrFrom4([4]byte(r.key)), r.sub)
		}
	}
	s.Hook(hook(event.Commit, "203.0.113.9", macB, t0+30))
	recs, _ = records(s, s.TakeDirty(), nil)
	if len(recs) != 1 || string(recs[0].sub) != string(subTold) {
		t.Fatalf("one hook event: %d records (%v), want its told record", len(recs), recs)
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

// TestPersistUnwritten: a restarted agent still ends a lease a hook told
// and the file never showed (rule 3, unwritten): the commit's end is in
// its Told record, and the end heap is rebuilt from it.
func TestPersistUnwritten(t *testing.T) {
	store := openStore(t, t.TempDir())
	defer store.Close()
	s := NewState(grace)
	p := persisted{t, store, s}
	tab, _ := table(t, block(ip1, "active", macA, t0-100, t0+5000))
	s.Snapshot(tab, true, t0)
	s.Hook(renewal(ip2, macB, t0+10, 20))
	p.commit(nil)
	var got *State
	if err := store.View(bucketName, func(b *bbolt.Bucket) error {
		var err error
		got, _, _, err = load(b, grace)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if at, ok := got.NextDue(); !ok || at != t0+30+grace {
		t.Fatalf("loaded NextDue = %+d, %t; want the commit's end plus the grace", at-t0, ok)
	}
	evs := got.Due(t0 + 30 + grace)
	if len(evs) != 1 || evs[0].Reason != ReasonUnwritten || evs[0].IP != netip.MustParseAddr(ip2) || evs[0].Timestamp != t0+30 {
		t.Fatalf("loaded Due = %+v; want the unwritten lease's expiry", evs)
	}
}

// TestRecordsLayout: records cuts every key and value out of one buffer;
// each must be what the per-record encoders write (the key as AsSlice
// returns the address, so records written before stay readable), and
// none may have room past its end, where the next one is appended.
func TestRecordsLayout(t *testing.T) {
	s := NewState(grace)
	for i, ip := range []netip.Addr{
		netip.MustParseAddr("203.0.113.7"),
		netip.MustParseAddr("2001:db8::7"),
		netip.MustParseAddr("::ffff:198.51.100.7"),
		netip.MustParseAddr("198.51.100.8"),
	} {
		s.File[ip] = Lease{State: parser.StateActive, Family: "ipv4", MAC: macA, Hostname: strings.Repeat("h", 40*i), Starts: t0, Ends: t0 + 600}
		s.Told[ip] = Told{Action: event.Commit, MAC: macB, At: t0 + int64(i), Ends: t0 + 600}
		s.mark(ip, ChangedFile|ChangedTold)
	}
	recs, err := records(s, s.TakeDirty(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 8 {
		t.Fatalf("%d records, want 8 (a block and a told record for each of 4 addresses)", len(recs))
	}
	for _, r := range recs {
		ip, ok := netip.AddrFromSlice(r.key)
		if !ok || !bytes.Equal(r.key, ip.AsSlice()) {
			t.Fatalf("key %x is not an address as AsSlice writes it", r.key)
		}
		var want []byte
		switch string(r.sub) {
		case string(subFile):
			want = encodeLease(s.File[ip])
		case string(subTold):
			want = encodeTold(s.Told[ip])
		default:
			t.Fatalf("record in %q", r.sub)
		}
		if !bytes.Equal(r.val, want) {
			t.Errorf("%s %v: %x, want %x", r.sub, ip, r.val, want)
		}
		if cap(r.key) != len(r.key) || cap(r.val) != len(r.val) {
			t.Errorf("%s %v: key or value with room past its end", r.sub, ip)
		}
	}
}

// TestDropFamily: an agent that followed dhcpd.leases alone recorded the
// hooks' DHCPv6 events in the one state; started with dhcpd.leases6
// followed too, its dhcpd.leases reconciler (Family ipv4) drops those
// records, in memory at once and on disk at its next commit, so that
// rule 3 never ends a lease its file cannot show. The dhcpd.leases6
// reconciler starts on a bucket of its own.
func TestDropFamily(t *testing.T) {
	dir := t.TempDir()
	store := openStore(t, dir)
	defer store.Close()
	const ip6 = "2001:db8::5"
	s := NewState(grace)
	p := persisted{t, store, s}
	tab, _ := table(t, block(ip1, "active", macA, t0-100, t0+5000))
	s.Snapshot(tab, true, t0)
	s.Hook(renewal(ip1, macA, t0+10, 600))
	v6 := renewal(ip6, macB, t0+10, 600)
	v6.Family = event.IPv6
	s.Hook(v6)
	p.commit(nil)

	loaded := func(bucket string) *State {
		t.Helper()
		var got *State
		if err := store.View(bucket, func(b *bbolt.Bucket) error {
			var err error
			got, _, _, err = load(b, grace)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := loaded(bucketName); len(got.Told) != 2 {
		t.Fatalf("stored told records: %v; want both addresses'", got.Told)
	}
	leases := filepath.Join(dir, "dhcpd.leases")
	r, err := New(Config{Leases: leases, Family: event.IPv4}, store, zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.st.Told[netip.MustParseAddr(ip6)]; ok || len(r.st.Told) != 1 {
		t.Errorf("ipv4 reconciler's told records: %v; want %s's alone", r.st.Told, ip1)
	}
	r.mu.Lock()
	err = r.commit(context.Background(), nil)
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	got := loaded(bucketName)
	if _, ok := got.Told[netip.MustParseAddr(ip6)]; ok || len(got.Told) != 1 || len(got.File) != 1 {
		t.Errorf("after its commit, stored told %v, file %v; want %s's alone", got.Told, got.File, ip1)
	}

	r6, err := New(Config{Leases: filepath.Join(dir, "dhcpd6.leases"), Family: event.IPv6, Bucket: "reconcile6"}, store, zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r6.st.Told) != 0 || len(r6.st.File) != 0 || r6.st.Baselined {
		t.Errorf("ipv6 reconciler loaded told %v, file %v, baselined %t; want a state of its own, new", r6.st.Told, r6.st.File, r6.st.Baselined)
	}
	r6.mu.Lock()
	r6.st.Hook(v6)
	err = r6.commit(context.Background(), nil)
	r6.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded("reconcile6"); len(got.Told) != 1 {
		t.Errorf("stored in reconcile6: told %v; want %s's", got.Told, ip6)
	}
	if got := loaded(bucketName); len(got.Told) != 1 {
		t.Errorf("the ipv6 reconciler's commit changed the ipv4 state: told %v", got.Told)
	}
}
