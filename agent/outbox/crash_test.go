package outbox

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// crashEvent is the event child appender g sends as its i-th in round;
// the hostname names it so the parent can check every byte of what it
// reads back.
func crashEvent(round, g, i int) event.Event {
	n := g<<12 | i&0xfff
	return event.Event{
		Action: []string{event.Commit, event.Expiry, event.Release}[i%3], Family: event.IPv4,
		MAC:       fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(round), byte(g), byte(i>>8), byte(i)),
		IP:        netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}),
		Hostname:  fmt.Sprintf("r%d-g%d-%d", round, g, i),
		Timestamp: int64(1_700_000_000 + i), LeaseTime: int64(i), TimestampNS: int64(round)<<40 | int64(i),
		Source: event.SourceHook,
	}
}

func parseCrashHostname(h string) (round, g, i int, ok bool) {
	_, err := fmt.Sscanf(h, "r%d-g%d-%d", &round, &g, &i)
	return round, g, i, err == nil
}

const crashAppenders = 8

// TestCrashChild is the child process of TestCrashKill9; it does nothing
// in a normal run. It appends batches from several goroutines and acks
// from another, and prints, one write(2) per line:
//
//	A first n      after Append returned: Seqs first..first+n-1 accepted
//	K seq seq ...  before Ack is called: these may be gone
func TestCrashChild(t *testing.T) {
	if os.Getenv("OUTBOX_CHILD") != "1" {
		t.Skip("child of TestCrashKill9")
	}
	round, _ := strconv.Atoi(os.Getenv("OUTBOX_ROUND"))
	s, err := Open(os.Getenv("OUTBOX_PATH"), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	say := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := os.Stdout.WriteString(line + "\n"); err != nil {
			os.Exit(3)
		}
	}
	ctx := context.Background()
	for g := 0; g < crashAppenders; g++ {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
			for i := 0; ; {
				batch := make([]event.Event, 1+rng.IntN(20))
				for j := range batch {
					batch[j] = crashEvent(round, g, i)
					i++
				}
				first, err := s.AppendSeq(ctx, batch...)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(4)
				}
				say(fmt.Sprintf("A %d %d", first, len(batch)))
			}
		}()
	}
	go func() {
		for range s.Notify() {
			q, err := s.Peek(1 + rand.IntN(40))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(5)
			}
			if len(q) == 0 {
				continue
			}
			line := []string{"K"}
			for _, e := range q {
				line = append(line, strconv.FormatUint(e.Seq, 10))
			}
			say(strings.Join(line, " "))
			if err := s.Ack(seqs(q)...); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(6)
			}
		}
	}()
	say("ready")
	time.Sleep(30 * time.Second) // the parent kills it long before
	os.Exit(7)
}

// TestCrashKill9 runs TestCrashChild in a child process, SIGKILLs it at a
// random moment, reopens the store and checks that everything the child
// was told is accepted is there (or was being acked), that every record
// reads back whole, and that Seqs are strictly increasing with no gaps
// but acked ones, across rounds in one file.
func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("re-execs the test binary")
	}
	path := filepath.Join(t.TempDir(), "outbox.db")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	acking := map[uint64]bool{} // Seqs the child was acking when, or before, it died
	var nextSeq uint64 = 1
	const rounds = 8
	acceptedAll := 0
	for round := 0; round < rounds; round++ {
		delay := time.Duration(rng.IntN(400)) * time.Millisecond
		if round == 0 {
			delay = 0 // right after Open
		}
		accepted, k, stderr := runCrashChild(t, path, round, delay)
		for seq := range k {
			acking[seq] = true
		}
		if len(accepted) == 0 {
			t.Logf("round %d: the child accepted nothing in %v; stderr: %s", round, delay, stderr)
		}
		acceptedAll += len(accepted)
		for seq := range accepted {
			if seq < nextSeq {
				t.Fatalf("round %d: Seq %d reused (the store had reached %d)", round, seq, nextSeq)
			}
		}

		s := openTest(t, path, 0)
		must(t, s.db.View(func(tx *bbolt.Tx) error {
			for err := range tx.Check() {
				t.Errorf("round %d: bbolt check: %v", round, err)
			}
			return nil
		}))
		q := peekAll(t, s.Store)
		queued := map[uint64]bool{}
		for i, e := range q {
			if i > 0 && e.Seq <= q[i-1].Seq {
				t.Fatalf("round %d: Seq %d after %d", round, e.Seq, q[i-1].Seq)
			}
			queued[e.Seq] = true
			r, g, n, ok := parseCrashHostname(e.Event.Hostname)
			if !ok {
				t.Fatalf("round %d: Seq %d: hostname %q", round, e.Seq, e.Event.Hostname)
			}
			if diff := cmp.Diff(crashEvent(r, g, n), e.Event, cmpAddr); diff != "" {
				t.Fatalf("round %d: Seq %d read back (-want +got):\n%s", round, e.Seq, diff)
			}
		}
		for seq := range accepted {
			if !queued[seq] && !acking[seq] {
				t.Errorf("round %d: accepted Seq %d lost", round, seq)
			}
		}
		next := s.w.nextSeq
		for seq := uint64(1); seq < next; seq++ {
			if !queued[seq] && !acking[seq] {
				t.Errorf("round %d: gap at Seq %d (next %d)", round, seq, next)
				break
			}
		}
		if len(q) > 0 && q[len(q)-1].Seq >= next {
			t.Errorf("round %d: queued Seq %d ≥ next Seq %d", round, q[len(q)-1].Seq, next)
		}
		if s.Depth() != len(q) {
			t.Errorf("round %d: Depth %d, %d queued", round, s.Depth(), len(q))
		}
		t.Logf("round %d: killed after %v: %d accepted, %d queued, next Seq %d",
			round, delay, len(accepted), len(q), next)
		nextSeq = next
		must(t, s.Close())
	}
	// The test proves something only if the kills fell on accepted
	// events; a round alone may not (a slow fsync, a short delay).
	if acceptedAll == 0 {
		t.Errorf("no child accepted anything in %d rounds", rounds)
	}
}

// runCrashChild starts the child, kills it delay after it is ready and
// returns what it reported.
func runCrashChild(t *testing.T, path string, round int, delay time.Duration) (accepted, acking map[uint64]bool, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OUTBOX_CHILD=1", "OUTBOX_PATH="+path, "OUTBOX_ROUND="+strconv.Itoa(round))
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()

	accepted, acking = map[uint64]bool{}, map[uint64]bool{}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				// A fragment without its newline was never a whole report.
				if err == io.EOF {
					err = nil
				}
				done <- err
				return
			}
			f := strings.Fields(line)
			switch {
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			case len(f) == 3 && f[0] == "A":
				first, _ := strconv.ParseUint(f[1], 10, 64)
				n, _ := strconv.ParseUint(f[2], 10, 64)
				for seq := first; seq < first+n; seq++ {
					accepted[seq] = true
				}
			case len(f) > 1 && f[0] == "K":
				for _, s := range f[1:] {
					seq, _ := strconv.ParseUint(s, 10, 64)
					acking[seq] = true
				}
			default:
				done <- fmt.Errorf("child said %q", line)
				return
			}
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("round %d: child ended before ready: %v; stderr: %s", round, err, errBuf.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("round %d: child not ready; stderr: %s", round, errBuf.String())
	}
	time.Sleep(delay)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatalf("round %d: kill: %v; stderr: %s", round, err, errBuf.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child ended on its own (%v); stderr: %s", round, cmd.ProcessState, errBuf.String())
	}
	return accepted, acking, errBuf.String()
}
