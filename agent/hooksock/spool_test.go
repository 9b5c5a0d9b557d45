package hooksock

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lab"
)

func spoolLines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.Write(datagram(i, "spooled"))
		b.WriteByte('\n')
	}
	return b.String()
}

func timestamps(evs []int64) string { return fmt.Sprint(evs) }

func TestSpoolDrainedFirstInOrder(t *testing.T) {
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	os.MkdirAll(spool, 0o750)
	// A drain that crashed left the oldest events; the hooks then kept
	// spooling; one write was torn by a full disk.
	os.WriteFile(filepath.Join(spool, drainFile), []byte(spoolLines(0, 3)), 0o640)
	torn := string(datagram(3, "spooled"))
	cur := spoolLines(3, 3) + torn[:20] + spoolLines(4, 6) + "garbage line\n"
	os.WriteFile(filepath.Join(spool, spoolFile), []byte(cur), 0o640)

	path := filepath.Join(dir, "hook.sock")
	s := newSink()
	start(t, Config{Path: path, Spool: spool}, s)
	s.waitFor(t, 5)
	send(t, path, datagram(6, "live")) // a hook sends once the spool is gone
	evs := s.waitFor(t, 6)
	var got []int64
	for _, e := range evs {
		got = append(got, e.Timestamp-1795000000)
	}
	// Event 3's line was torn: lost (it was never whole on disk); the
	// line appended after it is recovered.
	if want := "[0 1 2 4 5 6]"; timestamps(got) != want {
		t.Errorf("order %v, want %s", got, want)
	}
	for _, f := range []string{spoolFile, drainFile} {
		if _, err := os.Stat(filepath.Join(spool, f)); err == nil {
			t.Errorf("%s still there after the drain", f)
		}
	}
	if evs[0].Source.String() != "spool" || evs[5].Source.String() != "hook" {
		t.Errorf("sources %s, %s", evs[0].Source, evs[5].Source)
	}
}

// TestSpoolWithRealHook: the real leasekeeper-hook spools while no agent
// listens, and a running agent picks the spool up by itself.
func TestSpoolWithRealHook(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	dir := t.TempDir()
	hook := lab.BuildHook(t)
	spool := filepath.Join(dir, "spool")
	path := filepath.Join(dir, "hook.sock")
	notify := func(i int) {
		t.Helper()
		cmd := exec.Command(hook, "notify", "--action", "commit", "--mac", fmt.Sprintf("2:0:0:0:0:%x", i),
			"--ip-family", "ipv4", "--ip", fmt.Sprintf("203.0.113.%d", i), "--lease-time", "600",
			"--hostname", "n", "--socket", path, "--spool", spool)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hook: %v: %s", err, out)
		}
	}
	for i := 1; i <= 3; i++ {
		notify(i) // no agent: spooled
	}
	if b, err := os.ReadFile(filepath.Join(spool, spoolFile)); err != nil || strings.Count(string(b), "\n") != 3 {
		t.Fatalf("spool: %q %v", b, err)
	}
	s := newSink()
	start(t, Config{Path: path, Spool: spool}, s)
	for i := 4; i <= 5; i++ {
		notify(i) // agent up: sent
	}
	evs := s.waitFor(t, 5)
	for i, e := range evs {
		if want := fmt.Sprintf("203.0.113.%d", i+1); e.IP.String() != want {
			t.Fatalf("event %d is %s, want %s (order)", i, e.IP, want)
		}
	}
	// Later spooling (e.g. a full receive queue) is drained while running.
	os.WriteFile(filepath.Join(spool, spoolFile), []byte(spoolLines(100, 102)), 0o640)
	deadline := time.Now().Add(5 * time.Second)
	for len(s.events()) < 7 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(s.events()); n != 7 {
		t.Fatalf("%d events after a spool appeared while running, want 7", n)
	}
}
