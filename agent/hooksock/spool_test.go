package hooksock

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/testlog"
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

// TestSpoolHostileFiles: whatever sits in the spool under the spool's
// names, the drain neither follows it, nor blocks on it, nor reads what
// an untrusted user wrote: the file is moved aside, counted, and the
// events that follow are delivered. An overlong line costs only itself.
func TestSpoolHostileFiles(t *testing.T) {
	secretLine := string(datagram(99, "secret")) + "\n"
	for _, tc := range []struct {
		name    string
		root    bool // needs root (chown)
		plant   func(t *testing.T, dir, spool string)
		allowed []uint32
		want    string // events the sink gets before the live one
		reason  string // rejection counted
	}{
		{name: "symlink to a file outside", plant: func(t *testing.T, dir, spool string) {
			secret := filepath.Join(dir, "secret")
			os.WriteFile(secret, []byte(secretLine), 0o600)
			os.Symlink(secret, filepath.Join(spool, drainFile))
		}, want: "[]", reason: "spool-refused"},
		{name: "dangling symlink", plant: func(t *testing.T, dir, spool string) {
			os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(spool, spoolFile))
		}, want: "[]", reason: "spool-refused"},
		{name: "fifo", plant: func(t *testing.T, dir, spool string) {
			if err := syscall.Mkfifo(filepath.Join(spool, spoolFile), 0o640); err != nil {
				t.Fatal(err)
			}
		}, want: "[]", reason: "spool-refused"},
		{name: "directory", plant: func(t *testing.T, dir, spool string) {
			os.Mkdir(filepath.Join(spool, drainFile), 0o750)
		}, want: "[]", reason: "spool-refused"},
		{name: "writable by anyone", plant: func(t *testing.T, dir, spool string) {
			p := filepath.Join(spool, spoolFile)
			os.WriteFile(p, []byte(secretLine), 0o640)
			os.Chmod(p, 0o666)
		}, want: "[]", reason: "spool-refused"},
		{name: "owner not allowed", root: true, allowed: []uint32{uint32(os.Getuid())}, plant: func(t *testing.T, dir, spool string) {
			p := filepath.Join(spool, spoolFile)
			os.WriteFile(p, []byte(secretLine), 0o640)
			if err := os.Chown(p, 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}, want: "[]", reason: "spool-refused"},
		{name: "overlong line among good ones", plant: func(t *testing.T, dir, spool string) {
			long := `{"action":"commit","hostname":"` + strings.Repeat("x", 3*maxSpoolLine) + "\"}\n"
			os.WriteFile(filepath.Join(spool, spoolFile), []byte(spoolLines(0, 2)+long+spoolLines(2, 4)), 0o640)
		}, want: "[0 1 2 3]", reason: "spool-overlong"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root to give a file another owner")
			}
			dir := t.TempDir()
			spool := filepath.Join(dir, "spool")
			os.MkdirAll(spool, 0o750)
			tc.plant(t, dir, spool)
			before, _ := os.ReadFile(filepath.Join(dir, "secret"))
			path := filepath.Join(dir, "hook.sock")
			s := newSink()
			_, reg := start(t, Config{Path: path, Spool: spool, AllowedUIDs: tc.allowed}, s)
			send(t, path, datagram(7, "live"))
			// The live datagram may be read before the spool is drained
			// (it was queued first): wait for the drain's verdict.
			counted := func() float64 {
				return testutil.ToFloat64(mustVec(t, reg, "leasekeeper_rejected_datagrams_total", tc.reason))
			}
			for deadline := time.Now().Add(10 * time.Second); counted() == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			var got []int64
			for _, e := range s.waitFor(t, len(strings.Fields(strings.Trim(tc.want, "[]")))+1) {
				got = append(got, e.Timestamp-1795000000)
			}
			// The live datagram was queued before the drain began, so it
			// may come first; the spool's lines keep their order.
			if i := slices.Index(got, 7); i < 0 {
				t.Errorf("events %v: the live one is missing", got)
			} else if got = slices.Delete(got, i, i+1); timestamps(got) != tc.want {
				t.Errorf("spooled events %v, want %s", got, tc.want)
			}
			if n := counted(); n != 1 {
				t.Errorf("%s counted %v times, want 1", tc.reason, n)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "secret")); string(after) != string(before) {
				t.Errorf("the file a link pointed to changed: %q", after)
			}
			// The drain removes its file once the sink has stored every
			// line, which the sink may report a moment before.
			for _, f := range []string{spoolFile, drainFile} {
				gone := func() bool { _, err := os.Lstat(filepath.Join(spool, f)); return err != nil }
				for deadline := time.Now().Add(10 * time.Second); !gone() && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				if !gone() {
					t.Errorf("%s still in the spool", f)
				}
			}
		})
	}
}

// TestSpoolTroubleKeepsListening: a spool the agent cannot drain (here a
// path through a regular file; on a rack a directory the hook made 0750
// for dhcpd's user, or a file the agent's user may not read) is told and
// shown in leasekeeper_hook_spool_unreadable, and the agent goes on
// taking the hooks' datagrams; once the spool can be read, its events are
// drained and the gauge goes back to 0. (It stopped the whole agent,
// which its unit then restarted into the same failure.)
func TestSpoolTroubleKeepsListening(t *testing.T) {
	dir := t.TempDir()
	block := filepath.Join(dir, "x")
	if err := os.WriteFile(block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(block, "spool") // ENOTDIR
	path := filepath.Join(dir, "hook.sock")
	s := newSink()
	logs := &testlog.Buffer{}
	reg := prometheus.NewRegistry()
	l, err := New(Config{Path: path, Spool: spool}, s, zerolog.New(logs), reg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	stop := listen(t, l)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	send(t, path, datagram(1, "live"))
	s.waitFor(t, 1)
	select {
	case <-l.Drained():
		t.Error("Drained() closed while the spool cannot be read")
	default:
	}
	if !strings.Contains(logs.String(), "cannot drain the hook spool") || !strings.Contains(logs.String(), "is not a directory the agent can reach") {
		t.Errorf("the spool's trouble is not told:\n%s", logs.String())
	}
	if v := testutil.ToFloat64(l.m.spoolUnreadable); v != 1 {
		t.Errorf("leasekeeper_hook_spool_unreadable %v, want 1", v)
	}
	// Mended: the directory is there, with what the hooks spooled.
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(spool, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, spoolFile), []byte(spoolLines(2, 4)), 0o640); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, 3)
	select {
	case <-l.Drained():
	case <-time.After(5 * time.Second):
		t.Error("Drained() still open after the spool drained")
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(l.m.spoolUnreadable) != 0 || !strings.Contains(logs.String(), "the hook spool drains again") {
		if time.Now().After(deadline) {
			t.Fatalf("gauge %v; log:\n%s", testutil.ToFloat64(l.m.spoolUnreadable), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// takenSpool makes a spool directory holding a taken file of n lines
// (the drain's own name for it), as a drain that stopped leaves it.
func takenSpool(t *testing.T, n int) (dir, spool, lines string) {
	t.Helper()
	dir = t.TempDir()
	spool = filepath.Join(dir, "spool")
	if err := os.MkdirAll(spool, 0o750); err != nil {
		t.Fatal(err)
	}
	lines = spoolLines(0, n)
	if err := os.WriteFile(filepath.Join(spool, drainFile), []byte(lines), 0o640); err != nil {
		t.Fatal(err)
	}
	return dir, spool, lines
}

// lineOffset is the offset in lines just after its first n lines.
func lineOffset(lines string, n int) int {
	o := 0
	for range n {
		o += strings.Index(lines[o:], "\n") + 1
	}
	return o
}

// failingReader fails every read once it has passed after bytes, while
// fails is above 0.
type failingReader struct {
	r     io.Reader
	after int
	read  int
	fails *atomic.Int32
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.fails.Load() > 0 && f.read+len(p) > f.after {
		if f.read >= f.after {
			f.fails.Add(-1)
			return 0, syscall.EIO
		}
		p = p[:f.after-f.read]
	}
	n, err := f.r.Read(p)
	f.read += n
	return n, err
}

// TestSpoolReadErrorResumes: a read error in the middle of a taken spool
// file (a bad block) stops the drain; the next attempts resume after the
// lines already handed on, so each event is stored once, in order (each
// retry stored the lines before the error again).
func TestSpoolReadErrorResumes(t *testing.T) {
	dir, spool, lines := takenSpool(t, 6)
	third := lineOffset(lines, 3)
	var fails atomic.Int32
	fails.Store(3)
	path := filepath.Join(dir, "hook.sock")
	s := newSink()
	l, err := New(Config{Path: path, Spool: spool}, s, zerolog.Nop(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	l.spoolRead = func(r io.Reader) io.Reader { return &failingReader{r: r, after: third, fails: &fails} }
	stop := listen(t, l)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	evs := s.waitFor(t, 6)
	time.Sleep(1500 * time.Millisecond) // another drain, were the file still there
	if got := len(s.events()); got != 6 || fails.Load() != 0 {
		t.Fatalf("%d events stored (want 6), %d injected errors left", got, fails.Load())
	}
	for i, e := range evs {
		if want := int64(1795000000 + i); e.Timestamp != want {
			t.Errorf("event %d: timestamp %d, want %d", i, e.Timestamp, want)
		}
	}
	if _, err := os.Stat(filepath.Join(spool, drainFile)); err == nil {
		t.Error("the drained file is still there")
	}
}

// TestSpoolReadErrorWhileSkipping: a second read error among the lines a
// resumed drain skips keeps them skipped: the first drain fails after 3
// lines, the second inside those 3, the third finishes; each event is
// stored once (a review of the change: lines 2 and 3 came twice).
func TestSpoolReadErrorWhileSkipping(t *testing.T) {
	dir, spool, lines := takenSpool(t, 6)
	s := newSink()
	l, err := New(Config{Path: filepath.Join(dir, "hook.sock"), Spool: spool}, s, zerolog.Nop(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	var opens atomic.Int32
	l.spoolRead = func(r io.Reader) io.Reader {
		var one atomic.Int32
		one.Store(1)
		switch opens.Add(1) {
		case 1:
			return &failingReader{r: r, after: lineOffset(lines, 3), fails: &one}
		case 2:
			return &failingReader{r: r, after: lineOffset(lines, 1), fails: &one}
		}
		return r
	}
	stop := listen(t, l)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	s.waitFor(t, 6)
	time.Sleep(1500 * time.Millisecond) // another drain, were the file still there
	if got := len(s.events()); got != 6 || opens.Load() < 3 {
		t.Errorf("%d events stored from a 6-line file in %d drains, want 6 in 3", got, opens.Load())
	}
}
