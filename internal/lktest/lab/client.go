package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client is a client namespace whose eth0 sits on the lab's bridge.
type Client struct {
	Name     string
	NS       string           // the client's namespace
	Iface    string           // "eth0", in NS
	Peer     string           // the veth end enslaved to the bridge, in the server namespace
	MAC      net.HardwareAddr // eth0's address
	Hostname string           // the host-name option dhclient sends ("" sends none)
	Dir      string           // dhclient.conf, .leases, .pid and .log
	// DhclientConf is appended to the client's dhclient.conf
	// (WithDhclientConf).
	DhclientConf string

	lab *Lab

	mu        sync.Mutex
	p         *proc // the running dhclient
	addr      netip.Addr
	runs      int
	cleanedUp bool
}

var boundRe = regexp.MustCompile(`bound to (\d+\.\d+\.\d+\.\d+)`)

func (c *Client) path(ext string) string { return filepath.Join(c.Dir, "dhclient."+ext) }

// LeaseFile is dhclient's lease file.
func (c *Client) LeaseFile() string { return c.path("leases") }

// Logs returns everything dhclient logged in this client.
func (c *Client) Logs() string { return readFrom(c.path("log"), 0) }

// Addr is the address the last Dhclient configured, invalid after
// Release.
func (c *Client) Addr() netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// Dhclient obtains a lease:
// `dhclient -4 -1 -d -v -sf true -cf CONF -lf LEASES -pf PID [args] eth0`,
// waits (bounded by ctx) until it is bound, then adds the address to eth0
// itself (the script is /bin/true) so that a later Release can unicast
// to the server. dhclient stays running in the foreground, renewing like
// a real client, until Release, Kill or the end of the test.
func (c *Client) Dhclient(ctx context.Context, args ...string) (netip.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p != nil && !c.p.exited() {
		return netip.Addr{}, fmt.Errorf("client %s: dhclient already running (pid %d)", c.Name, c.p.pid())
	}
	bin, err := c.lab.bin("dhclient")
	if err != nil {
		return netip.Addr{}, err
	}
	script := trueBin()
	if err := c.writeConf(); err != nil {
		return netip.Addr{}, err
	}
	if !c.cleanedUp {
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
	c.runs++
	off := c.logHeader(fmt.Sprintf("dhclient %d", c.runs))
	argv := []string{bin, "-4", "-1", "-d", "-v", "-sf", script,
		"-cf", c.path("conf"), "-lf", c.LeaseFile(), "-pf", c.path("pid")}
	argv = append(argv, args...)
	argv = append(argv, c.Iface)
	p, err := startProc(c.lab.Command(c.NS, argv...), c.path("log"))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("client %s: start dhclient: %w", c.Name, err)
	}
	c.p = p

	var addr netip.Addr
	for !addr.IsValid() {
		logs := readFrom(c.path("log"), off)
		if m := boundRe.FindStringSubmatch(logs); m != nil {
			addr, err = netip.ParseAddr(m[1])
			if err != nil {
				return netip.Addr{}, fmt.Errorf("client %s: %v", c.Name, err)
			}
			break
		}
		if p.exited() {
			c.p = nil
			return netip.Addr{}, fmt.Errorf("client %s: dhclient exited without a lease (%v); its log:\n%s", c.Name, p.err, logs)
		}
		select {
		case <-ctx.Done():
			c.p = nil
			serr := p.stop(syscall.SIGTERM, 2*time.Second)
			return netip.Addr{}, fmt.Errorf("client %s: no lease: %w (stop: %v); dhclient's log:\n%s", c.Name, ctx.Err(), serr, logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !Allowed(addr) || !c.lab.Addr.Masked().Contains(addr) {
		c.p = nil
		_ = p.stop(syscall.SIGTERM, 2*time.Second)
		return netip.Addr{}, fmt.Errorf("client %s: dhcpd offered %s, outside the lab subnet %s: not configuring it", c.Name, addr, c.lab.Addr.Masked())
	}
	pfx := netip.PrefixFrom(addr, c.lab.Addr.Bits())
	if err := c.lab.setup(c.NS, []string{"addr", "replace", pfx.String(), "dev", c.Iface}); err != nil {
		return netip.Addr{}, fmt.Errorf("client %s: %w", c.Name, err)
	}
	c.addr = addr
	return addr, nil
}

// Release runs `dhclient -r` (bounded by ctx): it stops the running
// dhclient through the pid file and unicasts a DHCPRELEASE to the server,
// so dhcpd frees the lease and runs its on release. The address is then
// removed from eth0.
func (c *Client) Release(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.addr.IsValid() {
		return fmt.Errorf("client %s: no lease to release", c.Name)
	}
	bin, err := c.lab.bin("dhclient")
	if err != nil {
		return err
	}
	script := trueBin()
	c.logHeader("dhclient -r")
	argv := []string{bin, "-4", "-r", "-v", "-sf", script,
		"-cf", c.path("conf"), "-lf", c.LeaseFile(), "-pf", c.path("pid"), c.Iface}
	out, err := c.lab.Exec(ctx, c.NS, argv...)
	appendFile(c.path("log"), out)
	if err != nil {
		return fmt.Errorf("client %s: %w", c.Name, err)
	}
	if c.p != nil {
		// dhclient -r sent it SIGTERM and waited; reap it.
		select {
		case <-c.p.done:
		case <-time.After(5 * time.Second):
			err = errors.Join(fmt.Errorf("client %s: dhclient survived dhclient -r", c.Name),
				c.p.stop(syscall.SIGTERM, 2*time.Second))
		}
		c.p = nil
	}
	pfx := netip.PrefixFrom(c.addr, c.lab.Addr.Bits())
	if serr := c.lab.setup(c.NS, []string{"addr", "del", pfx.String(), "dev", c.Iface}); serr != nil {
		err = errors.Join(err, serr)
	}
	c.addr = netip.Addr{}
	return err
}

// Kill makes the client vanish the way a destroyed container does: its
// dhclient dies by SIGKILL and sends nothing; the address stays on eth0.
func (c *Client) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p == nil || c.p.exited() {
		c.p = nil
		return fmt.Errorf("client %s: dhclient: %w", c.Name, errStopped)
	}
	err := c.p.stop(syscall.SIGKILL, 5*time.Second)
	c.p = nil
	// A later dhclient -r must not signal whatever reuses the pid.
	if rerr := os.Remove(c.path("pid")); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// writeConf writes the client's own dhclient.conf (not
// /etc/dhcp/dhclient.conf, whose host-name is the machine's).
func (c *Client) writeConf() error {
	var b strings.Builder
	if c.Hostname != "" {
		for _, r := range c.Hostname {
			if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
				return fmt.Errorf("client %s: host name %q: printable ASCII without quotes or backslashes only", c.Name, c.Hostname)
			}
		}
		fmt.Fprintf(&b, "send host-name \"%s\";\n", c.Hostname)
	}
	// Retry fast: the first DISCOVER may race the veth coming up.
	b.WriteString("initial-interval 1;\nbackoff-cutoff 2;\n")
	if c.DhclientConf != "" {
		b.WriteString(c.DhclientConf)
		b.WriteString("\n")
	}
	return os.WriteFile(c.path("conf"), []byte(b.String()), 0o644)
}

// logHeader marks a new run in the client's log and returns the offset
// after the mark.
func (c *Client) logHeader(what string) int64 {
	appendFile(c.path("log"), []byte("--- lab: "+what+" ---\n"))
	return fileSize(c.path("log"))
}

func appendFile(path string, b []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(b)
}
