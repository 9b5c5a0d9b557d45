package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/release"
	"github.com/leasekeeper/leasekeeper/systemd"
)

// The lab tests run `leasekeeper release` inside a client namespace:
// this test binary re-executed through `ip netns exec`, running the
// command tree as main does (TestReleaseHelperProcess).
const helperEnv = "LEASEKEEPER_RELEASE_HELPER"

// TestReleaseHelperProcess is not a test: with LEASEKEEPER_RELEASE_HELPER=1
// it runs the leasekeeper command tree on the arguments after "--" and
// exits with main's status.
func TestReleaseHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	env := Env{Version: "test", Stdout: os.Stdout, Stderr: os.Stderr}
	env.defaults()
	root := New(env)
	if c, _, err := root.Find([]string{"release"}); err != nil || c == root {
		root.AddCommand(newReleaseCmd(&env)) // until root.go registers it
	}
	root.SetArgs(args)
	os.Exit(ExitCode(root.Execute(), os.Stderr))
}

// runRelease runs the command in-process.
func runRelease(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	env := Env{Root: t.TempDir(), Stdout: &out, Stderr: &errb, Now: func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }}
	env.defaults()
	cmd := newReleaseCmd(&env)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	code := ExitCode(cmd.Execute(), &errb)
	return out.String(), errb.String(), code
}

func TestReleaseUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"argument", []string{"eth0"}, 2, "unexpected argument"},
		{"bad timeout", []string{"--timeout", "0s"}, 2, "must be positive"},
		{"unknown flag", []string{"--four", "203.0.113.5"}, 2, "unknown flag"},
		{"for without mac", []string{"--for", "203.0.113.5"}, 2, "--for IP and --mac MAC go together"},
		{"server without for", []string{"--server", "203.0.113.1", "--dry-run"}, 2, "--server is for the rack-side release and needs --for IP --mac MAC"},
		{"leases without for", []string{"--leases=/var/lib/dhcp/dhcpd.leases", "--dry-run"}, 2, "--leases is for the rack-side release"},
		{"no-wait without for", []string{"--no-wait", "--dry-run"}, 2, "--no-wait is for the rack-side release"},
		{"config without for", []string{"--config=/etc/leasekeeper/leasekeeper.toml", "--dry-run"}, 2, "--config is for the rack-side release"},
		{"no such interface", []string{"--interface", "lk-nosuch0", "--lease-file", "/nonexistent/lease", "--dry-run"}, 2, "--interface lk-nosuch0: no such interface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runRelease(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.msg)
			}
		})
	}
}

// TestReleaseAtRebootAlone: --at-reboot says when --only-at-shutdown
// releases; without it release gives the leases back at once, so the
// flag alone is a mistake, refused before anything is read or sent.
func TestReleaseAtRebootAlone(t *testing.T) {
	_, stderr, code := run(t, "release", "--at-reboot", "--dry-run")
	if code != 2 || !strings.Contains(stderr, "--at-reboot goes with --only-at-shutdown") {
		t.Errorf("exit %d, stderr %q; want 2 and the rule", code, stderr)
	}
}

// TestReleaseNoLeases: lease files that hold no lease (an empty file,
// a dhclient file with only its DUID) are not an error.
func TestReleaseNoLeases(t *testing.T) {
	dir := t.TempDir()
	empty, duidOnly := filepath.Join(dir, "empty"), filepath.Join(dir, "dhclient.leases")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(duidOnly, []byte("default-duid \"\\000\\001\\000\\001\";\n"), 0o644)
	out, stderr, code := runRelease(t, "--lease-file", empty, "--lease-file", duidOnly)
	if code != 0 || !strings.Contains(out, "no DHCPv4 leases found") || stderr != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0 and \"no DHCPv4 leases found\"", code, out, stderr)
	}
}

// TestReleaseHelp: the help says what a release costs on a running
// node, and that it needs root.
func TestReleaseHelp(t *testing.T) {
	out, _, code := runRelease(t, "--help")
	for _, want := range []string{"Sending needs root", "dhcpd may hand it to another client", "except at shutdown", "--interface this node does not have"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, help lacks %q", code, want)
		}
	}
}

// TestReleaseDhclientConfNamed: a --dhclient-conf given but missing is
// warned about, even when it is the default path.
func TestReleaseDhclientConfNamed(t *testing.T) {
	dir := t.TempDir()
	lease := filepath.Join(dir, "dhclient.leases")
	os.WriteFile(lease, []byte("lease {\n interface \"lk-nosuch0\";\n fixed-address 203.0.113.9;\n option dhcp-server-identifier 203.0.113.1;\n expire never;\n}\n"), 0o644)
	missing := filepath.Join(dir, "missing.conf")
	_, stderr, code := runRelease(t, "--lease-file", lease, "--dhclient-conf", missing, "--dry-run")
	if code != 0 || !strings.Contains(stderr, missing+": open "+missing+": no such file") {
		t.Errorf("exit %d, stderr %q; want 0 and a warning naming %s", code, stderr, missing)
	}
}

func TestReleaseMissingFile(t *testing.T) {
	out, stderr, code := runRelease(t, "--lease-file", filepath.Join(t.TempDir(), "nope"))
	if code != 1 || !strings.Contains(stderr, "no such file") || !strings.Contains(out, "no DHCPv4 leases found") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1, a no-such-file warning and no leases", code, out, stderr)
	}
}

// relLab is a lab with dhcpd running the packaging hook snippet, whose
// hook reports to a test listener.
type relLab struct {
	t    *testing.T
	lab  *lab.Lab
	d    *lab.Dhcpd
	hook *net.UnixConn

	grams []map[string]any
}

func newRelLab(t *testing.T) *relLab {
	t.Helper()
	return newRelLabWith(t, nil)
}

// newRelLabWith is newRelLab with before run once the lab exists and
// before dhcpd starts; it returns more dhcpd.conf and more interfaces
// for dhcpd to serve.
func newRelLabWith(t *testing.T, before func(*lab.Lab) (conf string, ifaces []string)) *relLab {
	t.Helper()
	lab.Require(t, "dhcpd", "dhclient")
	hook := lab.BuildHook(t)
	dir, err := os.MkdirTemp("", "lkrel") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, spool := filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	snippet := lab.HookSnippet(t, hook, sock, spool)

	r := &relLab{t: t, lab: lab.New(t), hook: conn}
	var extraConf string
	var extraIfaces []string
	if before != nil {
		extraConf, extraIfaces = before(r.lab)
	}
	r.d = r.lab.StartDhcpd(t, lab.DhcpdConfig{Conf: "ping-check false;\nauthoritative;\nddns-update-style none;\n" +
		"default-lease-time 600;\nmax-lease-time 600;\n" + snippet + "\n" +
		r.lab.SubnetConf("  range 203.0.113.100 203.0.113.150;") + extraConf,
		ExtraArgs: extraIfaces})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dhcpd log:\n%s", r.d.Logs())
		}
	})
	return r
}

func (r *relLab) client(name string, opts ...lab.ClientOption) (*lab.Client, netip.Addr) {
	r.t.Helper()
	c := r.lab.AddClient(name, opts...)
	return c, r.lease(c)
}

// lease runs dhclient in a client added before.
func (r *relLab) lease(c *lab.Client) netip.Addr {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ip, err := c.Dhclient(ctx)
	if err != nil {
		r.t.Fatalf("dhclient: %v", err)
	}
	return ip
}

// release runs `leasekeeper release ARGS…` in the client's namespace.
func (r *relLab) release(c *lab.Client, args ...string) (stdout, stderr string, code int, took time.Duration) {
	r.t.Helper()
	return r.releaseWith(func(ctx context.Context, argv ...string) *exec.Cmd {
		return r.lab.CommandContext(ctx, c.NS, argv...)
	}, args...)
}

// releaseAsNode is release with the client's own /var/lib and /run
// (lab.Client.NodeCommand): the default lease file paths are the
// client's, not the host's.
func (r *relLab) releaseAsNode(c *lab.Client, args ...string) (stdout, stderr string, code int, took time.Duration) {
	r.t.Helper()
	return r.releaseWith(c.NodeCommand, args...)
}

func (r *relLab) releaseWith(command func(ctx context.Context, argv ...string) *exec.Cmd, args ...string) (stdout, stderr string, code int, took time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append([]string{os.Args[0], "-test.run=^TestReleaseHelperProcess$", "--", "release"}, args...)
	cmd := command(ctx, argv...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		r.t.Fatalf("release: %v\n%s", err, errb.String())
	}
	r.t.Logf("release %s (exit %d, %v):\n%s%s", strings.Join(args, " "), code, took.Round(time.Millisecond), out.String(), errb.String())
	return out.String(), errb.String(), code, took
}

// waitHook waits for a hook datagram with the action for ip.
func (r *relLab) waitHook(action string, ip netip.Addr) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 64<<10)
	for time.Now().Before(deadline) {
		r.hook.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := r.hook.Read(buf)
		if err != nil {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			r.t.Fatalf("hook datagram %q: %v", buf[:n], err)
		}
		r.grams = append(r.grams, m)
		if m["action"] == action && m["ip"] == ip.String() {
			return
		}
	}
	r.t.Fatalf("no %s for %s from the hook; got %v", action, ip, r.grams)
}

// checkReleased checks that dhcpd logged the release (found) and wrote
// the address's last block free (or released).
func (r *relLab) checkReleased(ip netip.Addr, mac net.HardwareAddr) {
	r.t.Helper()
	r.checkReleasedVia(ip, mac, "br0")
}

// checkReleasedVia is checkReleased for a release dhcpd received on
// its interface via.
func (r *relLab) checkReleasedVia(ip netip.Addr, mac net.HardwareAddr, via string) {
	r.t.Helper()
	// dhcpd names the lease's client-hostname, if any, before "via".
	want := regexp.MustCompile(`DHCPRELEASE of ` + regexp.QuoteMeta(ip.String()) + ` from ` +
		regexp.QuoteMeta(mac.String()) + ` (\(\S+\) )?via ` + regexp.QuoteMeta(via) + ` \(found\)`)
	deadline := time.Now().Add(5 * time.Second)
	for !want.MatchString(r.d.Logs()) {
		if time.Now().After(deadline) {
			r.t.Fatalf("dhcpd did not log %s", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(r.d.LeasesPath())
	if err != nil {
		r.t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndex(s, "lease "+ip.String()+" {")
	if i < 0 {
		r.t.Fatalf("no block for %s in dhcpd.leases:\n%s", ip, s)
	}
	last := s[i:]
	if j := strings.Index(last, "}"); j >= 0 {
		last = last[:j+1]
	}
	if !regexp.MustCompile(`binding state (free|released);`).MatchString(last) {
		r.t.Errorf("after the release, the last block for %s is not free/released:\n%s", ip, last)
	}
}

func (r *relLab) noRelease() {
	r.t.Helper()
	if strings.Contains(r.d.Logs(), "DHCPRELEASE") {
		r.t.Errorf("dhcpd logged a DHCPRELEASE:\n%s", r.d.Logs())
	}
}

// TestLabReleaseDhclient: a client leases with real dhclient (sending a
// client identifier from its dhclient.conf); `leasekeeper release` in
// its namespace, while dhclient still runs, frees the lease: dhcpd logs
// the DHCPRELEASE, writes the lease free, and the hook reports release.
// --dry-run first shows the packet and sends nothing.
func TestLabReleaseDhclient(t *testing.T) {
	t.Parallel()
	r := newRelLab(t)
	c, ip := r.client("c1", lab.WithDhclientConf("send dhcp-client-identifier 1:2:0:0:0:0:1;"))
	r.waitHook("commit", ip)
	conf := filepath.Join(c.Dir, "dhclient.conf")

	out, stderr, code, _ := r.release(c, "--dry-run", "--lease-file", c.LeaseFile(), "--dhclient-conf", conf)
	wantDry := fmt.Sprintf("eth0: would release %s: DHCPRELEASE xid ", ip)
	if code != 0 || !strings.Contains(out, wantDry) || strings.Contains(stderr, "warning") ||
		!strings.Contains(out, "chaddr 02:00:00:00:00:01 server-id 203.0.113.1 client-id 01:02:00:00:00:00:01") {
		t.Fatalf("dry run: exit %d, output %q; want 0 and %q… with chaddr, server-id and client-id", code, out, wantDry)
	}
	time.Sleep(200 * time.Millisecond)
	r.noRelease()

	// Released while still configured, not at shutdown: said on stderr.
	out, stderr, code, _ = r.release(c, "--lease-file", c.LeaseFile(), "--dhclient-conf", conf)
	if want := fmt.Sprintf("eth0: released %s to server 203.0.113.1 (dhclient lease in %s)", ip, c.LeaseFile()); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output %q; want 0 and %q", code, out, want)
	}
	if want := fmt.Sprintf("leasekeeper: warning: %s is still configured on eth0: dhcpd may give it to another client while this node still uses it", ip); !strings.Contains(stderr, want) {
		t.Errorf("stderr %q lacks %q", stderr, want)
	}
	r.checkReleased(ip, c.MAC)
	r.waitHook("release", ip)
}

// TestLabReleaseNetworkd: the same with a systemd-networkd lease file
// (named by eth0's index in the client namespace, as networkd names
// them) for the address dhclient obtained; dhclient is gone (killed, no
// release of its own). The file's CLIENTID is networkd's DUID-based one,
// which dhcpd never saw: dhcpd still finds the lease by ciaddr and
// releases it because chaddr matches.
func TestLabReleaseNetworkd(t *testing.T) {
	t.Parallel()
	r := newRelLab(t)
	c, ip := r.client("c2")
	r.waitHook("commit", ip)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	link, err := r.lab.Exec(ctx, c.NS, "ip", "-o", "link", "show", "dev", c.Iface)
	if err != nil {
		t.Fatal(err)
	}
	idx, _, _ := strings.Cut(string(link), ":")
	dir := filepath.Join(t.TempDir(), "leases")
	os.MkdirAll(dir, 0o755)
	file := filepath.Join(dir, idx)
	lease := fmt.Sprintf(`# This is private data. Do not parse.
ADDRESS=%s
NETMASK=255.255.255.0
SERVER_ADDRESS=203.0.113.1
T1=300
T2=525
LIFETIME=600
CLIENTID=ff5ac2b0e200020000ab11a1b2c3d4e5f60718
`, ip)
	if err := os.WriteFile(file, []byte(lease), 0o644); err != nil {
		t.Fatal(err)
	}
	// Saved two hours ago, longer than LIFETIME: networkd leaves the file
	// (and its time) as it is at a renewal that changes none of its
	// content (sd-dhcp-lease.c, dhcp_lease_save: conservative_rename),
	// so on a node up longer than one lease time the file is older than
	// that, and the lease runs all the same (a cold review, with real
	// networkd: the file's time plus LIFETIME was taken for the end, and
	// the release skipped as expired).
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	out, _, code, _ := r.release(c, "--lease-file", file)
	if want := fmt.Sprintf("eth0: released %s to server 203.0.113.1 (networkd lease in %s)", ip, file); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output %q; want 0 and %q", code, out, want)
	}
	r.checkReleased(ip, c.MAC)
	r.waitHook("release", ip)
}

// TestLabReleaseDhcpcd: a node whose network is real dhcpcd's (Debian's
// configuration: a DUID-based client identifier, the address kept when
// dhcpcd stops) leases an address; dhcpcd exits without releasing, as at
// its stop. `leasekeeper release` with the default paths, on the node's
// own /var/lib, finds dhcpcd's lease (the DHCPACK it stored), and
// releases it: dhcpd finds the lease by ciaddr and chaddr (the release
// carries no client identifier: dhcpd did not echo dhcpcd's), logs the
// DHCPRELEASE, writes the lease free, and the hook reports release. The
// file's time is set two hours back first, longer than the lease time, as
// after the clock was set forward (a board without a real-time clock):
// the address still on eth0 tells the lease runs, and it is released all
// the same (a cold review: the file's time plus the lease time was taken
// for the end, and the lease skipped as ended).
func TestLabReleaseDhcpcd(t *testing.T) {
	t.Parallel()
	lab.Require(t, "dhcpcd")
	r := newRelLab(t)
	c := r.lab.AddClient("c1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ip, err := c.Dhcpcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.waitHook("commit", ip)
	const file = "/var/lib/dhcpcd/eth0.lease" // as the node sees it
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(c.DhcpcdDB(), "eth0.lease"), old, old); err != nil {
		t.Fatal(err)
	}

	out, _, code, _ := r.releaseAsNode(c, "--dry-run")
	if want := "chaddr " + c.MAC.String() + " server-id 203.0.113.1, from"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("dry run: exit %d, output %q; want 0 and %q (no client-id)", code, out, want)
	}
	time.Sleep(200 * time.Millisecond)
	r.noRelease()
	out, _, code, _ = r.releaseAsNode(c)
	if want := fmt.Sprintf("eth0: released %s to server 203.0.113.1 (dhcpcd lease in %s)", ip, file); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output %q; want 0 and %q", code, out, want)
	}
	r.checkReleased(ip, c.MAC)
	r.waitHook("release", ip)
}

// TestLabReleaseBadInput: an expired lease and a stale one are skipped
// and say why; a server with no route and an on-link server that is not
// there both fail within the time limit with a clear error; dhcpd sees
// no release at all.
func TestLabReleaseBadInput(t *testing.T) {
	t.Parallel()
	r := newRelLab(t)
	c, ip := r.client("c3")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	block := func(addr, server, expire string) string {
		return fmt.Sprintf("lease {\n  interface \"eth0\";\n  fixed-address %s;\n  option dhcp-server-identifier %s;\n  expire %s;\n}\n", addr, server, expire)
	}
	future := "epoch " + fmt.Sprint(time.Now().Add(time.Hour).Unix())

	t.Run("expired", func(t *testing.T) {
		f := write("expired.leases", block(ip.String(), "203.0.113.1", "1 2020/01/06 00:00:00"))
		out, _, code, _ := r.release(c, "--lease-file", f)
		if want := fmt.Sprintf("eth0: skipped %s: the lease expired at 2020-01-06T00:00:00Z", ip); code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output %q; want 0 and %q", code, out, want)
		}
	})
	t.Run("stale", func(t *testing.T) {
		f := write("stale.leases", block("203.0.113.149", "203.0.113.1", future))
		out, _, code, _ := r.release(c, "--lease-file", f)
		if want := "eth0: skipped 203.0.113.149: 203.0.113.149 is not configured on eth0"; code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output %q; want 0 and %q", code, out, want)
		}
	})
	t.Run("no route", func(t *testing.T) {
		f := write("noroute.leases", block(ip.String(), "198.51.100.1", future))
		out, stderr, code, took := r.release(c, "--lease-file", f, "--timeout", "2s")
		if code != 1 || !strings.Contains(out, "FAILED to release "+ip.String()+" to server 198.51.100.1: no route to 198.51.100.1") ||
			!strings.Contains(stderr, "1 of 1 release(s) not sent") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 1 and no route", code, out, stderr)
		}
		if took >= release.DefaultTimeout { // the flag's limit kept, not the default's: a bound, not a timing
			t.Errorf("took %v with --timeout 2s", took)
		}
	})
	t.Run("silent server", func(t *testing.T) {
		f := write("silent.leases", block(ip.String(), "203.0.113.254", future))
		out, _, code, took := r.release(c, "--lease-file", f, "--timeout", "1s")
		if code != 1 || !strings.Contains(out, "203.0.113.254 did not answer ARP on eth0 within the time limit") {
			t.Errorf("exit %d, output %q; want 1 and an ARP failure", code, out)
		}
		if took >= release.DefaultTimeout { // the flag's limit kept, not the default's: a bound, not a timing
			t.Errorf("took %v with --timeout 1s", took)
		}
	})
	t.Run("missing file and a good one", func(t *testing.T) {
		f := write("stale2.leases", block("203.0.113.148", "203.0.113.1", future))
		out, stderr, code, _ := r.release(c, "--lease-file", filepath.Join(dir, "nope"), "--lease-file", f)
		if code != 1 || !strings.Contains(stderr, "nope: open") || !strings.Contains(out, "skipped 203.0.113.148") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 1, the missing file named, the other handled", code, out, stderr)
		}
	})
	time.Sleep(200 * time.Millisecond)
	r.noRelease()
}

// TestLabReleaseCachedHop: the node's neighbour table already holds an
// entry for the server (STALE, as after its last renewal) when it
// releases. A server that went down since (an address nobody holds,
// entered with a made-up MAC) must not count as released because the
// kernel still sends to the cached address: it is asked with an ARP
// request, and its silence fails the release. The real server, its entry
// cached the same way, answers and the release is reported released and
// reaches dhcpd.
func TestLabReleaseCachedHop(t *testing.T) {
	t.Parallel()
	r := newRelLab(t)
	c, ip := r.client("c1")
	ipcmd := func(ns string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := r.lab.CommandContext(ctx, ns, append([]string{"ip"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	stale := func(addr, mac string) {
		t.Helper()
		ipcmd(c.NS, "neigh", "replace", addr, "lladdr", mac, "dev", "eth0", "nud", "stale")
		if got := ipcmd(c.NS, "neigh", "show", addr, "dev", "eth0"); !strings.Contains(got, "STALE") {
			t.Fatalf("neighbour entry %q, want STALE", got)
		}
	}
	dir := t.TempDir()
	lease := func(server string) string {
		f := filepath.Join(dir, server+".leases")
		body := fmt.Sprintf("lease {\n  interface \"eth0\";\n  fixed-address %s;\n  option dhcp-server-identifier %s;\n  expire epoch %d;\n}\n",
			ip, server, time.Now().Add(time.Hour).Unix())
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}

	stale("203.0.113.253", "02:00:00:00:fe:fd")
	out, _, code, _ := r.release(c, "--lease-file", lease("203.0.113.253"), "--timeout", "2s")
	if want := "203.0.113.253 did not answer ARP on eth0"; code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "STALE, was from before") {
		t.Errorf("a gone server cached STALE: exit %d, output %q; want 1 and %q, the stale entry named", code, out, want)
	}
	time.Sleep(200 * time.Millisecond)
	r.noRelease()

	mac := ipcmd(r.lab.NS, "-br", "link", "show", r.lab.Bridge)
	if f := strings.Fields(mac); len(f) >= 3 {
		mac = f[2]
	}
	stale("203.0.113.1", mac)
	out, _, code, _ = r.release(c, "--lease-file", lease("203.0.113.1"))
	if want := fmt.Sprintf("eth0: released %s to server 203.0.113.1", ip); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("the server cached STALE: exit %d, output %q; want 0 and %q", code, out, want)
	}
	r.checkReleased(ip, c.MAC)
}

// TestLabReleaseMultiHomed: a node with two interfaces, whose lease's
// server is reachable only through the other one. The client leases
// 203.0.113.x on eth0 (the bridge) and has eth1, 198.18.0.2/24, on a
// second link to the server namespace, where dhcpd also listens
// (198.18.0.1). The server namespace answers ARP only for the addresses
// of the interface asked (arp_ignore 1), as a server elsewhere would:
// nothing on eth0's link answers for 198.18.0.1. A lease naming server
// 198.18.0.1 is released through eth1, the kernel's route from the
// lease's address, and the report says so; dhcpd receives it on the
// second link and frees the lease. (A release forced out of eth0 would
// ARP there in vain, and used to be reported released.) Through the
// same interface: a server that is not there, and a router that is not
// there, fail with the ARP failure named; a route through a link
// without ARP is reported sent, not confirmed.
func TestLabReleaseMultiHomed(t *testing.T) {
	t.Parallel()
	var c *lab.Client
	var link *lab.Link
	r := newRelLabWith(t, func(l *lab.Lab) (string, []string) {
		if err := l.Sysctl(l.NS, "net/ipv4/conf/all/arp_ignore", "1"); err != nil {
			t.Fatal(err)
		}
		c = l.AddClient("c1")
		var err error
		link, err = c.AddLink("eth1", "m1", netip.MustParsePrefix("198.18.0.2/24"), netip.MustParsePrefix("198.18.0.1/24"))
		if err != nil {
			t.Fatal(err)
		}
		return "subnet 198.18.0.0 netmask 255.255.255.0 {\n}\n", []string{link.ServerIface}
	})
	ip := r.lease(c)
	r.waitHook("commit", ip)

	dir := t.TempDir()
	leaseFor := func(name, server string) string {
		p := filepath.Join(dir, name)
		body := fmt.Sprintf("lease {\n  interface \"eth0\";\n  fixed-address %s;\n  option dhcp-server-identifier %s;\n  expire epoch %d;\n}\n",
			ip, server, time.Now().Add(time.Hour).Unix())
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("silent server", func(t *testing.T) {
		out, _, code, took := r.release(c, "--lease-file", leaseFor("silent.leases", "198.18.0.9"), "--timeout", "1s")
		if want := "198.18.0.9 did not answer ARP on eth1"; code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "via eth1, the route to the server") {
			t.Errorf("exit %d, output %q; want 1 and %q", code, out, want)
		}
		if took >= release.DefaultTimeout { // the flag's limit kept, not the default's: a bound, not a timing
			t.Errorf("took %v with --timeout 1s", took)
		}
	})
	t.Run("silent router", func(t *testing.T) {
		if err := r.lab.IP(c.NS, []string{"route", "add", "198.51.100.0/25", "via", "198.18.0.254", "dev", "eth1"}); err != nil {
			t.Fatal(err)
		}
		out, _, code, _ := r.release(c, "--lease-file", leaseFor("router.leases", "198.51.100.1"), "--timeout", "1s")
		if want := "the router 198.18.0.254 did not answer ARP on eth1 within the time limit: 198.51.100.1 is unreachable"; code != 1 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output %q; want 1 and %q", code, out, want)
		}
	})
	t.Run("no ARP", func(t *testing.T) {
		// A veth pair inside the client's namespace, ARP off on n0: the
		// packet goes out unresolved (to n0's own MAC, which n1 drops).
		if err := r.lab.IP(c.NS,
			[]string{"link", "add", "n0", "type", "veth", "peer", "name", "n1"},
			[]string{"link", "set", "n0", "arp", "off"},
			[]string{"link", "set", "n1", "up"},
			[]string{"link", "set", "n0", "up"},
			[]string{"route", "add", "198.51.100.128/25", "dev", "n0"},
		); err != nil {
			t.Fatal(err)
		}
		out, _, code, _ := r.release(c, "--lease-file", leaseFor("noarp.leases", "198.51.100.129"))
		want := fmt.Sprintf("eth0: sent, not confirmed: release of %s to server 198.51.100.129 via n0, the route to the server: n0 resolves no neighbours", ip)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output %q; want 0 and %q", code, out, want)
		}
	})
	time.Sleep(200 * time.Millisecond)
	r.noRelease()

	f := leaseFor("other.leases", link.ServerAddr.Addr().String())
	out, _, code, _ := r.release(c, "--lease-file", f)
	if want := fmt.Sprintf("eth0: released %s to server 198.18.0.1 via eth1, the route to the server (dhclient lease in %s)", ip, f); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output %q; want 0 and %q", code, out, want)
	}
	r.checkReleasedVia(ip, c.MAC, link.ServerIface)
	r.waitHook("release", ip)
}

// TestLabShutdownUnitReleases is the clean-shutdown story end to end: a
// client leases with real dhclient; the shutdown unit is installed over
// D-Bus into a real systemd manager running in the client's namespace;
// nothing is released while the machine runs, nor when the unit alone is
// stopped; when the manager shuts down, the unit's ExecStop runs
// `leasekeeper release` and dhcpd frees the lease and fires on release.
func TestLabShutdownUnitReleases(t *testing.T) {
	t.Parallel()
	r := newRelLab(t)
	c, ip := r.client("c1")
	r.waitHook("commit", ip)
	su := r.shutdownUnit(c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A stop that is not a shutdown (systemctl stop, restart, isolate)
	// runs ExecStop too: the machine keeps its address, nothing is sent.
	if err := su.mgr.Stop(ctx, systemd.ShutdownUnitName); err != nil {
		t.Fatalf("stop: %v\nsystemd log:\n%s", err, su.um.Log())
	}
	if out := su.log(); !strings.Contains(out, "not releasing: systemd is running, not shutting down") {
		t.Fatalf("a plain stop's ExecStop said %q", out)
	}
	time.Sleep(200 * time.Millisecond)
	r.noRelease()
	if err := su.mgr.Start(ctx, systemd.ShutdownUnitName); err != nil {
		t.Fatal(err)
	}

	su.um.Stop(t)
	out := su.log()
	t.Logf("ExecStop's release:\n%s", out)
	if want := fmt.Sprintf("eth0: released %s to server 203.0.113.1", ip); !strings.Contains(out, want) {
		t.Fatalf("release at shutdown did not report %q\nsystemd log:\n%s", want, su.um.Log())
	}
	// At shutdown the address is about to go: no warning that it is in use.
	if strings.Contains(out, "still configured") {
		t.Errorf("release at shutdown warned: %s", out)
	}
	r.checkReleased(ip, c.MAC)
	r.waitHook("release", ip)
}

// TestLabShutdownUnitReboot: at a reboot the machine comes back and asks
// for its addresses again, so the shutdown unit releases nothing, unless
// installed with --at-reboot (a cold review: every reboot and lxc
// restart released). The user manager stands in for a rebooting system
// manager: a target named reboot.target pulls in exit.target, as the
// system's reboot.target pulls in the shutdown, and its start job is
// queued while the unit's ExecStop runs, as at `systemctl reboot`.
func TestLabShutdownUnitReboot(t *testing.T) {
	t.Parallel()
	r := newRelLab(t)
	for _, tc := range []struct {
		name     string
		args     []string
		released bool
	}{{"c1", nil, false}, {"c2", []string{"--at-reboot"}, true}} {
		c, ip := r.client(tc.name)
		r.waitHook("commit", ip)
		su := r.shutdownUnit(c, tc.args...)
		target := "[Unit]\nDescription=a reboot, as the system manager's\nDefaultDependencies=no\nRequires=exit.target\nAfter=exit.target\n"
		if err := os.WriteFile(filepath.Join(su.um.UnitDir, "reboot.target"), []byte(target), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := su.mgr.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		// The manager exits before the job ends: its result never comes.
		go su.mgr.Start(ctx, "reboot.target") //nolint:errcheck
		su.um.Wait(t)
		cancel()
		out := su.log()
		t.Logf("%s: ExecStop's release:\n%s", tc.name, out)
		if !tc.released {
			if !strings.Contains(out, "not releasing: the machine reboots (reboot.target)") {
				t.Fatalf("%s: ExecStop at a reboot said %q\nsystemd log:\n%s", tc.name, out, su.um.Log())
			}
			time.Sleep(200 * time.Millisecond)
			r.noRelease()
			continue
		}
		if want := fmt.Sprintf("eth0: released %s to server 203.0.113.1", ip); !strings.Contains(out, want) {
			t.Fatalf("%s: release at a reboot with --at-reboot did not report %q\nsystemd log:\n%s", tc.name, want, su.um.Log())
		}
		r.checkReleased(ip, c.MAC)
		r.waitHook("release", ip)
	}
}

// shutdownLab is the shutdown unit installed and started in a user
// manager in a client's namespace, running this test binary's command
// tree; log reads what its ExecStop printed.
type shutdownLab struct {
	um      *lab.UserManager
	mgr     *systemd.DBusManager
	logPath string
}

func (s shutdownLab) log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// shutdownUnit installs the shutdown unit for c's lease, with release's
// extra args, in a user manager started in c's namespace.
func (r *relLab) shutdownUnit(c *lab.Client, args ...string) shutdownLab {
	t := r.t
	t.Helper()
	um := r.lab.StartUserManager(t, c.NS)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "release.log")
	// The unit's leasekeeper: this test binary running the command tree.
	wrapper := filepath.Join(dir, "leasekeeper")
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q -test.run='^TestReleaseHelperProcess$' -- \"$@\" >>%q 2>&1\n", helperEnv, self, logPath)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	u := systemd.ShutdownUnit{Binary: wrapper, ReleaseArgs: append([]string{"--systemd-socket=" + um.Socket, "--lease-file=" + c.LeaseFile(), "--timeout=5s"}, args...)}
	if err := u.Validate(); err != nil {
		t.Skipf("temporary paths not usable in a unit here: %v", err)
	}
	// Dialled without a deadline: the connection lives as long as the
	// test (a context given to the dial ends it when cancelled).
	mgr, err := systemd.DialManager(context.Background(), um.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := systemd.Installer{Root: "/", UnitDir: strings.TrimPrefix(um.UnitDir, "/"), Unit: u, Enable: true, Manager: mgr}.Install(ctx)
	if err != nil || !res.Started {
		t.Fatalf("install: %+v %v\nsystemd log:\n%s", res, err, um.Log())
	}
	time.Sleep(200 * time.Millisecond)
	r.noRelease()
	return shutdownLab{um: um, mgr: mgr, logPath: logPath}
}
