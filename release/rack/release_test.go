package rack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReleaseRefuses runs Release up to its checks, unprivileged: every
// refusal and bad option returns before an interface is chosen or a
// socket opened.
func TestReleaseRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dhcpd.leases")
	if err := os.WriteFile(path, []byte(leasesText), 0o644); err != nil {
		t.Fatal(err)
	}
	// The owner's block, then a block for the same address the parser
	// cannot read: the lease in force is unknown.
	unreadable := filepath.Join(t.TempDir(), "dhcpd.leases")
	if err := os.WriteFile(unreadable, []byte(leasesText+"lease 203.0.113.100 {\n  starts 9 2026/13/29 11:55:00;\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return now }
	owner := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	for _, tc := range []struct {
		name string
		opts Options
		want error  // errors.Is
		msg  string // in the error
	}{
		{name: "other MAC", opts: Options{IP: netip.MustParseAddr("203.0.113.100"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}}, want: ErrMACMismatch},
		{name: "no lease", opts: Options{IP: netip.MustParseAddr("203.0.113.7"), MAC: owner}, want: ErrNoLease},
		{name: "free", opts: Options{IP: netip.MustParseAddr("203.0.113.102"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 3}}, want: ErrNotActive},
		{name: "IPv6", opts: Options{IP: netip.MustParseAddr("2001:db8::1"), MAC: owner}, msg: "IPv4 only"},
		{name: "no MAC", opts: Options{IP: netip.MustParseAddr("203.0.113.100")}, msg: "6-byte"},
		{name: "IPv6 server", opts: Options{IP: netip.MustParseAddr("203.0.113.100"), MAC: owner, Server: netip.MustParseAddr("2001:db8::1")}, msg: "IPv4 only"},
		{name: "unreadable later block", opts: Options{IP: netip.MustParseAddr("203.0.113.100"), MAC: owner, LeasesPath: unreadable}, want: ErrUnreadable,
			msg: `lease 203.0.113.100: bad date "2026/13/29"`},
		{name: "no leases file", opts: Options{IP: netip.MustParseAddr("203.0.113.100"), MAC: owner, LeasesPath: filepath.Join(t.TempDir(), "none")}, want: os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if opts.LeasesPath == "" {
				opts.LeasesPath = path
			}
			opts.Now = clock
			res, err := Release(context.Background(), opts)
			if err == nil || res.Sent {
				t.Fatalf("Release = %+v, %v; want an error and nothing sent", res, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q, want it to mention %q", err, tc.msg)
			}
		})
	}
}

// TestProbe: before sending, the address is probed on the chosen
// interface; a host that answers refuses the release (ErrInUse), naming
// whether it was the client itself; an address the interface holds is
// the rack's own; one in no subnet of the interface (relayed) and a probe
// not wanted go unprobed; a probe that fails stops the release.
func TestProbe(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 0x0c}
	other := net.HardwareAddr{2, 0, 0, 0, 0, 0x99}
	br := ifaceInfo{Name: "br0", Index: 7, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Addrs: []netip.Prefix{netip.MustParsePrefix("203.0.113.1/24")}}
	answer := func(by net.HardwareAddr, err error) func(context.Context, int, net.HardwareAddr, netip.Addr, time.Duration) (net.HardwareAddr, error) {
		return func(_ context.Context, ifindex int, hw net.HardwareAddr, ip netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
			if ifindex != 7 || hw.String() != br.MAC.String() || wait != 300*time.Millisecond {
				t.Errorf("probed on %d (%s) for %s, want br0's index and MAC for 300ms", ifindex, hw, wait)
			}
			return by, err
		}
	}
	for _, tc := range []struct {
		name    string
		ip      string
		noProbe bool
		dryRun  bool
		by      net.HardwareAddr
		err     error
		probe   string // Result.Probe
		refused string // in the *RefusedError with ErrInUse
		failed  string
	}{
		{name: "nobody answers", ip: "203.0.113.100", probe: "nobody answered an ARP probe on br0 within 300ms"},
		{name: "the client answers", ip: "203.0.113.100", by: mac, refused: "the client itself answered an ARP probe on br0: it is not gone"},
		{name: "another host answers", ip: "203.0.113.100", by: other, refused: "02:00:00:00:00:99 answered an ARP probe on br0: another host holds the address"},
		{name: "the rack's own address", ip: "203.0.113.1", refused: "it is this rack's own address on br0"},
		{name: "relayed: not probed", ip: "198.51.100.7", probe: "not probed: 198.51.100.7 is in no subnet of br0 (a relayed subnet)"},
		{name: "not wanted", ip: "203.0.113.100", noProbe: true, by: mac, probe: "not probed (asked not to)"},
		{name: "a dry run without the privilege: said, not failed", ip: "203.0.113.100", dryRun: true, err: errors.New("open a packet socket: operation not permitted (needs CAP_NET_RAW)"),
			probe: "not probed: open a packet socket: operation not permitted (needs CAP_NET_RAW)"},
		{name: "the probe fails", ip: "203.0.113.100", err: errors.New("open a packet socket: operation not permitted"), failed: "ARP probe of 203.0.113.100 on br0 before the release: open a packet socket: operation not permitted (nothing sent)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{IP: netip.MustParseAddr(tc.ip), MAC: mac, NoProbe: tc.noProbe, DryRun: tc.dryRun, ProbeWait: 300 * time.Millisecond, Prober: answer(tc.by, tc.err)}
			got, err := probe(context.Background(), opts, br)
			var re *RefusedError
			switch {
			case tc.refused != "":
				if !errors.As(err, &re) || re.Reason != ErrInUse || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err = %v, want ErrInUse: %q", err, tc.refused)
				}
			case tc.failed != "":
				if err == nil || errors.As(err, &re) || err.Error() != tc.failed {
					t.Fatalf("err = %v, want %q", err, tc.failed)
				}
			case err != nil || !strings.HasPrefix(got, tc.probe):
				t.Fatalf("got %q, %v; want %q", got, err, tc.probe)
			}
		})
	}
}
