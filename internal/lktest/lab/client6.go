package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// DHCPv6 clients, in a lab made WithIPv6. IPv6 is turned on for the
// client's eth0 alone, when Dhclient6 first runs (no router
// advertisements, no autoconfiguration, no duplicate address detection),
// so its link-local traffic stays on the lab's bridge like everything
// else.

var (
	iaaddrRe = regexp.MustCompile(`RCV:[ |]*X-- IAADDR ([0-9a-fA-F:]+)`)
	boundRe6 = regexp.MustCompile(`PRC: Bound to lease`)
)

func (c *Client) path6(ext string) string { return filepath.Join(c.Dir, "dhclient6."+ext) }

// LeaseFile6 is dhclient -6's lease file (it holds the client's DUID as
// default-duid).
func (c *Client) LeaseFile6() string { return c.path6("leases") }

// Dhclient6 obtains an IPv6 address:
// `dhclient -6 -1 -d -v -sf true -cf CONF -lf LEASES6 -pf PID6 [args] eth0`
// (args such as "-D", "LL" choose the DUID's type; dhclient's default for
// an address is DUID-LLT, both with eth0's MAC), waits (bounded by ctx)
// until it is bound and returns the address dhcpd gave. dhclient stays
// running, renewing, until Release6, Kill or the end of the test. The
// address is not configured on eth0: a DHCPv6 release goes from the
// link-local address to the servers' multicast address.
func (c *Client) Dhclient6(ctx context.Context, args ...string) (netip.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lab.Addr6.IsValid() {
		return netip.Addr{}, fmt.Errorf("client %s: the lab has no IPv6 (make it WithIPv6)", c.Name)
	}
	if c.p != nil && !c.p.exited() {
		return netip.Addr{}, fmt.Errorf("client %s: dhclient already running (pid %d)", c.Name, c.p.pid())
	}
	if err := c.enableIPv6(ctx); err != nil {
		return netip.Addr{}, err
	}
	bin, err := c.lab.bin("dhclient")
	if err != nil {
		return netip.Addr{}, err
	}
	script := trueBin()
	if err := c.writeConf6(); err != nil {
		return netip.Addr{}, err
	}
	c.cleanupOnce()
	c.runs++
	off := c.logHeader(fmt.Sprintf("dhclient -6 %d", c.runs))
	argv := []string{bin, "-6", "-1", "-d", "-v", "-sf", script,
		"-cf", c.path6("conf"), "-lf", c.LeaseFile6(), "-pf", c.path6("pid")}
	argv = append(argv, args...)
	argv = append(argv, c.Iface)
	p, err := startProc(c.lab.Command(c.NS, argv...), c.path("log"))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("client %s: start dhclient -6: %w", c.Name, err)
	}
	c.p = p
	for {
		logs := readFrom(c.path("log"), off)
		if boundRe6.MatchString(logs) {
			ms := iaaddrRe.FindAllStringSubmatch(logs, -1)
			if len(ms) == 0 {
				return netip.Addr{}, fmt.Errorf("client %s: dhclient -6 bound without an IAADDR in its log:\n%s", c.Name, logs)
			}
			addr, err := netip.ParseAddr(ms[len(ms)-1][1])
			if err != nil || !Allowed(addr) || !c.lab.Addr6.Masked().Contains(addr) {
				c.p = nil
				_ = p.stop(syscall.SIGTERM, 2*time.Second)
				return netip.Addr{}, fmt.Errorf("client %s: dhcpd offered %q, outside the lab subnet %s (%v)", c.Name, ms[len(ms)-1][1], c.lab.Addr6.Masked(), err)
			}
			c.addr = addr
			return addr, nil
		}
		if p.exited() {
			c.p = nil
			return netip.Addr{}, fmt.Errorf("client %s: dhclient -6 exited without a lease (%v); its log:\n%s", c.Name, p.err, logs)
		}
		select {
		case <-ctx.Done():
			c.p = nil
			serr := p.stop(syscall.SIGTERM, 2*time.Second)
			return netip.Addr{}, fmt.Errorf("client %s: no lease: %w (stop: %v); dhclient's log:\n%s", c.Name, ctx.Err(), serr, logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Release6 runs `dhclient -6 -r` (bounded by ctx): it stops the running
// dhclient -6 through its pid file and sends a Release, so dhcpd frees
// the address and runs its on release.
func (c *Client) Release6(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.addr.Is6() {
		return fmt.Errorf("client %s: no DHCPv6 lease to release", c.Name)
	}
	bin, err := c.lab.bin("dhclient")
	if err != nil {
		return err
	}
	script := trueBin()
	c.logHeader("dhclient -6 -r")
	argv := []string{bin, "-6", "-r", "-v", "-sf", script,
		"-cf", c.path6("conf"), "-lf", c.LeaseFile6(), "-pf", c.path6("pid"), c.Iface}
	out, err := c.lab.Exec(ctx, c.NS, argv...)
	appendFile(c.path("log"), out)
	if err != nil {
		return fmt.Errorf("client %s: %w", c.Name, err)
	}
	if c.p != nil {
		select {
		case <-c.p.done:
		case <-time.After(5 * time.Second):
			err = errors.Join(fmt.Errorf("client %s: dhclient -6 survived dhclient -6 -r", c.Name),
				c.p.stop(syscall.SIGTERM, 2*time.Second))
		}
		c.p = nil
	}
	c.addr = netip.Addr{}
	return err
}

// cleanupOnce registers the stop of the running dhclient at the test's
// end, once per client. c.mu is held.
func (c *Client) cleanupOnce() {
	if c.cleanedUp {
		return
	}
	c.cleanedUp = true
	// Registered after the namespace's cleanup, so it runs first.
	c.lab.t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.p != nil {
			if err := c.p.stop(syscall.SIGTERM, 2*time.Second); err != nil {
				c.lab.t.Errorf("lab: cleanup: client %s: dhclient: %v", c.Name, err)
			}
			c.p = nil
		}
	})
}

// enableIPv6 turns IPv6 on for eth0 and waits for its link-local address
// (dhclient -6 sends from it and exits without one). The bridge stops
// snooping multicast, so the clients' and the server's DHCPv6 and
// neighbour-discovery multicast reach each other with no MLD querier.
func (c *Client) enableIPv6(ctx context.Context) error {
	dir := "/proc/sys/net/ipv6/conf/" + c.Iface
	script := fmt.Sprintf(`[ -d /proc/sys/net/ipv6 ] || { echo "no IPv6 in this kernel"; exit 1; }
echo 0 > %[1]s/accept_ra
echo 0 > %[1]s/autoconf
echo 0 > %[1]s/accept_dad
echo 0 > %[1]s/disable_ipv6`, dir)
	if out, err := c.lab.Exec(ctx, c.NS, "/bin/sh", "-c", script); err != nil {
		return fmt.Errorf("client %s: enable IPv6 on %s: %v: %s", c.Name, c.Iface, err, out)
	}
	if err := c.lab.setup(c.lab.NS, []string{"link", "set", c.lab.Bridge, "type", "bridge", "mcast_snooping", "0"}); err != nil {
		return fmt.Errorf("client %s: %w", c.Name, err)
	}
	for {
		out, err := c.lab.Exec(ctx, c.NS, c.lab.ip, "-6", "-o", "addr", "show", "dev", c.Iface, "scope", "link")
		if err == nil && strings.Contains(string(out), "fe80::") && !strings.Contains(string(out), "tentative") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("client %s: no link-local IPv6 address on %s: %w (%s)", c.Name, c.Iface, ctx.Err(), out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// writeConf6 writes the client's dhclient.conf for -6: a fast first
// retry, and DhclientConf.
func (c *Client) writeConf6() error {
	conf := "initial-interval 1;\nbackoff-cutoff 2;\n"
	if c.DhclientConf != "" {
		conf += c.DhclientConf + "\n"
	}
	return os.WriteFile(c.path6("conf"), []byte(conf), 0o644)
}
