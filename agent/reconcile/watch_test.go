package reconcile

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/parser"
)

// describe renders changes compactly: "append 203.0.113.10=active …",
// "append(old) …", "snapshot why complete|held[ torn][ duid] IP=state…".
func describe(cs []change) []string {
	var out []string
	for _, c := range cs {
		var b strings.Builder
		switch c.kind {
		case changeAppend:
			b.WriteString("append")
			if c.oldFile {
				b.WriteString("(old)")
			}
			for _, l := range c.leases {
				fmt.Fprintf(&b, " %s=%s", l.IP, l.State)
			}
		case changeSnapshot:
			result := "complete"
			if !c.complete {
				result = "held"
			}
			fmt.Fprintf(&b, "snapshot %s %s", c.why, result)
			if c.torn {
				b.WriteString(" torn")
			}
			c.table.Each(func(l *parser.Lease) { fmt.Fprintf(&b, " %s=%s", l.IP, l.State) })
		}
		if c.duid {
			b.WriteString(" duid")
		}
		if len(c.errs) > 0 {
			fmt.Fprintf(&b, " errors=%d", len(c.errs))
		}
		out = append(out, b.String())
	}
	return out
}

func syncWant(t *testing.T, w *follower, poll bool, want ...string) {
	t.Helper()
	cs, err := w.sync(poll)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if diff := cmp.Diff(want, describe(cs)); diff != "" {
		t.Fatalf("sync(poll=%t) (-want +got):\n%s", poll, diff)
	}
}

func wblock(ip, state string) string {
	return block(ip, state, macA, t0, t0+600)
}

func TestFollowerAppendsAndTornWrites(t *testing.T) {
	d := newFakeDhcpd(t, t.TempDir())
	w := newFollower(d.path)
	defer w.close()

	syncWant(t, w, false) // no file yet: nothing, no error
	d.rewrite(wblock(ip1, "active"), true)
	syncWant(t, w, false, "snapshot appeared complete 203.0.113.10=active duid")
	syncWant(t, w, false)

	d.append(wblock(ip2, "active"))
	syncWant(t, w, false, "append 203.0.113.11=active")

	// A block torn in two writes: nothing until it is whole.
	b := wblock(ip1, "free")
	d.append(b[:17])
	syncWant(t, w, false)
	d.append(b[17:40])
	syncWant(t, w, true)
	d.append(b[40:] + wblock(ip2, "released"))
	syncWant(t, w, false, "append 203.0.113.10=free 203.0.113.11=released")

	// Garbage between blocks is skipped with an error; the next block counts.
	d.append("lease 203.0.113.12 { starts garbage; }\n" + wblock("203.0.113.13", "active"))
	syncWant(t, w, false, "append 203.0.113.13=active errors=1")
}

func TestFollowerRewrite(t *testing.T) {
	d := newFakeDhcpd(t, t.TempDir())
	d.rewrite(wblock(ip1, "active")+wblock(ip2, "active"), true)
	w := newFollower(d.path)
	defer w.close()
	syncWant(t, w, false, "snapshot start complete 203.0.113.10=active 203.0.113.11=active duid")

	// dhcpd starting: the expirations it finds go to the old file, then
	// the rewrite drops ip2 (out of range), then the server-duid line.
	// One sync sees it all, the old file first.
	d.append(wblock(ip1, "free"))
	d.rewrite(wblock(ip1, "free"), true)
	syncWant(t, w, false,
		"append(old) 203.0.113.10=free",
		"snapshot replaced complete 203.0.113.10=free duid")

	// The hourly rewrite has no server-duid line.
	d.rewrite(wblock(ip1, "free")+wblock(ip2, "active"), false)
	syncWant(t, w, false, "snapshot replaced complete 203.0.113.10=free 203.0.113.11=active")
	d.append(wblock(ip2, "free"))
	syncWant(t, w, false, "append 203.0.113.11=free")

	// Two rewrites between syncs: the middle file is never seen, the
	// last one is read whole.
	d.rewrite(wblock(ip1, "active"), false)
	d.rewrite(wblock(ip2, "active"), true)
	syncWant(t, w, false, "snapshot replaced complete 203.0.113.11=active duid")
}

// TestFollowerRestartSign: dhcpd -6 writes a server-duid statement at the
// head of every rewrite, hourly too (server/mdb6.c write_leases6), and a
// start adds another after the rename (server/dhcpd.c); dhcpd -4 writes
// one only at a start. Only the start's tells a restart.
func TestFollowerRestartSign(t *testing.T) {
	const duid6 = "00:01:00:01:2a:3b:4c:5d:02:00:00:00:00:01"
	ia1 := ia(duid6, "2001:db8:1::100", "active", t0, t0+600)
	d := newFakeDhcpd(t, t.TempDir())
	d.rewrite(duidLine+ia1, true)
	w := newFollower(d.path)
	defer w.close()
	syncWant(t, w, false, "snapshot start complete 2001:db8:1::100=active duid")

	d.rewrite(duidLine+ia1, false) // hourly
	syncWant(t, w, false, "snapshot replaced complete 2001:db8:1::100=active")
	d.rewrite(duidLine+ia1, true) // a start
	syncWant(t, w, false, "snapshot replaced complete 2001:db8:1::100=active duid")
	// With no IA, a DHCPv6 file cannot be told from a DHCPv4 one: its
	// hourly rewrite reads as a start.
	d.rewrite(duidLine, false)
	syncWant(t, w, false, "snapshot replaced complete duid")

	// dhcpd -4: the start's line after the table, or alone in an empty
	// one.
	d4 := newFakeDhcpd(t, t.TempDir())
	d4.rewrite("", true)
	w4 := newFollower(d4.path)
	defer w4.close()
	syncWant(t, w4, false, "snapshot start complete duid")
	d4.rewrite(wblock(ip1, "active"), false)
	syncWant(t, w4, false, "snapshot replaced complete 203.0.113.10=active")
	d4.rewrite(wblock(ip1, "active"), true)
	syncWant(t, w4, false, "snapshot replaced complete 203.0.113.10=active duid")
}

func TestFollowerTruncated(t *testing.T) {
	d := newFakeDhcpd(t, t.TempDir())
	d.rewrite(wblock(ip1, "active")+wblock(ip2, "active"), false)
	w := newFollower(d.path)
	defer w.close()
	syncWant(t, w, false, "snapshot start complete 203.0.113.10=active 203.0.113.11=active")

	// Shorter, same inode.
	d.truncate(leasesHeader + wblock(ip1, "active"))
	syncWant(t, w, false, "snapshot truncated complete 203.0.113.10=active")

	// Truncated and written again longer than before: the bytes before
	// the read position changed.
	d.truncate(leasesHeader + wblock(ip2, "released") + wblock(ip1, "free") + wblock("203.0.113.12", "active"))
	syncWant(t, w, false, "snapshot truncated complete 203.0.113.11=released 203.0.113.10=free 203.0.113.12=active")
}

func TestFollowerTornSnapshot(t *testing.T) {
	d := newFakeDhcpd(t, t.TempDir())
	d.rewrite(wblock(ip1, "active"), false)
	w := newFollower(d.path)
	defer w.close()
	syncWant(t, w, false, "snapshot start complete 203.0.113.10=active")

	// A rewrite whose end is torn: nothing is handed out; a poll that
	// finds it unchanged since the previous poll reports it held, once.
	b := wblock(ip2, "active")
	d.rewrite(wblock(ip1, "active")+b[:30], false)
	syncWant(t, w, false)
	syncWant(t, w, true)
	syncWant(t, w, true, "snapshot replaced held torn 203.0.113.10=active")
	syncWant(t, w, true)
	// Finished later: the whole read completes.
	d.append(b[30:])
	syncWant(t, w, false, "snapshot replaced complete 203.0.113.10=active 203.0.113.11=active")
}

func TestFollowerSyntaxErrorsRetried(t *testing.T) {
	d := newFakeDhcpd(t, t.TempDir())
	d.rewrite(wblock(ip1, "active"), false)
	w := newFollower(d.path)
	defer w.close()
	syncWant(t, w, false, "snapshot start complete 203.0.113.10=active")

	bad := "lease 203.0.113.99 {\n  starts 1 2026/13/45 99:00:00;\n}\n"
	d.rewrite(bad+wblock(ip2, "active"), false)
	syncWant(t, w, false, "snapshot replaced held 203.0.113.11=active errors=1")
	// Appends after it are still read as appends.
	d.append(wblock(ip2, "free"))
	syncWant(t, w, false, "append 203.0.113.11=free")
	// The poll reads it whole again: still bad.
	syncWant(t, w, true, "snapshot retry held 203.0.113.11=free errors=1")
	syncWant(t, w, false)
	// dhcpd's next rewrite is clean.
	d.rewrite(wblock(ip2, "free"), false)
	syncWant(t, w, true, "snapshot replaced complete 203.0.113.11=free")
	syncWant(t, w, true)
}

func TestFollowerResume(t *testing.T) {
	dir := t.TempDir()
	d := newFakeDhcpd(t, dir)
	d.rewrite(wblock(ip1, "active"), true)
	d.append(wblock(ip2, "active"))
	w := newFollower(d.path)
	syncWant(t, w, false, "snapshot start complete 203.0.113.10=active 203.0.113.11=active duid")
	pos, ok := w.position()
	w.close()
	if !ok {
		t.Fatal("no position while following")
	}

	resume := func(pos *Position, want ...string) *follower {
		t.Helper()
		w := newFollower(d.path)
		t.Cleanup(w.close)
		cs, err := w.resume(pos)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, describe(cs)); diff != "" {
			t.Fatalf("resume (-want +got):\n%s", diff)
		}
		return w
	}

	// Unchanged file: nothing to read.
	resume(&pos)
	// Appended while the agent was down: only the tail.
	d.append(wblock(ip1, "free"))
	w2 := resume(&pos, "append 203.0.113.10=free")
	pos2, _ := w2.position()
	if pos2.Offset <= pos.Offset {
		t.Fatalf("position did not move: %d then %d", pos.Offset, pos2.Offset)
	}

	// Replaced while the agent was down, the old file still there as
	// dhcpd.leases~: its tail first, then the new file whole.
	d.append(wblock(ip2, "free"))
	d.rewrite(wblock(ip1, "free"), true)
	resume(&pos2, "append(old) 203.0.113.11=free", "snapshot resume complete 203.0.113.10=free duid")

	// Replaced twice: the old one is gone, read the new one whole.
	d.rewrite(wblock(ip1, "active"), false)
	resume(&pos2, "snapshot resume complete 203.0.113.10=active")

	// Same inode, other bytes: read whole.
	p := pos2
	fi, err := os.Stat(d.path)
	if err != nil {
		t.Fatal(err)
	}
	p.Dev, p.Ino = idOf(fi).Dev, idOf(fi).Ino
	resume(&p, "snapshot resume complete 203.0.113.10=active")

	// No position stored: a first start.
	resume(nil, "snapshot start complete 203.0.113.10=active")
}
