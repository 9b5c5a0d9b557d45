package parser

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTableIA: IPv6 leases follow dhcpd's IAs (parse_ia_*_declaration,
// cleanup_lease6), and refused blocks change only what dhcpd changes.
// testdata/differential checks the same against real dhcpd.
func TestTableIA(t *testing.T) {
	ia := func(n, body string) string {
		return "ia-na \"\\00" + n + "\\000\\000\\000duid\" {\n" + body + "}\n"
	}
	addr := func(a, state string) string {
		return "  iaaddr 2001:db8::" + a + " {\n    binding state " + state + ";\n    ends never;\n  }\n"
	}
	noEnds := func(a string) string { return "  iaaddr 2001:db8::" + a + " {\n    binding state active;\n  }\n" }
	for _, tc := range []struct {
		name string
		file string
		want []string // address/state/IAID, in address order
	}{
		{"a new block replaces the IA's addresses",
			ia("1", addr("1", "active")+addr("2", "active")) + ia("1", addr("1", "active")),
			[]string{"::1 active 1"}},
		{"an address moves to the IA that binds it",
			ia("1", addr("1", "active")) + ia("2", addr("1", "active")),
			[]string{"::1 active 2"}},
		{"an IA reporting an address unbound does not take it from another",
			ia("1", addr("1", "active")) + ia("2", addr("1", "released")),
			[]string{"::1 active 1"}},
		{"unbound addresses are kept until the IA's next block",
			ia("1", addr("1", "active")) + ia("1", addr("1", "expired")),
			[]string{"::1 expired 1"}},
		{"a refused IA keeps the IA's earlier block",
			ia("1", addr("1", "active")) + ia("1", addr("1", "active")+noEnds("2")),
			[]string{"::1 active 1"}},
		{"a refused IA had already taken out an address it reported unbound",
			ia("1", addr("1", "active")) + ia("1", addr("1", "released")+noEnds("2")),
			[]string{}},
		{"a refused IA takes the addresses it read from other IAs",
			ia("1", addr("1", "active")+addr("3", "active")) + ia("2", addr("1", "active")+noEnds("2")) + ia("4", addr("4", "active")),
			[]string{"::3 active 1"}}, // IA 4 swallowed by dhcpd's recovery
		{"an address taken away comes back",
			ia("1", addr("1", "active")+addr("2", "active")) + ia("1", addr("1", "active")) + ia("3", addr("2", "active")),
			[]string{"::1 active 1", "::2 active 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := ParseLeases(strings.NewReader("authoring-byte-order little-endian;\n" + tc.file))
			if err != nil || len(ls.Errors) > 0 {
				t.Fatal(err, ls.Errors)
			}
			got := []string{}
			for _, l := range ls.Leases() {
				got = append(got, strings.TrimPrefix(l.IP.String(), "2001:db8")+" "+l.State.String()+" "+string(rune('0'+l.IA.IAID)))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			n := 0
			ls.Each(func(*Lease) { n++ })
			if n != ls.Len() || n != len(got) {
				t.Errorf("Each visits %d, Len %d, Leases %d", n, ls.Len(), len(got))
			}
		})
	}
}

// TestTableRefused: a refused IPv4 block leaves the earlier block, and
// the table lists the refusals in file order.
func TestTableRefused(t *testing.T) {
	ls, err := ParseLeases(strings.NewReader(`lease 203.0.113.1 {
  binding state active;
  hardware ethernet 02:00:00:00:00:01;
}
lease 203.0.113.1 {
  binding state free;
  hardware ethernet 02:00:00:00:00:02;
  hostname "x";
}
lease 203.0.113.2 {
  binding state active;
}
`))
	if err != nil || len(ls.Errors) > 0 {
		t.Fatal(err, ls.Errors)
	}
	l, ok := ls.Lookup(key("203.0.113.1"))
	if !ok || l.Line != 1 || l.State != StateActive {
		t.Errorf("203.0.113.1 = %+v; want the block at line 1", l)
	}
	if _, ok := ls.Lookup(key("203.0.113.2")); ok {
		t.Error("203.0.113.2: dhcpd's recovery swallows it; the table has it")
	}
	var got []string
	for _, r := range ls.Refused() {
		got = append(got, r.What)
	}
	if diff := cmp.Diff([]string{"lease 203.0.113.1", "lease 203.0.113.2"}, got); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if r := ls.Refused()[0]; r.IP != key("203.0.113.1").Addr() || r.At != 8 || r.Swallowed || !ls.Refused()[1].Swallowed {
		t.Errorf("refusals %+v %+v", r, ls.Refused()[1])
	}
}

// TestTableFailover: Failover keeps each peer's last state record,
// FailoverLog every record in file order (a server's states since the
// file was written: a reader that comes late still sees that the partner
// was in partner-down before both went back to normal).
func TestTableFailover(t *testing.T) {
	rec := func(peer, my, partner string) string {
		return "failover peer \"" + peer + "\" state {\n  my state " + my + " at 3 2026/12/02 13:14:27;\n  partner state " + partner + " at 3 2026/12/02 13:14:48;\n}\n"
	}
	ls, err := ParseLeases(strings.NewReader(rec("b", "normal", "normal") + rec("a", "normal", "partner-down") +
		rec("b", "recover", "partner-down") + rec("b", "normal", "normal")))
	if err != nil || len(ls.Errors) > 0 {
		t.Fatal(err, ls.Errors)
	}
	str := func(fs []*FailoverState) []string {
		out := []string{}
		for _, f := range fs {
			out = append(out, f.Peer+" "+f.MyState+"/"+f.PartnerState)
		}
		return out
	}
	if diff := cmp.Diff([]string{"a normal/partner-down", "b normal/normal"}, str(ls.Failover())); diff != "" {
		t.Errorf("Failover (-want +got):\n%s", diff)
	}
	want := []string{"b normal/normal", "a normal/partner-down", "b recover/partner-down", "b normal/normal"}
	if diff := cmp.Diff(want, str(ls.FailoverLog())); diff != "" {
		t.Errorf("FailoverLog (-want +got):\n%s", diff)
	}
}

// TestTableEachInFileOrder: leases come in the order of the block in
// effect for each (the last for its address), each with the number of
// failover state records written before that block, so that a reader
// can replay a whole file as dhcpd appended it.
func TestTableEachInFileOrder(t *testing.T) {
	rec := func(my string) string {
		return "failover peer \"fo\" state {\n  my state " + my + " at 3 2026/12/02 13:14:27;\n  partner state normal at 3 2026/12/02 13:14:48;\n}\n"
	}
	lease := func(ip, state string) string {
		return "lease " + ip + " {\n  binding state " + state + ";\n}\n"
	}
	ls, err := ParseLeases(strings.NewReader(rec("normal") + lease("203.0.113.1", "active") + lease("203.0.113.2", "active") +
		rec("communications-interrupted") + rec("partner-down") + lease("203.0.113.1", "expired") + rec("normal") +
		lease("203.0.113.3", "active")))
	if err != nil || len(ls.Errors) > 0 {
		t.Fatal(err, ls.Errors)
	}
	var got []string
	ls.EachInFileOrder(func(l *Lease, records int) {
		got = append(got, fmt.Sprintf("%s %s %d", l.IP, l.State, records))
	})
	want := []string{"203.0.113.2 active 1", "203.0.113.1 expired 3", "203.0.113.3 active 4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
