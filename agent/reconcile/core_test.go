package reconcile

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/parser"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).Unix()

const grace = 30

func date(sec int64) string {
	if sec == int64(parser.Never) {
		return "never"
	}
	return "epoch " + fmt.Sprint(sec)
}

// block writes a lease block the way dhcpd does.
func block(ip, state, mac string, starts, ends int64) string {
	return fmt.Sprintf("lease %s {\n  starts %s;\n  ends %s;\n  binding state %s;\n  hardware ethernet %s;\n}\n",
		ip, date(starts), date(ends), state, mac)
}

func blocks(t *testing.T, text string) []*parser.Lease {
	t.Helper()
	var out []*parser.Lease
	d := parser.NewDecoder()
	h := func(s parser.Statement, err error) {
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := s.(*parser.Lease); ok {
			out = append(out, l)
		}
	}
	d.Feed([]byte(text), h)
	if err := d.Close(h); err != nil {
		t.Fatal(err)
	}
	return out
}

func table(t *testing.T, text string) (*parser.Table, bool) {
	t.Helper()
	ls, err := parser.ParseLeases(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return ls.Table, len(ls.Errors) == 0 && ls.Incomplete == nil
}

func hook(action, ip, mac string, at int64) event.Event {
	return event.Event{Action: action, Family: event.IPv4, MAC: mac, IP: netip.MustParseAddr(ip), Timestamp: at, Source: event.SourceHook}
}

// step is one thing that happens to the reconciler at a time.
type step struct {
	at       int64  // seconds after t0
	appended string // blocks dhcpd appended
	snapshot string // a whole rewritten file
	torn     bool   // make the snapshot end inside a block
	hook     *event.Event
	// want: "action ip mac timestamp-offset reason" for each event Due
	// returns at this step, after applying the input.
	want []string
}

func run(t *testing.T, steps []step) {
	t.Helper()
	s := NewState(grace)
	for i, st := range steps {
		now := t0 + st.at
		if st.hook != nil {
			s.Hook(*st.hook)
		}
		if st.appended != "" {
			s.Appended(blocks(t, st.appended), now)
		}
		if st.snapshot != "" || st.torn {
			text := st.snapshot
			if st.torn {
				text += "lease 203.0.113.99 {\n  starts 1 2026/11/23 10:00:00;\n"
			}
			tab, complete := table(t, text)
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
}

const (
	macA = "00:16:3e:00:00:0a"
	macB = "00:16:3e:00:00:0b"
	ip1  = "203.0.113.10"
	ip2  = "203.0.113.11"
)

func ev(e event.Event) *event.Event { return &e }

func TestRules(t *testing.T) {
	base := block(ip1, "active", macA, t0-100, t0+500) + block(ip2, "active", macB, t0-100, t0+5000)
	tests := []struct {
		name  string
		steps []step
	}{
		{"hook before the file: nothing synthesised", []step{
			{at: 0, snapshot: "authoring-byte-order little-endian;\n"},
			{at: 1, hook: ev(hook(event.Commit, ip1, macA, t0+1))},
			{at: 1, appended: block(ip1, "active", macA, t0+1, t0+601)},
			{at: 100},
		}},
		{"hook after the file, within the grace: nothing", []step{
			{at: 0, snapshot: "\n"},
			{at: 1, appended: block(ip1, "active", macA, t0+1, t0+601)},
			{at: 20, hook: ev(hook(event.Commit, ip1, macA, t0+1))},
			{at: 40},
		}},
		{"rule 1: no hook, commit synthesised after the grace with its lease time", []step{
			{at: 0, snapshot: "\n"},
			{at: 1, appended: block(ip1, "active", macA, t0+1, t0+601)},
			{at: 30},
			{at: 31, want: []string{"commit 203.0.113.10 00:16:3e:00:00:0a +1 missed-commit"}},
			{at: 100},
		}},
		{"rule 1: a renewal whose hook failed is a commit", []step{
			{at: 0, snapshot: "\n"},
			{at: 1, hook: ev(hook(event.Commit, ip1, macA, t0+1))},
			{at: 1, appended: block(ip1, "active", macA, t0+1, t0+601)},
			{at: 300, appended: block(ip1, "active", macA, t0+300, t0+900)},
			{at: 330, want: []string{"commit 203.0.113.10 00:16:3e:00:00:0a +300 missed-commit"}},
		}},
		{"rule 1: release and expiry without hooks, in order", []step{
			{at: 0, snapshot: "\n"},
			{at: 1, appended: block(ip1, "active", macA, t0+1, t0+601)},
			{at: 5, appended: block(ip1, "released", macA, t0+1, t0+5)},
			{at: 6, appended: block(ip2, "active", macB, t0+6, t0+16)},
			{at: 16, appended: block(ip2, "free", macB, t0+6, t0+16)},
			{at: 31, want: []string{"commit 203.0.113.10 00:16:3e:00:00:0a +1 missed-commit"}},
			{at: 35, want: []string{"release 203.0.113.10 00:16:3e:00:00:0a +5 missed-release"}},
			{at: 46, want: []string{
				"commit 203.0.113.11 00:16:3e:00:00:0b +6 missed-commit",
				"expiry 203.0.113.11 00:16:3e:00:00:0b +16 missed-expiry",
			}},
		}},
		{"hook expiry after the file: nothing", []step{
			{at: 0, snapshot: base},
			{at: 500, appended: block(ip1, "free", macA, t0-100, t0+500)},
			{at: 501, hook: ev(hook(event.Expiry, ip1, macA, t0+501))},
			{at: 600},
		}},
		{"baseline: a first snapshot invents nothing", []step{
			{at: 0, snapshot: base + block("203.0.113.12", "free", macA, t0-900, t0-100)},
			{at: 100},
		}},
		{"restart that keeps the leases: nothing, ever", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: base},
			{at: 20, snapshot: base},
			{at: 499},
		}},
		{"rule 2: vanished at its own end, not before", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 100},
			{at: 499},
			{at: 500, want: []string{"expiry 203.0.113.10 00:16:3e:00:00:0a +500 vanished"}},
			{at: 600},
		}},
		{"rule 2: vanished after its end: at once", []step{
			{at: 0, snapshot: block(ip1, "active", macA, t0-100, t0+5)},
			{at: 20, snapshot: "\n", want: []string{"expiry 203.0.113.10 00:16:3e:00:00:0a +5 vanished"}},
		}},
		{"rule 2: vanished, then back before its end: nothing", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 20, hook: ev(hook(event.Commit, ip1, macA, t0+20))},
			{at: 20, appended: block(ip1, "active", macA, t0+20, t0+620)},
			{at: 500},
			{at: 640},
		}},
		{"rule 2 and 4: vanished, then committed to another MAC: no expiry for the old one", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: block(ip2, "active", macB, t0-100, t0+5000)},
			{at: 20, hook: ev(hook(event.Commit, ip1, macB, t0+20))},
			{at: 500},
		}},
		{"rule 3: dhcpd never expires an ended lease", []step{
			{at: 0, snapshot: base},
			{at: 500},
			{at: 529},
			{at: 530, want: []string{"expiry 203.0.113.10 00:16:3e:00:00:0a +500 ends-passed"}},
			{at: 531},
			{at: 540, appended: block(ip1, "free", macA, t0-100, t0+500)},
			{at: 600},
		}},
		{"rule 4: a torn rewrite decides nothing", []step{
			{at: 0, snapshot: base},
			{at: 10, snapshot: block(ip2, "active", macB, t0-100, t0+5000), torn: true},
			{at: 20, snapshot: base},
			{at: 499},
		}},
		{"rule 4: an IP re-leased to B never gets a late expiry for A", []step{
			{at: 0, snapshot: base},
			{at: 500, appended: block(ip1, "free", macA, t0-100, t0+500)},
			{at: 501, hook: ev(hook(event.Commit, ip1, macB, t0+501))},
			{at: 501, appended: block(ip1, "active", macB, t0+501, t0+1101)},
			{at: 600},
		}},
		{"ends never is never expired", []step{
			{at: 0, snapshot: block(ip1, "active", macA, t0-100, int64(parser.Never))},
			{at: 1 << 30},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.steps) })
	}
}

func TestHooklessGraceZero(t *testing.T) {
	s := NewState(0)
	s.Snapshot(parser.NewTable(), true, t0)
	s.Appended(blocks(t, block(ip1, "active", macA, t0, t0+600)), t0)
	got := s.Due(t0)
	if len(got) != 1 || got[0].Action != event.Commit || got[0].LeaseTime != 600 {
		t.Fatalf("Due = %+v, want the commit at once with lease_time 600", got)
	}
}

func TestNextDue(t *testing.T) {
	s := NewState(grace)
	if _, ok := s.NextDue(); ok {
		t.Fatal("empty state has something due")
	}
	s.Snapshot(parser.NewTable(), true, t0)
	s.Appended(blocks(t, block(ip1, "active", macA, t0, t0+600)), t0)
	if at, ok := s.NextDue(); !ok || at != t0+grace {
		t.Fatalf("NextDue = %d, %t; want t0+grace", at-t0, ok)
	}
}
