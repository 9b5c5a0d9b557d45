package hooksock

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
)

// crashSink stores into the outbox and then, if asked, dies right after
// storing the first batch from the source it is given ("hook": the
// socket's datagrams, stored but still on the socket; "spool": lines of
// the spool file, stored but the file not yet removed).
type crashSink struct {
	s     *outbox.Store
	crash string
}

func (k crashSink) Accept(ctx context.Context, evs []event.Event) error {
	if err := k.s.Append(ctx, evs...); err != nil {
		return err
	}
	for _, e := range evs {
		if k.crash != "" && e.Source.String() == k.crash {
			os.Exit(3)
		}
	}
	return nil
}

// TestSpoolCrashChild is the agent side of TestCrashBetweenStoreAndConsume.
func TestSpoolCrashChild(t *testing.T) {
	dir := os.Getenv("HOOKSOCK_SPOOLCRASH_DIR")
	if dir == "" {
		t.Skip("run by TestCrashBetweenStoreAndConsume")
	}
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	store, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := crashSink{s: store, crash: os.Getenv("HOOKSOCK_SPOOLCRASH")}
	// Batch 2: the five queued datagrams and the spool's lines cannot all
	// go in the first batch, so without care one batch mixes them.
	l, err := New(Config{Path: filepath.Join(dir, "hook.sock"), Spool: filepath.Join(dir, "spool"), Batch: 2},
		sink, zerolog.Nop(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	l.Run(context.Background(), func() {})
}

// TestCrashBetweenStoreAndConsume: one address's events 1-5 wait in the
// (activated) socket, 6-10 in the spool, sent after them. The agent dies
// right after storing a batch, before taking its datagrams off the socket
// (SO_PEEK_OFF keeps them there for the next run: "hook"), or before
// removing the spool file whose lines it stored ("spool"). The next agent
// stores them again, and must not leave the address with an older event
// last: replaying 1-5 after 6-10 would. Each case checks that its crash
// came.
func TestCrashBetweenStoreAndConsume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, at := range []string{"hook", "spool"} {
		t.Run(at, func(t *testing.T) { crashBetweenStoreAndConsume(t, at) })
	}
}

func crashBetweenStoreAndConsume(t *testing.T, at string) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hook.sock")
	f := activationSocket(t, path)

	ev := func(i int) []byte {
		return fmt.Appendf(nil, `{"action":"commit","mac":"2:0:0:0:0:%x","ip_family":"ipv4","ip":"198.18.0.1","timestamp":%d,"lease_time":600,"hostname":"h%d"}`,
			i, 1795000000+i, i)
	}
	for i := 1; i <= 5; i++ {
		send(t, path, ev(i))
	}
	spool := filepath.Join(dir, "spool")
	os.MkdirAll(spool, 0o750)
	var lines []byte
	for i := 6; i <= 10; i++ {
		lines = append(append(lines, ev(i)...), '\n')
	}
	if err := os.WriteFile(filepath.Join(spool, spoolFile), lines, 0o640); err != nil {
		t.Fatal(err)
	}

	run := func(crash string, d time.Duration) (exited bool) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSpoolCrashChild$")
		cmd.Env = append(os.Environ(), "HOOKSOCK_SPOOLCRASH_DIR="+dir, "HOOKSOCK_SPOOLCRASH="+crash, "LISTEN_FDS=1")
		cmd.ExtraFiles = []*os.File{f}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(d):
			cmd.Process.Kill()
			<-done
			return false
		}
	}
	if crashed := run(at, 2*time.Second); !crashed {
		t.Fatalf("the agent did not die after storing a batch from the %s", at)
	}
	run("", 1500*time.Millisecond)

	store, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := store.Peek(1000)
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, e := range q {
		got = append(got, e.Event.Timestamp-1795000000)
	}
	t.Logf("outbox: %v", got)
	if len(got) == 0 || got[len(got)-1] != 10 {
		t.Fatalf("outbox %v: the address is left with event %v, not 10", got, got[len(got)-1:])
	}
	seen := map[int64]bool{}
	for i, n := range got {
		if i > 0 && n > got[i-1]+1 && !seen[n-1] {
			t.Errorf("outbox %v: event %d before %d", got, n, n-1)
		}
		seen[n] = true
	}
	for i := int64(1); i <= 10; i++ {
		if !seen[i] {
			t.Errorf("outbox %v: event %d lost", got, i)
		}
	}
}
