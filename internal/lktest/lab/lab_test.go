package lab

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testConf = `ping-check false;
default-lease-time 600;
max-lease-time 600;
authoritative;
`

// TestLabDhclient is the whole cycle: dhcpd leases an address to a
// client namespace, the lease reaches the leases file, the release
// reaches dhcpd, and dhcpd restarts with a new config.
func TestLabDhclient(t *testing.T) {
	Require(t, "dhcpd", "dhclient")
	l := New(t)
	d := l.StartDhcpd(t, DhcpdConfig{
		Conf: testConf + l.SubnetConf("  range 203.0.113.100 203.0.113.150;"),
	})
	c := l.AddClient("c1")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ip, err := c.Dhclient(ctx)
	if err != nil {
		t.Fatalf("Dhclient: %v\ndhcpd:\n%s", err, d.Logs())
	}
	lo, hi := netip.MustParseAddr("203.0.113.100"), netip.MustParseAddr("203.0.113.150")
	if ip.Less(lo) || hi.Less(ip) {
		t.Errorf("leased %s, outside the range", ip)
	}
	leases := readFile(t, d.LeasesPath())
	if !strings.Contains(leases, "lease 203.0.113.") {
		t.Fatalf("no lease in %s:\n%s", d.LeasesPath(), leases)
	}
	for _, want := range []string{"lease " + ip.String() + " {", "hardware ethernet 02:00:00:00:00:01;", `client-hostname "c1";`} {
		if !strings.Contains(leases, want) {
			t.Errorf("leases file lacks %q:\n%s", want, leases)
		}
	}
	out, err := l.Exec(ctx, c.NS, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(string(out), ip.String()+"/24") {
		t.Errorf("eth0 not configured with %s/24: %v: %s", ip, err, out)
	}

	if err := c.Release(ctx); err != nil {
		t.Fatalf("Release: %v\ndhcpd:\n%s", err, d.Logs())
	}
	waitFor(t, 10*time.Second, "DHCPRELEASE in dhcpd's log", func() bool {
		return strings.Contains(d.Logs(), "DHCPRELEASE of "+ip.String())
	})
	// The release is appended as the IP's last block, free (no failover).
	leases = readFile(t, d.LeasesPath())
	last := leases[strings.LastIndex(leases, "lease "+ip.String()+" {"):]
	if !strings.Contains(last, "binding state free;") {
		t.Errorf("after release, last block for %s is not free:\n%s", ip, last)
	}

	pid := d.Pid()
	if err := d.Restart(testConf + l.SubnetConf("  range 203.0.113.160 203.0.113.170;")); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if d.Pid() == 0 || d.Pid() == pid {
		t.Errorf("pid after restart %d, before %d", d.Pid(), pid)
	}
	// The old range is gone, so the rewrite dropped the lease.
	if s := readFile(t, d.LeasesPath()); strings.Contains(s, "lease "+ip.String()) {
		t.Errorf("restart with a new range kept %s:\n%s", ip, s)
	}
	ip2, err := c.Dhclient(ctx)
	if err != nil {
		t.Fatalf("Dhclient after restart: %v\ndhcpd:\n%s", err, d.Logs())
	}
	if a := ip2.As4(); !ip2.Is4() || a[0] != 203 || a[1] != 0 || a[2] != 113 || a[3] < 160 || a[3] > 170 {
		t.Errorf("after restart leased %s, want 203.0.113.160-170", ip2)
	}
	if err := c.Kill(); err != nil {
		t.Errorf("Kill: %v", err)
	}
}

// TestLabCleanup checks that a lab leaves nothing behind: namespaces and
// processes are gone when the (sub)test that made them ends.
func TestLabCleanup(t *testing.T) {
	Require(t, "dhcpd", "dhclient")
	var names []string
	var pids []int
	t.Run("lab", func(t *testing.T) {
		l := New(t, WithAddr(netip.MustParsePrefix("198.51.100.1/24")))
		d := l.StartDhcpd(t, DhcpdConfig{Conf: testConf + l.SubnetConf("  range 198.51.100.10 198.51.100.20;")})
		c := l.AddClient("x")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.Dhclient(ctx); err != nil {
			t.Fatalf("Dhclient: %v", err)
		}
		names = append(names, l.NS, c.NS)
		pids = append(pids, d.Pid(), c.p.pid())
		// Leave everything running: cleanup must stop it.
	})
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, n := range names {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == n {
				t.Errorf("namespace %s survived its test", n)
			}
		}
	}
	for _, pid := range pids {
		// The lab reaps its children, so a live /proc entry would be a
		// survivor (or, improbably soon, a reused pid).
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			if strings.Contains(string(cmd), "dhc") {
				t.Errorf("pid %d (%q) survived its test", pid, cmd)
			}
		}
	}
}

// TestLabCheckLeaseFile pins dhcpd -T's behaviour: exit 0 even on a
// corrupt file, so the problems must be read from its output.
func TestLabCheckLeaseFile(t *testing.T) {
	conf := testConf + "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.100 203.0.113.150; }\n"
	good := `lease 203.0.113.100 {
  starts 1 2020/01/06 00:00:00;
  ends never;
  binding state active;
  hardware ethernet 02:00:00:00:00:01;
}
`
	c, err := CheckLeaseFile(t, DhcpdConfig{Conf: conf, Leases: good})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Problems) != 0 || c.Wrote != 1 {
		t.Errorf("good file: problems %q, wrote %d (want none, 1):\n%s", c.Problems, c.Wrote, c.Output)
	}
	bad := "lease 203.0.113.101 {\n  bogus thing;\n}\n" + good
	c, err = CheckLeaseFile(t, DhcpdConfig{Conf: conf, Leases: bad})
	if err != nil {
		t.Fatalf("dhcpd -T failed on a corrupt leases file (it used to exit 0): %v", err)
	}
	if len(c.Problems) == 0 {
		t.Errorf("corrupt file: no problems found in:\n%s", c.Output)
	}
	if _, err := CheckLeaseFile(t, DhcpdConfig{Conf: "subnet oops {", Leases: good}); err == nil {
		t.Error("bad dhcpd.conf: no error")
	}
}

// TestLabRunnableCopy runs dhcpd the way the lab does under AppArmor:
// from a copy in a temporary directory.
func TestLabRunnableCopy(t *testing.T) {
	if _, err := LookBin("dhcpd"); err != nil {
		t.Skipf("%v (install isc-dhcp-server)", err)
	}
	dir := t.TempDir()
	p, err := runnable("dhcpd", dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p, dir) {
		t.Errorf("confined: runs %s, want a copy under %s", p, dir)
	}
	out, err := exec.Command(p, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "isc-dhcpd") {
		t.Errorf("%s --version: %v: %s", p, err, out)
	}
}

func TestLabAllowed(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want bool
	}{
		{"203.0.113.1/24", true},
		{"198.51.100.254/24", true},
		{"198.18.0.1/15", true},
		{"198.19.255.1/16", true},
		{"203.0.113.1/23", false}, // subnet spills out of the range
		{"192.0.2.1/24", false},
		{"10.0.0.1/8", false},
	} {
		if got := allowedPrefix(netip.MustParsePrefix(tc.p)); got != tc.want {
			t.Errorf("allowedPrefix(%s) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestLabAllowed6(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want bool
	}{
		{"2001:db8:1::1/64", true},
		{"2001:db8::1/32", true},
		{"2001:db8::1/31", false}, // subnet spills out of the prefix
		{"2001:db9::1/64", false},
		{"fd00::1/64", false},
		{"::ffff:203.0.113.1/120", false},
	} {
		if got := allowedPrefix6(netip.MustParsePrefix(tc.p)); got != tc.want {
			t.Errorf("allowedPrefix6(%s) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if !Allowed(netip.MustParseAddr("2001:db8::5")) || Allowed(netip.MustParseAddr("2001:4860::1")) {
		t.Error("Allowed: IPv6 outside 2001:db8::/32 must be refused, inside accepted")
	}
}

// TestLabDhcpd6: a lab made WithIPv6 runs dhcpd -6 on its bridge, which
// rewrites its leases file at start; IPv6 stays off everywhere else in
// the namespace.
func TestLabDhcpd6(t *testing.T) {
	Require(t, "dhcpd")
	t.Parallel()
	l := New(t, WithIPv6(netip.MustParsePrefix("2001:db8:1::1/64")))
	d := l.StartDhcpd(t, DhcpdConfig{Family: 6,
		Conf: l.Subnet6Conf("range6 2001:db8:1::100 2001:db8:1::1ff;")})
	if !strings.Contains(d.Logs(), "2001:db8:1::/64") {
		t.Errorf("dhcpd -6 does not serve the bridge's subnet; its log:\n%s", d.Logs())
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, d.LeasesPath()); !strings.Contains(got, "server-duid") {
		t.Errorf("leases file not rewritten:\n%s", got)
	}
	out, err := l.Exec(context.Background(), l.NS, "/bin/sh", "-c", "cat /proc/sys/net/ipv6/conf/default/disable_ipv6 /proc/sys/net/ipv6/conf/lo/disable_ipv6")
	if err != nil || strings.Fields(string(out))[0] != "1" || strings.Fields(string(out))[1] != "1" {
		t.Errorf("IPv6 must stay disabled off the bridge: %q, %v", out, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnixgramQlen: the socket's queue takes qlen+1 datagrams (the kernel
// refuses a datagram once more than qlen wait), whatever the host's
// net.unix.max_dgram_qlen, which it leaves as it found it.
func TestUnixgramQlen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace")
	}
	host, err := os.ReadFile("/proc/sys/net/unix/max_dgram_qlen")
	if err != nil {
		t.Skip(err)
	}
	for _, qlen := range []int{3, 10, 40} {
		path := filepath.Join(t.TempDir(), "q.sock")
		f, err := UnixgramQlen(path, qlen)
		if err != nil {
			t.Fatal(err)
		}
		// One sender per datagram: a sender's own buffer never limits.
		sent := 0
		for ; sent < 1000; sent++ {
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			err = syscall.Sendto(fd, []byte("x"), 0, &syscall.SockaddrUnix{Name: path})
			syscall.Close(fd)
			if err == syscall.EAGAIN {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		if sent != qlen+1 {
			t.Errorf("qlen %d: the queue took %d datagrams, want %d", qlen, sent, qlen+1)
		}
	}
	if now, _ := os.ReadFile("/proc/sys/net/unix/max_dgram_qlen"); string(now) != string(host) {
		t.Errorf("host net.unix.max_dgram_qlen changed from %q to %q", host, now)
	}
}

// TestLabRunningRewrite: RestartRewritingAfter makes the running dhcpd do
// its hourly rewrite (ISC dhcp server/db.c, commit_leases) at the first
// commit after the delay: a new inode, same pid, the lease kept and
// nothing appended after it (the start's server-duid marker is absent).
func TestLabRunningRewrite(t *testing.T) {
	Require(t, "dhcpd", "dhclient", "cc")
	l := New(t)
	d := l.StartDhcpd(t, DhcpdConfig{
		Conf: testConf + l.SubnetConf("  range 203.0.113.100 203.0.113.150;"),
	})
	c := l.AddClient("c1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ip, err := c.Dhclient(ctx)
	if err != nil {
		t.Fatalf("Dhclient: %v\ndhcpd:\n%s", err, d.Logs())
	}
	const after = 3 * time.Second
	if err := d.RestartRewritingAfter(after); err != nil {
		t.Fatalf("RestartRewritingAfter: %v", err)
	}
	started, pid, ino := time.Now(), d.Pid(), d.Inode()
	// A commit before the rewrite is due appends; one after it rewrites.
	if err := c.Release(ctx); err != nil {
		t.Fatalf("Release: %v\ndhcpd:\n%s", err, d.Logs())
	}
	waitFor(t, 10*time.Second, "DHCPRELEASE in dhcpd's log", func() bool {
		return strings.Contains(d.Logs(), "DHCPRELEASE of "+ip.String())
	})
	if time.Since(started) < after-time.Second && d.Inode() != ino {
		t.Fatalf("dhcpd rewrote its leases file %v after the start, before the rewrite was due", time.Since(started))
	}
	time.Sleep(time.Until(started.Add(after + time.Second)))
	if ip, err = c.Dhclient(ctx); err != nil {
		t.Fatalf("Dhclient: %v\ndhcpd:\n%s", err, d.Logs())
	}
	waitFor(t, 10*time.Second, "a running rewrite", func() bool { return d.Inode() != ino })
	if d.Pid() != pid {
		t.Fatalf("dhcpd pid %d, was %d: restarted, not a running rewrite", d.Pid(), pid)
	}
	leases := readFile(t, d.LeasesPath())
	if !strings.HasSuffix(strings.TrimSpace(leases), "}") || strings.Contains(leases, "\nserver-duid ") {
		t.Errorf("running rewrite: want lease blocks only, no server-duid start marker:\n%s", leases)
	}
	if !strings.Contains(leases, "lease "+ip.String()+" {") {
		t.Errorf("running rewrite lost %s:\n%s", ip, leases)
	}
	if _, err := os.Stat(d.LeasesPath() + "~"); err != nil {
		t.Errorf("no backup of the old file: %v", err)
	}
	if err := c.Kill(); err != nil {
		t.Errorf("Kill: %v", err)
	}
}
