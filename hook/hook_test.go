package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// hookBin is the hook binary, built once by TestMain the way `make build`
// does, and run as dhcpd runs it: a fresh process per event.
var hookBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lkhook")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hookBin = filepath.Join(dir, "leasekeeper-hook")
	if err := lktest.Build(hookBin, "hook", false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// shortDir is a temporary directory with a path short enough for a
// socket (t.TempDir embeds the test's name and can outgrow sun_path).
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "lkh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// runHook runs the built hook with args and the environment extra on top
// of a clean one (no LEASEKEEPER_* from the caller's environment).
func runHook(t testing.TB, extra []string, args ...string) result {
	t.Helper()
	r, err := execHook(extra, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// execHook is runHook for goroutines. A hook that has not finished after
// 10 s has blocked: it is killed and reported.
func execHook(extra []string, args ...string) (result, error) {
	cmd := exec.Command(hookBin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return result{}, fmt.Errorf("hook %q blocked for 10 s", args)
	}
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		return r, fmt.Errorf("hook %q: %w", args, err)
	}
	return r, nil
}

// listen binds a unixgram socket the way the agent does and returns its
// path; it is closed when the test ends.
func listen(t testing.TB) (string, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(shortDir(t), "hook.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, c
}

// receive reads one datagram, or fails the test after a while.
func receive(t testing.TB, c *net.UnixConn) []byte {
	t.Helper()
	buf := make([]byte, 64<<10)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no datagram: %v", err)
	}
	return buf[:n]
}

// nothingQueued fails if a datagram is waiting on c.
func nothingQueued(t testing.TB, c *net.UnixConn) {
	t.Helper()
	buf := make([]byte, 64<<10)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := c.Read(buf); err == nil {
		t.Errorf("unexpected datagram %q", buf[:n])
	}
}

func decode(t testing.TB, b []byte) datagram {
	t.Helper()
	var d datagram
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("invalid datagram %q: %v", b, err)
	}
	return d
}

// spoolLines reads the spool file; none when it does not exist.
func spoolLines(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, spoolFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("spool does not end in a newline: %q", b)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func ptr[T any](v T) *T { return &v }

// TestDatagram runs the hook against a real unixgram listener and checks
// what arrives, for MAAS's argument lists and hostile host names.
func TestDatagram(t *testing.T) {
	sock, c := listen(t)
	spool := filepath.Join(shortDir(t), "spool")
	for _, tc := range []struct {
		name string
		args []string
		want datagram
	}{
		{"maas commit",
			[]string{"notify", "--action", "commit", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5", "--lease-time", "600", "--hostname", "c1"},
			datagram{Action: "commit", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "203.0.113.5", LeaseTime: ptr[uint32](600), Hostname: ptr("c1")}},
		{"maas no hostname",
			[]string{"notify", "--action", "commit", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5", "--lease-time", "600", "--hostname", "(none)"},
			datagram{Action: "commit", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "203.0.113.5", LeaseTime: ptr[uint32](600), Hostname: ptr("")}},
		{"maas expiry",
			[]string{"notify", "--action", "expiry", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5"},
			datagram{Action: "expiry", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "203.0.113.5"}},
		{"release equals form",
			[]string{"notify", "--action=release", "--mac=02:00:00:0A:0B:0C", "--ip-family=ipv4", "--ip=198.51.100.7"},
			datagram{Action: "release", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "198.51.100.7"}},
		{"ipv6 duid",
			[]string{"notify", "--action", "commit", "--mac", "0:1:0:1:2a:3b:4c:5d:2:0:0:a:b:c", "--ip-family", "ipv6", "--ip", "2001:db8:0:0:0:0:0:5", "--lease-time", "7200", "--hostname", "v6"},
			datagram{Action: "commit", MAC: "00:01:00:01:2a:3b:4c:5d:02:00:00:0a:0b:0c", IPFamily: "ipv6", IP: "2001:db8::5", LeaseTime: ptr[uint32](7200), Hostname: ptr("v6")}},
		{"empty last argument",
			notifyArgs("--lease-time", "60", "--hostname", ""),
			datagram{Action: "commit", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "203.0.113.5", LeaseTime: ptr[uint32](60), Hostname: ptr("")}},
		{"no lease time",
			notifyArgs(),
			datagram{Action: "commit", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "203.0.113.5", LeaseTime: ptr[uint32](0), Hostname: ptr("")}},
		{"hostile hostname",
			notifyArgs("--hostname", "x\",\"action\":\"expiry\n\\\x01\xff"),
			datagram{Action: "commit", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "203.0.113.5", LeaseTime: ptr[uint32](0), Hostname: ptr("x\",\"action\":\"expiry\n\\\x01\ufffd")}},
		{"64 KiB hostname",
			notifyArgs("--hostname", strings.Repeat("h", 64<<10)),
			datagram{Action: "commit", MAC: "02:00:00:0a:0b:0c", IPFamily: "ipv4", IP: "203.0.113.5", LeaseTime: ptr[uint32](0), Hostname: ptr(strings.Repeat("h", maxHostname))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			r := runHook(t, []string{envSocket + "=" + sock, envSpool + "=" + spool}, tc.args...)
			if r.code != 0 || r.stderr != "" || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			got := decode(t, receive(t, c))
			if got.PID <= 0 || got.TimestampNS/1e9 != got.Timestamp || got.Timestamp < before.Unix() || got.Timestamp > time.Now().Unix() {
				t.Errorf("pid %d, timestamp %d, timestamp_ns %d: not this run's", got.PID, got.Timestamp, got.TimestampNS)
			}
			got.PID, got.Timestamp, got.TimestampNS = 0, 0, 0
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
			if lines := spoolLines(t, spool); lines != nil {
				t.Errorf("spooled although the agent listens: %q", lines)
			}
		})
	}
}

// TestHostileHostnameKeepsNeighbours sends a hostile event between two
// plain ones: each arrives whole and alone, and a receiver reading the
// socket the way MAAS's Go rack agent does (one json.Decoder over the
// connection, 512-byte reads) decodes all three.
func TestHostileHostnameKeepsNeighbours(t *testing.T) {
	sock, c := listen(t)
	spool := filepath.Join(shortDir(t), "spool")
	hostile := strings.Repeat("\x01\"\\\xff", 16<<10)
	for i, h := range []string{"before", hostile, "after"} {
		if r := runHook(t, nil, notifyArgs("--hostname", h, "--lease-time", fmt.Sprint(i), "--socket", sock, "--spool", spool)...); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	}
	dec := json.NewDecoder(c) // reads datagram by datagram, as MAAS's listener does
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := range 3 {
		var d datagram
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if d.LeaseTime == nil || *d.LeaseTime != uint32(i) || d.Hostname == nil {
			t.Fatalf("event %d decoded as %+v", i, d)
		}
		if i == 1 {
			checkHostname(t, hostile, *d.Hostname)
		}
	}
}

// TestInvalidArguments: exit 2, one line on stderr, nothing sent, nothing
// spooled.
func TestInvalidArguments(t *testing.T) {
	sock, c := listen(t)
	spool := filepath.Join(shortDir(t), "spool")
	for _, args := range [][]string{
		{},
		{"notify"},
		notifyArgs("--action", "renew"),
		notifyArgs("--ip-family", "ipv6"),
		notifyArgs("--mac", "zz:zz"),
		notifyArgs("--lease-time", "-5"),
		notifyArgs("--lease-time", "soon"),
		notifyArgs("--lease-time", "18446744073709551616"),
		notifyArgs("--action", "commit\nEvil: injected line"),
		notifyArgs("--socket", "relative.sock"),
	} {
		r := runHook(t, []string{envSocket + "=" + sock, envSpool + "=" + spool}, args...)
		if r.code != 2 {
			t.Errorf("%q: exit %d, want 2", args, r.code)
		}
		if r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") || !strings.HasPrefix(r.stderr, "leasekeeper-hook: ") {
			t.Errorf("%q: stdout %q, stderr %q: want one line on stderr", args, r.stdout, r.stderr)
		}
	}
	nothingQueued(t, c)
	if fileExists(spool) {
		t.Errorf("invalid arguments created the spool %s", spool)
	}
}

// TestUnknownFlag: a flag the hook does not know (a newer MAAS's
// dhcpd.conf under the diversion) costs a warning line, not the event:
// exit 0, the event sent whole, the flag named on stderr.
func TestUnknownFlag(t *testing.T) {
	sock, c := listen(t)
	r := runHook(t, []string{envSocket + "=" + sock}, notifyArgs("--client-id", "\x01abc", "--hostname", "c1")...)
	if r.code != 0 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `unknown flag "--client-id"`) {
		t.Errorf("exit %d, stdout %q, stderr %q: want 0 and one warning line", r.code, r.stdout, r.stderr)
	}
	d := decode(t, receive(t, c))
	if d.IP != "203.0.113.5" || d.Action != "commit" || d.Hostname == nil || *d.Hostname != "c1" {
		t.Errorf("event %+v", d)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"notify", "--help"}} {
		r := runHook(t, nil, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: leasekeeper-hook notify") || r.stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runHook(t, nil, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "leasekeeper-hook ") {
		t.Errorf("--version: exit %d, stdout %q", r.code, r.stdout)
	}
}

// bindOnly leaves a socket file nobody listens on (the agent died
// without removing it): sendto gets ECONNREFUSED.
func bindOnly(t testing.TB) string {
	t.Helper()
	path := filepath.Join(shortDir(t), "stale.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	return path
}

// fillQueue sends datagrams to path until its receive queue is full,
// whatever net.unix.max_dgram_qlen is (10 by default, 512 where the
// package is installed). A sender socket also stops at its own send
// buffer, which can come first with a long queue, so a new sender takes
// over whenever one is blocked: the queue is full when a fresh sender,
// with an empty send buffer, cannot add a datagram.
func fillQueue(t testing.TB, path string) int {
	t.Helper()
	n := 0
	for senders := 0; ; senders++ {
		if senders > 1<<12 {
			t.Fatal("the queue never filled")
		}
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) }) // its datagrams stay queued until then
		sent := 0
		for {
			err := syscall.Sendto(fd, []byte(`{"filler":true}`), 0, &syscall.SockaddrUnix{Name: path})
			if err == syscall.EAGAIN {
				break
			}
			if err != nil {
				t.Fatalf("filling the queue: %v", err)
			}
			sent++
		}
		n += sent
		if sent == 0 {
			return n
		}
	}
}

// TestAgentUnreachable: whatever keeps the agent from taking the
// datagram, the event lands in the spool, exit 0, in bounded time.
func TestAgentUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		socket func(t *testing.T) (string, *net.UnixConn)
	}{
		{"no socket file", func(t *testing.T) (string, *net.UnixConn) { return filepath.Join(shortDir(t), "absent.sock"), nil }},
		{"no listener", func(t *testing.T) (string, *net.UnixConn) { return bindOnly(t), nil }},
		{"not a socket", func(t *testing.T) (string, *net.UnixConn) {
			p := filepath.Join(shortDir(t), "file.sock")
			os.WriteFile(p, nil, 0o644)
			return p, nil
		}},
		{"queue full", func(t *testing.T) (string, *net.UnixConn) {
			p, c := listen(t)
			t.Logf("queue full after %d datagrams", fillQueue(t, p))
			return p, c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, c := tc.socket(t)
			spool := filepath.Join(shortDir(t), "spool")
			r := runHook(t, nil, notifyArgs("--hostname", "c1", "--lease-time", "600", "--socket", sock, "--spool", spool)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			t.Logf("hook process took %v", r.elapsed)
			lines := spoolLines(t, spool)
			if len(lines) != 1 {
				t.Fatalf("spool holds %d lines, want 1: %q", len(lines), lines)
			}
			d := decode(t, []byte(lines[0]))
			if d.Action != "commit" || d.IP != "203.0.113.5" || d.Hostname == nil || *d.Hostname != "c1" || *d.LeaseTime != 600 {
				t.Errorf("spooled %+v", d)
			}
			if c != nil {
				// Only fillers in the queue: the hook's datagram is not there.
				buf := make([]byte, 4096)
				for {
					c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
					n, err := c.Read(buf)
					if err != nil {
						break
					}
					if !bytes.Equal(buf[:n], []byte(`{"filler":true}`)) {
						t.Errorf("event sent although spooled: %q", buf[:n])
					}
				}
			}
		})
	}
}

// TestDeliverBound: deliver (no process start) against a full queue
// spools rather than waiting for the reader; a send that blocked would
// hang the test until go test's -timeout fails it. The log line shows
// how long it took.
func TestDeliverBound(t *testing.T) {
	sock, _ := listen(t)
	fillQueue(t, sock)
	spool := shortDir(t)
	msg := []byte(`{"action":"commit"}`)
	start := time.Now()
	if err := deliver(msg, sock, spool); err != nil {
		t.Fatal(err)
	}
	t.Logf("deliver to a full queue (spooled) took %v", time.Since(start))
	if got := spoolLines(t, spool); len(got) != 1 || got[0] != string(msg) {
		t.Errorf("spool %q", got)
	}
}

// TestSpoolSticky: once an event is spooled, later ones follow it into
// the spool even when the agent is back, so the spool and the socket
// never reorder events; after the agent drains (renames the file away),
// events go to the socket again.
func TestSpoolSticky(t *testing.T) {
	dir := shortDir(t)
	sock, spool := filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool")
	run := func(ip string) {
		t.Helper()
		if r := runHook(t, nil, notifyArgs("--ip", ip, "--socket", sock, "--spool", spool)...); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	}
	run("203.0.113.1") // agent down: spooled
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run("203.0.113.2") // agent up, but the spool is not drained: spooled after .1
	nothingQueued(t, c)
	lines := spoolLines(t, spool)
	if len(lines) != 2 || decode(t, []byte(lines[0])).IP != "203.0.113.1" || decode(t, []byte(lines[1])).IP != "203.0.113.2" {
		t.Fatalf("spool %q", lines)
	}
	// The agent drains: rename, lock, read, remove.
	drained := filepath.Join(spool, "draining")
	if err := os.Rename(filepath.Join(spool, spoolFile), drained); err != nil {
		t.Fatal(err)
	}
	os.Remove(drained)
	run("203.0.113.3")
	if d := decode(t, receive(t, c)); d.IP != "203.0.113.3" {
		t.Errorf("after the drain, received %+v", d)
	}
	if lines := spoolLines(t, spool); lines != nil {
		t.Errorf("spooled after the drain: %q", lines)
	}
}

func TestSpoolDirCreated(t *testing.T) {
	spool := filepath.Join(shortDir(t), "a", "b")
	if r := runHook(t, nil, notifyArgs("--socket", "/nonexistent/hook.sock", "--spool", spool)...); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	fi, err := os.Stat(spool)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&^0o750 != 0 {
		t.Errorf("spool directory mode %v, want at most 0750", fi.Mode())
	}
	if n := len(spoolLines(t, spool)); n != 1 {
		t.Errorf("%d lines spooled", n)
	}
}

// TestEventLost: only when neither the socket nor the spool can take the
// event does the hook exit 1, with one line saying both reasons.
func TestEventLost(t *testing.T) {
	blocker := filepath.Join(shortDir(t), "file")
	os.WriteFile(blocker, nil, 0o644)
	r := runHook(t, nil, notifyArgs("--socket", "/nonexistent/hook.sock", "--spool", blocker+"/spool")...)
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "event lost") ||
		!strings.Contains(r.stderr, "no such file or directory") || !strings.Contains(r.stderr, "not a directory") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestSpoolConcurrentProcesses: many hooks spooling at once (dhcpd4 and
// dhcpd6, or several dhcpd) interleave whole lines, each writer's lines
// in its own order, while an agent drains the spool under their feet
// with the documented protocol (rename, exclusive lock, read, remove).
func TestSpoolConcurrentProcesses(t *testing.T) {
	const writers, events = 6, 40
	spool := shortDir(t)
	sock := filepath.Join(spool, "absent.sock")
	host := strings.Repeat("x", 200)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range events {
				r, err := execHook(nil, notifyArgs("--lease-time", fmt.Sprint(w*1000+i), "--hostname", host, "--socket", sock, "--spool", spool)...)
				if err != nil {
					t.Error(err)
					return
				}
				if r.code != 0 {
					t.Errorf("writer %d event %d: exit %d: %s", w, i, r.code, r.stderr)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var drained [][]string
	drainDone := make(chan struct{})
	go func() {
		defer close(drainDone)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			lines, err := drainOnce(spool, n)
			if err != nil {
				t.Error(err)
				return
			}
			if lines != nil {
				drained = append(drained, lines)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-drainDone
	if rest := spoolLines(t, spool); rest != nil {
		drained = append(drained, rest)
	}
	next := make([]int, writers)
	total := 0
	for _, batch := range drained {
		for _, l := range batch {
			d := decode(t, []byte(l))
			w, i := int(*d.LeaseTime)/1000, int(*d.LeaseTime)%1000
			if w >= writers || i != next[w] {
				t.Fatalf("writer %d: event %d arrived when %d was due", w, i, next[w])
			}
			next[w]++
			total++
		}
	}
	if total != writers*events {
		t.Errorf("%d events drained, want %d", total, writers*events)
	}
	t.Logf("%d events in %d drains", total, len(drained))
}

// drainOnce is the agent's side of the spool protocol, as doc.go
// describes it.
func drainOnce(spool string, n int) ([]string, error) {
	name := filepath.Join(spool, fmt.Sprintf("draining-%06d", n))
	if err := os.Rename(filepath.Join(spool, spoolFile), name); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return lines, os.Remove(name)
}

// TestSpoolAppendAtomic checks the filesystem property the spool relies
// on, with lines far longer than any event and than PIPE_BUF: concurrent
// O_APPEND writes of whole lines (writeLine, as appendSpool opens the
// file) never interleave. TestSpoolConcurrentProcesses runs the whole
// path, a process per hook.
func TestSpoolAppendAtomic(t *testing.T) {
	const goroutines, each, size = 8, 50, 256 << 10
	spool := shortDir(t)
	path := filepath.Join(spool, spoolFile)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := append(bytes.Repeat([]byte{byte('a' + g)}, size), '\n')
			for range each {
				fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_CLOEXEC, 0o640)
				if err != nil {
					t.Error(err)
					return
				}
				err = writeLine(fd, line)
				syscall.Close(fd)
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	lines := spoolLines(t, spool)
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
	for i, l := range lines {
		if len(l) != size || strings.Count(l, l[:1]) != size {
			t.Fatalf("line %d is torn (%d bytes)", i, len(l))
		}
	}
}

// BenchmarkProcess measures what dhcpd waits for per event: starting the
// hook, sending to a listening socket (or spooling) and exiting, against
// /bin/true, an empty Go program and the hook failing its argument check.
// scripts/bench-hook measures the same inside dhcpd.
//
//	go test -run '^$' -bench Process ./hook
func BenchmarkProcess(b *testing.B) {
	sock, c := listen(b)
	go func() { // drain like the agent
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	spool := filepath.Join(shortDir(b), "spool")
	empty := filepath.Join(shortDir(b), "empty")
	src := filepath.Join(filepath.Dir(empty), "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(lktest.GoTool(), "build", "-o", empty, src).CombinedOutput(); err != nil {
		b.Fatalf("build an empty program: %v\n%s", err, out)
	}
	args := notifyArgs("--lease-time", "600", "--hostname", "node1", "--spool", spool)
	for _, bc := range []struct {
		name string
		argv []string
	}{
		{"true", []string{"/bin/true"}},
		{"empty-go", []string{empty}},
		{"hook-invalid", append([]string{hookBin}, notifyArgs("--action", "x")...)},
		{"hook-send", append(append([]string{hookBin}, args...), "--socket", sock)},
		{"hook-spool", append(append([]string{hookBin}, args...), "--socket", sock+".absent")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(bc.argv[0], bc.argv[1:]...)
				cmd.Env = []string{}
				_ = cmd.Run() // hook-invalid exits 2 by design
			}
		})
	}
}

// BenchmarkDeliver measures the hook's delivery alone, in process: the
// system calls deliver makes for one event (the spool's stat, then
// socket, sendto and close, or the spool's append), each event a pause
// after the last so that the reader is asleep when it comes, as the
// agent is between dhcpd's events. What it reports, µs-per-event, is
// what no hook that delivers its event to another process gets under,
// whatever its language; BenchmarkProcess and scripts/bench-hook-start
// measure it with the process's start and exit around it.
//
//	go test -run '^$' -bench Deliver ./hook
func BenchmarkDeliver(b *testing.B) {
	msg := []byte(`{"action":"commit","mac":"02:00:00:0a:0b:0c","ip_family":"ipv4","ip":"198.18.0.5","timestamp":1796267724,"lease_time":3600,"hostname":"node-1"}` + "\n")
	for _, bc := range []struct {
		name   string
		listen bool // a reader drains the socket; else nobody binds it
	}{
		{"listening", true},
		{"refused-spooling", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sock := filepath.Join(shortDir(b), "absent.sock")
			if bc.listen {
				var c *net.UnixConn
				sock, c = listen(b)
				go func() { // drain like the agent
					buf := make([]byte, 64<<10)
					for {
						if _, err := c.Read(buf); err != nil {
							return
						}
					}
				}()
			}
			spool := filepath.Join(shortDir(b), "spool")
			var spent time.Duration
			n := 0
			for b.Loop() {
				time.Sleep(200 * time.Microsecond)
				t0 := time.Now()
				err := deliver(msg, sock, spool)
				spent += time.Since(t0)
				n++
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(n)/1000, "µs-per-event")
			if _, err := os.Stat(filepath.Join(spool, spoolFile)); bc.listen == (err == nil) {
				b.Fatalf("spool file there: %v, want %v", err == nil, !bc.listen)
			}
		})
	}
}

// TestAsMAASHelper: installed in place of maas-dhcp-helper (a link by
// that name, as README.Debian's diversion makes), the hook is run with
// MAAS's dhcpd.conf arguments, whose --socket names MAAS's own socket.
// The event goes to the agent's socket instead; the same link by another
// name honours --socket.
func TestAsMAASHelper(t *testing.T) {
	sock, c := listen(t)
	dir := shortDir(t)
	spool := filepath.Join(dir, "spool")
	maas := filepath.Join(dir, "maas-dhcp-helper")
	if err := os.Symlink(hookBin, maas); err != nil {
		t.Fatal(err)
	}
	args := []string{"notify", "--action", "commit", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5",
		"--lease-time", "600", "--hostname", "c1", "--socket", filepath.Join(dir, "maas-dhcpd.sock")}
	cmd := exec.Command(maas, args...)
	cmd.Env = []string{envSocket + "=" + sock, envSpool + "=" + spool}
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("as maas-dhcp-helper: %v %q", err, out)
	}
	got := decode(t, receive(t, c))
	if got.Action != "commit" || got.IP != "203.0.113.5" {
		t.Fatalf("received %+v", got)
	}
	if lines := spoolLines(t, spool); lines != nil {
		t.Fatalf("spooled: %q", lines)
	}

	// By its own name, --socket wins: MAAS's (absent) socket, so it spools.
	r := runHook(t, []string{envSocket + "=" + sock, envSpool + "=" + spool}, args...)
	if r.code != 0 || len(spoolLines(t, spool)) != 1 {
		t.Fatalf("as leasekeeper-hook: exit %d, spool %q", r.code, spoolLines(t, spool))
	}
}

func TestDropSocketFlag(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"notify", "--ip", "x", "--socket", "/s", "--hostname", "h"}, []string{"notify", "--ip", "x", "--hostname", "h"}},
		{[]string{"notify", "--socket=/s", "--ip", "x"}, []string{"notify", "--ip", "x"}},
		{[]string{"notify", "--hostname", "--socket", "--socket", "/s"}, []string{"notify", "--hostname", "--socket"}},
		{[]string{"notify", "--hostname", "--socket=x", "--socket=/s", "--help"}, []string{"notify", "--hostname", "--socket=x", "--help"}},
		{[]string{"notify", "--ip", "x", "--socket"}, []string{"notify", "--ip", "x"}},
		{[]string{"notify"}, []string{"notify"}},
	} {
		if got := dropSocketFlag(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("dropSocketFlag(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for name, want := range map[string]bool{
		"/usr/sbin/maas-dhcp-helper": true, "maas-dhcp-helper": true,
		"/usr/sbin/leasekeeper-hook": false, "/x/maas-dhcp-helper.py": false, "": false,
	} {
		if got := isMAASHelper(name); got != want {
			t.Errorf("isMAASHelper(%q) = %v", name, got)
		}
	}
}
