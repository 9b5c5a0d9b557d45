package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/leasegen"
)

// TestDisallowedUIDRejected: the hook run as nobody reaches the socket
// (mode 0622, as the agent makes it without a socket group) but the agent,
// allowing only root, rejects its datagrams by their SO_PASSCRED
// credentials and counts them; root's events next to them go through.
func TestDisallowedUIDRejected(t *testing.T) {
	needRoot(t, "runs the hook as the user nobody")
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	e := newEnv(t)
	// nobody needs to execute the hook and reach the socket: both go in a
	// directory of their own that others may search (t.TempDir is 0700).
	pub, err := os.MkdirTemp("", "leasekeeper-e2e-uid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	if err := os.Chmod(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	hookBin := filepath.Join(pub, "leasekeeper-hook")
	copyFile(t, bins.hook, hookBin, 0o755)
	e.socket = filepath.Join(pub, "hook.sock")
	a := e.startAgent(agentOptions{allowedUIDs: "[0]"})

	g := newGen(6)
	asNobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	bad := g.events(20, 0, 10)
	for _, h := range bad {
		// Exit 0: the kernel took the datagram. The spool (0750, root's)
		// is out of nobody's reach, so nothing can slip in that way.
		if err := e.hookWith(hookBin, asNobody, e.hookArgs(h)...); err != nil {
			t.Fatal(err)
		}
	}
	good := g.events(20, 10, 10)
	if err := e.runHooks(good, 2, nil); err != nil {
		t.Fatal(err)
	}
	e.waitDelivered(a, good, 30*time.Second)
	if d := checkDelivered(t, good, e.region.items()); d.dups != 0 {
		t.Errorf("%d duplicates", d.dups)
	}
	if got := a.metric(`leasekeeper_rejected_datagrams_total{reason="uid"}`); got != float64(len(bad)) {
		t.Errorf(`leasekeeper_rejected_datagrams_total{reason="uid"} = %v, want %d`, got, len(bad))
	}
	if !strings.Contains(a.log(), fmt.Sprintf("sender uid %d not in hook.allowed_uids", uid)) {
		t.Error("the rejection is not logged")
	}
	if _, err := os.Stat(filepath.Join(e.spool, "events.jsonl")); err == nil {
		t.Error("something was spooled")
	}
	t.Logf("%d datagrams from uid %d rejected and counted, %d from root delivered", len(bad), uid, len(good))
	a.stop()
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// sendDatagram sends b to the unix datagram socket at path, waiting while
// its queue is full.
func sendDatagram(t *testing.T, path string, b []byte) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 1<<20); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Sendto(fd, b, syscall.MSG_DONTWAIT, &syscall.SockaddrUnix{Name: path})
		if err == nil {
			return
		}
		if (err != syscall.EAGAIN && err != syscall.EINTR) || time.Now().After(deadline) {
			t.Fatalf("sending a %d-byte datagram: %v", len(b), err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBadInput: garbage, truncated, oversized and badly encoded datagrams,
// sent straight to the socket between hook execs, and hostile host names
// given to the hook. The agent stays up, counts what it refuses, keeps
// what can be kept (a long host name is cut, invalid UTF-8 replaced), and
// the good events around the bad ones arrive, in order, once.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	a := e.startAgent(agentOptions{})
	rng := rand.New(rand.NewPCG(7, 7))
	garbage := make([]byte, 1500)
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	now := time.Now().Unix()
	rawEvent := func(ip, mac, hostname string) []byte {
		return fmt.Appendf(nil, `{"action":"commit","mac":%q,"ip_family":"ipv4","ip":%q,"timestamp":%d,"lease_time":600,"hostname":"%s","timestamp_ns":%d,"pid":1}`,
			mac, ip, now, hostname, time.Now().UnixNano())
	}
	rejects := []struct {
		name, reason string
		b            []byte
	}{
		{"random bytes", "malformed", garbage},
		{"empty datagram", "malformed", nil},
		{"a lone brace", "malformed", []byte("{")},
		{"invalid UTF-8 instead of JSON", "malformed", []byte("\xff\xfe\xfd{\"action\":\"commit\"}")},
		{"two objects", "malformed", append(rawEvent("198.18.9.1", "02:00:00:00:09:01", "x"), rawEvent("198.18.9.2", "02:00:00:00:09:02", "y")...)},
		{"unknown action", "malformed", []byte(`{"action":"explode","mac":"2:0:0:0:9:3","ip_family":"ipv4","ip":"198.18.9.3","timestamp":1}`)},
		{"bad MAC", "malformed", []byte(`{"action":"expiry","mac":"zz:zz","ip_family":"ipv4","ip":"198.18.9.4","timestamp":1}`)},
		{"IPv6 address as ipv4", "malformed", []byte(`{"action":"expiry","mac":"2:0:0:0:9:5","ip_family":"ipv4","ip":"2001:db8::5","timestamp":1}`)},
		{"hostname not a string", "malformed", []byte(`{"action":"commit","mac":"2:0:0:0:9:6","ip_family":"ipv4","ip":"198.18.9.6","timestamp":1,"hostname":{"a":1}}`)},
		{"70 000 bytes", "truncated", rawEvent("198.18.9.7", "02:00:00:00:09:07", strings.Repeat("h", 70_000))},
		{"a time no clock shows (2^63-1)", "timestamp", []byte(`{"action":"commit","mac":"2:0:0:0:9:8","ip_family":"ipv4","ip":"198.18.9.8","timestamp":9223372036854775807,"lease_time":600,"hostname":"x"}`)},
		{"a time before 2000", "timestamp", []byte(`{"action":"commit","mac":"2:0:0:0:9:9","ip_family":"ipv4","ip":"198.18.9.9","timestamp":1,"lease_time":600,"hostname":"x"}`)},
	}
	// Kept, with the host name made what the region can take
	// (event.RegionHostname: MAAS fails a whole batch on a name it cannot
	// coerce): each names its own address.
	longName := strings.Repeat("n", 64<<10-400) // the datagram stays within 64 KiB
	kept := []struct {
		name, ip, hostname string
		b                  []byte
	}{
		{"a 64 KiB datagram (host name too long for the region: none)", "198.18.8.1", "", rawEvent("198.18.8.1", "02:00:00:00:08:01", longName)},
		{"invalid UTF-8 in the host name", "198.18.8.2", "bad-name", rawEvent("198.18.8.2", "02:00:00:00:08:02", "bad\xff\xfename")},
		{"NUL and control characters in the host name", "198.18.8.4", "nul-ctl", rawEvent("198.18.8.4", "02:00:00:00:08:04", `NUL\u0000ctl\u0007\t`)},
		{"maas-dhcp-helper's datagram", "198.18.8.3", "maas-node", []byte(`{"action": "commit", "mac": "2:0:0:0:8:3", "ip_family": "ipv4", "ip": "198.18.8.3", "timestamp": 1795000000, "lease_time": 600, "hostname": "maas-node"}`)},
	}
	if len(kept[0].b) > 64<<10 {
		t.Fatalf("the 64 KiB datagram is %d bytes", len(kept[0].b))
	}

	var bads [][]byte
	for _, r := range rejects {
		bads = append(bads, r.b)
	}
	for _, k := range kept {
		bads = append(bads, k.b)
	}
	g := newGen(7)
	good := g.events(160, 0, 10)
	for i, h := range good {
		if err := e.hook(h); err != nil {
			t.Fatal(err)
		}
		if k := i / 8; i%8 == 7 && k < len(bads) {
			sendDatagram(t, e.socket, bads[k])
		}
	}
	if len(good)/8 < len(bads) {
		t.Fatal("not enough good events to go round the bad ones")
	}
	// Hostile host names through the hook itself: cut to 255 bytes,
	// invalid bytes replaced, and a bad MAC refused with exit status 2.
	hookLong := hookEvent{id: 900_001, action: event.Commit, ip: ipOf(50), client: 900_001, host: strings.Repeat("L", 64<<10)}
	hookBad := hookEvent{id: 900_002, action: event.Commit, ip: ipOf(51), client: 900_002, host: "caf\xe9-\xff"}
	for _, h := range []hookEvent{hookLong, hookBad} {
		if err := e.hook(h); err != nil {
			t.Fatal(err)
		}
	}
	err := e.hookWith(bins.hook, nil, "notify", "--action", "commit", "--mac", "zz:zz", "--ip-family", "ipv4", "--ip", ipOf(52), "--socket", e.socket, "--spool", e.spool)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("hook with --mac zz:zz: %v, want exit status 2", err)
	}

	e.waitDelivered(a, good, 30*time.Second)
	if !waitFor(10*time.Second, func() bool { return e.region.count() >= len(good)+len(kept)+2 }) {
		t.Errorf("region has %d items, want %d", e.region.count(), len(good)+len(kept)+2)
	}
	items := e.region.items()
	var goodItems []event.RegionItem
	byIP := map[string][]event.RegionItem{}
	for _, it := range items {
		byIP[it.IP] = append(byIP[it.IP], it)
		if strings.HasPrefix(it.Hostname, "node-") || it.Action != event.Commit {
			goodItems = append(goodItems, it)
		}
	}
	if d := checkDelivered(t, good, goodItems); d.dups != 0 {
		t.Errorf("%d duplicates", d.dups)
	}
	for _, k := range kept {
		if got := byIP[k.ip]; len(got) != 1 || got[0].Hostname != k.hostname {
			t.Errorf("%s: region got %.200v, want one commit with hostname %.60q… (%d bytes)", k.name, got, k.hostname, len(k.hostname))
		}
	}
	if got := byIP[hookLong.ip]; len(got) != 1 || got[0].Hostname != "" {
		t.Errorf("hook with a 64 KiB host name: region got %.200v, want no host name (too long for the region)", got)
	}
	if got := byIP[hookBad.ip]; len(got) != 1 || !utf8.ValidString(got[0].Hostname) || got[0].Hostname != "caf" {
		t.Errorf("hook with invalid UTF-8 in the host name: region got %+v", got)
	}
	if got := byIP[ipOf(52)]; len(got) != 0 {
		t.Errorf("an event with a bad MAC reached the region: %+v", got)
	}
	for _, reason := range []string{"malformed", "truncated", "timestamp"} {
		want := 0
		for _, r := range rejects {
			if r.reason == reason {
				want++
			}
		}
		if got := a.metric(`leasekeeper_rejected_datagrams_total{reason="` + reason + `"}`); got != float64(want) {
			t.Errorf("rejected %s: %v, want %d", reason, got, want)
		}
	}
	for _, ip := range []string{"198.18.9.1", "198.18.9.2", "198.18.9.3", "198.18.9.4", "198.18.9.6", "198.18.9.7", "198.18.9.8", "198.18.9.9"} {
		if got := byIP[ip]; len(got) != 0 {
			t.Errorf("a rejected datagram reached the region: %+v", got)
		}
	}
	if _, err := a.get("/healthz"); err != nil || !a.running() {
		t.Errorf("agent not healthy after the bad input: %v", err)
	}
	t.Logf("%d bad datagrams rejected and counted, %d repaired and kept, %d good events around them delivered in order", len(rejects), len(kept)+2, len(good))
	a.stop()
}

// TestFullStateDisk: the state directory is a tiny tmpfs, filled up while
// the region is away, so the outbox cannot grow. Hooks go on: their events
// wait in the socket and then in the spool; the agent logs the full disk,
// stays up and answers /status. Once space returns (and the region), every
// event the hooks handed over arrives, in order.
func TestFullStateDisk(t *testing.T) {
	needRoot(t, "mounts a tmpfs")
	e := newEnv(t)
	state := filepath.Join(e.dir, "state-tmpfs")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	lktest.Tmpfs(t, state, "1m", 0o700, 0) // unmounted after the agent's cleanup (last-in first-out)
	// A queue of 10 datagrams whatever the host's setting, so that 400
	// events overflow it into the spool.
	sock, err := lab.UnixgramQlen(e.socket, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	a := e.startAgent(agentOptions{stateDir: state, activated: sock})
	g := newGen(8)
	before := g.events(50, 0, 20)
	if err := e.runHooks(before, 2, nil); err != nil {
		t.Fatal(err)
	}
	e.waitDelivered(a, before, 30*time.Second)

	e.region.stub().Unavailable(time.Hour, "1")
	ballast := filepath.Join(state, "ballast")
	fill(t, ballast)
	// What the disk full shows is transient: a retry can store a batch on
	// the "full" disk (pages the outbox file already holds: freed ones,
	// or those a failed commit wrote), and the agent then drains the
	// spool. So watch from the start instead of reading once: the most
	// events /status showed held, and the most lines the spool held.
	watch := watchFull(a, e.spool)
	t.Cleanup(func() { watch.stop() }) // on a failure before the stop below
	during := g.events(400, 0, 20)
	if err := e.runHooks(during, 2, nil); err != nil {
		t.Fatal(err)
	}
	// Within a minute: under load (a CI machine running every package's
	// tests at once) the agent may take well over the 15 s this waited
	// to get to the events the hooks spooled, and meet the full disk
	// only then (a CI run failed so, nothing logged but the outage).
	if !waitFor(60*time.Second, func() bool { return strings.Contains(a.log(), "disk full") }) {
		t.Fatalf("no \"disk full\" in the log:\n%s", a.logTail(20))
	}
	if _, err := a.status(); err != nil || !a.running() {
		t.Fatalf("agent not answering on a full disk: %v", err)
	}
	// A hold lasts at least one retry interval (100 ms), many polls.
	waitFor(30*time.Second, func() bool { return watch.held() > 0 })
	seen := watch.stop()
	spooled := max(seen.spooled, drainedInLog(a.log()))
	var line string
	for _, l := range strings.Split(a.log(), "\n") {
		if strings.Contains(l, "disk full") {
			line = l
			break
		}
	}
	t.Logf("disk full: at most %d events held, %d spooled by the hooks; the agent logs:\n%s", seen.held, spooled, line)
	if spooled == 0 {
		t.Error("no hook spooled while the disk was full")
	}
	if seen.held == 0 {
		t.Error("status never showed events held while the outbox could not store them")
	}
	if seen.statusErr != nil {
		t.Errorf("/status failed on the full disk: %v", seen.statusErr)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	e.region.stub().ClearFaults()
	freed := time.Now()
	after := g.events(50, 0, 20)
	if err := e.runHooks(after, 2, nil); err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(before, during, after)
	e.waitDelivered(a, all, 60*time.Second)
	if d := checkDelivered(t, all, e.region.items()); d.dups != 0 {
		t.Errorf("%d duplicates", d.dups)
	}
	t.Logf("space back: all %d events delivered %s later", len(all), time.Since(freed).Round(time.Millisecond))
	a.stop()
}

// fullSeen is what watchFull saw.
type fullSeen struct {
	held, spooled int   // the most events /status showed held, lines the spool held
	statusErr     error // the first failed /status, if any
}

type fullWatch struct {
	mu   sync.Mutex
	seen fullSeen
	once sync.Once
	quit chan struct{}
	done chan struct{}
}

// watchFull polls the agent's /status and the spool file every 10 ms
// until stopped.
func watchFull(a *agentProc, spool string) *fullWatch {
	w := &fullWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			r, err := a.status()
			lines := 0
			for _, name := range []string{"events.jsonl", "events.jsonl.draining"} {
				if b, err := os.ReadFile(filepath.Join(spool, name)); err == nil {
					lines += strings.Count(string(b), "\n")
				}
			}
			w.mu.Lock()
			if err != nil && w.seen.statusErr == nil {
				w.seen.statusErr = err
			}
			if err == nil && r.Held != nil {
				w.seen.held = max(w.seen.held, r.Held.Events)
			}
			w.seen.spooled = max(w.seen.spooled, lines)
			w.mu.Unlock()
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *fullWatch) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen.held
}

// stop ends the polling (once; later calls wait for it) and returns
// what it saw.
func (w *fullWatch) stop() fullSeen {
	w.once.Do(func() { close(w.quit) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// drainedInLog sums the events the agent logged taking from the spool.
func drainedInLog(log string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		var m struct {
			Msg    string `json:"message"`
			Events int    `json:"events"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "drained the hook spool" {
			n += m.Events
		}
	}
	return n
}

// fill writes path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// TestBacklogBeforeFile: a client's lease was told. Then, its renewal
// and its release: the leases file, rewritten, shows the release alone,
// and the agent that read it stops before the hooks' events of both are
// stored (they wait in the socket's queue, or the spool). The next
// agent starts after reconcile.expiry_grace has passed. It must take the
// hooks' backlog before it sends what it scheduled from the file: the
// other way round, the release goes as missed and the hook's older
// commit is then dropped as older news, a lease life lost to the region
// (make chaos PAIR=1 seed 94: three).
func TestBacklogBeforeFile(t *testing.T) {
	for _, tc := range []struct {
		name      string
		activated bool // the socket outlives agents (systemd); else the hooks spool
	}{
		{"socket queue", true},
		{"spool", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var sock *os.File
			if tc.activated {
				sock = e.activatedSocket()
			}
			// The grace is long enough for the first agent to stop
			// before the release it read falls due: with 1 s, a slow
			// stop under CI's race detector let it send the release,
			// and the renewal was then older news.
			opts := agentOptions{activated: sock, extra: "\n[reconcile]\nmode = \"replacement\"\nexpiry_grace = \"4s\"\n"}
			leasesPath := filepath.Join(e.dir, "dhcpd.leases")
			if err := os.WriteFile(leasesPath, []byte("# dhcpd.leases\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			const mac = "02:00:00:00:00:07"
			h := hookEvent{ip: ipOf(7), client: 7}
			hook := func(id int, action string) hookEvent {
				x := h
				x.id, x.action = id, action
				if action == event.Commit {
					x.host = fmt.Sprintf("node-%d", id)
				}
				if err := e.hook(x); err != nil {
					t.Fatal(err)
				}
				return x
			}
			block := func(state string, starts, ends int64) string {
				at := func(sec int64) string { return leasegen.Date(time.Unix(sec, 0).UTC()) }
				return fmt.Sprintf("lease %s {\n  starts %s;\n  ends %s;\n  cltt %s;\n  binding state %s;\n  hardware ethernet %s;\n}\n",
					h.ip, at(starts), at(ends), at(starts), state, mac)
			}
			write := func(text string) { // whole, as dhcpd rewrites it
				tmp := leasesPath + "~"
				if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, leasesPath); err != nil {
					t.Fatal(err)
				}
			}

			// The first lease, told while an agent runs.
			a := e.startAgent(opts)
			at := time.Now().Unix()
			first := hook(1, event.Commit)
			write(block("active", at, at+600))
			e.waitDelivered(a, []hookEvent{first}, 30*time.Second)
			// The renewal at s and the release at r, the file rewritten
			// with the release; the agent reads it and stops.
			s, r := at+2, at+4
			write(block("released", s, r))
			if !waitFor(30*time.Second, func() bool { return a.metric("leasekeeper_reconcile_pending") > 0 }) {
				t.Fatalf("the release the file shows is not pending; the agent logs:\n%s", a.logTail(20))
			}
			a.stop()
			time.Sleep(time.Until(time.Unix(s, 0)))
			renewal := hook(2, event.Commit)
			time.Sleep(time.Until(time.Unix(r, 0)))
			release := hook(3, event.Release)
			// Past the grace of what the file showed.
			time.Sleep(time.Until(time.Unix(r+4, 0)))
			a = e.startAgent(opts)
			e.waitDelivered(a, []hookEvent{first, renewal, release}, 30*time.Second)
			time.Sleep(4 * time.Second) // whatever else comes, within a grace
			var got []string
			for _, it := range e.region.items() {
				got = append(got, it.Action+" "+it.Hostname)
			}
			if w := []string{"commit node-1", "commit node-2", "release "}; !slices.Equal(got, w) {
				t.Errorf("the region got %q, want %q; the agent logs:\n%s", got, w, a.logTail(20))
			}
			a.stop()
		})
	}
}
