package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// DhcpcdDB is the client's dhcpcd database directory: what dhcpcd and
// NodeCommand see at /var/lib/dhcpcd (the lease is eth0.lease in it).
func (c *Client) DhcpcdDB() string { return filepath.Join(c.Dir, "dhcpcd-db") }

// nodeScript gives the command after it a view of the node's own state,
// not the host's: empty /var/lib and /run (so no host lease file, pid
// file or control socket is read or written) with the client's dhcpcd
// database at /var/lib/dhcpcd. `ip netns exec` runs each command in a
// mount namespace of its own whose mounts do not propagate back, so the
// host never sees these mounts, and they go with the command.
const nodeScript = `set -e
mount -t tmpfs lab /var/lib
mount -t tmpfs lab /run
mkdir /var/lib/dhcpcd
mount --bind "$0" /var/lib/dhcpcd
exec "$@"`

// NodeCommand runs argv in the client's namespace as on a node of its
// own: /var/lib and /run are the client's (see DhcpcdDB), not the host's.
func (c *Client) NodeCommand(ctx context.Context, argv ...string) *exec.Cmd {
	if err := os.MkdirAll(c.DhcpcdDB(), 0o755); err != nil {
		c.lab.t.Fatalf("lab: %v", err)
	}
	return c.lab.CommandContext(ctx, c.NS, append([]string{"sh", "-c", nodeScript, c.DhcpcdDB()}, argv...)...)
}

// dhcpcdConf is Debian's dhcpcd.conf (dhcpcd-base 9.4.1) as it bears on
// a lease: a DUID-based client identifier (RFC 4361), the address kept
// when dhcpcd stops (persistent), a server identifier required; plus,
// for the lab's speed, no ARP probe of the offered address and no
// link-local fallback.
const dhcpcdConf = `duid
persistent
require dhcp_server_identifier
option domain_name_servers, domain_name, domain_search
noarp
noipv4ll
`

var leasedRe = regexp.MustCompile(`leased (\d+\.\d+\.\d+\.\d+) for`)

// Dhcpcd obtains a lease with real dhcpcd as a node whose network it
// runs: `dhcpcd -4 -1 -B -d -f CONF -c /bin/true eth0` under
// NodeCommand. dhcpcd configures the address itself, writes the lease
// to DhcpcdDB()/eth0.lease and, being one-shot, exits once bound; the
// address stays (persistent), as on a node whose dhcpcd was stopped
// without releasing. Hooks are not run (the script is /bin/true).
func (c *Client) Dhcpcd(ctx context.Context) (netip.Addr, error) {
	bin, err := c.lab.bin("dhcpcd")
	if err != nil {
		return netip.Addr{}, err
	}
	script := trueBin()
	conf := filepath.Join(c.Dir, "dhcpcd.conf")
	if err := os.WriteFile(conf, []byte(dhcpcdConf), 0o644); err != nil {
		return netip.Addr{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := c.NodeCommand(ctx, bin, "-4", "-1", "-B", "-d", "-f", conf, "-c", script, c.Iface).CombinedOutput()
	appendFile(filepath.Join(c.Dir, "dhcpcd.log"), out)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("client %s: dhcpcd: %w; its output:\n%s", c.Name, err, out)
	}
	m := leasedRe.FindSubmatch(out)
	if m == nil {
		return netip.Addr{}, fmt.Errorf("client %s: dhcpcd exited without a lease; its output:\n%s", c.Name, out)
	}
	addr, err := netip.ParseAddr(string(m[1]))
	if err != nil {
		return netip.Addr{}, err
	}
	if !Allowed(addr) || !c.lab.Addr.Masked().Contains(addr) {
		return netip.Addr{}, fmt.Errorf("client %s: dhcpd offered %s, outside the lab subnet %s", c.Name, addr, c.lab.Addr.Masked())
	}
	c.mu.Lock()
	c.addr = addr
	c.mu.Unlock()
	return addr, nil
}
