package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// TestMetaSyncFailure: a commit whose meta page was written but whose
// fdatasync failed (EIO; on a thin-provisioned or network file system
// also a full disk at writeback) is there all the same: bbolt reads the
// page cache's meta page from then on. The store must not give its Seqs
// again: the next Append wrote over them, and the Ack of a batch that
// held the ghost events deleted an event accepted since, never sent (a
// cold review, with strace's fault injection as here). The child runs
// under strace, which fails the fourth fdatasync with EIO: with bbolt
// v1.5 an Open of an existing file syncs twice (its Update), and the
// first Append's commit syncs its pages, then its meta page. strace
// counts invocations per thread, and the Go runtime may move the store's
// goroutines to another thread between them: a later commit's sync can
// then be some thread's fourth too, or the first Append's not be its
// thread's fourth. The child says so (ARTEFACT, PRECONDITION), and is run
// again, up to ten times.
func TestMetaSyncFailure(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("needs strace (apt-get install strace) to inject the failed fdatasync")
	}
	if testing.Short() {
		t.Skip("runs a child under strace")
	}
	path := filepath.Join(t.TempDir(), "outbox.db")
	s := openTest(t, path, 0)
	must(t, s.Append(context.Background(), ev(1, event.Commit)))
	must(t, s.Close())
	seeded, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for try := 1; ; try++ {
		if err := os.WriteFile(path, seeded, 0o600); err != nil { // each run from the same file
			t.Fatal(err)
		}
		cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync", "-e", "inject=fdatasync:error=EIO:when=4",
			os.Args[0], "-test.run", "^TestMetaSyncFailureChild$", "-test.v")
		cmd.Env = append(os.Environ(), "OUTBOX_SYNCFAIL_PATH="+path)
		out, err = cmd.CombinedOutput()
		if !strings.Contains(string(out), "ARTEFACT") && !strings.Contains(string(out), "PRECONDITION") || try == 10 {
			break
		}
		t.Logf("run %d: %s", try, out)
	}
	switch {
	case strings.Contains(string(out), "ARTEFACT"):
		t.Fatalf("ten runs in a row had an injected EIO fail a later commit (strace counts per thread):\n%s", out)
	case strings.Contains(string(out), "PRECONDITION"):
		t.Fatalf("the injected EIO did not fail the first Append's meta sync (has bbolt's number of fdatasync calls changed?):\n%s", out)
	case err != nil && strings.Contains(string(out), "ptrace"):
		t.Skipf("strace cannot trace here: %s", out)
	case err != nil:
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestMetaSyncFailureChild is TestMetaSyncFailure's child.
func TestMetaSyncFailureChild(t *testing.T) {
	path := os.Getenv("OUTBOX_SYNCFAIL_PATH")
	if path == "" {
		t.Skip("child of TestMetaSyncFailure")
	}
	ctx := context.Background()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A: its commit's meta sync fails (the injected EIO).
	if err := s.Append(ctx, ev(100, event.Commit), ev(101, event.Commit)); err == nil {
		fmt.Println("PRECONDITION: the first Append did not fail")
		return
	}
	q, err := s.Peek(100)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 3 {
		fmt.Printf("PRECONDITION: %d queued after the failed Append, want the first event and A's two ghosts\n", len(q))
		return
	}
	// B, then the deliverer peeks, then C is accepted, then the peeked
	// batch is acknowledged: C must stay queued, and nothing queued may
	// share a Seq.
	artefact := func(what string, err error) bool {
		if errors.Is(err, syscall.EIO) {
			fmt.Printf("ARTEFACT: %s failed too: %v\n", what, err)
			return true
		}
		return false
	}
	if err := s.Append(ctx, ev(200, event.Release)); artefact("B's Append", err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	batch, err := s.Peek(100)
	if err != nil {
		t.Fatal(err)
	}
	seqC, err := s.AppendSeq(ctx, ev(300, event.Commit))
	if artefact("C's Append", err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, e := range batch {
		if seen[e.Seq] {
			t.Errorf("Seq %d twice in %v", e.Seq, batch)
		}
		seen[e.Seq] = true
	}
	if seen[seqC] {
		t.Errorf("C accepted as Seq %d, which the peeked batch holds already", seqC)
	}
	if err := s.Ack(seqs(batch)...); artefact("the Ack", err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	q, err = s.Peek(100)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 1 || q[0].Event.IP != ev(300, event.Commit).IP || s.Depth() != 1 {
		t.Errorf("after the Ack of the peeked batch: queued %v (depth %d), want C alone", q, s.Depth())
	}
}

// TestSyncSettings: the kill -9 tests (TestCrashKill9, hooksock's
// TestKill9NoLoss) cannot see a missing fsync, since a killed process
// leaves the page cache to the kernel; a power cut would. So the settings
// that would skip one are checked here: every commit syncs its pages and
// its meta page, growth syncs, and the free list is stored.
func TestSyncSettings(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "outbox.db"), 0)
	if db := s.db; db.NoSync || db.NoGrowSync || db.NoFreelistSync {
		t.Errorf("bbolt NoSync %v, NoGrowSync %v, NoFreelistSync %v: an accepted event could be lost to a power cut",
			db.NoSync, db.NoGrowSync, db.NoFreelistSync)
	}
}

// TestDamagedFile: a file whose data pages are damaged (a disk's bad
// sectors, a copy cut short) makes bbolt panic when it reads them; Open
// returns ErrDamaged with what to do instead, which the agent logs as it
// stops (a cold review: a stack trace, at every restart).
func TestDamagedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s := openTest(t, path, 0)
	ctx := context.Background()
	for n := 0; n < 2000; n += 100 {
		evs := make([]event.Event, 100)
		for i := range evs {
			evs[i] = ev(n+i, event.Commit)
		}
		must(t, s.Append(ctx, evs...))
	}
	must(t, s.Close())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Every page after the two meta pages gets junk where its type and
	// counts are (its id kept).
	damagePages(t, f, func(pg uint64) bool { return pg < 64 })
	f.Close()
	var s2 *Store
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Open panicked: %v", p)
			}
		}()
		s2, err = Open(path, Options{})
	}()
	if err == nil {
		s2.Close()
		t.Fatal("Open of a damaged file succeeded")
	}
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "move the file aside") {
		t.Errorf("Open: %v, want ErrDamaged saying what to do", err)
	}
}

// TestDamagedStateBucket: a damaged page among the other components'
// buckets (the reconciler's state, which only its owner reads) is found
// by Open too, as ErrDamaged, not as a panic at the owner's first View (a
// review of the change).
func TestDamagedStateBucket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s := openTest(t, path, 0)
	must(t, s.Update(context.Background(), "leases", func(b *bbolt.Bucket) ([]event.Event, error) {
		for i := 0; i < 3000; i++ {
			if err := b.Put(fmt.Appendf(nil, "k%06d", i), make([]byte, 200)); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}))
	must(t, s.Close())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The newer meta page names the root and the free list: every other
	// page gets junk where its type and counts are.
	var best, freelist, root uint64
	for p := int64(0); p < 2; p++ {
		b := make([]byte, 128)
		if _, err := f.ReadAt(b, p*4096); err != nil {
			t.Fatal(err)
		}
		m := b[16:]
		if txid := binary.LittleEndian.Uint64(m[48:56]); txid >= best {
			best, root, freelist = txid, binary.LittleEndian.Uint64(m[16:24]), binary.LittleEndian.Uint64(m[32:40])
		}
	}
	damagePages(t, f, func(pg uint64) bool { return pg != freelist && pg != root })
	f.Close()
	s2, err := Open(path, Options{})
	if err == nil {
		s2.Close()
		t.Fatal("Open of a file whose state pages are damaged succeeded")
	}
	if !errors.Is(err, ErrDamaged) {
		t.Errorf("Open: %v, want ErrDamaged", err)
	}
}

// damagePages writes junk where the type and counts of every page after
// the two meta pages are (their ids kept), for the pages damage picks.
func damagePages(t *testing.T, f *os.File, damage func(pg uint64) bool) {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 16)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	for pg := uint64(2); int64(pg*4096) < fi.Size(); pg++ {
		if damage(pg) {
			if _, err := f.WriteAt(junk, int64(pg)*4096+8); err != nil {
				t.Fatal(err)
			}
		}
	}
}
