package cli

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/release/rack"
)

// releaseForCmd is a `release` command carrying the node side's own
// flags (as release.go defines them) and the rack-side ones, wired as the
// lead will wire them. nodeFlags false leaves only addReleaseForFlags'.
func releaseForCmd(env *Env, nodeFlags bool, got *rack.Options) *cobra.Command {
	cmd := &cobra.Command{Use: "release", SilenceUsage: true, SilenceErrors: true}
	if nodeFlags {
		fl := cmd.Flags()
		fl.StringArray("interface", nil, "")
		fl.StringArray("lease-file", nil, "")
		fl.Bool("dry-run", false, "")
		fl.Duration("timeout", 10*time.Second, "")
	}
	rf := addReleaseForFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if !rf.requested(cmd) {
			return errors.New("node side")
		}
		opts, err := rf.options(cmd, env)
		if err != nil {
			return err
		}
		if got != nil {
			*got = opts
			return nil
		}
		return runReleaseFor(cmd, env, opts)
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func TestReleaseForOptions(t *testing.T) {
	maasConf, badConf := filepath.Join(t.TempDir(), "leasekeeper.toml"), filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(maasConf, []byte("[dhcpd]\nleases = \"/var/lib/maas/dhcp/dhcpd.leases\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badConf, []byte("[dhcpd]\nleases = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("203.0.113.100")
	mac := net.HardwareAddr{0x02, 0, 0, 0x0a, 0x0b, 0x0c}
	base := rack.Options{IP: ip, MAC: mac, LeasesPath: rack.DefaultLeasesPath, Timeout: 10 * time.Second}
	with := func(f func(*rack.Options)) rack.Options { o := base; f(&o); return o }
	for _, tc := range []struct {
		name      string
		nodeFlags bool
		args      []string
		want      rack.Options
		err       string // usage error substring
	}{
		{name: "minimal", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c"}, want: base},
		{name: "unpadded upper-case MAC", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "2:0:0:A:B:C"}, want: base},
		{name: "everything", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02-00-00-0a-0b-0c",
			"--interface", "br0", "--server", "203.0.113.1", "--leases", "/tmp/x.leases", "--timeout", "2s", "--no-wait", "--dry-run"},
			want: with(func(o *rack.Options) {
				o.Interface, o.Server, o.LeasesPath, o.Timeout, o.NoVerify, o.DryRun = "br0", netip.MustParseAddr("203.0.113.1"), "/tmp/x.leases", 2*time.Second, true, true
			})},
		{name: "own flags without the node side", args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c", "--interface", "eth1", "--timeout", "3s"},
			want: with(func(o *rack.Options) { o.Interface, o.Timeout = "eth1", 3*time.Second })},
		{name: "default timeout without the node side", args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c"},
			want: with(func(o *rack.Options) { o.Timeout = rack.DefaultTimeout })},
		{name: "no MAC", nodeFlags: true, args: []string{"--for", "203.0.113.100"}, err: "--for IP and --mac MAC go together"},
		{name: "no IP", nodeFlags: true, args: []string{"--mac", "02:00:00:0a:0b:0c"}, err: "--for IP and --mac MAC go together"},
		{name: "IPv6", nodeFlags: true, args: []string{"--for", "2001:db8::1", "--mac", "02:00:00:0a:0b:0c"}, err: "want an IPv4 address"},
		{name: "bad MAC", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b"}, err: "not a 6-octet"},
		{name: "InfiniBand MAC", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", strings.Repeat("00:", 19) + "01"}, err: "not a 6-octet"},
		{name: "bad server", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c", "--server", "rack"}, err: "--server"},
		{name: "two interfaces", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c", "--interface", "a", "--interface", "b"}, err: "at most one --interface"},
		{name: "client lease file", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c", "--lease-file", "x"}, err: "--leases"},
		// The agent's file, where the operator set it (a MAAS rack's).
		{name: "leases from the config", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c", "--config", maasConf},
			want: with(func(o *rack.Options) { o.LeasesPath = "/var/lib/maas/dhcp/dhcpd.leases" })},
		{name: "--leases over the config", nodeFlags: true, args: []string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c", "--config", maasConf, "--leases", "/tmp/x.leases"},
			want: with(func(o *rack.Options) { o.LeasesPath = "/tmp/x.leases" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got rack.Options
			// The default config path answers missing, whatever this
			// machine has there.
			env := &Env{Root: t.TempDir(), Open: func(p string) (io.ReadCloser, error) {
				if p == config.DefaultPath {
					return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
				}
				return os.Open(p)
			}}
			env.defaults()
			cmd := releaseForCmd(env, tc.nodeFlags, &got)
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			if tc.err != "" {
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want a usage error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("options (-want +got)\n%s", diff)
			}
		})
	}
	// A configuration that does not decode is an error (exit 1), which
	// says the other way to name the file.
	env := &Env{Root: t.TempDir()}
	env.defaults()
	cmd := releaseForCmd(env, true, &rack.Options{})
	cmd.SetArgs([]string{"--for", "203.0.113.100", "--mac", "02:00:00:0a:0b:0c", "--config", badConf})
	err := cmd.Execute()
	var ue usageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), badConf) || !strings.Contains(err.Error(), "or name dhcpd's leases file with --leases") {
		t.Errorf("a config that does not decode: %v", err)
	}
}

// TestReleaseForRefused: a MAC that does not hold the lease is refused
// with one line on stderr, exit status 1, nothing on stdout (and, as
// Release returns before choosing an interface, nothing sent).
func TestReleaseForRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dhcpd.leases")
	if err := os.WriteFile(path, []byte(`lease 203.0.113.100 {
  starts 0 2026/11/29 11:55:00;
  ends 0 2026/11/29 12:05:00;
  binding state active;
  hardware ethernet 02:00:00:00:00:01;
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, ip, mac, want string }{
		{"other MAC", "203.0.113.100", "02:00:00:00:00:99", "leasekeeper: refusing to release 203.0.113.100 for 02:00:00:00:00:99: the lease belongs to another MAC (its lease is held by 02:00:00:00:00:01); nothing sent\n"},
		{"no lease", "203.0.113.101", "02:00:00:00:00:01", "leasekeeper: refusing to release 203.0.113.101 for 02:00:00:00:00:01: no lease for this address in dhcpd's leases file (PATH); nothing sent\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			env := &Env{Root: t.TempDir(), Stdout: &out, Stderr: &errb, Now: func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }}
			env.defaults()
			cmd := releaseForCmd(env, true, nil)
			cmd.SetArgs([]string{"--for", tc.ip, "--mac", tc.mac, "--leases", path})
			code := ExitCode(cmd.Execute(), &errb)
			if want := strings.ReplaceAll(tc.want, "PATH", path); code != 1 || out.String() != "" || errb.String() != want {
				t.Errorf("exit %d, stdout %q, stderr %q; want 1, nothing, %q", code, out.String(), errb.String(), want)
			}
		})
	}
}

func TestPrintReleaseFor(t *testing.T) {
	ends := parser.TimeOf(time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC))
	res := rack.Result{
		IP: netip.MustParseAddr("203.0.113.100"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Hostname: "c1", Ends: ends,
		Interface: "br0", Server: netip.MustParseAddr("203.0.113.1"), Took: 123456789 * time.Nanosecond,
	}
	const head = "203.0.113.100: lease of 02:00:00:00:00:01 (c1), active until 2026-11-29T12:05:00Z\n"
	const sent = "sent a DHCPRELEASE on br0 to dhcpd at 203.0.113.1\n"
	for _, tc := range []struct {
		name string
		opts rack.Options
		res  func(r *rack.Result)
		err  error
		want string
	}{
		{name: "released", res: func(r *rack.Result) { r.Sent, r.Verified, r.State = true, true, parser.StateFree },
			want: head + sent + "released: dhcpd wrote 203.0.113.100 free in 123ms; its on release statements have run\n"},
		{name: "failover", res: func(r *rack.Result) { r.Sent, r.Verified, r.State = true, true, parser.StateReleased },
			want: head + sent + "released: dhcpd wrote 203.0.113.100 released in 123ms and ran its on release statements; with a failover peer it goes free once the peer acknowledges\n"},
		{name: "ended meanwhile", res: func(r *rack.Result) { r.Sent, r.Verified, r.State = true, true, parser.StateExpired },
			want: head + sent + "dhcpd wrote 203.0.113.100 expired in 123ms: the lease ended before the release reached dhcpd (its on expiry statements ran, not on release)\n"},
		{name: "dry run", opts: rack.Options{DryRun: true}, res: func(*rack.Result) {},
			want: head + "dry run: would send a DHCPRELEASE on br0 to dhcpd at 203.0.113.1\n"},
		{name: "no wait", opts: rack.Options{NoVerify: true}, res: func(r *rack.Result) { r.Sent = true },
			want: head + sent + "not waiting for dhcpd to record it (--no-wait)\n"},
		{name: "unconfirmed", res: func(r *rack.Result) { r.Sent = true }, err: rack.ErrUnconfirmed,
			want: head + sent},
		{name: "ends never", res: func(r *rack.Result) { r.Ends, r.Hostname = parser.Never, "" },
			want: "203.0.113.100: lease of 02:00:00:00:00:01, never ends\n"},
		{name: "refused", res: func(r *rack.Result) { r.Interface = "" }, err: rack.ErrMACMismatch, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			r := res
			tc.res(&r)
			printReleaseFor(&Env{Stdout: &out}, tc.opts, r, tc.err)
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got)\n%s", diff)
			}
		})
	}
}
