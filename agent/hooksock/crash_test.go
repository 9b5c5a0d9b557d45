package hooksock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
)

// storeSink stores into a real outbox.
type storeSink struct{ s *outbox.Store }

func (k storeSink) Accept(ctx context.Context, evs []event.Event) error {
	return k.s.Append(ctx, evs...)
}

// TestCrashChild is the agent side of TestKill9NoLoss: it inherits the
// socket as systemd socket activation passes it and stores into an outbox.
func TestCrashChild(t *testing.T) {
	state := os.Getenv("HOOKSOCK_CRASH_STATE")
	if state == "" {
		t.Skip("run by TestKill9NoLoss")
	}
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	store, err := outbox.Open(filepath.Join(state, "outbox.db"), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Path: filepath.Join(state, "hook.sock")}, storeSink{store}, zerolog.Nop(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	l.Run(context.Background(), func() { fmt.Println("ready") })
}

// TestKill9NoLoss kills the receiving process at random moments while
// datagrams stream in, restarting it on the same (activated) socket: every
// datagram the kernel accepted is stored in the end, duplicates aside.
func TestKill9NoLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "hook.sock")
	f := activationSocket(t, path)
	startChild := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), "HOOKSOCK_CRASH_STATE="+dir, "LISTEN_FDS=1")
		cmd.ExtraFiles = []*os.File{f}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}

	const total = 4000
	sent := make(chan int, total)
	go func() {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK, 0)
		if err != nil {
			panic(err)
		}
		defer syscall.Close(fd)
		for i := 0; i < total; i++ {
			for {
				err := syscall.Sendto(fd, datagram(i, "k"), 0, &syscall.SockaddrUnix{Name: path})
				if err == nil {
					break
				}
				time.Sleep(200 * time.Microsecond) // queue full: a real hook would spool
			}
			sent <- i
		}
		close(sent)
	}()
	rng := rand.New(rand.NewPCG(7, 9))
	for round := 0; round < 8; round++ {
		cmd := startChild()
		time.Sleep(time.Duration(20+rng.IntN(120)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	// A last run takes the rest of the stream; then count what the
	// outbox holds.
	cmd := startChild()
	for range sent {
	}
	deadline := time.Now().Add(60 * time.Second)
	var seen map[int64]int
	var firsts []int64 // each event's first copy, in queue order
	for {
		time.Sleep(500 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		store, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		q, err := store.Peek(1 << 30)
		store.Close()
		if err != nil {
			t.Fatal(err)
		}
		seen, firsts = map[int64]int{}, firsts[:0]
		for _, e := range q {
			i := e.Event.Timestamp - 1795000000
			if seen[i]++; seen[i] == 1 {
				firsts = append(firsts, i)
			}
		}
		if len(seen) == total || time.Now().After(deadline) {
			break
		}
		cmd = startChild()
	}
	var missing []int
	dups := 0
	for i := 0; i < total; i++ {
		switch n := seen[int64(i)]; {
		case n == 0:
			missing = append(missing, i)
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("%d events through 9 SIGKILLs: %d duplicates", total, dups)
	if len(missing) > 0 {
		t.Fatalf("%d events lost, e.g. %v", len(missing), missing[:min(10, len(missing))])
	}
	// One sender: the first copies are in the order sent (a duplicate is
	// a batch stored again after a crash, behind what followed it).
	for k := 1; k < len(firsts); k++ {
		if firsts[k] < firsts[k-1] {
			t.Fatalf("event %d stored before event %d, sent after it", firsts[k-1], firsts[k])
		}
	}
}
