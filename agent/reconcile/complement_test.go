package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser"
)

// runComplement is run with the state in complement mode: MAAS's helper
// reports every hooked change to the region, the agent nothing of them.
func runComplement(t *testing.T, steps []step) *State {
	t.Helper()
	s := NewState(grace)
	s.Complement = true
	for i, st := range steps {
		now := t0 + st.at
		if st.hook != nil {
			s.Hook(*st.hook)
		}
		if st.appended != "" {
			s.Appended(blocks(t, st.appended), now)
		}
		if st.snapshot != "" {
			tab, complete := table(t, st.snapshot)
			s.Snapshot(tab, complete, now)
		}
		var got []string
		for _, ev := range s.Due(now) {
			got = append(got, fmt.Sprintf("%s %s %s %+d %s", ev.Action, ev.IP, ev.MAC, ev.Timestamp-t0, ev.Reason))
			s.Hook(ev)
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("step %d (t+%ds) (-want +got):\n%s", i, st.at, diff)
		}
	}
	return s
}

// TestComplement: in complement mode the only events are expiries of
// leases a rewrite dropped, at their own end; commits, releases and
// expiries dhcpd wrote (which its hooks reported through MAAS) and
// leases that ended without dhcpd expiring them yield nothing.
func TestComplement(t *testing.T) {
	base := block(ip1, "active", macA, t0-100, t0+500) + block(ip2, "active", macB, t0-100, t0+5000)
	tests := []struct {
		name  string
		steps []step
	}{
		{"hooked commit, release and expiry: nothing", []step{
			{at: 0, snapshot: base},
			{at: 1, appended: block("203.0.113.12", "active", macA, t0+1, t0+601)},
			{at: 2, appended: block("203.0.113.12", "free", macA, t0+1, t0+2)}, // release, written as free
			{at: 3, appended: block(ip2, "active", macB, t0+3, t0+5003)},       // renewal
			{at: 500, appended: block(ip1, "free", macA, t0-100, t0+500)},      // expiry
			{at: 500 + 2*grace},
			{at: 10000}, // ip2 ended long ago and dhcpd never said so: not ours either
		}},
		{"range shrink: one expiry, at the lease's end", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: block(ip2, "active", macB, t0-100, t0+5000)}, // ip1 dropped
			{at: 499},
			{at: 500, want: []string{"expiry 203.0.113.10 00:16:3e:00:00:0a +500 vanished"}},
			{at: 600},
		}},
		{"dropped lease already ended: expiry at once", []step{
			{at: 0, snapshot: base},
			{at: 700, snapshot: block(ip2, "active", macB, t0-100, t0+5000),
				want: []string{"expiry 203.0.113.10 00:16:3e:00:00:0a +500 vanished"}},
		}},
		{"dropped, then back in range and renewed: nothing", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 20, snapshot: base},
			{at: 30, appended: block(ip1, "active", macA, t0+30, t0+630)},
			{at: 700},
		}},
		{"dropped, then the address went to another MAC: nothing", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 20, snapshot: base},
			{at: 30, appended: block(ip1, "active", macB, t0+30, t0+630)},
			{at: 700},
		}},
		{"restart with unchanged ranges: nothing", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: base},
			{at: 20, snapshot: base},
			{at: 10000},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := runComplement(t, tc.steps)
			if n := s.PendingCount(); n != 0 {
				t.Errorf("%d events still pending: %+v", n, s.Pending)
			}
		})
	}
}

// TestComplementNextDue: with an active lease whose end has passed, a
// complement state has nothing to do (rule 3 is off), so the task's
// timer does not spin on it.
func TestComplementNextDue(t *testing.T) {
	s := NewState(grace)
	s.Complement = true
	tab, _ := table(t, block(ip1, "active", macA, t0-100, t0+10))
	s.Snapshot(tab, true, t0)
	if at, ok := s.NextDue(); ok {
		t.Fatalf("NextDue = %d, want nothing", at-t0)
	}
	if evs := s.Due(t0 + 1000); len(evs) != 0 {
		t.Fatalf("Due = %+v", evs)
	}
	// Switched to replacement (dhcpd restarted with leasekeeper-hook):
	// rule 3 applies again.
	s.Complement = false
	if at, ok := s.NextDue(); !ok || at != t0+10+grace {
		t.Fatalf("NextDue = %d, %t; want the end plus the grace", at-t0, ok)
	}
}

// ia writes a DHCPv6 IA_NA block as dhcpd does, its identifier in hex
// (lease-id-format hex): IAID 1 then the DUID.
func ia(duid, addr, state string, cltt, ends int64) string {
	return fmt.Sprintf("ia-na 00:00:00:01:%s {\n  cltt %s;\n  iaaddr %s {\n    binding state %s;\n    preferred-life 300;\n    max-life 600;\n    ends %s;\n  }\n}\n",
		duid, date(cltt), addr, state, date(ends))
}

// blocks6 decodes IA blocks into their addresses, as the follower does.
func blocks6(t *testing.T, text string) []*parser.Lease {
	t.Helper()
	var out []*parser.Lease
	d := parser.NewDecoder()
	h := func(s parser.Statement, err error) {
		if err != nil {
			t.Fatal(err)
		}
		if x, ok := s.(*parser.IA); ok {
			out = append(out, x.Leases...)
		}
	}
	d.Feed([]byte(text), h)
	if err := d.Close(h); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDHCPv6MAC: an IPv6 block's MAC is the one in its DUID; a DUID with
// none gives an event without a MAC, which the caller keeps back.
func TestDHCPv6MAC(t *testing.T) {
	const (
		llt = "00:01:00:01:2f:00:00:01:00:16:3e:00:00:0a" // DUID-LLT, Ethernet, macA
		en  = "00:02:00:00:ab:11:01:02:03:04:05:06"       // DUID-EN: no MAC
	)
	s := NewState(0)
	tab, _ := table(t, "")
	s.Snapshot(tab, true, t0)
	s.Appended(blocks6(t, ia(llt, "2001:db8::10", "active", t0, t0+600)+ia(en, "2001:db8::11", "active", t0, t0+600)), t0)
	// dhcpd -6 keeps the end on release and moves cltt.
	s.Appended(blocks6(t, ia(llt, "2001:db8::10", "released", t0+5, t0+600)), t0+5)
	var got []string
	for _, ev := range s.Due(t0 + 5) {
		got = append(got, fmt.Sprintf("%s %s %s %s %+d %v", ev.Action, ev.IP, ev.MAC, ev.DUID, ev.Timestamp-t0, ev.Deliverable() == nil))
	}
	want := []string{
		"commit 2001:db8::10 00:16:3e:00:00:0a " + llt + " +0 true",
		"release 2001:db8::10 00:16:3e:00:00:0a " + llt + " +5 true",
		"commit 2001:db8::11  " + en + " +0 false",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The DUID survives persistence (older records have none).
	l := s.File[netip.MustParseAddr("2001:db8::11")]
	back, err := decodeLease(encodeLease(l))
	if err != nil || back != l {
		t.Errorf("decodeLease(encodeLease(%+v)) = %+v, %v", l, back, err)
	}
	v4 := Lease{State: parser.StateActive, Family: event.IPv4, MAC: macA, Starts: 1, Ends: 2}
	if enc := encodeLease(v4); enc[len(enc)-1] != 0 { // the hostname's zero length ends it, as before
		t.Errorf("IPv4 record changed form: %x", enc)
	}
}

// maasHooked writes a dhcpd.conf running a stand-in for MAAS's helper
// (a script sending to MAAS's socket): complement mode.
func (h *harness) maasHooked() {
	h.t.Helper()
	helper := filepath.Join(h.dir, "maas-dhcp-helper")
	if err := os.WriteFile(helper, []byte(maasHelperScript), 0o755); err != nil {
		h.t.Fatal(err)
	}
	conf := maasBlock(helper, filepath.Join(h.dir, "dhcpd.sock")) + "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.50; }\n"
	if err := os.WriteFile(h.conf, []byte(conf), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// TestTaskComplement: MAAS's own helper in dhcpd.conf. Whatever dhcpd
// appends is left to it, even past the grace; a lease a restart drops is
// expired at its end, once.
func TestTaskComplement(t *testing.T) {
	h := newHarness(t)
	h.maasHooked()
	ends := time.Now().Add(2 * time.Second).Unix()
	keep := nowBlock(ip2, "active", macB, -time.Minute, time.Hour)
	h.d.rewrite(block(ip1, "active", macA, ends-60, ends)+keep, true)
	h.start(time.Second)
	if !h.r.st.Complement || h.r.Mode().Mode != ModeComplement || !strings.Contains(h.logText(), `"mode":"complement"`) {
		t.Fatalf("not in complement mode: %+v\n%s", h.r.Mode(), h.logText())
	}
	now := time.Now().Unix()
	h.d.append(block("203.0.113.12", "active", macA, now, now+3600))
	h.d.append(block("203.0.113.12", "free", macA, now, now)) // a release
	h.d.append(block(ip2, "active", macB, now, now+3600))     // a renewal
	h.d.rewrite(block(ip2, "active", macB, now, now+3600), true)
	got, _ := h.waitQueued(1, 5*time.Second)
	if want := "expiry 203.0.113.10 00:16:3e:00:00:0a vanished"; len(got) != 1 || got[0] != want {
		t.Fatalf("queued %q, want only %q", got, want)
	}
	if at := time.Now().Unix(); at < ends {
		t.Fatalf("expiry queued at %d, before the lease's end %d", at, ends)
	}
	time.Sleep(2500 * time.Millisecond) // past the grace: nothing more
	if got := h.queued(); len(got) != 1 {
		t.Fatalf("queued later: %q", got)
	}
	if n := testutil.ToFloat64(h.r.met.mode.WithLabelValues("complement")); n != 1 {
		t.Errorf("leasekeeper_reconcile_mode{mode=complement} = %v", n)
	}
}

// DHCPv6 clients' DUIDs as dhcpd's hook passes them: a DUID-LLT that
// carries the Ethernet address 00:16:3e:00:00:0a, and a DUID-EN that
// carries none (kept back: event.NoMACDUID).
const (
	duidLLT = "0:1:0:1:2f:0:0:1:0:16:3e:0:0:a"
	duidEN  = "0:2:0:0:ab:11:1:2:3:4:5:6"
)

// TestTaskKeptBackGivenAway: a kept-back commit (a DHCPv6 client whose
// DUID carries no MAC) of an address another client's lease held still
// has that lease's end queued ahead of it: dhcpd gave the address away,
// so that lease is over (givenAwayTold), and once the kept-back commit
// is recorded as told nothing else would send it.
func TestTaskKeptBackGivenAway(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(time.Second)
	now := time.Now().Unix()
	ip := netip.MustParseAddr("2001:db8::10")
	llt := event.Event{Action: event.Commit, Family: event.IPv6, MAC: duidLLT, IP: ip, Timestamp: now - 10, LeaseTime: 3600}
	en := event.Event{Action: event.Commit, Family: event.IPv6, MAC: duidEN, IP: ip, Timestamp: now}
	for _, e := range []*event.Event{&llt, &en} {
		if err := e.Normalize(); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []event.Event{llt, en} {
		if err := h.r.Accept(context.Background(), []event.Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"commit 2001:db8::10 00:16:3e:00:00:0a ", "expiry 2001:db8::10 00:16:3e:00:00:0a given-away"}
	if got := h.queued(); !slices.Equal(got, want) {
		t.Fatalf("queued %q, want %q", got, want)
	}
}

// TestTaskKeptBack: a hook event with no MAC the region can take (a
// DHCPv6 DUID-EN, an empty MAC) is not queued, is counted, and the log
// explains it once per kind.
func TestTaskKeptBack(t *testing.T) {
	h := newHarness(t)
	h.hooked()
	h.d.rewrite("", true)
	h.start(time.Second)
	now := time.Now().Unix()
	en := event.Event{Action: event.Commit, Family: event.IPv6, MAC: duidEN, IP: netip.MustParseAddr("2001:db8::11"), Timestamp: now}
	llt := event.Event{Action: event.Commit, Family: event.IPv6, MAC: duidLLT, IP: netip.MustParseAddr("2001:db8::10"), Timestamp: now}
	none := hook(event.Expiry, ip1, "", now)
	var evs []event.Event
	for _, e := range []event.Event{en, en, llt, none} {
		if err := e.Normalize(); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if err := h.r.Accept(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	if got := h.queued(); len(got) != 1 || got[0] != "commit 2001:db8::10 00:16:3e:00:00:0a " {
		t.Fatalf("queued %q, want the DUID-LLT's commit only", got)
	}
	if n := testutil.ToFloat64(h.r.met.keptBack.WithLabelValues(event.NoMACDUID)); n != 2 {
		t.Errorf("kept_back{duid-no-mac} = %v, want 2", n)
	}
	if n := h.r.KeptBack(); n != 3 {
		t.Errorf("KeptBack() = %d, want 3", n)
	}
	if n := strings.Count(h.logText(), `"level":"warn"`); n != 2 {
		t.Errorf("%d warnings, want one per kind (2):\n%s", n, h.logText())
	}
	if !strings.Contains(h.logText(), "DUID-EN") {
		t.Errorf("the log does not say which DUID:\n%s", h.logText())
	}
}
