package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser"
)

// pairHooked writes a dhcpd.conf for one side of a failover pair running
// an executable leasekeeper-hook (replacement mode).
func (h *harness) pairHooked(role string) {
	h.t.Helper()
	hook := filepath.Join(h.dir, "leasekeeper-hook")
	if err := os.WriteFile(hook, []byte("#!/bin/true\n"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	conf := fmt.Sprintf("on commit { execute(%q, \"notify\"); }\n"+
		"failover peer \"fo\" { %s; address 203.0.113.1; peer address 203.0.113.2; max-response-delay 60; max-unacked-updates 10; mclt 3600; split 255; }\n"+
		"subnet 203.0.113.0 netmask 255.255.255.0 { pool { failover peer \"fo\"; range 203.0.113.10 203.0.113.50; } }\n", hook, role)
	if err := os.WriteFile(h.conf, []byte(conf), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// TestTaskSeveralPeers: MAAS declares one failover peer per HA VLAN
// (src/maasserver/dhcp.py, make_failover_peer_config, one per managed
// VLAN in get_dhcp_configuration), each with its own role and partner;
// the task reads them all from dhcpd.conf, says so, and each address
// follows its own subnet's pair.
func TestTaskSeveralPeers(t *testing.T) {
	h := newHarness(t)
	h.pairHooked("primary")
	b, err := os.ReadFile(h.conf)
	if err != nil {
		t.Fatal(err)
	}
	second := strings.NewReplacer(`"fo"`, `"fo2"`, "primary", "secondary", "203.0.113.", "198.51.100.").Replace(string(b[strings.Index(string(b), "failover peer"):]))
	if err := os.WriteFile(h.conf, append(b, second...), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	h.d.rewrite(fostate("normal", "normal")+block(ip1, "active", macA, now-100, now+3600), true)
	h.start(time.Second)
	h.waitLog("several failover peers", 10*time.Second)
	if !strings.Contains(h.logText(), `"peers":"fo (primary), fo2 (secondary)"`) {
		t.Errorf("the log does not name the peers:\n%s", h.logText())
	}
	if n := h.r.met.failoverPeers.Load(); n != 2 {
		t.Errorf("leasekeeper_reconcile_failover_peers = %d, want 2", n)
	}
	h.r.mu.Lock()
	p1, p2 := h.r.st.pairOf(netip.MustParseAddr(ip1)), h.r.st.pairOf(netip.MustParseAddr("198.51.100.20"))
	h.r.mu.Unlock()
	if p1.Peer != "fo" || p1.Role != RolePrimary || p2.Peer != "fo2" || p2.Role != RoleSecondary {
		t.Errorf("203.0.113.0/24 follows %+v, 198.51.100.0/24 %+v", p1, p2)
	}
}

// TestTaskSpooledReplayWaitsForFile is the returning rack of a pair whose
// agent starts after its dhcpd: dhcpd, recovering from its partner's
// partner-down, ran the on expiry its old copy of a lease carried when
// the survivor's update freed it (news the survivor told the region);
// the hook spooled it. The spool is drained at the agent's start, before
// or while the reconciler reads the file: the event must wait for the
// file's "my state recover" and be dropped, not reach the region again.
func TestTaskSpooledReplayWaitsForFile(t *testing.T) {
	h := newHarness(t)
	h.pairHooked("primary")
	now := time.Now().Unix()
	h.d.rewrite(fostate("normal", "normal")+block(ip1, "active", macA, now-100, now+3600), true)
	h.start(time.Second)
	if err := h.r.Accept(context.Background(), []event.Event{hook(event.Commit, ip1, macA, now-100)}); err != nil {
		t.Fatal(err)
	}
	h.stop()

	// The rack was down; its dhcpd starts again (rewrite), recovers, and
	// the survivor's update frees ip1: the hook runs, the agent is not
	// there yet, the event is spooled.
	h.d.rewrite(fostate("recover", "partner-down")+block(ip1, "active", macA, now-100, now+3600), true)
	h.d.append(block(ip1, "free", macA, now-100, now+5))
	replay := hook(event.Expiry, ip1, macA, now+10)
	replay.Source = event.SourceSpool
	accepted := make(chan error, 1)
	// The spool drains concurrently with the reconciler's start, as the
	// agent runs its tasks; here it is handed over before Run begins.
	h.beforeRun = func(r *Reconciler) {
		go func() { accepted <- r.Accept(context.Background(), []event.Event{replay}) }()
	}
	h.start(time.Second)
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after the reconciler read the file")
	}
	if got, want := strings.Join(h.queued(), "|"), "commit 203.0.113.10 00:16:3e:00:00:0a "; got != want {
		t.Fatalf("queued %q, want only the first commit %q\nlog:\n%s", got, want, h.logText())
	}
	if n := testutil.ToFloat64(h.r.met.superseded); n != 1 {
		t.Errorf("superseded = %v, want 1 (the replay)", n)
	}
}

// TestTaskPairStateResumed: the pair's state is persisted with the file
// position, so an agent restarted while dhcpd runs on (it resumes after
// the failover records and reads them no more) is still the survivor.
func TestTaskPairStateResumed(t *testing.T) {
	h := newHarness(t)
	h.pairHooked("secondary")
	now := time.Now().Unix()
	h.d.rewrite(fostate("normal", "normal")+block(ip1, "active", macA, now-100, now+1), true)
	h.start(time.Second)
	h.d.append(fostate("partner-down", "communications-interrupted"))
	h.waitLog("taking over", 10*time.Second) // the survivor takes over
	// Stopping persists the state with the position past the record.
	h.stop()

	h.start(time.Second)
	if !h.r.st.Pair.Survivor() {
		t.Fatalf("after a restart the pair is %+v, want this side partner-down", h.r.st.Pair)
	}
	if strings.Count(h.logText(), "leases file read whole") != 1 {
		t.Fatalf("the restarted agent read the file whole; the test wants a resume:\n%s", h.logText())
	}
	// ip1 ends while the primary is down: dhcpd writes it expired and
	// runs no hook; the survivor's agent tells it after the grace.
	h.d.append(block(ip1, "expired", macA, now-100, now+1))
	got, _ := h.waitQueued(1, 10*time.Second)
	if want := "expiry 203.0.113.10 00:16:3e:00:00:0a missed-expiry"; strings.Join(got, "|") != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
}

// TestTaskRestartKeepsShownEnd: in a pair, a free block's end is when the
// lease's state may next change, not when it ended, and a hook's commit
// made after the file showed such an end is news (endShownBefore). When
// the file showed it is kept in memory only; an agent restarted in
// between knows only that the last run recorded the end, so before it
// started (make chaos PAIR=1 seed 99: the primary's agent, killed and
// back in the same second, dropped its hook's next commit as older than
// the end and the region never saw that lease life).
func TestTaskRestartKeepsShownEnd(t *testing.T) {
	h := newHarness(t)
	h.pairHooked("primary")
	now := time.Now().Unix()
	// The partner's binding updates: the lease, then its end, dated
	// ahead (a free block's end is its next state change).
	h.d.rewrite(fostate("normal", "normal")+block(ip2, "active", macB, now-20, now+3600), true)
	h.start(time.Second)
	h.d.append(block(ip1, "active", macA, now-20, now+60) + block(ip1, "free", macA, now-20, now+60))
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.r.mu.Lock()
		_, _, told, _ := h.r.st.Lookup(netip.MustParseAddr(ip1))
		h.r.mu.Unlock()
		if told.Action == event.Expiry {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the free block was not recorded:\n%s", h.logText())
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.stop()

	h.start(time.Second)
	commit := hook(event.Commit, ip1, macA, time.Now().Unix())
	commit.LeaseTime = 600
	if err := h.r.Accept(context.Background(), []event.Event{commit}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(h.queued(), "|"), "commit 203.0.113.10 00:16:3e:00:00:0a "; got != want {
		t.Fatalf("queued %q, want the client's next commit %q\nlog:\n%s", got, want, h.logText())
	}
}

// TestTaskBacklogBehindPeerRecord is the secondary's agent back from a
// restart: meanwhile its own lease of ip1 ended (the hook's expiry waits
// in the socket) and the primary acked the client a new lease two
// seconds later. The agent reads the file first, the primary's commit
// included, then the hook's expiry. Whose lease that expiry ends the
// newer record cannot say, and the region may not have the primary's
// news yet: with the pair channel the expiry is queued for the
// deliverer to judge by the peer's word; without it, it is dropped as
// before (make chaos PAIR=1 seed 95, 203.0.113.166: dropped with the
// channel, a lease end the region never heard).
func TestTaskBacklogBehindPeerRecord(t *testing.T) {
	for _, channel := range []bool{true, false} {
		t.Run(fmt.Sprintf("channel=%t", channel), func(t *testing.T) {
			h := newHarness(t)
			h.pairHooked("secondary")
			h.beforeRun = func(r *Reconciler) { r.cfg.PairChannel = channel }
			now := time.Now().Unix()
			h.d.rewrite(fostate("normal", "normal")+ackedBlock(ip1, "active", macA, now-20, now+3600), true)
			h.start(time.Second)
			if err := h.r.Accept(context.Background(), []event.Event{renewal(ip1, macA, now-20, 3620)}); err != nil {
				t.Fatal(err)
			}
			h.stop()

			h.d.append(ackedBlock(ip1, "expired", macA, now-20, now-2) + block(ip1, "active", macA, now, now+600))
			h.start(time.Second)
			end := hook(event.Expiry, ip1, macA, now-2)
			end.Source = event.SourceSpool
			if err := h.r.Accept(context.Background(), []event.Event{end}); err != nil {
				t.Fatal(err)
			}
			want := []string{"commit 203.0.113.10 00:16:3e:00:00:0a "}
			if channel {
				want = append(want, "expiry 203.0.113.10 00:16:3e:00:00:0a ")
			}
			if got := h.queued(); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("queued %q, want %q\nlog:\n%s", got, want, h.logText())
			}
		})
	}
}

// TestTaskPairExpiredThenBack: a failover primary whose partner is away
// (communications interrupted) expires a lease: its block goes
// "expired" in the file, and no on expiry runs — with a peer, dhcpd runs
// it only when the lease moves on to free or backup (server/mdb.c,
// make_binding_state_transition), which waits for the partner. The client
// asks again in the same second and gets a new lease: dhcpd runs its
// commit's hook, then writes its block. The region must hear the end
// before that commit, whichever the agent meets first:
//   - hook first: the hook's datagram comes while the reader, a busy
//     round apart, has not read the expired block (make chaos PAIR=1
//     SEED=107: the end went after the commit, one lease life lost).
//     Without BackAfterEnd's read the end is never queued;
//   - file first: the reader has both blocks before the datagram is
//     judged (the catch-up read itself may take the new block too).
//     Without carriedEnd the new block, this side's ack, buried the end:
//     never queued.
func TestTaskPairExpiredThenBack(t *testing.T) {
	for _, fileFirst := range []bool{false, true} {
		name := map[bool]string{false: "hook first", true: "file first"}[fileFirst]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.pairHooked("primary")
			// The harness's clock is the wall's: the old lease ends a
			// moment after the start.
			end := time.Now().Unix() + 2
			h.d.rewrite(fostate("communications-interrupted", "normal")+block(ip1, "active", macA, end-20, end), true)
			h.beforeRun = func(r *Reconciler) {
				r.cfg.Poll = time.Hour
				if !fileFirst {
					// After a read that found a block, the next waits
					// this long: only Accept's read can get to the
					// expired block in time.
					r.busyRound = time.Hour
				}
			}
			h.start(time.Second)
			old := hook(event.Commit, ip1, macA, end-20)
			old.LeaseTime = 20
			if err := h.r.Accept(context.Background(), []event.Event{old}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(time.Unix(end, 300e6)))
			back := hook(event.Commit, ip1, macA, end)
			back.TimestampNS, back.LeaseTime = end*1e9+300e6, 13
			if fileFirst {
				h.d.append(block(ip1, "expired", macA, end-20, end) + ackedBlock(ip1, "active", macA, end, end+13))
				waitFile(t, h, ip1, func(l Lease) bool { return l.State == parser.StateActive && l.Starts == end })
			} else {
				// A busy dhcpd: a read that found a block starts a busy
				// round.
				other := hook(event.Commit, ip2, macB, end)
				if err := h.r.Accept(context.Background(), []event.Event{other}); err != nil {
					t.Fatal(err)
				}
				h.d.append(block(ip2, "active", macB, end, end+600))
				waitFile(t, h, ip2, func(Lease) bool { return true })
				h.d.append(block(ip1, "expired", macA, end-20, end))
			}
			if err := h.r.Accept(context.Background(), []event.Event{back}); err != nil {
				t.Fatal(err)
			}
			if !fileFirst {
				h.d.append(ackedBlock(ip1, "active", macA, end, end+13))
			}
			time.Sleep(1500 * time.Millisecond) // what anything would synthesise from the file
			want := "commit 203.0.113.10 00:16:3e:00:00:0a |expiry 203.0.113.10 00:16:3e:00:00:0a missed-expiry|commit 203.0.113.10 00:16:3e:00:00:0a "
			var got []string
			for _, q := range h.queued() {
				if strings.Contains(q, " "+ip1+" ") {
					got = append(got, q)
				}
			}
			if got := strings.Join(got, "|"); got != want {
				t.Fatalf("queued %q,\nwant %q (the end before the new lease)\nlog:\n%s", got, want, h.logText())
			}
		})
	}
}

// waitFile waits until the reconciler has read a block for ip that ok
// accepts.
func waitFile(t *testing.T, h *harness, ip string, ok func(Lease) bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		h.r.mu.Lock()
		l, read := h.r.st.File[netip.MustParseAddr(ip)]
		h.r.mu.Unlock()
		if read && ok(l) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the block for %s was never read", ip)
		}
	}
}

// TestTaskStaleUpdateHeld: this side acks a lease; a second later the
// partner's stale binding update of the client's life before frees it
// and dhcpd runs this side's on expiry (make chaos PAIR=1 TIMERS=maas
// seed 119). The expiry is held, across a restart of the agent, and
// queued the grace after the end of the lease it cut, dated at that end,
// reason stale-update (HoldCut), and the log says until when.
func TestTaskStaleUpdateHeld(t *testing.T) {
	h := newHarness(t)
	h.pairHooked("secondary")
	now := time.Now().Unix()
	end := now + 4
	h.d.rewrite(fostate("normal", "normal")+block(ip2, "active", macB, now-100, now+3600), true)
	h.start(time.Second)
	ack := renewal(ip1, macA, now, end-now)
	if err := h.r.Accept(context.Background(), []event.Event{ack}); err != nil {
		t.Fatal(err)
	}
	h.d.append(ackedBlock(ip1, "active", macA, now, end))
	waitFile(t, h, ip1, func(l Lease) bool { return l.State == parser.StateActive })
	if err := h.r.Accept(context.Background(), []event.Event{hook(event.Expiry, ip1, macA, now)}); err != nil {
		t.Fatal(err)
	}
	h.d.append(clttBlock(ip1, "free", macA, now-30, now-10, now))
	waitFile(t, h, ip1, func(l Lease) bool { return l.State != parser.StateActive })
	if got := h.queued(); len(got) != 1 {
		t.Fatalf("queued %q, want the commit alone (the expiry held)\nlog:\n%s", got, h.logText())
	}
	h.stop()
	h.start(time.Second)
	waitFile(t, h, ip1, func(l Lease) bool { return l.State != parser.StateActive })
	if time.Now().Unix() < end {
		// (On a machine slow enough to restart past the end, not asked.)
		if got := h.queued(); len(got) != 1 {
			t.Fatalf("queued %q after the restart, before the lease's end: want the commit alone\nlog:\n%s", got, h.logText())
		}
	}
	got, _ := h.waitQueued(2, time.Until(time.Unix(end+5, 0)))
	if want := "expiry 203.0.113.10 00:16:3e:00:00:0a stale-update"; got[1] != want {
		t.Fatalf("queued %q, want %q second\nlog:\n%s", got, want, h.logText())
	}
	qs, err := h.store.Peek(10)
	if err != nil {
		t.Fatal(err)
	}
	if at := qs[1].Event.Timestamp; at != end {
		t.Errorf("the held expiry is dated %d, want the lease's end %d", at, end)
	}
	if want := fmt.Sprintf(`"lease_end":%d,"held_until":%d`, end, end+1); !strings.Contains(h.logText(), want) {
		t.Errorf("the hold is not logged:\n%s", h.logText())
	}
}
