package rack

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/parser"
)

// now is the clock of the checks: 2026-11-29 12:00:00 UTC.
var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// table parses a leases file text.
func table(t *testing.T, text string) *parser.Table {
	t.Helper()
	ls, err := parser.ParseLeases(strings.NewReader(text))
	if err != nil || len(ls.Errors) > 0 || ls.Incomplete != nil {
		t.Fatalf("leases: %v %v %v", err, ls.Errors, ls.Incomplete)
	}
	return ls.Table
}

const leasesText = `
lease 203.0.113.100 {
  starts 0 2026/11/29 11:55:00;
  ends 0 2026/11/29 12:05:00;
  binding state active;
  next binding state free;
  hardware ethernet 02:00:00:00:00:01;
  client-hostname "c1";
}
lease 203.0.113.101 {
  starts 0 2026/11/29 11:00:00;
  ends 0 2026/11/29 11:10:00;
  binding state active;
  hardware ethernet 02:00:00:00:00:02;
}
lease 203.0.113.102 {
  starts 0 2026/11/29 11:55:00;
  ends 0 2026/11/29 11:55:00;
  binding state free;
  hardware ethernet 02:00:00:00:00:03;
}
lease 203.0.113.103 {
  starts 0 2026/11/29 11:55:00;
  ends never;
  binding state active;
  hardware ethernet 02:00:00:00:00:04;
  uid "\001\002\000\000\000\000\004";
}
lease 203.0.113.104 {
  starts 0 2026/11/29 11:55:00;
  ends 0 2026/11/29 12:05:00;
  binding state active;
  hardware token-ring 02:00:00:00:00:05;
}
lease 203.0.113.105 {
  starts 0 2026/11/29 11:55:00;
  ends 0 2026/11/29 12:05:00;
  binding state active;
  hardware ethernet 02:00:00:00:00:06;
}
lease 203.0.113.105 {
  starts 0 2026/11/29 11:58:00;
  ends 0 2026/11/29 11:58:00;
  binding state free;
  hardware ethernet 02:00:00:00:00:06;
}
lease 203.0.113.106 {
  ends 0 2026/11/29 12:30:00;
  hardware ethernet 02:00:00:00:00:07;
}
`

func TestCheckLease(t *testing.T) {
	tab := table(t, leasesText)
	mac := func(s string) net.HardwareAddr {
		hw, err := net.ParseMAC(s)
		if err != nil {
			t.Fatal(err)
		}
		return hw
	}
	for _, tc := range []struct {
		name   string
		ip     string
		mac    string
		want   error  // nil: accepted
		detail string // in the error
	}{
		{name: "active, same MAC", ip: "203.0.113.100", mac: "02:00:00:00:00:01"},
		{name: "ends never, with uid", ip: "203.0.113.103", mac: "02:00:00:00:00:04"},
		{name: "no binding state, ends in the future", ip: "203.0.113.106", mac: "02:00:00:00:00:07"},
		{name: "other MAC", ip: "203.0.113.100", mac: "02:00:00:00:00:99", want: ErrMACMismatch, detail: "held by 02:00:00:00:00:01"},
		{name: "no lease", ip: "203.0.113.200", mac: "02:00:00:00:00:01", want: ErrNoLease},
		{name: "free", ip: "203.0.113.102", mac: "02:00:00:00:00:03", want: ErrNotActive, detail: "binding state free"},
		{name: "active but ended", ip: "203.0.113.101", mac: "02:00:00:00:00:02", want: ErrNotActive, detail: "ended at 2026-11-29T11:10:00Z"},
		{name: "not ethernet", ip: "203.0.113.104", mac: "02:00:00:00:00:05", want: ErrMACMismatch, detail: "token-ring 02:00:00:00:00:05"},
		{name: "last block wins", ip: "203.0.113.105", mac: "02:00:00:00:00:06", want: ErrNotActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip := netip.MustParseAddr(tc.ip)
			l, err := CheckLease(tab, ip, mac(tc.mac), now)
			if tc.want == nil {
				if err != nil || l == nil || l.IP != ip {
					t.Fatalf("CheckLease = %v, %v; want the lease of %s", l, err, ip)
				}
				return
			}
			if !errors.Is(err, tc.want) || l != nil {
				t.Fatalf("CheckLease = %v, %v; want %v", l, err, tc.want)
			}
			var re *RefusedError
			if !errors.As(err, &re) || re.IP != ip {
				t.Fatalf("error %T %v: want a *RefusedError for %s", err, err, ip)
			}
			if !strings.Contains(err.Error(), tc.detail) || !strings.HasSuffix(err.Error(), "nothing sent") {
				t.Errorf("error %q: want it to mention %q and end in \"nothing sent\"", err, tc.detail)
			}
		})
	}
}

func TestReleased(t *testing.T) {
	before, _ := table(t, leasesText).Lookup(netip.MustParsePrefix("203.0.113.100/32"))
	at := parser.TimeOf(now)
	for _, tc := range []struct {
		name  string
		after string // the file's current block for the address; "" for none
		want  bool
	}{
		{name: "unchanged", after: "binding state active; hardware ethernet 02:00:00:00:00:01;", want: false},
		{name: "free", after: "binding state free; hardware ethernet 02:00:00:00:00:01;", want: true},
		{name: "released (failover)", after: "binding state released; hardware ethernet 02:00:00:00:00:01;", want: true},
		{name: "active for another client", after: "binding state active; hardware ethernet 02:00:00:00:00:09;", want: true},
		{name: "gone (rewrite dropped it)", after: "", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l *parser.Lease
			if tc.after != "" {
				l, _ = table(t, "lease 203.0.113.100 {\n  ends 0 2026/11/29 12:10:00;\n  "+tc.after+"\n}\n").
					Lookup(netip.MustParsePrefix("203.0.113.100/32"))
			}
			if got := released(before, l, at); got != tc.want {
				t.Errorf("released = %v, want %v", got, tc.want)
			}
		})
	}
}
