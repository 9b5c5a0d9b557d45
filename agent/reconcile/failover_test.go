package reconcile

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// fostate writes a failover state record the way dhcpd does.
func fostate(my, partner string) string {
	return fmt.Sprintf("failover peer \"fo\" state {\n  my state %s at 4 2026/11/26 12:00:00;\n  partner state %s at 4 2026/11/26 12:00:00;\n  mclt 3600;\n}\n", my, partner)
}

// runPair is run for one side of a pair: appended text is fed in file
// order, failover state records included.
func runPair(t *testing.T, pair Pair, hookless bool, steps []step) {
	t.Helper()
	s := NewState(grace)
	s.Pair, s.Hookless = pair, hookless
	if hookless {
		s.Grace = 0
	}
	runSteps(t, s, steps)
}

// runSteps is runPair's loop, for a state set up by the caller.
func runSteps(t *testing.T, s *State, steps []step) {
	t.Helper()
	for i, st := range steps {
		now := t0 + st.at
		var got []string
		show := func(ev event.Event) {
			got = append(got, fmt.Sprintf("%s %s %s %+d %s", ev.Action, ev.IP, ev.MAC, ev.Timestamp-t0, ev.Reason))
			s.Hook(ev)
		}
		held := false
		if st.hook != nil && s.KeptCutEnd(*st.hook) {
			// As Reconciler.Accept: the end of a cut life the client
			// kept is dropped.
			got = append(got, "dropped "+st.hook.IP.String())
			held = true
		} else if st.hook != nil {
			_, held = s.HoldCut(*st.hook)
		}
		if st.hook != nil && !held {
			// As Reconciler.Accept: an end held for the life it cuts is
			// neither queued nor recorded; else what must precede the
			// hook's event.
			for _, ev := range s.TakeEndedBefore(*st.hook) {
				show(ev)
			}
			s.Hook(*st.hook)
		}
		if st.appended != "" {
			appendPair(t, s, st.appended, now)
		}
		if st.snapshot != "" {
			tab, complete := table(t, st.snapshot)
			s.Snapshot(tab, complete, now)
		}
		for _, ev := range s.Due(now) {
			show(ev)
		}
		for _, ev := range s.TakeAheadSent() { // (Reconciler logs these)
			got = append(got, "ahead "+ev.IP.String())
		}
		for _, ev := range s.TakeCutKept() { // (and these)
			got = append(got, "kept "+ev.IP.String())
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("step %d (t+%ds) (-want +got):\n%s", i, st.at, diff)
		}
	}
}

// appendPair feeds text, appended to the leases file, to s in file
// order, failover state records included.
func appendPair(t *testing.T, s *State, text string, now int64) {
	t.Helper()
	d := parser.NewDecoder()
	var ls []*parser.Lease
	h := func(x parser.Statement, err error) {
		if err != nil {
			t.Fatal(err)
		}
		switch x := x.(type) {
		case *parser.Lease:
			ls = append(ls, x)
		case *parser.FailoverState:
			s.Appended(ls, now)
			ls = nil
			s.FailoverSeen([]*parser.FailoverState{x})
		}
	}
	d.Feed([]byte(text), h)
	if err := d.Close(h); err != nil {
		t.Fatal(err)
	}
	s.Appended(ls, now)
}

func TestPairOf(t *testing.T) {
	conf := func(peer string) string {
		return strings.Join([]string{
			`failover peer "fo" { ` + peer + `address 203.0.113.1; peer address 203.0.113.2; max-response-delay 60; max-unacked-updates 10; load balance max seconds 3; mclt 3600; split 255; }`,
			"subnet 203.0.113.0 netmask 255.255.255.0 {",
			`  pool { failover peer "fo"; range 203.0.113.100 203.0.113.150; }`,
			"}",
		}, "\n")
	}
	for _, tc := range []struct {
		name, conf string
		want       Pair
	}{
		{"primary", conf("primary; "), Pair{Peer: "fo", Role: RolePrimary}},
		{"secondary", strings.Replace(conf("secondary; "), " mclt 3600; split 255;", "", 1), Pair{Peer: "fo", Role: RoleSecondary}},
		{"alone", "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.100 203.0.113.150; }", Pair{}},
		{"declared, used by no pool", strings.Replace(conf("primary; "), `failover peer "fo"; `, "", 1), Pair{}},
		// MAAS declares one peer per HA VLAN, each with its own role
		// (src/maasserver/dhcp.py, make_failover_peer_config): the first
		// is the lead pair (PeersOf has them all: TestPeersOf).
		{"one per VLAN", conf("primary; ") + "\n" + strings.NewReplacer(`"fo"`, `"fo2"`, "203.0.113.", "198.51.100.").Replace(conf("secondary; ")),
			Pair{Peer: "fo", Role: RolePrimary}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := dhcpdconf.Parse(strings.NewReader(tc.conf), dhcpdconf.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, PairOf(cfg)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailoverRules steps one side of a pair through what dhcpd writes:
// the peer's binding updates, partner-down, recovery, a range shrink.
func TestFailoverRules(t *testing.T) {
	primary := Pair{Peer: "fo", Role: RolePrimary}
	secondary := Pair{Peer: "fo", Role: RoleSecondary}
	base := fostate("normal", "normal") + block(ip1, "active", macA, t0-100, t0+500) + block(ip2, "active", macB, t0-100, t0+5000)
	// shrunk is base rewritten by a range shrink that dropped ip1.
	shrunk := fostate("normal", "normal") + block(ip2, "active", macB, t0-100, t0+5000)
	// interrupted opens the cases of a lease the peer acked whose end the
	// file recorded while communications were interrupted.
	interrupted := func(then ...step) []step {
		return append([]step{
			{at: 0, snapshot: base},
			{at: 10, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 29, appended: fostate("communications-interrupted", "normal")},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
		}, then...)
	}
	// interruptedDropped is the peer's lease of 203.0.113.12 (its
	// binding update: no cltt) ending while communications were
	// interrupted, then a rewrite dropping it (want: sent the grace
	// after).
	interruptedDropped := func(want ...string) []step {
		return []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 29, appended: fostate("communications-interrupted", "normal")},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			{at: 40, snapshot: fostate("communications-interrupted", "normal") + block(ip1, "active", macA, t0-100, t0+500) + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 40 + grace, want: want},
			{at: 10000},
		}
	}
	// survivorEnds is what a survivor tells at last of base's leases (their
	// ends pass after the takeover), then more.
	survivorEnds := func(more ...string) []string {
		return append([]string{
			"expiry " + ip1 + " " + macA + " +500 ends-passed",
			"expiry " + ip2 + " " + macB + " +5000 ends-passed",
		}, more...)
	}
	// partnerDied is a lease of 203.0.113.12 (opening: the steps that
	// made and ended it), the partner dying just after its end, and this
	// side taking over (wantAt: what it sends then); then the survivor's
	// ends of base.
	partnerDied := func(wantAt []string, opening ...step) []step {
		steps := append([]step{{at: 0, snapshot: base}}, opening...)
		return append(steps,
			step{at: 31, appended: fostate("communications-interrupted", "normal")},
			step{at: 32, appended: fostate("partner-down", "normal"), want: wantAt},
			step{at: 10000, want: survivorEnds()},
		)
	}
	// ownDropped opens the cases of this side's own lease of
	// 203.0.113.12, expired in normal (not yet free: that needs the
	// partner's ack) and dropped by a rewrite in the next second (a range
	// shrink applied to both peers, as MAAS does).
	ownDropped := func(then ...step) []step {
		return append([]step{
			{at: 0, snapshot: base},
			{at: 10, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			{at: 10, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 30, appended: ackedBlock("203.0.113.12", "expired", macA, t0+10, t0+30)},
			{at: 31, snapshot: base},
		}, then...)
	}
	// survivorDropped opens the cases of a lease of ip1 this side acked
	// as the survivor (ends at +40), dropped by a range shrink at +20,
	// then the partner's return (this side steps back at +30); then more,
	// and nothing else to the end.
	survivorDropped := func(then ...step) []step {
		down := fostate("partner-down", "normal")
		steps := []step{
			{at: 0, snapshot: down + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 1, hook: ev(renewal(ip1, macA, t0+1, 39))},
			{at: 1, appended: ackedBlock(ip1, "active", macA, t0+1, t0+40)},
			{at: 20, snapshot: down + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 30, appended: fostate("normal", "recover-done") + fostate("normal", "normal")},
		}
		return append(append(steps, then...), step{at: 4000})
	}
	// acked: this side acks 203.0.113.12 to macA at +10 for 20 s, its
	// hook's commit first, then the file's block; then the steps given.
	acked := func(then ...step) []step {
		return append([]step{
			{at: 0, snapshot: base},
			{at: 10, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			{at: 10, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30)},
		}, then...)
	}
	// cut opens the cases of a partner's stale binding update over this
	// side's ack: this side acks 203.0.113.12 to macA at +10 for 20 s;
	// at +11 the partner's update of the client's life before, freed at
	// that life's end (+0), frees the lease (the file shows it free with
	// the older life's times and this side's cltt), and dhcpd runs the on
	// expiry of this side's ack (make chaos PAIR=1 TIMERS=maas seed 119).
	cut := func(then ...step) []step {
		return acked(append([]step{
			{at: 11, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11))},
			{at: 11, appended: clttBlock("203.0.113.12", "free", macA, t0-20, t0, t0+10)},
		}, then...)...)
	}
	// cutEnd is the held end as it goes, dated at.
	cutEnd := func(at int64) string { return fmt.Sprintf("expiry 203.0.113.12 %s %+d stale-update", macA, at) }
	// shrunkOnBoth opens the cases of a range shrink applied to both
	// peers while both are up (as MAAS does), dropping ip1: base, then
	// shrunk, then the rewrite's first failover record.
	shrunkOnBoth := func(then ...step) []step {
		return append([]step{
			{at: 0, snapshot: base},
			{at: 600, snapshot: shrunk},
			{at: 601, appended: fostate("normal", "normal")},
		}, then...)
	}
	// steppedBack opens the cases of a survivor whose file recorded the
	// end of a lease the partner acked and that stepped back within the
	// grace.
	steppedBack := func(then ...step) []step {
		return append([]step{
			{at: 0, snapshot: base},
			{at: 0, appended: block("203.0.113.12", "active", macA, t0, t0+30)},
			{at: 1, appended: fostate("partner-down", "normal")},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0, t0+30)},
			{at: 31, appended: fostate("normal", "recover-done") + block("203.0.113.12", "free", macA, t0, t0+30)},
		}, then...)
	}
	tests := []struct {
		name     string
		pair     Pair
		hookless bool
		steps    []step
	}{{
		name: "a peer's binding updates are recorded as told, never synthesised",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			// The primary committed a new lease and renewed another: its
			// hooks told the region; the secondary's file gets the BNDUPDs.
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+610) + block(ip2, "active", macB, t0+10, t0+5010)},
			// The primary released ip1 and expired it.
			{at: 20, appended: block(ip1, "released", macA, t0-100, t0+20) + block(ip1, "free", macA, t0-100, t0+20)},
			{at: 10000},
		},
	}, {
		name: "the primary is quiet too when hooks report (the secondary's hooks may have)",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+610)},
			{at: 600, appended: block(ip1, "expired", macA, t0-100, t0+500)},
			{at: 10000},
		},
	}, {
		// dhcpd runs on expiry only when the expired lease goes free, on
		// the peer's ack; the client came back first and got the same
		// address from the expired lease: no hook ever tells that end.
		// The new commit's hook sends it first (make chaos PAIR=1).
		name: "an end the file recorded and no hook told, then the same client's new lease: the end first",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			{at: 10, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			{at: 32, hook: ev(renewal("203.0.113.12", macA, t0+32, 20)),
				want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			{at: 32, appended: ackedBlock("203.0.113.12", "active", macA, t0+32, t0+52)},
			{at: 10000},
		},
	}, {
		// The same, the client back in the very second its lease
		// expired (make chaos PAIR=1 seed 14: the peer acked the first
		// lease and died; this side recorded its end at 41 and acked the
		// client again at 41). A lease cannot begin and expire in one
		// second, so the recorded expiry came first.
		name: "an expiry the file recorded, the same client's new lease in the same second: the end first",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			{at: 30, hook: ev(renewal("203.0.113.12", macA, t0+30, 20)),
				want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			{at: 30, appended: ackedBlock("203.0.113.12", "active", macA, t0+30, t0+50)},
			{at: 10000},
		},
	}, {
		// The same, the reader getting to the new lease's block before
		// the hook's commit is judged (dhcpd writes it after the hook
		// runs): the end goes ahead of it, not buried by its record
		// (carriedEnd; make chaos PAIR=1 SEED=107).
		name: "an expiry the file recorded, the same client's new lease read before its hook: the end first",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			{at: 10, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 29, appended: fostate("communications-interrupted", "normal")},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30) + ackedBlock("203.0.113.12", "active", macA, t0+30, t0+50)},
			{at: 30, hook: ev(renewal("203.0.113.12", macA, t0+30, 20)),
				want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			{at: 10000},
		},
	}, {
		// The same, the hook's commit never coming (the hook failed):
		// the end is not sent alone, as before, for the region would
		// then show the address free under the client's running lease.
		name: "an expiry the file recorded, the same client's new lease read, no hook: nothing sent",
		pair: primary,
		steps: acked(
			step{at: 29, appended: fostate("communications-interrupted", "normal")},
			step{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30) + ackedBlock("203.0.113.12", "active", macA, t0+30, t0+50)},
			step{at: 10000}, // past the carried end's grace: dropped, not sent
		),
	}, {
		// The same across a takeover: the partner went quiet, this
		// side's file recorded the end while communications were
		// interrupted (recorded as told: nothing expires then), then
		// partner-down, and the client came back in the next second.
		// As survivor this side tells the file's ends, but this one was
		// recorded before; its hook would have run only once the lease
		// went free, an MCLT later (make chaos PAIR=1 seed 14: all four
		// violations of one run).
		name: "an end recorded while communications were interrupted, partner-down, then the same client's new lease: the end first",
		pair: primary,
		steps: acked(
			step{at: 29, appended: fostate("communications-interrupted", "normal")},
			step{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			step{at: 30, appended: fostate("partner-down", "normal"), want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			step{at: 31, hook: ev(renewal("203.0.113.12", macA, t0+31, 20))},
			step{at: 31, appended: ackedBlock("203.0.113.12", "active", macA, t0+31, t0+51)},
			// The survivor tells the ends that pass from here on.
			step{at: 10000, want: survivorEnds("expiry 203.0.113.12 " + macA + " +51 ends-passed")},
		),
	}, {
		// The same, the client not coming back (make chaos PAIR=1 seed
		// 14: lost). No hook tells that end before the lease goes free,
		// an MCLT after the takeover; the partner's, recovering, is
		// dropped as the survivor's news (pairRepeat). Sent on taking
		// over; the client's next commit, had it come, then brings no
		// second copy (untoldEnd: told).
		name: "an end recorded while communications were interrupted, then partner-down: sent on taking over",
		pair: secondary,
		steps: interrupted(
			step{at: 40},
			step{at: 50, appended: fostate("partner-down", "normal"), want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			step{at: 60, hook: ev(renewal("203.0.113.12", macA, t0+60, 20))},
			step{at: 60, appended: ackedBlock("203.0.113.12", "active", macA, t0+60, t0+80)},
			step{at: 10000, want: survivorEnds("expiry 203.0.113.12 " + macA + " +80 ends-passed")},
		),
	}, {
		// This side's own lease expired in normal, waiting for the
		// partner's ack to go free (its on expiry runs only then), and
		// the partner died: the ack never comes, the lease goes free an
		// MCLT after the takeover, and dhcpd restarts in between leave
		// it to no hook at all (make chaos PAIR=1 seed 3: three lease
		// lives lost). Sent on taking over; the hook, if it comes, then
		// repeats it (pairRepeat).
		name: "this side's own lease expired in normal, then the partner died: sent on taking over",
		pair: primary,
		steps: partnerDied([]string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"},
			step{at: 10, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			step{at: 10, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30)},
			step{at: 30, appended: ackedBlock("203.0.113.12", "expired", macA, t0+10, t0+30)},
		),
	}, {
		// The same lease gone free before the partner died: its hook ran.
		name: "this side's own lease expired and freed in normal, then the partner died: its hook told it",
		pair: primary,
		steps: partnerDied(nil,
			step{at: 10, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			step{at: 10, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30)},
			step{at: 30, appended: ackedBlock("203.0.113.12", "expired", macA, t0+10, t0+30) + ackedBlock("203.0.113.12", "free", macA, t0+10, t0+30)},
			step{at: 30, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+30))},
		),
	}, {
		// The partner's lease (its binding update, no cltt of this
		// side's) expired in normal: its end is the partner's hook's,
		// run on its return (a replay, judged by the pair channel).
		name: "the partner's lease expired in normal, then the partner died: left to the partner",
		pair: secondary,
		steps: partnerDied(nil,
			step{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			step{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
		),
	}, {
		// This side's own lease expired in normal, waiting for the
		// partner's ack, and a range shrink applied to both peers in that
		// second dropped it: dhcpd runs no on expiry for a lease it no
		// longer has (make chaos PAIR=1 seed 21: lost). Sent after the
		// grace, for a hook of its going free to come first if dhcpd
		// freed it before it stopped.
		name: "this side's own lease expired in normal, then a rewrite dropped it: sent after the grace",
		pair: primary,
		steps: ownDropped(
			step{at: 31 + grace - 1},
			step{at: 31 + grace, want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			step{at: 10000},
		),
	}, {
		name: "the same on the secondary: its own lease is its own to tell",
		pair: secondary,
		steps: ownDropped(
			step{at: 31 + grace, want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			step{at: 10000},
		),
	}, {
		// The same client back within the grace (the range holds the
		// address again): the end goes ahead of its new commit.
		name: "this side's own lease expired in normal, dropped, then the same client's new lease: the end first",
		pair: primary,
		steps: ownDropped(
			step{at: 40, hook: ev(renewal("203.0.113.12", macA, t0+40, 20)),
				want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			step{at: 40, appended: ackedBlock("203.0.113.12", "active", macA, t0+40, t0+60)},
			step{at: 10000},
		),
	}, {
		// Freed before the rewrite, its hook ran (still queued for the
		// agent as the file is read): nothing more.
		name: "this side's own lease expired and freed, its hook late, then a rewrite dropped it: the hook told it",
		pair: primary,
		steps: ownDropped(
			step{at: 32, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+31))},
			step{at: 10000},
		),
	}, {
		// The partner's lease: its end is the partner's hook's.
		name: "the partner's lease expired in normal, then a rewrite dropped it: left to the partner",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			{at: 31, snapshot: base},
			{at: 10000},
		},
	}, {
		// The survivor's file recorded an end of a lease the partner
		// acked and stepped back within the grace; the free block that
		// follows is recorded as told. The partner, recovering, drops its
		// own hook's copy as the survivor's news (pairRepeat): the
		// survivor still sends its end (make chaos PAIR=1 seed 21: lost).
		name: "the survivor steps back within the grace after an end its file recorded: it still sends it",
		pair: primary,
		steps: steppedBack(
			step{at: 30 + grace, want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			step{at: 10000},
		),
	}, {
		// The same, read late in one whole read (the agent down through
		// it all, the file rewritten meanwhile): the end is judged under
		// the state in force where the file recorded it (partner-down),
		// not the one the file ends on.
		name: "a late whole read holds the survivor's takeover, an end its file recorded, and its step-back: it still sends the end",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 0, appended: block("203.0.113.12", "active", macA, t0, t0+30)},
			{at: 31, snapshot: base + fostate("partner-down", "normal") + block("203.0.113.12", "expired", macA, t0, t0+30) +
				fostate("normal", "recover-done")},
			{at: 31 + grace, want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			{at: 10000},
		},
	}, {
		// The same, and within the grace the partner, back, acks the
		// same client's next lease of the address: the file records that
		// commit as told (the partner's agent sends it). The survivor's
		// end is owed ahead of it: no hook of either side reports it
		// (the partner drops its own on expiry as the survivor's news),
		// and after the commit it would take the client's new lease from
		// the region. It goes at once, ahead, and the deliverer sends
		// the file's newer record right after it (NewestForPair). Before,
		// the file's record of the commit covered it and it went untold
		// (make chaos PAIR=1 VLANS=2 seed 116: lost, the survivor's
		// agent restarted within the grace and read both at once).
		name: "the survivor steps back within the grace after an end its file recorded, and the partner acks the same client's next lease: the end at once, ahead",
		pair: primary,
		steps: steppedBack(
			step{at: 35, appended: block("203.0.113.12", "active", macA, t0+35, t0+65),
				want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry", "ahead 203.0.113.12"}},
			step{at: 30 + grace},
			step{at: 10000},
		),
	}, {
		// The same partner's commit, read in one read with the end and
		// the step-back (an agent back from a restart within the grace).
		name: "the survivor's end, its step-back and the partner's next commit of the same client read at once: the end at once, ahead",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 0, appended: block("203.0.113.12", "active", macA, t0, t0+30)},
			{at: 1, appended: fostate("partner-down", "normal")},
			{at: 38, appended: block("203.0.113.12", "expired", macA, t0, t0+30) + fostate("normal", "recover-done") +
				block("203.0.113.12", "free", macA, t0, t0+30) + block("203.0.113.12", "active", macA, t0+35, t0+65),
				want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry", "ahead 203.0.113.12"}},
			{at: 38 + grace},
			{at: 10000},
		},
	}, {
		// Another client's lease of the address: MAAS links the
		// address's record to the new client without unlinking the old
		// one (src/maasservicelayer/services/leases.py _commit_lease_info,
		// services/interfaces.py link_ip, which only adds; givenAway), so
		// the old client's end goes ahead of it too.
		name: "the survivor steps back within the grace after an end its file recorded, and the partner acks the address to another client: the end at once, ahead",
		pair: primary,
		steps: steppedBack(
			step{at: 35, appended: block("203.0.113.12", "active", macB, t0+35, t0+65),
				want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry", "ahead 203.0.113.12"}},
			step{at: 30 + grace},
			step{at: 10000},
		),
	}, {
		// A survivor's file records the end with an end to come (an
		// unbound block's end in a pair is when its state may next
		// change): the end is dated at the lease's own, not ahead, where
		// it was newer news than the partner's next commits (make chaos
		// PAIR=1 VLANS=2 seed 116: five lease lives lost).
		name: "a survivor's end the file records dated ahead is dated at the lease's end",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base + fostate("partner-down", "normal")},
			{at: 1, hook: ev(renewal("203.0.113.12", macA, t0+1, 29))},
			{at: 1, appended: ackedBlock("203.0.113.12", "active", macA, t0+1, t0+30)},
			{at: 2, hook: ev(renewal("203.0.113.13", macB, t0+2, 298))},
			{at: 2, appended: ackedBlock("203.0.113.13", "active", macB, t0+2, t0+300)},
			{at: 32, appended: block("203.0.113.12", "expired", macA, t0+1, t0+150)},
			{at: 32 + grace, want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			// Ended before its end (a release): the moment the file
			// showed it.
			{at: 40, appended: block("203.0.113.13", "free", macB, t0+2, t0+150)},
			{at: 40 + grace, want: []string{"release 203.0.113.13 " + macB + " +40 missed-release"}},
			{at: 500 + grace, want: []string{"expiry " + ip1 + " " + macA + " +500 ends-passed"}},
			{at: 10000, want: []string{"expiry " + ip2 + " " + macB + " +5000 ends-passed"}},
		},
	}, {
		// Its own hook told the end (its on expiry as the lease went
		// free), then the partner acks the same client's next lease:
		// nothing more (a cold review: the end was sent again, ahead).
		name: "the survivor's end its hook told, then the partner's next commit of the same client: nothing more",
		pair: primary,
		steps: steppedBack(
			step{at: 31, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+31))},
			step{at: 35, appended: block("203.0.113.12", "active", macA, t0+35, t0+65)},
			step{at: 30 + grace},
			step{at: 10000},
		),
	}, {
		// Its own hook told the end within the grace: nothing more.
		name: "the survivor steps back within the grace after an end its hook told: nothing more",
		pair: primary,
		steps: steppedBack(
			step{at: 31, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+31))},
			step{at: 30 + grace},
			step{at: 10000},
		),
	}, {
		// The region's last news of the address is a commit of A's (the
		// partner's binding update; a rewrite then listed the address
		// free). While this side speaks for the pair, the partner's
		// recovery updates write backup and free blocks carrying another
		// client's hardware address, ending a minute ahead; it steps
		// back, and the next of those blocks is recorded as told.
		// Not the end of any lease the region heard of: nothing (make
		// chaos PAIR=1 seed 94: an expiry, dated ahead, of a MAC never
		// bound to the address).
		name: "backup and free blocks of a client never bound to the address, across a step-back: nothing",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base + block("203.0.113.12", "active", macA, t0-10, t0+20)},
			{at: 10, snapshot: base + "lease 203.0.113.12 {\n  binding state free;\n}\n"},
			{at: 40, appended: fostate("communications-interrupted", "normal")},
			{at: 50, appended: fostate("partner-down", "normal")},
			{at: 60, appended: block("203.0.113.12", "backup", macB, t0+60, t0+120) + block("203.0.113.12", "free", macB, t0+60, t0+120)},
			{at: 61, appended: fostate("normal", "recover-done") + block("203.0.113.12", "free", macB, t0+60, t0+120) + block("203.0.113.12", "backup", macB, t0+60, t0+120)},
			{at: 61 + grace},
			{at: 200},
		},
	}, {
		// The survivor acks a lease and the client releases it in the
		// same second; the partner's recovery ends in between and this
		// side steps back. Its hooks told both events. The missed-commit
		// its file made pending as the survivor is older than the
		// release (the file's order) and must not follow it: it did,
		// and the region ended on a released lease (make chaos PAIR=1
		// seed 95, 203.0.113.101).
		name: "a survivor's hooks tell a commit and, after its step-back, the release of the same second: nothing more",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: fostate("partner-down", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10, hook: ev(fine(renewal(ip1, macA, t0+10, 10), 100))},
			{at: 10, appended: ackedBlock(ip1, "active", macA, t0+10, t0+20)},
			{at: 10, appended: fostate("partner-down", "recover-done") + fostate("normal", "recover-done")},
			{at: 10, hook: ev(fine(hook(event.Release, ip1, macA, t0+10), 900))},
			{at: 10, appended: ackedBlock(ip1, "released", macA, t0+10, t0+10)},
			{at: 10 + grace},
		},
	}, {
		// The same with both hooks ahead of the file's blocks.
		name: "a survivor's hooks tell a commit and its release before the file shows them across its step-back: nothing more",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: fostate("partner-down", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10, hook: ev(fine(renewal(ip1, macA, t0+10, 10), 100))},
			{at: 10, hook: ev(fine(hook(event.Release, ip1, macA, t0+10), 900))},
			{at: 10, appended: ackedBlock(ip1, "active", macA, t0+10, t0+20) + fostate("partner-down", "recover-done") +
				fostate("normal", "recover-done") + ackedBlock(ip1, "released", macA, t0+10, t0+10)},
			{at: 10 + grace},
		},
	}, {
		// The survivor's file recorded the end of A's lease and it
		// stepped back within the grace; the next block is a backup
		// block carrying another client's address, dated later. It is
		// no news of A's lease: A's end still goes (recorded as told,
		// its later date made A's end look old, and it was dropped).
		name: "the survivor steps back after an end its file recorded, then another client's backup block: it still sends the end",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 0, appended: block("203.0.113.12", "active", macA, t0, t0+30)},
			{at: 1, appended: fostate("partner-down", "normal")},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0, t0+30)},
			{at: 31, appended: fostate("normal", "recover-done") + block("203.0.113.12", "backup", macB, t0+31, t0+90)},
			{at: 30 + grace, want: []string{"expiry 203.0.113.12 " + macA + " +30 missed-expiry"}},
			{at: 200},
		},
	}, {
		// Communications come back without a takeover: the lease goes
		// free with the partner's ack, and the hook of the side that
		// acked it tells the end.
		name: "an end recorded while communications were interrupted, then normal again: left to the hooks",
		pair: secondary,
		steps: interrupted(
			step{at: 50, appended: fostate("normal", "normal")},
			step{at: 10000},
		),
	}, {
		// The peer's lease (its binding update: no cltt) ended while
		// communications were interrupted, and a range shrink drops it:
		// it never goes free, so no hook of either side tells that end;
		// the partner drops its own copy too, and the primary reports
		// what rewrites drop (TestLabFailoverInterruptedShrink; make
		// chaos PAIR=1 TIMERS=maas seed 118).
		name:  "the peer's lease ended while communications were interrupted, then dropped by a rewrite: the primary sends its end",
		pair:  primary,
		steps: interruptedDropped("expiry 203.0.113.12 " + macA + " +30 missed-expiry"),
	}, {
		name:  "the same on the secondary: the primary sends it",
		pair:  secondary,
		steps: interruptedDropped(),
	}, {
		// The same while this side recovers from its partner's
		// partner-down: the survivor told the ends its file recorded,
		// this one among them; sent again here, one copy lands after the
		// client's new commit (make chaos PAIR=1 seed 21).
		name: "an end the file recorded while the partner spoke for the pair, then the same client's new lease: the partner told it",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 20, appended: fostate("recover", "partner-down")},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			{at: 32, hook: ev(renewal("203.0.113.12", macA, t0+32, 20))},
			{at: 32, appended: ackedBlock("203.0.113.12", "active", macA, t0+32, t0+52)},
			{at: 10000},
		},
	}, {
		// The same with this side's recovery over by the client's next
		// lease: the end was recorded while the partner spoke (make chaos
		// PAIR=1 seed 5: the returning primary sent it again, and the
		// survivor's copy, held by a failing region, landed after the
		// client's next commit).
		name: "an end the file recorded while the partner spoke, recovery over, then the same client's new lease: the partner told it",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 20, appended: fostate("recover", "partner-down")},
			{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			{at: 31, appended: fostate("recover-done", "normal") + fostate("normal", "normal")},
			{at: 32, hook: ev(renewal("203.0.113.12", macA, t0+32, 20))},
			{at: 32, appended: ackedBlock("203.0.113.12", "active", macA, t0+32, t0+52)},
			{at: 10000},
		},
	}, {
		name: "the end's hook came: nothing more",
		pair: primary,
		steps: acked(
			step{at: 30, appended: block("203.0.113.12", "expired", macA, t0+10, t0+30)},
			step{at: 30, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+30))},
			step{at: 30, appended: block("203.0.113.12", "free", macA, t0+10, t0+30)},
			step{at: 32, hook: ev(renewal("203.0.113.12", macA, t0+32, 20))},
			step{at: 32, appended: ackedBlock("203.0.113.12", "active", macA, t0+32, t0+52)},
			step{at: 10000},
		),
	}, {
		name: "a renewal before the end is no new lease",
		pair: primary,
		steps: acked(
			step{at: 20, hook: ev(renewal("203.0.113.12", macA, t0+20, 20))},
			step{at: 20, appended: ackedBlock("203.0.113.12", "active", macA, t0+20, t0+40)},
			step{at: 10000},
		),
	}, {
		name:     "hookless pair: the primary alone speaks for the file",
		pair:     primary,
		hookless: true,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+610),
				want: []string{"commit 203.0.113.12 " + macA + " +10 missed-commit"}},
		},
	}, {
		name:     "hookless pair: the secondary stays quiet",
		pair:     secondary,
		hookless: true,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+610)},
			{at: 10000},
		},
	}, {
		name: "partner down: the survivor takes over without a gap, then steps back",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			// The primary dies. Communications-interrupted: the survivor
			// renews ip2 (its hook reports), nothing expires.
			{at: 100, appended: fostate("communications-interrupted", "normal")},
			{at: 110, hook: ev(hook("commit", ip2, macB, t0+110)), appended: block(ip2, "active", macB, t0+110, t0+3000)},
			// Partner-down: ip1 ran out while the primary was dead;
			// dhcpd writes it expired (the free comes after the MCLT).
			{at: 200, appended: fostate("partner-down", "normal")},
			{at: 500, appended: block(ip1, "expired", macA, t0-100, t0+500)},
			{at: 500 + grace, want: []string{"expiry 203.0.113.10 " + macA + " +500 missed-expiry"}},
			// A new client the survivor serves, whose hook failed.
			{at: 600, appended: block(ip1, "active", macB, t0+600, t0+1200)},
			{at: 600 + grace, want: []string{"commit 203.0.113.10 " + macB + " +600 missed-commit"}},
			// The survivor's pool timer expires ip1 at its end.
			{at: 1200, appended: block(ip1, "expired", macB, t0+600, t0+1200)},
			{at: 1200 + grace, want: []string{"expiry 203.0.113.10 " + macB + " +1200 missed-expiry"}},
			// ip2's renewal runs out and dhcpd writes nothing (stuck):
			// rule 3, as for a dhcpd on its own.
			{at: 3000 + grace, want: []string{"expiry 203.0.113.11 " + macB + " +3000 ends-passed"}},
			// The MCLT later ip1 goes free: the same news, nothing new.
			{at: 4100, appended: block(ip1, "free", macB, t0+600, t0+1200)},
			{at: 4100 + grace},
			// The primary returns: recover, normal. Its updates to the
			// survivor's file are its own hooks' news: no burst.
			{at: 5000, appended: fostate("partner-down", "recover") + fostate("normal", "normal")},
			{at: 5010, appended: block(ip1, "active", macA, t0+5010, t0+5610) + block(ip2, "free", macB, t0+110, t0+3000)},
			{at: 10000},
		},
	}, {
		name: "partner down: rule 3 for leases dhcpd never expires (stuck or dying)",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: fostate("partner-down", "communications-interrupted") + block(ip1, "active", macA, t0-100, t0+500)},
			{at: 500 + grace, want: []string{"expiry 203.0.113.10 " + macA + " +500 ends-passed"}},
		},
	}, {
		name: "range shrink on both peers: the primary expires the dropped lease",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: shrunk},
			{at: 500 + grace - 1},
			{at: 500 + grace, want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
		},
	}, {
		name: "range shrink on both peers: the secondary leaves it to the primary",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: shrunk},
			{at: 10000},
		},
	}, {
		// The primary holds its expiry pairSettle for its dhcpd to learn
		// the partner's state, and dies within that wait: this side takes
		// over, and the primary on its return drops the expiry, since its
		// file shows the partner in partner-down (make chaos PAIR=1 seed
		// 5: three leases never expired). The secondary held it in
		// standby for that wait, and sends it.
		name: "range shrink on both peers, the primary dies within its wait: the survivor expires it",
		pair: secondary,
		steps: shrunkOnBoth(
			step{at: 610, appended: fostate("communications-interrupted", "normal")},
			step{at: 611, appended: fostate("partner-down", "normal"), want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
			step{at: 10000, want: []string{"expiry 203.0.113.11 " + macB + " +5000 ends-passed"}},
		),
	}, {
		// The primary's wait (pairVanished): the grace after the
		// rewrite, at least pairSettle. The secondary holds its copy as
		// long: dying just before the end of that wait, the primary had
		// not sent it (a standby of pairSettle alone lost it then).
		name: "range shrink on both peers, the primary dies at the end of its wait: the survivor expires it",
		pair: secondary,
		steps: shrunkOnBoth(
			step{at: 600 + max(grace, pairSettle) - 1},
			step{at: 600 + max(grace, pairSettle) - 1, appended: fostate("communications-interrupted", "normal") + fostate("partner-down", "normal"),
				want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
			step{at: 10000, want: []string{"expiry 203.0.113.11 " + macB + " +5000 ends-passed"}},
		),
	}, {
		name: "range shrink on both peers, the primary dies after its wait: the primary sent it",
		pair: secondary,
		steps: shrunkOnBoth(
			step{at: 600 + max(grace, pairSettle)},
			step{at: 640, appended: fostate("communications-interrupted", "normal")},
			step{at: 641, appended: fostate("partner-down", "normal")},
			step{at: 10000, want: []string{"expiry 203.0.113.11 " + macB + " +5000 ends-passed"}},
		),
	}, {
		// The file read late, whole (the agent busy, or restarted): it
		// holds this side's takeover and its step-back. The takeover
		// made the standby copy this side's (the primary, returning,
		// finds that its partner spoke, and drops its own), and so it is
		// sent, though the read ends with this side in normal again.
		name: "range shrink on both peers, then a late whole read holds the secondary's takeover and step-back: it sends its standby",
		pair: secondary,
		steps: shrunkOnBoth(
			step{at: 615, snapshot: fostate("normal", "normal") + fostate("communications-interrupted", "normal") +
				fostate("partner-down", "normal") + fostate("partner-down", "recover") + fostate("normal", "recover-done") +
				block(ip2, "active", macB, t0-100, t0+5000),
				want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
			step{at: 10000},
		),
	}, {
		// Back from a restart, this side's dhcpd learns the partner took
		// over (recover, partner-down): the partner expired the lease
		// when the shrink reached it, so the copy in standby is dropped
		// (dropPairWaits), not sent should this side take over later.
		name: "range shrink on both peers, then the partner spoke for the pair: the secondary drops its standby",
		pair: secondary,
		steps: shrunkOnBoth(
			step{at: 610, appended: fostate("recover", "partner-down")},
			step{at: 620, appended: fostate("communications-interrupted", "normal")},
			step{at: 621, appended: fostate("partner-down", "normal")},
			step{at: 10000, want: []string{"expiry 203.0.113.11 " + macB + " +5000 ends-passed"}},
		),
	}, {
		// The secondary acks from its own pool while out of touch (the
		// primary's rack down), and a range change restarts it on a
		// range without the address before communications return: the
		// primary never had the lease (make chaos PAIR=1 VLANS=2
		// TIMERS=maas seed 121: lost).
		name: "this side's own ack while communications were interrupted, dropped by a rewrite before they return: the secondary expires it",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: fostate("communications-interrupted", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10, hook: ev(renewal(ip1, macA, t0+10, 20))},
			{at: 10, appended: ackedBlock(ip1, "active", macA, t0+10, t0+30)},
			{at: 11, snapshot: fostate("communications-interrupted", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 30 + grace - 1},
			{at: 30 + grace, want: []string{"expiry 203.0.113.10 " + macA + " +30 vanished"}},
			{at: 10000},
		},
	}, {
		name: "... the file read before the hook: the same",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: fostate("communications-interrupted", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10, appended: ackedBlock(ip1, "active", macA, t0+10, t0+30)},
			{at: 10, hook: ev(renewal(ip1, macA, t0+10, 20))},
			{at: 11, snapshot: fostate("communications-interrupted", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 30 + grace, want: []string{"expiry 203.0.113.10 " + macA + " +30 vanished"}},
			{at: 10000},
		},
	}, {
		// Back in touch before the rewrite, the binding update went: the
		// primary holds the lease and reports it (rule 2); this side
		// keeps its copy in standby.
		name: "... communications back before the rewrite: left to the primary",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: fostate("communications-interrupted", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10, hook: ev(renewal(ip1, macA, t0+10, 20))},
			{at: 10, appended: ackedBlock(ip1, "active", macA, t0+10, t0+30)},
			{at: 11, appended: fostate("normal", "normal")},
			{at: 12, snapshot: fostate("normal", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10000},
		},
	}, {
		name: "... acked in normal: left to the primary",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: fostate("normal", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10, hook: ev(renewal(ip1, macA, t0+10, 20))},
			{at: 10, appended: ackedBlock(ip1, "active", macA, t0+10, t0+30)},
			{at: 11, appended: fostate("communications-interrupted", "normal")},
			{at: 12, snapshot: fostate("communications-interrupted", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10000},
		},
	}, {
		name: "range shrink while the primary is down: the survivor expires it",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: fostate("partner-down", "normal") + block(ip1, "active", macA, t0-100, t0+500) + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10, snapshot: fostate("partner-down", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 500 + grace - 1},
			{at: 500 + grace, want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
		},
	}, {
		// ... and the primary, returning with the same smaller range,
		// drops the lease its file last showed active: its restart's
		// first records repeat the state it had (dhcpd's startup), then
		// it learns its partner is partner-down and recovers. The
		// survivor spoke; the primary sends nothing (issue 14).
		name: "range shrink while the primary was down: the returning primary leaves it to the survivor",
		pair: primary,
		steps: shrunkOnBoth(
			step{at: 602, appended: fostate("normal", "partner-down")},
			step{at: 603, appended: fostate("recover", "partner-down")},
			step{at: 10000},
		),
	}, {
		name: "range shrink while the primary was down, agent started after its dhcpd recovered: nothing",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 600, snapshot: fostate("recover-wait", "partner-down") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10000},
		},
	}, {
		// The agent reads the rewrite late (its rack under load, or it
		// started after dhcpd): by then dhcpd has recovered and its last
		// record is normal again. The records before it, in the same
		// file, show that the partner spoke for the pair (CI failure of
		// TestLabFailoverShrinkPrimaryDown: the expiry went out twice).
		name: "range shrink while the primary was down, rewrite read after its dhcpd recovered to normal: nothing",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 600, snapshot: fostate("normal", "normal") + fostate("normal", "partner-down") + fostate("recover", "partner-down") +
				fostate("recover-done", "partner-down") + fostate("recover-done", "normal") + fostate("normal", "normal") +
				block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 10000},
		},
	}, {
		// ... and the same on the secondary's side: it holds no standby
		// copy of an expiry the partner spoke for.
		name: "range shrink while the secondary was down, rewrite read after its dhcpd recovered to normal: nothing",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 600, snapshot: fostate("normal", "normal") + fostate("recover", "partner-down") + fostate("normal", "normal") +
				block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 610, appended: fostate("communications-interrupted", "normal")},
			{at: 611, appended: fostate("partner-down", "normal")},
			{at: 10000, want: []string{"expiry 203.0.113.11 " + macB + " +5000 ends-passed"}},
		},
	}, {
		// A rewrite read late must not take the evidence back from an
		// earlier rewrite's expiry: the records it holds are about its
		// own restart (pairRewrite).
		name: "range shrink on both peers, then the primary dies and returns to a partner-down, read late: still the primary's",
		pair: primary,
		steps: shrunkOnBoth(
			step{at: 605, snapshot: fostate("normal", "normal") + fostate("normal", "partner-down") + fostate("recover", "partner-down") +
				fostate("normal", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			step{at: 600 + max(grace, pairSettle), want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
		),
	}, {
		// The lease has ended: the primary still waits for its dhcpd to
		// learn the partner's state (pairSettle; and the grace for a renewal
		// the file never showed) before expiring it.
		name: "range shrink on both peers, lease ended: the primary waits for the partner's state",
		pair: primary,
		steps: shrunkOnBoth(
			step{at: 602, appended: fostate("normal", "normal")},
			step{at: 600 + max(grace, pairSettle) - 1},
			step{at: 600 + max(grace, pairSettle), want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
		),
	}, {
		// Shrunk with both up; before the expiry is due the primary rack
		// dies and returns (a new rewrite) to a partner that went
		// partner-down only then: the partner never spoke for the lease.
		name: "range shrink on both peers, then the primary dies and returns to a partner-down: still the primary's",
		pair: primary,
		steps: shrunkOnBoth(
			step{at: 605, snapshot: shrunk},
			step{at: 606, appended: fostate("normal", "partner-down") + fostate("recover", "partner-down")},
			step{at: 600 + max(grace, pairSettle), want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
		),
	}, {
		// ... and the client comes back to the returned primary before
		// that expiry is due: the end is this side's, and goes ahead of
		// the new lease's commit (make chaos PAIR=1 seed 17: kept
		// pending, the commit covered it and the region never heard the
		// end of the dropped lease).
		name: "range shrink on both peers, the primary dies and returns, the client is back first: the end goes ahead of its commit",
		pair: primary,
		steps: shrunkOnBoth(
			step{at: 605, snapshot: shrunk},
			step{at: 606, appended: fostate("normal", "partner-down") + fostate("recover", "partner-down")},
			step{at: 610, hook: ev(renewal(ip1, macA, t0+610, 20)), want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
			step{at: 610, appended: ackedBlock(ip1, "active", macA, t0+610, t0+630)},
			step{at: 10000},
		),
	}, {
		// A survivor's rewrite (a range shrink while the partner was
		// down) drops a lease it acked; the partner returns and the
		// survivor steps back; the client, back after the lease's end,
		// is acked by the partner, whose binding update this side's file
		// records as told. The dropped lease's end is this side's, and
		// goes ahead of that commit (make chaos PAIR=1 seed 91: the
		// update dropped the pending expiry, and the region never heard
		// the end of two lease lives).
		name:  "survivor's dropped lease, it steps back, the partner acks the client after the end: the end goes",
		pair:  secondary,
		steps: survivorDropped(step{at: 41, appended: block(ip1, "active", macA, t0+41, t0+61), want: []string{"expiry 203.0.113.10 " + macA + " +40 vanished", "ahead 203.0.113.10"}}),
	}, {
		name:  "... acked after the end by this side (its hook still to come): the end goes at the file's record, once",
		pair:  secondary,
		steps: survivorDropped(step{at: 41, appended: ackedBlock(ip1, "active", macA, t0+41, t0+61), want: []string{"expiry 203.0.113.10 " + macA + " +40 vanished", "ahead 203.0.113.10"}}, step{at: 41, hook: ev(renewal(ip1, macA, t0+41, 20))}),
	}, {
		name:  "... renewed by the partner before the end: no end",
		pair:  secondary,
		steps: survivorDropped(step{at: 35, appended: block(ip1, "active", macA, t0+35, t0+55)}),
	}, {
		// MAAS links the address to the new MAC without unlinking the
		// old one, so it must hear the old lease end first
		// (internal/maasmodel; givenAway).
		name:  "... another client's after the end: the end goes too, ahead of that commit",
		pair:  secondary,
		steps: survivorDropped(step{at: 41, appended: block(ip1, "active", macB, t0+41, t0+61), want: []string{"expiry 203.0.113.10 " + macA + " +40 vanished", "ahead 203.0.113.10"}}),
	}, {
		name:  "... another client's before the end: the end goes at once, dated at that commit",
		pair:  secondary,
		steps: survivorDropped(step{at: 35, appended: block(ip1, "active", macB, t0+35, t0+55), want: []string{"expiry 203.0.113.10 " + macA + " +35 vanished", "ahead 203.0.113.10"}}),
	}, {
		// No hook of either server tells the end of the life the update
		// cut: this side's on expiry ran for the update, and the partner
		// has the life from this side's update, with none attached.
		name:  "a partner's stale binding update ends this side's ack: the end is held to the lease's end",
		pair:  secondary,
		steps: cut(step{at: 30 + grace - 1}, step{at: 30 + grace, want: []string{cutEnd(30)}}, step{at: 10000}),
	}, {
		name:  "... the same on the primary",
		pair:  primary,
		steps: cut(step{at: 30 + grace - 1}, step{at: 30 + grace, want: []string{cutEnd(30)}}, step{at: 10000}),
	}, {
		name:  "... the partner renews the client's lease first: dropped, the client kept the address",
		pair:  secondary,
		steps: cut(step{at: 25, appended: block("203.0.113.12", "active", macA, t0+25, t0+45), want: []string{"kept 203.0.113.12"}}, step{at: 10000}),
	}, {
		// The partner's renewal's block never reached this side's file,
		// its release of that lease did: the partner tells both.
		name:  "... the file shows only the end of the partner's renewal (begun before the cut lease's end): dropped, the client kept the address",
		pair:  secondary,
		steps: cut(step{at: 29, appended: block("203.0.113.12", "released", macA, t0+25, t0+29), want: []string{"kept 203.0.113.12"}}, step{at: 10000}),
	}, {
		name:  "... the file shows only the end of the client's next lease, begun after the cut lease's end: the end first, at the cut lease's end",
		pair:  secondary,
		steps: cut(step{at: 38, appended: block("203.0.113.12", "released", macA, t0+33, t0+38), want: []string{cutEnd(30)}}, step{at: 10000}),
	}, {
		name:  "... an unbound block begun with the cut life, a second off (the hook's time, not the file's): the cut lease's own end, at once",
		pair:  secondary,
		steps: cut(step{at: 20, appended: block("203.0.113.12", "released", macA, t0+11, t0+20), want: []string{cutEnd(20)}}, step{at: 10000}),
	}, {
		name: "... this side renews it first: dropped",
		pair: secondary,
		steps: cut(
			step{at: 25, hook: ev(renewal("203.0.113.12", macA, t0+25, 20)), want: []string{"kept 203.0.113.12"}},
			step{at: 25, appended: ackedBlock("203.0.113.12", "active", macA, t0+25, t0+45)},
			step{at: 10000}),
	}, {
		name: "... the client's new lease from this side after the end: the end first, then nothing",
		pair: secondary,
		steps: cut(
			step{at: 31, hook: ev(renewal("203.0.113.12", macA, t0+31, 20)), want: []string{cutEnd(30)}},
			step{at: 31, appended: ackedBlock("203.0.113.12", "active", macA, t0+31, t0+51)},
			step{at: 10000}),
	}, {
		// Read at once with the update (an agent restarted, or behind):
		// that lease is the client's next life, after the cut one.
		name:  "... the client's next lease read after the cut lease's end, before the end was sent: the end first, at the cut lease's end",
		pair:  secondary,
		steps: cut(step{at: 35, appended: block("203.0.113.12", "active", macA, t0+33, t0+53), want: []string{cutEnd(30)}}, step{at: 10000}),
	}, {
		// A spool replayed after a restart tells the cut lease's own
		// commit again: not the client's next lease.
		name: "... the cut lease's own commit told again: still held",
		pair: secondary,
		steps: cut(
			step{at: 12, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			step{at: 30 + grace, want: []string{cutEnd(30)}},
			step{at: 10000}),
	}, {
		// MAAS must hear the old lease end before another client's
		// commit (givenAway).
		name:  "... the partner gives the address to another client: the end at once, dated at that lease's start",
		pair:  secondary,
		steps: cut(step{at: 25, appended: block("203.0.113.12", "active", macB, t0+25, t0+45), want: []string{cutEnd(25)}}, step{at: 10000}),
	}, {
		name: "... this side's hook commits another client: the end ahead of it",
		pair: secondary,
		steps: cut(
			step{at: 25, hook: ev(renewal("203.0.113.12", macB, t0+25, 20)), want: []string{cutEnd(25)}},
			step{at: 25, appended: ackedBlock("203.0.113.12", "active", macB, t0+25, t0+45)},
			step{at: 10000}),
	}, {
		name:  "... the file shows the cut lease released: the end at once, at the release",
		pair:  secondary,
		steps: cut(step{at: 20, appended: block("203.0.113.12", "released", macA, t0+10, t0+20), want: []string{cutEnd(20)}}, step{at: 10000}),
	}, {
		// The update that took only the state: the same cut, the
		// client holding its lease to +30 (make chaos PAIR=1 VLANS=2
		// TIMERS=maas seed 121).
		name:  "... the file shows the cut lease freed well before its end, with its own times: held all the same",
		pair:  secondary,
		steps: cut(step{at: 15, appended: block("203.0.113.12", "free", macA, t0+10, t0+30)}, step{at: 30 + grace - 1}, step{at: 30 + grace, want: []string{cutEnd(30)}}, step{at: 10000}),
	}, {
		name: "... and the client's next lease before that end: dropped, the client kept the address",
		pair: secondary,
		steps: cut(
			step{at: 15, appended: block("203.0.113.12", "free", macA, t0+10, t0+30)},
			step{at: 25, appended: block("203.0.113.12", "active", macA, t0+25, t0+45), want: []string{"kept 203.0.113.12"}},
			step{at: 10000}),
	}, {
		// In a pair an unbound block's end is when its state may next
		// change: the life ended by the time the file showed it.
		name:  "... the file shows the cut lease freed within a second of its end, with its own times: the end at once, dated then",
		pair:  secondary,
		steps: cut(step{at: 29, appended: block("203.0.113.12", "free", macA, t0+10, t0+30), want: []string{cutEnd(29)}}, step{at: 10000}),
	}, {
		// An agent back from a restart reads the file before the
		// hook's datagram, queued while it was down (make chaos PAIR=1
		// VLANS=2 TIMERS=maas seed 127: the end went at once, 15 s
		// into the lease the client renewed through the partner).
		name: "... the file shows the cut lease freed well before its end, with its own times, before the hook's expiry is judged: held all the same",
		pair: secondary,
		steps: acked(
			step{at: 15, appended: block("203.0.113.12", "free", macA, t0+10, t0+30)},
			step{at: 16, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+15))},
			step{at: 30 + grace - 1},
			step{at: 30 + grace, want: []string{cutEnd(30)}},
			step{at: 10000},
		),
	}, {
		name: "... and the client's next lease before that end, then the hook's expiry: nothing",
		pair: secondary,
		steps: acked(
			step{at: 16, appended: block("203.0.113.12", "free", macA, t0+10, t0+30) + block("203.0.113.12", "active", macA, t0+16, t0+36), want: []string{"kept 203.0.113.12"}},
			step{at: 16, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+15)), want: []string{"dropped 203.0.113.12"}},
			step{at: 10000},
		),
	}, {
		// An agent back from a restart at the cut life's end reads the
		// update and the client's next lease, through the partner, in
		// one go, then the hook's expiry queued while it was down (make
		// chaos PAIR=1 VLANS=2 TIMERS=maas seed 127).
		name: "... the file shows the update and the client's next lease at the cut lease's end, then the hook's expiry: nothing",
		pair: secondary,
		steps: acked(
			step{at: 30, appended: clttBlock("203.0.113.12", "free", macA, t0-20, t0, t0+10) + block("203.0.113.12", "active", macA, t0+28, t0+48), want: []string{"kept 203.0.113.12"}},
			step{at: 30, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11)), want: []string{"dropped 203.0.113.12"}},
			step{at: 10000},
		),
	}, {
		name: "... the file shows the update after the cut lease's end, then the hook's expiry: the end, at the cut lease's end",
		pair: secondary,
		steps: acked(
			step{at: 40, appended: clttBlock("203.0.113.12", "free", macA, t0-20, t0, t0+10)},
			step{at: 40, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11))},
			step{at: 30 + grace - 1},
			step{at: 30 + grace, want: []string{cutEnd(30)}},
			step{at: 10000},
		),
	}, {
		name: "... the hook's expiry judged before the file shows the ack: held all the same",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, hook: ev(renewal("203.0.113.12", macA, t0+10, 20))},
			{at: 11, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11))},
			{at: 11, appended: ackedBlock("203.0.113.12", "active", macA, t0+10, t0+30) + clttBlock("203.0.113.12", "free", macA, t0-20, t0, t0+10)},
			{at: 30 + grace, want: []string{cutEnd(30)}},
			{at: 10000},
		},
	}, {
		// dhcpd writes the update's block right after the hook runs:
		// the reader may get to it before the hook's datagram is judged.
		name: "... the file shows the update before the hook's expiry is judged: held all the same",
		pair: secondary,
		steps: acked(
			step{at: 11, appended: clttBlock("203.0.113.12", "free", macA, t0-20, t0, t0+10)},
			step{at: 11, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11))},
			step{at: 30 + grace, want: []string{cutEnd(30)}},
			step{at: 10000},
		),
	}, {
		name: "... the file shows the update and the client's next lease before the hook's expiry is judged: nothing",
		pair: secondary,
		steps: acked(
			step{at: 11, appended: clttBlock("203.0.113.12", "free", macA, t0-20, t0, t0+10) + block("203.0.113.12", "active", macA, t0+11, t0+31), want: []string{"kept 203.0.113.12"}},
			step{at: 11, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11)), want: []string{"dropped 203.0.113.12"}},
			step{at: 10000},
		),
	}, {
		name: "an expiry within a second of the lease's end is not held",
		pair: secondary,
		steps: acked(
			step{at: 29, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+29))},
			step{at: 29, appended: block("203.0.113.12", "free", macA, t0+10, t0+30)},
			step{at: 10000},
		),
	}, {
		// The peer acked it last: an on expiry of this side's older
		// ack, the peer's to tell (pairRepeat drops it in Accept).
		name: "the expiry of the peer's lease is not held",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 11, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11))},
			{at: 11, appended: block("203.0.113.12", "free", macA, t0-20, t0)},
			{at: 10000},
		},
	}, {
		name: "... nor when the file shows the update first",
		pair: secondary,
		steps: []step{
			{at: 0, snapshot: base},
			{at: 10, appended: block("203.0.113.12", "active", macA, t0+10, t0+30)},
			{at: 11, appended: block("203.0.113.12", "free", macA, t0-20, t0)},
			{at: 11, hook: ev(hook(event.Expiry, "203.0.113.12", macA, t0+11))},
			{at: 10000},
		},
	}, {
		name: "range shrink while the secondary was down: the surviving primary does not wait",
		pair: primary,
		steps: []step{
			{at: 0, snapshot: fostate("partner-down", "normal") + block(ip1, "active", macA, t0-100, t0+500) + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 600, snapshot: fostate("partner-down", "normal") + block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 600 + grace, want: []string{"expiry 203.0.113.10 " + macA + " +500 vanished"}},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runPair(t, tc.pair, tc.hookless, tc.steps) })
	}
}

// TestComplementPairDropsEndBeforeRecordedCommit: in complement mode
// MAAS's helper tells the region the commit the file records, so a
// dropped lease's end still pending then is dropped, as before Ahead
// existed, not sent ahead of it as in replacement mode: nothing orders
// it before MAAS's own delivery of the commit, and an end arriving
// after it is rule 4's case (what MAAS does with it:
// maasservicelayer/services/leases.py, store_lease_info). The read
// comes before the tick that would have sent the end at its time.
func TestComplementPairDropsEndBeforeRecordedCommit(t *testing.T) {
	s := NewState(grace)
	s.Pair, s.Complement = Pair{Peer: "fo", Role: RoleSecondary}, true
	down := fostate("partner-down", "normal")
	runSteps(t, s, []step{
		{at: 0, snapshot: down + block(ip2, "active", macB, t0-100, t0+5000)},
		{at: 1, appended: ackedBlock(ip1, "active", macA, t0+1, t0+40)},
		{at: 20, snapshot: down + block(ip2, "active", macB, t0-100, t0+5000)},
		{at: 30, appended: fostate("normal", "recover-done") + fostate("normal", "normal")},
		{at: 41, appended: block(ip1, "active", macA, t0+41, t0+61)},
		{at: 4000},
	})
}

// TestPairSameMACRule is the rule that drops a pair's hook repeating what
// the region was told, against hooks that bring news and must pass. Each
// case feeds one side of a pair what happened (the file's blocks, events
// queued) and asks Superseded of the last hook.
func TestPairSameMACRule(t *testing.T) {
	primary := Pair{Peer: "fo", Role: RolePrimary, MyState: "normal", PartnerState: "normal"}
	survivor := Pair{Peer: "fo", Role: RoleSecondary, MyState: StatePartnerDown, PartnerState: "normal"}
	base := block(ip1, "active", macA, t0-100, t0+500)
	// ownFreed: this side's lease of A, acked, expired, then freed.
	ownFreed := ackedBlock(ip1, "active", macA, t0+200, t0+700) + ackedBlock(ip1, "expired", macA, t0+200, t0+700) +
		ackedBlock(ip1, "free", macA, t0+200, t0+700)
	for _, tc := range []struct {
		name     string
		pair     Pair
		appended string        // blocks dhcpd wrote, in order
		queued   []event.Event // events queued before (hooks, synthesised)
		after    string        // blocks dhcpd wrote after those
		then     *Pair         // the pair's states when the hook comes, if they changed
		pre      []event.Event // hook events judged (Superseded) and passed (Hook) before the hook
		hook     event.Event
		drop     bool
	}{{
		name:     "survivor: the hook's expiry when the lease goes free repeats the expiry told from the expired block",
		pair:     survivor,
		appended: block(ip1, "expired", macA, t0-100, t0+500),
		queued:   []event.Event{hook(event.Expiry, ip1, macA, t0+500)},
		hook:     hook(event.Expiry, ip1, macA, t0+4100),
		drop:     true,
	}, {
		name:   "a release the hook reported, reported again",
		pair:   primary,
		queued: []event.Event{hook(event.Release, ip1, macA, t0+20)},
		hook:   hook(event.Release, ip1, macA, t0+21),
		drop:   true,
	}, {
		name:   "older than what was told",
		pair:   primary,
		queued: []event.Event{hook(event.Commit, ip1, macB, t0+30)},
		hook:   hook(event.Expiry, ip1, macA, t0+20),
		drop:   true,
	}, {
		name:     "recovering: a replay of the survivor's news",
		pair:     Pair{Peer: "fo", Role: RolePrimary, MyState: "recover", PartnerState: StatePartnerDown},
		appended: block(ip1, "free", macA, t0-100, t0+500),
		hook:     hook(event.Expiry, ip1, macA, t0+5000),
		drop:     true,
	}, {
		// dhcpd keeps the on expiry of an old ack through the peer's
		// updates and runs it when the lease goes free (issue 14).
		name:     "normal: the peer acked the lease last (its renewal recorded, no hook here); this side's old on expiry",
		pair:     primary,
		appended: block(ip1, "active", macA, t0+200, t0+700) + block(ip1, "expired", macA, t0+200, t0+700),
		hook:     hook(event.Expiry, ip1, macA, t0+701),
		drop:     true,
	}, {
		name:     "the peer acked last, then the client released to it: this side's old on release",
		pair:     primary,
		appended: block(ip1, "active", macA, t0+200, t0+700) + block(ip1, "released", macA, t0+200, t0+300),
		hook:     hook(event.Release, ip1, macA, t0+300),
		drop:     true,
	}, {
		name:     "after recovery: the end the file recorded while the partner was partner-down (the survivor told it)",
		pair:     Pair{Peer: "fo", Role: RolePrimary, MyState: "recover", PartnerState: StatePartnerDown},
		appended: block(ip1, "expired", macA, t0-100, t0+500),
		then:     &primary,
		hook:     hook(event.Expiry, ip1, macA, t0+900),
		drop:     true,
	}, {
		// Newer news: none of these may be dropped.
		name:     "normal: this side acked the lease last (its hook's commit, the file's block after it); its on expiry",
		pair:     primary,
		appended: block(ip1, "active", macA, t0+200, t0+700),
		queued:   []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		after:    block(ip1, "active", macA, t0+200, t0+700) + block(ip1, "expired", macA, t0+200, t0+700),
		hook:     hook(event.Expiry, ip1, macA, t0+701),
	}, {
		name:   "normal: this side acked the lease last (the file's block before its hook's commit); its on expiry",
		pair:   primary,
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		after:  block(ip1, "active", macA, t0+200, t0+700) + block(ip1, "expired", macA, t0+200, t0+700),
		hook:   hook(event.Expiry, ip1, macA, t0+701),
	}, {
		// An agent that restarted reads the file before the hook events
		// queued while it was down: its own ack's commit comes after the
		// blocks, older than the release recorded, and is this side's
		// backlog (TestPairBacklog); its release after that.
		name:     "restarted agent: the file's commit and release first, then this side's hooks for them: its release",
		pair:     primary,
		appended: block(ip1, "active", macA, t0+200, t0+700) + block(ip1, "released", macA, t0+200, t0+300),
		pre:      []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		hook:     hook(event.Release, ip1, macA, t0+300),
	}, {
		name:     "the peer acked last, the partner-down survivor is this side: its hook's expiry is not judged by who acked",
		pair:     survivor,
		appended: block(ip1, "active", macA, t0+200, t0+700),
		hook:     hook(event.Expiry, ip1, macA, t0+701),
	}, {
		name: "normal: the file shows this side's expired block first, its hook's expiry comes when the peer's ack frees the lease",
		pair: primary, appended: block(ip1, "expired", macA, t0-100, t0+500),
		hook: hook(event.Expiry, ip1, macA, t0+501),
	}, {
		name: "normal: the file shows the released block before the hook's release",
		pair: primary, appended: block(ip1, "released", macA, t0-100, t0+200),
		hook: hook(event.Release, ip1, macA, t0+200),
	}, {
		name:   "a commit for the same MAC after its release",
		pair:   primary,
		queued: []event.Event{hook(event.Release, ip1, macA, t0+20)},
		hook:   hook(event.Commit, ip1, macA, t0+40),
	}, {
		name:   "an expiry after the same MAC's renewal",
		pair:   survivor,
		queued: []event.Event{hook(event.Expiry, ip1, macA, t0+500), hook(event.Commit, ip1, macA, t0+600)},
		hook:   hook(event.Expiry, ip1, macA, t0+1200),
	}, {
		// dhcpd frees A's lease (its on expiry runs then, in a pair),
		// acks B the address in the same second, and runs B's commit
		// hook after A's expiry hook; the agent read the file's blocks
		// first (make chaos PAIR=1 seed 92: the end of A's life lost).
		name:   "this side freed A's lease and acked B in that second, the file read first: A's expiry is its backlog",
		pair:   primary,
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		after:  ownFreed + ackedBlock(ip1, "active", macB, t0+700, t0+720),
		hook:   hook(event.Expiry, ip1, macA, t0+700),
	}, {
		name:   "... B acked by the peer in that second: still dropped (rule 4: an end of another MAC after the address's commit)",
		pair:   primary,
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		after:  ownFreed + block(ip1, "active", macB, t0+700, t0+720),
		hook:   hook(event.Expiry, ip1, macA, t0+700),
		drop:   true,
	}, {
		name:   "an expiry for another MAC than the one told free",
		pair:   primary,
		queued: []event.Event{hook(event.Expiry, ip1, macA, t0+500)},
		hook:   hook(event.Expiry, ip1, macB, t0+1500),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.Pair = tc.pair
			tab, _ := table(t, base)
			s.Snapshot(tab, true, t0)
			if tc.appended != "" {
				s.Appended(blocks(t, tc.appended), t0+500)
			}
			for _, q := range tc.queued {
				s.Hook(q)
			}
			if tc.after != "" {
				s.Appended(blocks(t, tc.after), t0+700)
			}
			if tc.then != nil {
				s.Pair = *tc.then
			}
			for _, ev := range tc.pre {
				if s.Superseded(ev) {
					t.Fatalf("Superseded(%s %s) = true, want this side's backlog passed", ev.Action, ev.MAC)
				}
				s.Hook(ev)
			}
			if got := s.Superseded(tc.hook); got != tc.drop {
				tr := s.Told[netip.MustParseAddr(ip1)]
				t.Errorf("Superseded(%s %s %s) = %t, want %t (told %+v)", tc.hook.Action, tc.hook.MAC, tc.hook.IP, got, tc.drop, tr)
			}
		})
	}
}

// TestPairReplay: which of the recovering side's hook ends, dropped by
// pairRepeat, the pair channel may still send (pairReplay): only an end
// of the lease this agent itself told last, with that news to weigh the
// peer's answer against. (make chaos PAIR=1 seed 21: an end the partner
// recorded in normal just before the death of this side, whose hook had
// not run, was lost when this replay was dropped.)
func TestPairReplay(t *testing.T) {
	recovering := Pair{Peer: "fo", Role: RolePrimary, MyState: "recover", PartnerState: StatePartnerDown}
	normal := Pair{Peer: "fo", Role: RolePrimary, MyState: "normal", PartnerState: "normal"}
	ownCommit := []event.Event{hook(event.Commit, ip1, macA, t0+200)}
	freed := block(ip1, "active", macA, t0+200, t0+210) + block(ip1, "free", macA, t0+200, t0+210)
	for _, tc := range []struct {
		name     string
		pair     Pair
		queued   []event.Event // this side's hooks
		appended string        // blocks the file recorded after them
		hook     event.Event
		wantOwn  int64 // this side's own news before the hook; 0: no replay
	}{
		{name: "its own ack, freed by the partner's update: a replay, after its commit", pair: recovering,
			queued: ownCommit, appended: freed, hook: hook(event.Expiry, ip1, macA, t0+300), wantOwn: t0 + 200},
		{name: "its own ack, a release", pair: recovering,
			queued: ownCommit, appended: block(ip1, "released", macA, t0+200, t0+205), hook: hook(event.Release, ip1, macA, t0+300), wantOwn: t0 + 200},
		{name: "not recovering: the other rules decide", pair: normal,
			queued: ownCommit, appended: freed, hook: hook(event.Expiry, ip1, macA, t0+300)},
		{name: "the address is another MAC's now", pair: recovering,
			queued: ownCommit, appended: block(ip1, "active", macB, t0+250, t0+260) + block(ip1, "free", macB, t0+250, t0+260), hook: hook(event.Expiry, ip1, macA, t0+300)},
		{name: "nothing of the address queued by this agent (the peer acked it)", pair: recovering,
			appended: freed, hook: hook(event.Expiry, ip1, macA, t0+300)},
		{name: "older than what the file recorded", pair: recovering,
			queued: ownCommit, appended: freed, hook: hook(event.Expiry, ip1, macA, t0+205)},
		{name: "a commit is never a replay", pair: recovering,
			queued: ownCommit, appended: freed, hook: hook(event.Commit, ip1, macA, t0+300)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.Pair = normal
			tab, _ := table(t, block(ip2, "active", macB, t0-100, t0+5000))
			s.Snapshot(tab, true, t0)
			for _, q := range tc.queued {
				s.Hook(q)
			}
			s.Pair = tc.pair
			s.Appended(blocks(t, tc.appended), t0+250)
			own, ok := s.pairReplay(tc.hook)
			if ok != (tc.wantOwn != 0) || own.Timestamp != tc.wantOwn {
				t.Fatalf("pairReplay = %d, %v; want %d", own.Timestamp, ok, tc.wantOwn)
			}
			if ok && s.SupersededWhy(tc.hook) != whyPairRepeat {
				t.Errorf("SupersededWhy = %q, want the pair repeat the replay stands in for", s.SupersededWhy(tc.hook))
			}
		})
	}
}

// ackedBlock writes a lease block as the server that acked it does: its
// cltt is its start (a partner's binding update has none, or an older
// one).
func ackedBlock(ip, state, mac string, starts, ends int64) string {
	return clttBlock(ip, state, mac, starts, ends, starts)
}

// clttBlock writes a lease block with its cltt: a renewal dhcpd answered
// with the lease unaltered (dhcp-cache-threshold) moves cltt alone.
func clttBlock(ip, state, mac string, starts, ends, cltt int64) string {
	return strings.Replace(block(ip, state, mac, starts, ends), "  binding state", "  cltt "+date(cltt)+";\n  binding state", 1)
}

// TestPairBacklog: an agent that was down (or whose file reader got
// ahead of its socket) reads what its dhcpd wrote before the hook events
// queued for it meanwhile. The file's later blocks are recorded as told;
// the queued hooks of this side's own work are older than them, and are
// the only report of that work the region can get: they must pass, in
// order. Hook events older than the peer's news, and replays of what
// this agent already queued, are still dropped. (make chaos PAIR=1, seed
// 14: the primary rack's queued commit of a lease released a second
// later, lost.)
func TestPairBacklog(t *testing.T) {
	primary := Pair{Peer: "fo", Role: RolePrimary, MyState: "normal", PartnerState: "normal"}
	secondary := Pair{Peer: "fo", Role: RoleSecondary, MyState: "normal", PartnerState: "normal"}
	for _, tc := range []struct {
		name   string
		pair   Pair
		before []event.Event // queued and accepted before the agent went down
		file   string        // what dhcpd wrote meanwhile, read first
		queued []event.Event // the hook events queued meanwhile, in order
		want   []string      // those that pass
	}{{
		name:   "this side's commit and the client's release of it (the released block's start is the commit)",
		pair:   primary,
		file:   ackedBlock(ip1, "active", macA, t0+200, t0+700) + block(ip1, "released", macA, t0+200, t0+201),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200), hook(event.Release, ip1, macA, t0+201)},
		want:   []string{"commit +200", "release +201"},
	}, {
		name: "a commit, its release, a new commit: the file's last block is this side's ack (cltt)",
		pair: secondary,
		file: ackedBlock(ip1, "active", macA, t0+200, t0+700) + block(ip1, "released", macA, t0+200, t0+201) +
			ackedBlock(ip1, "active", macA, t0+230, t0+730),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200), hook(event.Release, ip1, macA, t0+201), hook(event.Commit, ip1, macA, t0+230)},
		want:   []string{"commit +200", "release +201", "commit +230"},
	}, {
		name:   "an earlier lease's expiry, then this side's ack of the address to another client",
		pair:   primary,
		before: []event.Event{hook(event.Commit, ip1, macA, t0+100)},
		file:   block(ip1, "free", macA, t0+100, t0+150) + ackedBlock(ip1, "active", macB, t0+160, t0+660),
		queued: []event.Event{hook(event.Expiry, ip1, macA, t0+150), hook(event.Commit, ip1, macB, t0+160)},
		want:   []string{"expiry +150", "commit +160"},
	}, {
		name:   "the peer renewed the lease after this side's commit (no cltt: a binding update): the commit is older news",
		pair:   primary,
		file:   ackedBlock(ip1, "active", macA, t0+200, t0+700) + block(ip1, "active", macA, t0+300, t0+800),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		want:   nil,
	}, {
		// make chaos PAIR=1 seed 14: this side acked a lease and the
		// client released it a second later; the partner died, and this
		// side took over; its agent, killed meanwhile, read the file
		// before its hook's backlog. The records are from before the
		// takeover: the backlog is judged as it would have been then.
		name: "this side's commit and the release of it recorded, then a takeover, then the hook's backlog",
		pair: primary,
		file: ackedBlock(ip1, "active", macA, t0+200, t0+700) + block(ip1, "released", macA, t0+200, t0+201) +
			fostate("communications-interrupted", "normal") + fostate("partner-down", "normal"),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200), hook(event.Release, ip1, macA, t0+201)},
		want:   []string{"commit +200", "release +201"},
	}, {
		name:   "a replay of a commit this agent queued, older than the peer's news: dropped",
		pair:   primary,
		before: []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		file:   ackedBlock(ip1, "active", macA, t0+200, t0+700) + block(ip1, "active", macA, t0+300, t0+800),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200)},
		want:   nil,
	}, {
		name:   "the peer acked the address to another client after this side's lease ended",
		pair:   secondary,
		before: []event.Event{hook(event.Commit, ip1, macA, t0+100)},
		file:   block(ip1, "free", macA, t0+100, t0+150) + block(ip1, "active", macB, t0+160, t0+660),
		queued: []event.Event{hook(event.Expiry, ip1, macA, t0+150)},
		want:   nil,
	}, {
		// make chaos PAIR=1 seeds 7 and 14: the file, read at +300,
		// showed the lease free with its end still ahead (+400); the
		// client's next commit, at +350, is news.
		name:   "a free block whose end is still to come, then the client's next commit before that end",
		pair:   primary,
		file:   block(ip1, "active", macA, t0+200, t0+400) + block(ip1, "free", macA, t0+200, t0+400),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+350)},
		want:   []string{"commit +350"},
	}, {
		name:   "a free block whose end is still to come, then a commit from before the file showed it: older",
		pair:   primary,
		file:   block(ip1, "active", macA, t0+200, t0+400) + block(ip1, "free", macA, t0+200, t0+400),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+250)},
		want:   nil,
	}, {
		name:   "a replay of what this agent queued before (the socket read again after a crash), older than its own later ack",
		pair:   primary,
		before: []event.Event{hook(event.Commit, ip1, macA, t0+200), hook(event.Release, ip1, macA, t0+201)},
		file:   ackedBlock(ip1, "active", macA, t0+200, t0+700) + block(ip1, "released", macA, t0+200, t0+201) + ackedBlock(ip1, "active", macA, t0+230, t0+730),
		queued: []event.Event{hook(event.Commit, ip1, macA, t0+200), hook(event.Release, ip1, macA, t0+201), hook(event.Commit, ip1, macA, t0+230)},
		want:   []string{"commit +230"},
	}, {
		// make chaos PAIR=1 seed 6: dhcpd answered a renewal with the
		// lease unaltered (its dhcp-cache-threshold: "reuse_lease: lease
		// age under 25% threshold"), moving only cltt; the lease then
		// expired and went free (its hook ran, the agent down), and the
		// client came back for a new lease, reused in turn. The reused
		// blocks (cltt after their start) are this side's own: taken for
		// the peer's, they made the end's hook a repeat of the peer's.
		name:   "this side's reused renewals (cltt after the start), the lease's end, a new lease: all this side's news",
		pair:   primary,
		before: []event.Event{hook(event.Commit, ip1, macA, t0+200), hook(event.Commit, ip1, macA, t0+204)},
		file: clttBlock(ip1, "active", macA, t0+200, t0+220, t0+204) + clttBlock(ip1, "expired", macA, t0+200, t0+220, t0+204) +
			clttBlock(ip1, "free", macA, t0+200, t0+220, t0+204) + ackedBlock(ip1, "active", macA, t0+222, t0+240) +
			clttBlock(ip1, "active", macA, t0+222, t0+240, t0+223),
		queued: []event.Event{hook(event.Expiry, ip1, macA, t0+221), hook(event.Commit, ip1, macA, t0+222), hook(event.Commit, ip1, macA, t0+223)},
		want:   []string{"expiry +221", "commit +222", "commit +223"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.Pair = tc.pair
			tab, _ := table(t, block(ip2, "active", macB, t0-100, t0+5000))
			s.Snapshot(tab, true, t0)
			for _, ev := range tc.before {
				s.Hook(ev)
			}
			appendPair(t, s, tc.file, t0+300)
			var got []string
			for _, ev := range tc.queued {
				if s.Superseded(ev) {
					continue
				}
				s.Hook(ev)
				got = append(got, fmt.Sprintf("%s %+d", ev.Action, ev.Timestamp-t0))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hook events passed (-want +got):\n%s", diff)
			}
			if evs := s.Due(t0 + 1000); len(evs) > 0 {
				t.Errorf("Due synthesised %d events, want none (outside partner-down the file only records)", len(evs))
			}
		})
	}
}

func TestStaleForPair(t *testing.T) {
	primary := Pair{Peer: "fo", Role: RolePrimary, MyState: "normal", PartnerState: "normal"}
	commit := hook(event.Commit, ip1, macA, t0+200)
	for _, tc := range []struct {
		name   string
		pair   Pair
		queued []event.Event // accepted before the agent went down, still in the outbox
		file   string        // what dhcpd wrote meanwhile
		ask    event.Event
		// returned: the agent's start, when its file showed the partner
		// spoke since; 0: not shown.
		returned int64
		want     bool
		// newest: NewestForPair's event, "action mac +offset": the
		// file's newer record, sent after the event; "" for none.
		newest string
	}{{
		name:   "the partner expired the lease in partner-down (this side recovers): the queued commit is stale",
		pair:   primary,
		queued: []event.Event{commit},
		file:   fostate("recover", "partner-down") + block(ip1, "free", macA, t0+200, t0+260),
		ask:    commit,
		want:   true,
		newest: "expiry " + macA + " +260",
	}, {
		name:   "the peer renewed the lease (a binding update, no cltt) after it: stale",
		pair:   primary,
		queued: []event.Event{commit},
		file:   block(ip1, "active", macA, t0+230, t0+290),
		ask:    commit,
		want:   true,
		newest: "commit " + macA + " +230",
	}, {
		name:   "this side's own later ack recorded (cltt): not stale, its hook follows",
		pair:   primary,
		queued: []event.Event{commit},
		file:   ackedBlock(ip1, "active", macA, t0+230, t0+290),
		ask:    commit,
		want:   false,
		newest: "commit " + macA + " +230",
	}, {
		name:   "this side's own expiry recorded outside partner-down: not stale",
		pair:   primary,
		queued: []event.Event{commit},
		file:   ackedBlock(ip1, "active", macA, t0+200, t0+260) + block(ip1, "expired", macA, t0+200, t0+260),
		ask:    commit,
		want:   false,
		newest: "expiry " + macA + " +260",
	}, {
		name:   "the same commit recorded (the peer's update of this side's ack): not stale",
		pair:   primary,
		queued: []event.Event{commit},
		file:   block(ip1, "active", macA, t0+200, t0+260),
		ask:    commit,
		want:   false,
		newest: "",
	}, {
		name:     "returned after the partner spoke: this side's dhcpd expired its own copy as it started, the survivor told that end",
		pair:     primary,
		queued:   []event.Event{commit},
		file:     block(ip1, "expired", macA, t0+200, t0+260),
		ask:      commit,
		returned: t0 + 280,
		want:     true,
		newest:   "expiry " + macA + " +260",
	}, {
		name:   "the same end, the partner never spoke: this side's own end, its hook follows",
		pair:   primary,
		queued: []event.Event{commit},
		file:   block(ip1, "expired", macA, t0+200, t0+260),
		ask:    commit,
		want:   false,
		newest: "expiry " + macA + " +260",
	}, {
		name:     "this agent queued the end itself before it went down: not stale, the end follows in its queue",
		pair:     primary,
		queued:   []event.Event{commit, hook(event.Expiry, ip1, macA, t0+260)},
		file:     block(ip1, "expired", macA, t0+200, t0+260),
		ask:      commit,
		returned: t0 + 280,
		want:     false,
		newest:   "expiry " + macA + " +260", // its own, queued behind: sent twice
	}, {
		name:     "an end after the agent's start is news of this run: not stale",
		pair:     primary,
		queued:   []event.Event{commit},
		file:     block(ip1, "expired", macA, t0+200, t0+260),
		ask:      commit,
		returned: t0 + 250,
		want:     false,
		newest:   "expiry " + macA + " +260",
	}, {
		name:   "a free block whose end is ahead (a pair's free lease: when its state may next change): no newer news",
		pair:   primary,
		queued: []event.Event{commit},
		file:   block(ip1, "free", macA, t0+200, t0+400),
		ask:    commit,
		want:   false,
		newest: "",
	}, {
		name:   "no pair: never",
		pair:   Pair{},
		queued: []event.Event{commit},
		file:   block(ip1, "free", macA, t0+200, t0+260) + block(ip1, "active", macB, t0+230, t0+290),
		ask:    commit,
		want:   false,
		newest: "",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.Pair = tc.pair
			tab, _ := table(t, block(ip2, "active", macB, t0-100, t0+5000))
			s.Snapshot(tab, true, t0)
			for _, e := range tc.queued {
				s.Hook(e)
			}
			d := parser.NewDecoder()
			var ls []*parser.Lease
			h := func(x parser.Statement, err error) {
				if err != nil {
					t.Fatal(err)
				}
				switch x := x.(type) {
				case *parser.Lease:
					ls = append(ls, x)
				case *parser.FailoverState:
					s.Appended(ls, t0+300)
					ls = nil
					s.FailoverSeen([]*parser.FailoverState{x})
				}
			}
			d.Feed([]byte(tc.file), h)
			if err := d.Close(h); err != nil {
				t.Fatal(err)
			}
			s.Appended(ls, t0+300)
			if got := s.StaleForPair(tc.ask, tc.returned); got != tc.want {
				t.Errorf("StaleForPair = %v, want %v (told %+v)", got, tc.want, s.Told[tc.ask.IP])
			}
			n, ok := s.NewestForPair(tc.ask, t0+300)
			got := ""
			if ok {
				got = fmt.Sprintf("%s %s %+d", n.Action, n.MAC, n.Timestamp-t0)
			}
			if got != tc.newest {
				t.Errorf("NewestForPair = %q, want %q", got, tc.newest)
			}
		})
	}
}

func TestPairHoldOld(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pair  Pair
		since time.Duration
		want  time.Duration
	}{
		{"alone: never held", Pair{}, 0, 0},
		{"a pair, just started: the settle time", Pair{Peer: "fo", Role: RolePrimary, MyState: "normal"}, 5 * time.Second, 15 * time.Second},
		{"settled, normal: judge now", Pair{Peer: "fo", Role: RolePrimary, MyState: "normal"}, 20 * time.Second, 0},
		{"settled, recovering (updates still coming)", Pair{Peer: "fo", Role: RolePrimary, MyState: "recover", PartnerState: "partner-down"}, 30 * time.Second, time.Second},
		{"recover-wait: the updates are done", Pair{Peer: "fo", Role: RolePrimary, MyState: "recover-wait", PartnerState: "partner-down"}, 30 * time.Second, 0},
		{"recover for too long: judge now", Pair{Peer: "fo", Role: RolePrimary, MyState: "recover"}, pairHoldMax, 0},
	} {
		if got := tc.pair.holdOld(tc.since); got != tc.want {
			t.Errorf("%s: holdOld(%v) = %v, want %v", tc.name, tc.since, got, tc.want)
		}
	}
}

// TestPendingOldestLeavesStandby: an expiry the secondary holds in
// standby is the primary's to send, not news this side holds: the pair
// channel tells the peer nothing of it (PendingOldest); at its Due it
// lapses, and is counted (TakeLapsed) for the log.
func TestPendingOldestLeavesStandby(t *testing.T) {
	a, b := netip.MustParseAddr(ip1), netip.MustParseAddr(ip2)
	expiry := func(ip string, at int64) event.Event {
		return event.Event{Action: event.Expiry, IP: netip.MustParseAddr(ip), MAC: macA, Timestamp: at, Reason: ReasonVanished}
	}
	s := NewState(grace)
	s.Pending[a] = []Pending{{Event: expiry(ip1, t0+500), Due: t0 + 600, Standby: true}}
	s.Pending[b] = []Pending{{Event: expiry(ip2, t0+600), Due: t0 + 600, Standby: true}, {Event: expiry(ip2, t0+700), Due: t0 + 700}}
	r := &Reconciler{st: s}
	defer func() {
		// At their Due the standby copies lapse, counted for the log.
		if evs := s.Due(t0 + 600); len(evs) != 0 {
			t.Errorf("Due sent %v", evs)
		}
		if n := s.TakeLapsed(); !maps.Equal(n, map[string]int{"": 2}) {
			t.Errorf("lapsed %v, want 2 of the one pair", n)
		}
	}()
	oldest, pending := r.PendingOldest([]netip.Addr{a, b}, []int64{0, 0}, func(ev event.Event) int64 { return ev.Timestamp })
	if want := []int64{0, t0 + 700}; !slices.Equal(oldest, want) {
		t.Errorf("oldest %v, want %v", oldest, want)
	}
	if want := []bool{false, true}; !slices.Equal(pending, want) {
		t.Errorf("pending %v, want %v", pending, want)
	}
}

// TestPendingOldestCut: an end held for the life it cut is not told to
// the peer's agent while it is held: the peer's renewal of that life,
// which this side's file may not show yet, does not wait for it, and,
// delivered, is newer than the hook's time the end is weighed against
// when it goes, dated at the cut life's end: the deliverer then drops it
// (agent: judgePair).
func TestPendingOldestCut(t *testing.T) {
	a := netip.MustParseAddr("203.0.113.12")
	s := NewState(grace)
	s.Pair = Pair{Peer: "fo", Role: RoleSecondary}
	s.Told[a] = Told{Action: event.Commit, MAC: macA, At: t0 + 10, Ends: t0 + 30}
	expiry := fine(hook(event.Expiry, "203.0.113.12", macA, t0+11), 250)
	if _, held := s.HoldCut(expiry); !held {
		t.Fatal("not held")
	}
	r := &Reconciler{st: s}
	oldest, _ := r.PendingOldest([]netip.Addr{a}, []int64{0}, func(ev event.Event) int64 { return ev.TimestampNS })
	if oldest[0] != 0 {
		t.Errorf("oldest %d, want 0: the held end is not told", oldest[0])
	}
	if evs := s.Due(t0 + 30 + grace - 1); len(evs) != 0 {
		t.Errorf("Due before the grace after the cut lease's end = %+v, want nothing", evs)
	}
	evs := s.Due(t0 + 30 + grace)
	if len(evs) != 1 || evs[0].Timestamp != t0+30 {
		t.Fatalf("Due the grace after the cut lease's end = %+v, want the expiry dated at that end", evs)
	}
	// The pair channel weighs it against the hook's time (judgePair).
	if own, ok := r.PairReplay(evs[0], func(ev event.Event) int64 { return ev.TimestampNS }); !ok || own != expiry.TimestampNS {
		t.Errorf("PairReplay = %d, %t; want the hook's time %d", own, ok, expiry.TimestampNS)
	}
}

// TestHoldCutEarlierLife: an expiry dated before the life HoldCut would
// hold it for is not held. The agent restarted while this side's acked
// lease (+10 to +30) ended and the client took its next (+36 to +56); it
// read the file, then judged the hook datagrams queued meanwhile: the
// expiry, dated +30, ends the acked lease at its own end. Held for the
// next life, it was dropped when that life's commit came, and the end
// never reached the region (make chaos PAIR=1 seed 126: four addresses).
// Dated inside the next life (a partner's stale update cutting it), it is
// held for that life as before; dated seconds into the acked lease (an
// update cutting that one, judged late), it is held for the acked lease.
func TestHoldCutEarlierLife(t *testing.T) {
	a := netip.MustParseAddr("203.0.113.12")
	for _, tc := range []struct {
		name  string
		at    int64
		held  bool
		until int64 // the held life's end
		next  int64 // when the file's next lease began, if not t0+36
	}{
		{"at the acked lease's end, before the next began", t0 + 30, false, 0, 0},
		{"seconds before the next began", t0 + 33, false, 0, 0},
		{"two seconds before the next's start", t0 + 34, false, 0, 0},
		// make chaos PAIR=1 seed 121: dhcpd's timer ending the acked
		// lease on time, the next begun a second later.
		{"at the acked lease's end, a second before the next began", t0 + 30, false, 0, t0 + 31},
		{"in the second the next began", t0 + 31, true, t0 + 51, t0 + 31},
		{"a second into the next lease", t0 + 32, true, t0 + 51, t0 + 31},
		{"seconds into the next lease", t0 + 37, true, t0 + 56, 0},
		{"seconds into the acked lease", t0 + 11, true, t0 + 30, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(grace)
			s.Pair = Pair{Peer: "fo", Role: RoleSecondary}
			s.Told[a] = Told{Action: event.Commit, MAC: macA, At: t0 + 10, Ends: t0 + 30}
			next := tc.next
			if next == 0 {
				next = t0 + 36
			}
			s.File[a] = Lease{State: parser.StateActive, Family: "ipv4", MAC: macA, Starts: next, Ends: next + 20}
			p, held := s.HoldCut(hook(event.Expiry, "203.0.113.12", macA, tc.at))
			if held != tc.held || held && p.Until != tc.until {
				t.Errorf("held %t until %+d, want %t until %+d", held, p.Until-t0, tc.held, tc.until-t0)
			}
		})
	}
}

// TestHoldCutBeforeToldLife: an expiry dated before the told lease
// began (its commit, or its block, judged before the queued expiry of
// the life before it) cuts none of it, not even a second before (dhcpd
// runs one hook at a time: a cut's expiry hook runs after the commit's);
// one from the told commit's second on may. Make chaos
// PAIR=1 RACKS=3 seed 201: rack c's agent, restarted, judged its hook's
// expiry of the acked lease's end two seconds before the client's next
// lease, whose block it had read, held it for that lease and dropped it
// when that lease's commit came: the end never reached the region.
func TestHoldCutBeforeToldLife(t *testing.T) {
	a := netip.MustParseAddr("203.0.113.12")
	for _, tc := range []struct {
		at   int64
		held bool
	}{{t0 + 34, false}, {t0 + 35, false}, {t0 + 36, true}, {t0 + 40, true}} {
		s := NewState(grace)
		s.Pair = Pair{Peer: "fo", Role: RoleSecondary}
		s.Told[a] = Told{Action: event.Commit, MAC: macA, At: t0 + 36, Ends: t0 + 56}
		s.File[a] = Lease{State: parser.StateActive, Family: "ipv4", MAC: macA, Starts: t0 + 36, Ends: t0 + 56}
		if p, held := s.HoldCut(hook(event.Expiry, "203.0.113.12", macA, tc.at)); held != tc.held || held && p.Until != t0+56 {
			t.Errorf("expiry at %+d: held %t until %+d, want %t", tc.at-t0, held, p.Until-t0, tc.held)
		}
	}
	// The told commit's own life, the file's block not read yet.
	s := NewState(grace)
	s.Pair = Pair{Peer: "fo", Role: RoleSecondary}
	s.Told[a] = Told{Action: event.Commit, MAC: macA, At: t0 + 36, Ends: t0 + 56}
	if _, held := s.HoldCut(hook(event.Expiry, "203.0.113.12", macA, t0+34)); held {
		t.Error("an expiry two seconds before the told commit: held for its life")
	}
}

// TestOwnTold: what this agent answers the peer's agent it delivered of
// an address: its own last news, also once the file's blocks are
// recorded over it (the peer weighs a recovering side's replay against
// it: PairReplay); nothing for an address only the file told of.
func TestOwnTold(t *testing.T) {
	a, b, c := netip.MustParseAddr(ip1), netip.MustParseAddr(ip2), netip.MustParseAddr("203.0.113.12")
	s := NewState(grace)
	s.Pair = Pair{Peer: "fo", Role: RoleSecondary, MyState: "normal", PartnerState: "normal"}
	s.Hook(hook(event.Commit, ip1, macA, t0+200))
	s.Hook(hook(event.Commit, ip2, macB, t0+300))
	s.Appended(blocks(t, block(ip2, "active", macB, t0+300, t0+400)+block(ip2, "free", macB, t0+300, t0+400)+
		block("203.0.113.12", "active", macA, t0+350, t0+450)), t0+450)
	r := &Reconciler{st: s}
	got := r.OwnTold([]netip.Addr{a, b, c}, func(ev event.Event) int64 { return ev.Timestamp })
	if want := []int64{t0 + 200, t0 + 300, 0}; !slices.Equal(got, want) {
		t.Errorf("OwnTold %v, want %v", got, want)
	}
}

// TestOwnToldDropped: an event the deliverer dropped unsent (Dropped) is
// not this agent's delivered news in the pair channel's answers: the
// peer's agent would take it for news the region holds, and drop its
// own copy of the end too (make chaos PAIR=1 seed 126: four lease ends
// lost, each agent dropping its end on the other's word). Only the last
// event this agent queued is marked, also once the file's blocks are
// recorded over it (the mark is carried with it); the next one it queues
// is news again. The mark is on disk when Dropped returns: an agent
// killed next would answer with the dropped event again.
func TestOwnToldDropped(t *testing.T) {
	a := netip.MustParseAddr(ip1)
	key := func(ev event.Event) int64 { return ev.Timestamp }
	own := func(r *Reconciler) int64 { return r.OwnTold([]netip.Addr{a}, key)[0] }
	store := openStore(t, t.TempDir())
	defer store.Close()
	newState := func() *Reconciler {
		s := NewState(grace)
		s.Pair = Pair{Peer: "fo", Role: RoleSecondary, MyState: "normal", PartnerState: "normal"}
		return &Reconciler{st: s, store: store}
	}
	ns := (t0+200)*1e9 + 5
	at200 := func(action, mac string) event.Event {
		e := hook(action, ip1, mac, t0+200)
		e.TimestampNS = ns
		return e
	}
	commit := hook(event.Commit, ip1, macA, t0+100)
	end := at200(event.Expiry, macA)

	r := newState()
	r.st.Hook(commit)
	r.st.Hook(end)
	// Not the last event queued: nothing changes. The same instant,
	// another MAC or action: the record is this agent's own, and says
	// which event it was.
	for _, other := range []event.Event{commit, at200(event.Expiry, macB), at200(event.Release, macA), hook(event.Expiry, ip1, macA, t0+200)} {
		r.Dropped(other)
	}
	if got := own(r); got != t0+200 {
		t.Fatalf("after dropping other events: OwnTold %+d, want the end's %+d", got-t0, 200)
	}
	r.Dropped(end)
	if got := own(r); got != 0 {
		t.Errorf("after dropping the end: OwnTold %+d, want nothing", got-t0)
	}
	if tl := r.st.Told[a]; tl.Action != event.Expiry || tl.At != t0+200 || !tl.OwnDropped {
		t.Errorf("record %+v: want the end, marked; only the answer changes", tl)
	}
	// On disk already, as in memory (nothing else committed it).
	if err := store.View(bucketName, func(b *bbolt.Bucket) error {
		got, _, _, err := load(b, grace)
		if err == nil && got.Told[a] != r.st.Told[a] {
			t.Errorf("stored told %+v, want %+v", got.Told[a], r.st.Told[a])
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// The file's block recorded over it (the peer's commit of the
	// address) carries the mark; the next event this agent queues
	// clears it.
	r.st.Appended(blocks(t, block(ip1, "active", macB, t0+250, t0+400)), t0+260)
	if tl := r.st.Told[a]; !tl.Recorded || tl.MAC != macB || !tl.OwnDropped {
		t.Fatalf("the peer's commit recorded %+v: want it, with this agent's end still marked dropped", tl)
	}
	if got := own(r); got != 0 {
		t.Errorf("the end recorded over: OwnTold %+d, want nothing", got-t0)
	}
	backlog := hook(event.Commit, ip1, macA, t0+220) // this side's, queued behind the recorded news
	r.st.Hook(backlog)
	if got := own(r); got != t0+220 {
		t.Errorf("after this side's backlog queued: OwnTold %+d, want %+d", got-t0, 220)
	}

	// Dropped after the file recorded over it: the record's action and
	// MAC are the file's, and the time alone says which event it was,
	// also when the block is of the same second (the record then keeps
	// no separate time of its own).
	for _, tc := range []struct {
		name  string
		block string
	}{
		{"a later block", block(ip1, "active", macB, t0+250, t0+400)},
		{"a block of the same second", block(ip1, "active", macB, t0+200, t0+400)},
	} {
		r = newState()
		synth := hook(event.Expiry, ip1, macA, t0+200) // made from the file: no fine time
		synth.Source, synth.Reason = event.SourceFile, ReasonEndsPassed
		r.st.Hook(synth)
		r.st.Appended(blocks(t, tc.block), t0+260)
		r.Dropped(synth)
		if got := own(r); got != 0 {
			t.Errorf("%s: OwnTold %+d, want nothing", tc.name, got-t0)
		}
	}
}

// TestPairBacklogFirst: the primary acked A's lease and renewed it; with
// the partner gone quiet its file recorded the lease expired (not free:
// that needs the partner's ack), A back two seconds later, and released;
// the agent stopped before it took those hooks' events, and the next one
// reads the file, partner-down and all, before the hooks' backlog. The
// release is this side's own end not yet free (ownExpired), due at once
// as it takes over. The Reconciler takes the backlog first
// (AwaitBacklog): then each hook event is this side's backlog behind its
// recorded news (ownBacklog), and the pending release is covered by the
// hook's. Sent before them, the release made the hook's older commit
// look old: dropped, a lease life lost (make chaos PAIR=1 seed 94, the
// agent's log: the same three drops).
func TestPairBacklogFirst(t *testing.T) {
	const ip = "203.0.113.12"
	s := NewState(grace)
	s.Pair = Pair{Peer: "fo", Role: RolePrimary}
	tab, complete := table(t, fostate("normal", "normal"))
	s.Snapshot(tab, complete, t0)
	var got []string
	accept := func(ev event.Event) { // as Reconciler.Accept
		if why := s.SupersededWhy(ev); why != "" {
			got = append(got, fmt.Sprintf("dropped %s %+d: %s", ev.Action, ev.Timestamp-t0, why))
			return
		}
		for _, x := range s.TakeEndedBefore(ev) {
			got = append(got, fmt.Sprintf("ahead %s %+d", x.Action, x.Timestamp-t0))
			s.Hook(x)
		}
		s.Hook(ev)
		got = append(got, fmt.Sprintf("hook %s %+d", ev.Action, ev.Timestamp-t0))
	}
	due := func(at int64) {
		for _, ev := range s.Due(t0 + at) {
			got = append(got, fmt.Sprintf("due %s %+d %s", ev.Action, ev.Timestamp-t0, ev.Reason))
			s.Hook(ev)
		}
	}
	accept(renewal(ip, macA, t0+16, 10))
	appendPair(t, s, ackedBlock(ip, "active", macA, t0+16, t0+26), t0+16)
	accept(renewal(ip, macA, t0+18, 20))
	appendPair(t, s, clttBlock(ip, "active", macA, t0+16, t0+26, t0+18), t0+18)
	due(20)
	appendPair(t, s, block(ip, "expired", macA, t0+16, t0+26)+
		ackedBlock(ip, "active", macA, t0+28, t0+48)+ackedBlock(ip, "released", macA, t0+28, t0+29), t0+30)
	due(30)
	// The next agent: the file (partner-down), the backlog, then Due.
	appendPair(t, s, fostate("partner-down", "normal"), t0+32)
	accept(hook(event.Expiry, ip, macA, t0+26))
	accept(renewal(ip, macA, t0+28, 20))
	accept(hook(event.Release, ip, macA, t0+29))
	due(32)
	due(10000)
	want := []string{"hook commit +16", "hook commit +18", "hook expiry +26", "hook commit +28", "hook release +29"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestBehindPeerRecord: a hook's event older than the peer's news the
// file recorded first is queued for the peer's word — unless it is an end
// and the record is the same MAC's end, which is the end it tells, the
// peer's (TestLabFailoverStaleOnExpiry once sent it twice).
func TestBehindPeerRecord(t *testing.T) {
	const ip, a, b = "203.0.113.10", "00:16:3e:00:00:0a", "00:16:3e:00:00:0b"
	now := time.Now().Unix()
	tests := []struct {
		name      string
		told      Told
		ev        event.Event
		recovered bool
		want      bool
	}{
		{"expiry behind the peer's commit of the next lease", Told{Action: event.Commit, MAC: b, At: now, Recorded: true, PeerOwns: true}, hook(event.Expiry, ip, a, now-2), true, true},
		{"expiry behind the peer's renewal of the same MAC", Told{Action: event.Commit, MAC: a, At: now, Recorded: true, PeerOwns: true}, hook(event.Expiry, ip, a, now-2), true, true},
		{"expiry behind another MAC's end", Told{Action: event.Expiry, MAC: b, At: now, Recorded: true, PeerOwns: true}, hook(event.Expiry, ip, a, now-2), true, true},
		{"expiry behind the same MAC's end", Told{Action: event.Expiry, MAC: a, At: now, Recorded: true, PeerOwns: true}, hook(event.Expiry, ip, a, now-18), true, false},
		{"release behind the same MAC's end", Told{Action: event.Release, MAC: a, At: now, Recorded: true, PeerOwns: true}, hook(event.Release, ip, a, now-2), true, false},
		{"commit behind the same MAC's end", Told{Action: event.Expiry, MAC: a, At: now, Recorded: true, PeerOwns: true}, hook(event.Commit, ip, a, now-2), true, true},
		{"not the peer's", Told{Action: event.Commit, MAC: b, At: now, Recorded: true}, hook(event.Expiry, ip, a, now-2), true, false},
		{"while dhcpd recovers", Told{Action: event.Commit, MAC: b, At: now, Recorded: true, PeerOwns: true}, hook(event.Expiry, ip, a, now-2), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &State{Told: map[netip.Addr]Told{netip.MustParseAddr(ip): tc.told}, Pair: Pair{Peer: "fo", Role: RolePrimary, MyState: "normal", PartnerState: "normal"}}
			if !tc.recovered {
				s.Pair.MyState = "recover"
			}
			if got := s.behindPeerRecord(tc.ev); got != tc.want {
				t.Errorf("behindPeerRecord = %t, want %t", got, tc.want)
			}
		})
	}
}

// TestEndsInPairRecorded: in a failover pair rule 3's ends are recorded
// with what the deliverer weighs against what the peer's agent delivered
// (agent: judgePair); alone, nothing is recorded for the channel.
//   - The end of a lease a hook told and the file never showed
//     (unwritten), with the commit it ends: the partner may have renewed
//     the lease, news this side's file never showed (make chaos PAIR=1
//     seeds 102 and 103).
//   - The end of a lease the file shows active past its end
//     (ends-passed), with the start of that lease's life plus
//     commitSlack (the stamp of the hook of the ack that wrote it): the
//     peer's newer news shows the block is a stale copy of a lease the
//     partner renewed (make chaos PAIR=1 VLANS=2 seed 117).
func TestEndsInPairRecorded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string       // the file's block, beside the pair's state
		hook    *event.Event // a hook's commit told after the file
		at      int64        // when the end falls due (its end plus the grace)
		want    event.Event  // the end: Reason, Timestamp, MAC
		wantOwn event.Event  // what it is recorded with: Timestamp, TimestampNS, MAC
	}{
		{name: "unwritten", file: block(ip1, "active", macA, t0-100, t0+5000),
			hook: new(fine(renewal(ip2, macB, t0+10, 20), 250)), at: t0 + 30 + grace,
			want:    event.Event{Reason: ReasonUnwritten, Timestamp: t0 + 30, MAC: macB},
			wantOwn: event.Event{Timestamp: t0 + 10, TimestampNS: (t0+10)*1e9 + 250e6, MAC: macB}},
		{name: "ends-passed", file: block(ip1, "active", macA, t0-100, t0+50), at: t0 + 50 + grace,
			want:    event.Event{Reason: ReasonEndsPassed, Timestamp: t0 + 50, MAC: macA},
			wantOwn: event.Event{Timestamp: t0 - 100 + commitSlack, MAC: macA}},
	} {
		for _, pair := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pair=%t", tc.name, pair), func(t *testing.T) {
				s := NewState(grace)
				file := tc.file
				if pair {
					s.Pair = Pair{Peer: "fo", Role: RoleSecondary, MyState: StatePartnerDown, PartnerState: "normal"}
					file = fostate(StatePartnerDown, "normal") + file
				}
				tab, _ := table(t, file)
				s.Snapshot(tab, true, t0)
				if tc.hook != nil {
					s.Hook(*tc.hook)
				}
				if got := s.Due(tc.at - 1); len(got) != 0 {
					t.Fatalf("Due before the end and the grace = %v", got)
				}
				got := s.Due(tc.at)
				if len(got) != 1 || got[0].Reason != tc.want.Reason || got[0].Timestamp != tc.want.Timestamp || got[0].MAC != tc.want.MAC {
					t.Fatalf("Due = %+v; want the expiry at the lease's end, %+v", got, tc.want)
				}
				own, ok := s.replayOwn(got[0])
				switch {
				case pair && (!ok || own.Timestamp != tc.wantOwn.Timestamp || own.TimestampNS != tc.wantOwn.TimestampNS || own.MAC != tc.wantOwn.MAC):
					t.Errorf("replayOwn = %+v, %t; want %+v", own, ok, tc.wantOwn)
				case !pair && (ok || len(s.Replays) != 0):
					t.Errorf("alone: Replays = %v, want none", s.Replays)
				}
			})
		}
	}
}

// TestUnwrittenOnlyNeverShown: unwrittenEnd is for leases the file never
// showed. One it showed, then dropped, is rule 2's (here the partner's to
// tell: it spoke for the pair when this side's rewrite dropped it); and a
// hook's commit told again after another address's end (Restatement) is
// still the lease the file never showed.
func TestUnwrittenOnlyNeverShown(t *testing.T) {
	only1 := block(ip1, "active", macA, t0-100, t0+50000)
	t.Run("shown by the survivor's file, dropped on its return to the partner's partner-down: the partner's", func(t *testing.T) {
		runPair(t, Pair{Peer: "fo", Role: RolePrimary}, false, []step{
			{at: 0, snapshot: fostate(StatePartnerDown, "normal") + only1},
			{at: 10, hook: ev(renewal(ip2, macB, t0+10, 20))},
			{at: 10, appended: ackedBlock(ip2, "active", macB, t0+10, t0+30)},
			{at: 40, snapshot: fostate("recover", StatePartnerDown) + only1},
			{at: 30 + grace},
			{at: 10000},
		})
	})
	t.Run("... the hook read after the block (an agent restarted): the same", func(t *testing.T) {
		runPair(t, Pair{Peer: "fo", Role: RolePrimary}, false, []step{
			{at: 0, snapshot: fostate(StatePartnerDown, "normal") + only1},
			{at: 10, appended: ackedBlock(ip2, "active", macB, t0+10, t0+30)},
			{at: 11, hook: ev(renewal(ip2, macB, t0+11, 20))},
			{at: 40, snapshot: fostate("recover", StatePartnerDown) + only1},
			{at: 31 + grace},
			{at: 10000},
		})
	})
	t.Run("restated, never shown: ended at its end", func(t *testing.T) {
		s := NewState(grace)
		tab, _ := table(t, block(ip1, "active", macA, t0-100, t0+15))
		s.Snapshot(tab, true, t0)
		s.Hook(renewal(ip2, macA, t0+10, 60))
		end := s.Due(t0 + 15 + grace)
		if len(end) != 1 || end[0].Reason != ReasonEndsPassed {
			t.Fatalf("Due = %+v; want ip1's end", end)
		}
		s.Hook(end[0])
		x, ok := s.Restatement(end[0], t0+15+grace)
		if !ok || x.IP != netip.MustParseAddr(ip2) {
			t.Fatalf("Restatement = %+v, %v; want ip2's commit", x, ok)
		}
		s.Hook(x)
		got := s.Due(t0 + 70 + grace)
		if len(got) != 1 || got[0].Reason != ReasonUnwritten || got[0].IP != x.IP || got[0].Timestamp != t0+70 {
			t.Fatalf("Due = %+v; want ip2's unwritten end at t0+70", got)
		}
	})
}

// TestReplaysKeptPerAddress: a pair replay still queued keeps its record
// when another end of its address is queued after it (an unwritten end
// or rule 3's end, another MAC's): judged at delivery, a replay with no
// record is dropped as a repeat (agent: judgePair), so one record an
// address lost the first. The newest maxReplays are kept; the same end
// recorded again replaces its record.
func TestReplaysKeptPerAddress(t *testing.T) {
	s := NewState(grace)
	replay := hook(event.Expiry, ip1, macA, t0+30)
	s.queueReplay(replay, hook(event.Commit, ip1, macA, t0+10))
	unwritten := event.Event{IP: netip.MustParseAddr(ip1), Action: event.Expiry, MAC: macB, Timestamp: t0 + 60}
	s.queueReplay(unwritten, staleCopyBound(netip.MustParseAddr(ip1), Lease{MAC: macB, Starts: t0 + 40}))
	for _, c := range []struct {
		ev   event.Event
		want int64
	}{{replay, t0 + 10}, {unwritten, t0 + 40 + commitSlack}} {
		if own, ok := s.replayOwn(c.ev); !ok || own.Timestamp != c.want {
			t.Errorf("replayOwn(%s %s at %d) = %d, %t; want %d", c.ev.Action, c.ev.MAC, c.ev.Timestamp, own.Timestamp, ok, c.want)
		}
	}

	s.queueReplay(replay, hook(event.Commit, ip1, macA, t0+20))
	if n := len(s.Replays[netip.MustParseAddr(ip1)]); n != 2 {
		t.Errorf("the same end queued again: %d records, want 2", n)
	}
	if own, _ := s.replayOwn(replay); own.Timestamp != t0+20 {
		t.Errorf("the same end queued again: own %d, want the newer record's %d", own.Timestamp, t0+20)
	}

	for i := range maxReplays {
		s.queueReplay(hook(event.Expiry, ip1, macB, t0+100+int64(i)), hook(event.Commit, ip1, macB, t0+90))
	}
	if _, ok := s.replayOwn(replay); ok {
		t.Errorf("%d newer records queued: the oldest is still kept", maxReplays)
	}
	if n := len(s.Replays[netip.MustParseAddr(ip1)]); n != maxReplays {
		t.Errorf("%d records, want at most %d", n, maxReplays)
	}
}

// TestDecodeReplays: an address's records as this agent writes them (an
// array), and the one object an agent before maxReplays wrote.
func TestDecodeReplays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Replay
		err  bool
	}{
		{in: `[{"action":"expiry","mac":"` + macA + `","at":5,"own_at":3,"own_at_ns":3000000001},{"action":"release","mac":"` + macB + `","at":9,"own_at":7}]`,
			want: []Replay{{Action: "expiry", MAC: macA, At: 5, OwnAt: 3, OwnAtNS: 3000000001}, {Action: "release", MAC: macB, At: 9, OwnAt: 7}}},
		{in: `{"action":"expiry","mac":"` + macA + `","at":5,"own_at":3}`, want: []Replay{{Action: "expiry", MAC: macA, At: 5, OwnAt: 3}}},
		{in: `[{"action":`, err: true},
		{in: `"expiry"`, err: true},
	} {
		got, err := decodeReplays([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("decodeReplays(%s): error %v, want error %t", tc.in, err, tc.err)
			continue
		}
		if !tc.err && !slices.Equal(got, tc.want) {
			t.Errorf("decodeReplays(%s) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestCommInterruptedRelease: out of touch with its partner, dhcpd
// writes a release of a lease from its own free pool as "free" (the
// primary) or "backup" (the secondary) with the end moved to the release
// (server/mdb.c release_lease: not_cooperating rewinds it). Recorded as
// an expiry at that end, it was taken, in the second of the client's
// commit, for the end of a lease before that commit (sooner), and an
// agent that read the file before its spooled hooks sent it ahead of the
// commit the release followed (make chaos PAIR=1 TIMERS=maas seed 118).
// The commit and the release go as the hooks told them, nothing ahead.
func TestCommInterruptedRelease(t *testing.T) {
	lease := func(ip, state, mac string, starts, ends int64) string {
		return fmt.Sprintf("lease %s {\n  starts %s;\n  ends %s;\n  tstp %s;\n  cltt %s;\n  binding state %s;\n  next binding state free;\n  rewind binding state free;\n  hardware ethernet %s;\n}\n",
			ip, date(starts), date(ends), date(ends), date(starts), state, mac)
	}
	for _, tc := range []struct {
		role, freed string
	}{{RolePrimary, "free"}, {RoleSecondary, "backup"}} {
		t.Run(tc.role, func(t *testing.T) {
			s := NewState(grace)
			s.Pair = Pair{Peer: "fo", Role: tc.role, MyState: "normal", PartnerState: "normal"}
			tab, _ := table(t, block(ip2, "active", macB, t0-100, t0+5000))
			s.Snapshot(tab, true, t0)
			commit, release := hook(event.Commit, ip1, macA, t0+3), hook(event.Release, ip1, macA, t0+3)
			commit.TimestampNS, release.TimestampNS = (t0+3)*1e9+5e8, (t0+3)*1e9+9e8
			runSteps(t, s, []step{
				{at: 1, appended: fostate(StateCommInterrupted, StateCommInterrupted)},
				// The agent down: the hooks spooled, the file read first.
				{at: 4, appended: lease(ip1, "active", macA, t0+3, t0+23) + lease(ip1, tc.freed, macA, t0+3, t0+3)},
				{at: 5, hook: &commit},
				{at: 5, hook: &release},
				{at: 30},
			})
			if got := s.Told[netip.MustParseAddr(ip1)]; got.Action != event.Release || got.MAC != macA {
				t.Errorf("told %+v, want the release", got)
			}
		})
	}
}
