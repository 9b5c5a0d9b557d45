package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest"
	"github.com/leasekeeper/leasekeeper/internal/lktest/testlog"
)

// TestDiskFull fills a 512 KiB tmpfs holding the store: Append must fail
// with an error wrapping ENOSPC and store nothing of the failed call, the
// store must stay consistent and usable, and once space returns (another
// file in the tmpfs deleted) appends succeed again and everything
// accepted, before and after, is there after a reopen.
func TestDiskFull(t *testing.T) {
	dir := smallTmpfs(t)
	ballast := filepath.Join(dir, "ballast")
	must(t, os.WriteFile(ballast, make([]byte, 192<<10), 0o600))

	path := filepath.Join(dir, "outbox.db")
	s := openTest(t, path, 0)
	ctx := context.Background()
	var accepted []event.Event
	batch := func(n, size int) []event.Event {
		evs := make([]event.Event, size)
		for i := range evs {
			evs[i] = ev(n+i, event.Commit)
			evs[i].Hostname = fmt.Sprintf("%d-%s", n+i, strings.Repeat("x", 200))
		}
		return evs
	}
	var err error
	for n := 0; n < 100_000; n += 20 {
		evs := batch(n, 20)
		if err = s.Append(ctx, evs...); err != nil {
			break
		}
		accepted = append(accepted, evs...)
	}
	if err == nil {
		t.Fatal("100 000 events fit in a 512 KiB tmpfs")
	}
	t.Logf("full after %d events: %v", len(accepted), err)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Append on a full disk: err = %v, want one wrapping ENOSPC that says so", err)
	}
	if s.Depth() != len(accepted) {
		t.Errorf("Depth %d after the failure, %d accepted", s.Depth(), len(accepted))
	}
	if got := s.metric(t, "leasekeeper_outbox_commit_errors_total"); got == 0 {
		t.Error("commit_errors_total not counted")
	}
	// Still full: fails again, the same way, and breaks nothing.
	for i := 0; i < 3; i++ {
		if err := s.Append(ctx, batch(1_000_000+100*i, 20)...); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("Append on a still full disk: err = %v", err)
		}
	}
	check := func(s *testStore, want []event.Event) {
		t.Helper()
		must(t, s.db.View(func(tx *bbolt.Tx) error {
			for err := range tx.Check() {
				t.Errorf("bbolt check: %v", err)
			}
			return nil
		}))
		q := peekAll(t, s.Store)
		got := make([]event.Event, len(q))
		for i := range q {
			got[i] = q[i].Event
		}
		if diff := cmp.Diff(want, got, cmpAddr); diff != "" {
			t.Errorf("queue (-accepted +stored):\n%s", diff[:min(len(diff), 2000)])
		}
	}
	check(s, accepted)

	// Space returns.
	must(t, os.Remove(ballast))
	for n := 2_000_000; n < 2_000_200; n += 20 {
		evs := batch(n, 20)
		if err := s.Append(ctx, evs...); err != nil {
			t.Fatalf("Append after space returned: %v", err)
		}
		accepted = append(accepted, evs...)
	}
	check(s, accepted)
	must(t, s.Close())
	s = openTest(t, path, 0)
	check(s, accepted)
	if err := s.Append(ctx, batch(3_000_000, 1)...); err != nil {
		t.Errorf("Append after reopen: %v", err)
	}
}

// smallTmpfs mounts a 512 KiB tmpfs for the test, or skips it.
func smallTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	lktest.Tmpfs(t, dir, "512k", 0o700, 0)
	return dir
}

// TestDiskFullLogged: commits failing for as long as the disk is full
// are logged when they begin, then at most every commitFailLogEvery
// (callers retry every few seconds), and their end once.
func TestDiskFullLogged(t *testing.T) {
	dir := smallTmpfs(t)
	ballast := filepath.Join(dir, "ballast")
	must(t, os.WriteFile(ballast, make([]byte, 192<<10), 0o600))
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	logs := &testlog.Buffer{}
	s, err := Open(filepath.Join(dir, "outbox.db"), Options{
		Logger: zerolog.New(logs),
		Now:    func() time.Time { return time.Unix(0, clock.Load()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	batch := func(n int) []event.Event {
		evs := make([]event.Event, 20)
		for i := range evs {
			evs[i] = ev(n+i, event.Commit)
			evs[i].Hostname = fmt.Sprintf("%d-%s", n+i, strings.Repeat("x", 200))
		}
		return evs
	}
	n := 0
	for ; n < 100_000; n += 20 {
		if err = s.Append(ctx, batch(n)...); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full disk: %v", err)
	}
	// Two minutes of retries every 5 s: the first failure above, then 24.
	for i := 0; i < 24; i++ {
		clock.Add(int64(5 * time.Second))
		if err := s.Append(ctx, batch(1_000_000+20*i)...); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Append on a still full disk: %v", err)
		}
	}
	must(t, os.Remove(ballast))
	clock.Add(int64(5 * time.Second))
	if err := s.Append(ctx, batch(2_000_000)...); err != nil {
		t.Fatalf("Append after space returned: %v", err)
	}
	var failed, recovered []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		switch {
		case strings.Contains(l, "outbox commit failed"):
			failed = append(failed, l)
		case strings.Contains(l, "outbox commits succeed again"):
			recovered = append(recovered, l)
		}
	}
	// At 0 s, 30 s, 60 s, 90 s and 120 s of the 125 s it lasted.
	if len(failed) != 5 || !strings.Contains(failed[0], "no space left on device") || !strings.Contains(failed[1], `"not_logged_since_last":5`) {
		t.Errorf("%d failure lines, want 5, the second counting 5 left out:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if len(recovered) != 1 || !strings.Contains(recovered[0], `"failures":25`) || !strings.Contains(recovered[0], `"failed_for":125000`) {
		t.Errorf("recovery lines:\n%s\nwant one, after 25 failures and 125 s", strings.Join(recovered, "\n"))
	}
}

// bbolt formats the error of growing the file into a string; the store
// still lets callers find ENOSPC with errors.Is.
func TestCommitErrorENOSPC(t *testing.T) {
	s := &Store{path: "/state/outbox.db"}
	for _, err := range []error{
		&os.PathError{Op: "write", Path: "/state/outbox.db", Err: syscall.ENOSPC},
		fmt.Errorf("file resize error: %s", &os.PathError{Op: "truncate", Path: "x", Err: syscall.ENOSPC}),
	} {
		got := s.commitError(err)
		if !errors.Is(got, syscall.ENOSPC) || !strings.Contains(got.Error(), "disk full") || !strings.Contains(got.Error(), "/state/outbox.db") {
			t.Errorf("commitError(%v) = %v", err, got)
		}
	}
	if got := s.commitError(syscall.EIO); errors.Is(got, syscall.ENOSPC) || !errors.Is(got, syscall.EIO) {
		t.Errorf("commitError(EIO) = %v", got)
	}
}
