package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// TestLabUnwrittenCommit: dhcpd runs a commit's hook before it writes
// the lease (server/dhcp.c ack_lease: the on commit statements execute,
// then supersede_lease writes the lease and commit_leases syncs it), and
// waits for the hook (common/execute.c: fork, then waitpid). Killed in
// between, it never wrote the lease; the restarted dhcpd does not know
// it. Here the hook's datagram reaches the agent only after the agent
// read the restart's rewrite (make chaos PAIR=1 seed 103: the region kept
// the address for the client): no file ever shows the lease, and no hook
// will tell its end. The agent tells it, once, at the commit's end plus
// the grace (rule 3, "unwritten").
func TestLabUnwrittenCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := newWorld(t, hooksOK, 12)
	arm, fired, goOn := filepath.Join(w.dir, "arm"), filepath.Join(w.dir, "fired"), filepath.Join(w.dir, "go")
	c := w.lab.AddClient("c1")
	// c1's first commit after arm is noted (its arguments in fired) and
	// its hook held until go (at most 60 s), then run: dhcpd waits for
	// it meanwhile, and the test kills dhcpd then. (Not another client's
	// renewal in between.)
	wrapper := filepath.Join(w.dir, "stalling-hook")
	// (dhcpd's binary-to-ascii writes the MAC's octets unpadded.)
	var octets []string
	for _, b := range c.MAC {
		octets = append(octets, fmt.Sprintf("%x", b))
	}
	script := fmt.Sprintf(`#!/bin/sh
case " $* " in
*" --action commit "*)
	case " $* " in
	*" --mac %[5]s "*|*" --mac %[6]s "*)
		if /bin/rm %[1]s 2>/dev/null; then
			echo "$*" > %[2]s.tmp && /bin/mv %[2]s.tmp %[2]s
			i=0
			while [ ! -e %[3]s ] && [ $i -lt 600 ]; do /bin/sleep 0.1; i=$((i+1)); done
		fi
	esac
esac
exec %[4]s "$@"
`, shq(arm), shq(fired), shq(goOn), shq(w.hook), mac(c), strings.Join(octets, ":"))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	w.hook, w.mode = wrapper, "replacement"
	w.startDhcpd(100, 150)
	w.startAgent()

	// A client that keeps its lease, so the file is not empty.
	c0 := w.lab.AddClient("c0")
	ip0 := w.dhclient(c0)
	w.waitArrival(ip0, event.Commit, mac(c0), 5*time.Second)

	if err := os.WriteFile(arm, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { _, err := c.Dhclient(ctx); errc <- err }()
	args := waitFile(t, fired, 30*time.Second)
	ip, err := netip.ParseAddr(argAfter(args, "--ip"))
	if err != nil {
		t.Fatalf("the hook's arguments %q: %v", args, err)
	}
	leaseTime, err := strconv.ParseInt(argAfter(args, "--lease-time"), 10, 64)
	if err != nil {
		t.Fatalf("the hook's arguments %q: %v", args, err)
	}
	// dhcpd waits for the hook: killed now, it never writes the lease.
	if err := w.d.Kill(); err != nil {
		t.Fatal(err)
	}
	cancel() // the client was never acked: it stops asking
	if err := <-errc; err == nil {
		t.Fatal("the client got a lease from a dhcpd killed before it acked; the test premise is gone")
	}
	before := counters(t, w.agent.reg, "leasekeeper_reconcile_snapshots_total")["complete"]
	w.restartDhcpd(100, 150)
	if strings.Contains(readFile(t, w.d.LeasesPath()), "hardware ethernet "+mac(c)) {
		t.Fatalf("the restarted dhcpd's file holds %s; the test premise is gone:\n%s", mac(c), readFile(t, w.d.LeasesPath()))
	}
	for counters(t, w.agent.reg, "leasekeeper_reconcile_snapshots_total")["complete"] <= before {
		time.Sleep(20 * time.Millisecond) // the agent reads the restart's rewrite (go test -timeout bounds it)
	}
	// Only now the hook runs and tells the commit.
	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	commit := w.waitArrival(ip, event.Commit, mac(c), 10*time.Second)
	ends := commit.Timestamp + leaseTime
	exp := w.waitArrival(ip, event.Expiry, mac(c), time.Until(time.Unix(ends, 0))+w.grace+15*time.Second)
	if exp.Timestamp != ends {
		t.Errorf("expiry dated %d, want the commit's end %d", exp.Timestamp, ends)
	}
	time.Sleep(2 * time.Second) // anything else would come now
	w.checkOnlyExpiry(ip, mac(c), ends)
	w.stopAgent()
	if got := w.lastSynth; len(got) != 1 || got["unwritten"] != 1 {
		t.Errorf("synthesised %v, want unwritten=1 only", got)
	}
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// argAfter is the word after flag in args (space-separated), "" if none.
func argAfter(args, flag string) string {
	f := strings.Fields(args)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == flag {
			return f[i+1]
		}
	}
	return ""
}

// waitFile waits for path to exist and returns its content, trimmed.
func waitFile(t *testing.T, path string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", path, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
