package rack

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRequest: the CLI and the HTTP endpoint read a release request
// through Request, so they accept the same MACs (dashes included) and
// name the same field when one is wrong.
func TestRequest(t *testing.T) {
	ip := netip.MustParseAddr("203.0.113.100")
	mac := net.HardwareAddr{2, 0, 0, 0x0a, 0x0b, 0x0c}
	for _, tc := range []struct {
		name string
		r    Request
		want Options
		bad  string // the field a *RequestError names; "" = accepted
	}{
		{name: "colons", r: Request{IP: "203.0.113.100", MAC: "02:00:00:0a:0b:0c"}, want: Options{IP: ip, MAC: mac}},
		{name: "unpadded upper case", r: Request{IP: "203.0.113.100", MAC: "2:0:0:A:B:C"}, want: Options{IP: ip, MAC: mac}},
		{name: "dashes", r: Request{IP: "203.0.113.100", MAC: "02-00-00-0A-0B-0C"}, want: Options{IP: ip, MAC: mac}},
		{name: "server and interface", r: Request{IP: "203.0.113.100", MAC: "02:00:00:0a:0b:0c", Server: "203.0.113.1", Interface: "eth1"},
			want: Options{IP: ip, MAC: mac, Server: netip.MustParseAddr("203.0.113.1"), Interface: "eth1"}},
		{name: "IPv6", r: Request{IP: "2001:db8::1", MAC: "02:00:00:0a:0b:0c"}, bad: "ip"},
		{name: "IP first", r: Request{IP: "x", MAC: "x"}, bad: "ip"},
		{name: "short MAC", r: Request{IP: "203.0.113.100", MAC: "02:00:00:0a:0b"}, bad: "mac"},
		{name: "InfiniBand MAC", r: Request{IP: "203.0.113.100", MAC: "00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01"}, bad: "mac"},
		{name: "no MAC", r: Request{IP: "203.0.113.100"}, bad: "mac"},
		{name: "server a name", r: Request{IP: "203.0.113.100", MAC: "02:00:00:0a:0b:0c", Server: "rack"}, bad: "server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.r.Options()
			var re *RequestError
			switch {
			case tc.bad == "" && err != nil:
				t.Fatal(err)
			case tc.bad != "" && (!errors.As(err, &re) || re.Field != tc.bad):
				t.Fatalf("error %v, want a *RequestError for %s", err, tc.bad)
			case tc.bad == "":
				if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			}
		})
	}
}
