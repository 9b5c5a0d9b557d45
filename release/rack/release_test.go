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
