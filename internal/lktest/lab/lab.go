package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// allowed are the only address ranges a lab may use: documentation
// ranges for labs, the benchmark range for load.
var allowed = []netip.Prefix{
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
}

// allowed6 is the only IPv6 range a lab may use (WithIPv6): the
// documentation prefix.
var allowed6 = netip.MustParsePrefix("2001:db8::/32")

// Allowed reports whether addr lies in a range labs may use.
func Allowed(addr netip.Addr) bool {
	if addr.Is6() && !addr.Is4In6() {
		return allowed6.Contains(addr)
	}
	for _, p := range allowed {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// packages names the Debian package of each binary, for skip messages.
var packages = map[string]string{
	"ip":          "iproute2",
	"dhcpd":       "isc-dhcp-server",
	"dhclient":    "isc-dhcp-client",
	"dhcpcd":      "dhcpcd-base",
	"dhcpd-pools": "dhcpd-pools",
	"perfdhcp":    "kea-admin",
}

// cmdTimeout bounds every setup and teardown command.
const cmdTimeout = 30 * time.Second

// LookBin finds a binary in PATH or in the sbin directories a non-root
// PATH often lacks.
func LookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH, /usr/sbin, /sbin or /usr/local/sbin", name)
}

// Require skips the test unless it runs as root, network namespaces can
// be created, and every named binary exists.
func Require(t testing.TB, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("lab: needs root (network namespaces, raw sockets)")
	}
	for _, b := range append([]string{"ip"}, bins...) {
		if _, err := LookBin(b); err != nil {
			if pkg, ok := packages[b]; ok {
				t.Skipf("lab: %v (install %s)", err, pkg)
			}
			t.Skipf("lab: %v", err)
		}
	}
	ip, _ := LookBin("ip")
	name := "lk-probe-" + randHex(4)
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, ip, "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("lab: cannot create network namespaces: %v: %s", err, bytes.TrimSpace(out))
	}
	if out, err := exec.CommandContext(ctx, ip, "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("lab: delete probe namespace %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// Option configures New.
type Option func(*config)

type config struct {
	addr  netip.Prefix
	addr6 netip.Prefix
}

// WithAddr sets the bridge's address and prefix (default 203.0.113.1/24).
// The subnet must lie inside one of the allowed ranges.
func WithAddr(p netip.Prefix) Option {
	return func(c *config) { c.addr = p }
}

// WithIPv6 enables IPv6 on the server namespace's bridge, and only
// there, with the address p (inside 2001:db8::/32, no duplicate address
// detection, no router advertisements), so that dhcpd -6 can serve it
// (StartDhcpd with Family 6). Client namespaces stay IPv4-only.
func WithIPv6(p netip.Prefix) Option {
	return func(c *config) { c.addr6 = p }
}

// Lab is a server namespace with a bridge, and the client namespaces
// attached to it.
type Lab struct {
	NS     string       // server namespace, "lk-" + 8 hex digits
	Bridge string       // "br0", in NS
	Addr   netip.Prefix // the bridge's address, e.g. 203.0.113.1/24
	Addr6  netip.Prefix // the bridge's IPv6 address (WithIPv6); invalid without
	Dir    string       // scratch directory removed with the test

	t  testing.TB
	ip string

	mu      sync.Mutex
	clients map[string]*Client
	bins    map[string]string // resolved (and maybe copied) binaries
}

// New creates a lab: the server namespace with br0 up and addressed,
// lo up and IPv6 disabled. It skips the test when Require would.
// Everything is removed when the test ends.
func New(t testing.TB, opts ...Option) *Lab {
	t.Helper()
	Require(t)
	cfg := config{addr: netip.MustParsePrefix("203.0.113.1/24")}
	for _, o := range opts {
		o(&cfg)
	}
	if !allowedPrefix(cfg.addr) {
		t.Fatalf("lab: address %s is outside 203.0.113.0/24, 198.51.100.0/24 and 198.18.0.0/15", cfg.addr)
	}
	if cfg.addr6.IsValid() && !allowedPrefix6(cfg.addr6) {
		t.Fatalf("lab: IPv6 address %s is outside 2001:db8::/32", cfg.addr6)
	}
	ip, _ := LookBin("ip")
	l := &Lab{
		Bridge:  "br0",
		Addr:    cfg.addr,
		Addr6:   cfg.addr6,
		Dir:     t.TempDir(),
		t:       t,
		ip:      ip,
		clients: make(map[string]*Client),
		bins:    make(map[string]string),
	}
	ns, err := l.addNetns("lk-" + randHex(4))
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	l.NS = ns
	t.Cleanup(func() { l.delNetns(ns) })

	if err := l.setup(ns,
		[]string{"link", "set", "lo", "up"},
		[]string{"link", "add", l.Bridge, "type", "bridge", "forward_delay", "0"},
		[]string{"addr", "add", l.Addr.String(), "dev", l.Bridge},
		[]string{"link", "set", l.Bridge, "up"},
	); err != nil {
		t.Fatalf("lab: %v", err)
	}
	if l.Addr6.IsValid() {
		if err := l.enableIPv6(); err != nil {
			t.Fatalf("lab: %v", err)
		}
	}
	return l
}

// enableIPv6 turns IPv6 on for the bridge alone (the namespace's default
// stays off, so veths added later have none) and gives it Addr6.
func (l *Lab) enableIPv6() error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	dir := "/proc/sys/net/ipv6/conf/" + l.Bridge
	script := fmt.Sprintf(`[ -d /proc/sys/net/ipv6 ] || { echo "no IPv6 in this kernel"; exit 1; }
echo 0 > %[1]s/accept_ra
echo 0 > %[1]s/autoconf
echo 0 > %[1]s/accept_dad
echo 0 > %[1]s/disable_ipv6`, dir)
	if out, err := l.Exec(ctx, l.NS, "/bin/sh", "-c", script); err != nil {
		return fmt.Errorf("enable IPv6 on %s: %v: %s", l.Bridge, err, out)
	}
	return l.setup(l.NS, []string{"addr", "add", l.Addr6.String(), "dev", l.Bridge, "nodad"})
}

// allowedPrefix6 reports whether an IPv6 bridge address and its whole
// subnet lie inside 2001:db8::/32.
func allowedPrefix6(p netip.Prefix) bool {
	return p.IsValid() && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() >= allowed6.Bits() && allowed6.Contains(p.Addr())
}

// allowedPrefix reports whether a bridge address and its whole subnet
// lie inside one allowed range.
func allowedPrefix(p netip.Prefix) bool {
	if !p.IsValid() || !p.Addr().Is4() {
		return false
	}
	for _, a := range allowed {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// addNetns creates a namespace, with another random name if it exists
// (a leftover of a crashed run is never touched), and disables IPv6 in it.
func (l *Lab) addNetns(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	base := name
	for i := 0; ; i++ {
		out, err := exec.CommandContext(ctx, l.ip, "netns", "add", name).CombinedOutput()
		if err == nil {
			break
		}
		if i < 5 && bytes.Contains(out, []byte("exists")) {
			name = base + randHex(1)
			continue
		}
		return "", fmt.Errorf("ip netns add %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
	// Before any interface exists, so "default" covers them all.
	const script = `[ -d /proc/sys/net/ipv6 ] || exit 0
echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6`
	if out, err := l.Exec(ctx, name, "/bin/sh", "-c", script); err != nil {
		l.delNetns(name)
		return "", fmt.Errorf("disable IPv6 in %s: %v: %s", name, err, out)
	}
	return name, nil
}

// delNetns deletes a namespace this lab created.
func (l *Lab) delNetns(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, l.ip, "netns", "del", name).CombinedOutput(); err != nil {
		l.t.Errorf("lab: cleanup: ip netns del %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
}

// setup runs `ip -n ns ARGS…` for each argument list, in order.
func (l *Lab) setup(ns string, cmds ...[]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	for _, c := range cmds {
		args := append([]string{"-n", ns}, c...)
		if out, err := exec.CommandContext(ctx, l.ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// Command returns a command running argv inside namespace ns (the
// server's or a client's). `ip netns exec` execs argv in place, so the
// started process's pid is argv's.
func (l *Lab) Command(ns string, argv ...string) *exec.Cmd {
	return l.CommandContext(context.Background(), ns, argv...)
}

// CommandContext is Command bound to ctx.
func (l *Lab) CommandContext(ctx context.Context, ns string, argv ...string) *exec.Cmd {
	if ns == "" {
		// Never fall through to the host namespace.
		panic("lab: Command with an empty namespace")
	}
	return exec.CommandContext(ctx, l.ip, append([]string{"netns", "exec", ns}, argv...)...)
}

// Exec runs argv inside namespace ns and returns its combined output; the
// error includes the output.
func (l *Lab) Exec(ctx context.Context, ns string, argv ...string) ([]byte, error) {
	out, err := l.CommandContext(ctx, ns, argv...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s in %s: %w: %s", strings.Join(argv, " "), ns, err, bytes.TrimSpace(out))
	}
	return out, nil
}

// SubnetConf returns a dhcpd subnet declaration for the bridge's subnet
// with body inside, e.g. SubnetConf("range 203.0.113.100 203.0.113.150;").
func (l *Lab) SubnetConf(body string) string {
	p := l.Addr.Masked()
	mask := net.CIDRMask(p.Bits(), 32)
	return fmt.Sprintf("subnet %s netmask %s {\n%s\n}\n", p.Addr(), net.IP(mask).String(), body)
}

// Subnet6Conf returns a dhcpd subnet6 declaration for the bridge's IPv6
// subnet (WithIPv6) with body inside.
func (l *Lab) Subnet6Conf(body string) string {
	return fmt.Sprintf("subnet6 %s {\n%s\n}\n", l.Addr6.Masked(), body)
}

// bin returns the path to run a binary from, copied into the lab's
// directory when AppArmor would confine the system one.
func (l *Lab) bin(name string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.bins[name]; ok {
		return p, nil
	}
	p, err := runnable(name, l.Dir, apparmorEnabled())
	if err != nil {
		return "", err
	}
	l.bins[name] = p
	return p, nil
}

var clientName = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// ClientOption configures AddClient.
type ClientOption func(*Client)

// WithMAC sets the client's eth0 MAC (default 02:00:00:00:00:NN, NN the
// client's 1-based index in the lab).
func WithMAC(hw net.HardwareAddr) ClientOption {
	return func(c *Client) { c.MAC = hw }
}

// WithHostname sets the host-name dhclient sends (default: the client's
// name).
func WithHostname(name string) ClientOption {
	return func(c *Client) { c.Hostname = name }
}

// WithDhclientConf appends statements to the dhclient.conf the lab
// writes for the client, e.g. `send dhcp-client-identifier 1:2:0:0:0:0:1;`.
func WithDhclientConf(statements string) ClientOption {
	return func(c *Client) { c.DhclientConf = statements }
}

// AddClient creates a client namespace named after the lab and name
// (1–8 lower-case letters or digits) with eth0 joined to the bridge.
func (l *Lab) AddClient(name string, opts ...ClientOption) *Client {
	l.t.Helper()
	if !clientName.MatchString(name) {
		l.t.Fatalf("lab: client name %q: want 1-8 lower-case letters or digits", name)
	}
	l.mu.Lock()
	if _, dup := l.clients[name]; dup {
		l.mu.Unlock()
		l.t.Fatalf("lab: client %q added twice", name)
	}
	n := len(l.clients) + 1
	c := &Client{
		Name:     name,
		Iface:    "eth0",
		Peer:     "v" + name,
		MAC:      net.HardwareAddr{0x02, 0, 0, 0, byte(n >> 8), byte(n)},
		Hostname: name,
		lab:      l,
	}
	l.clients[name] = c
	l.mu.Unlock()
	for _, o := range opts {
		o(c)
	}
	if len(c.MAC) != 6 {
		l.t.Fatalf("lab: client %s: MAC %v is not 6 bytes", name, c.MAC)
	}
	dir := filepath.Join(l.Dir, "client-"+name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	c.Dir = dir

	ns, err := l.addNetns(l.NS + "-" + name)
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	c.NS = ns
	// Registered after the server's, so it runs first.
	l.t.Cleanup(func() { l.delNetns(ns) })

	err = l.setup(ns,
		[]string{"link", "set", "lo", "up"},
		[]string{"link", "add", c.Iface, "type", "veth", "peer", "name", c.Peer, "netns", l.NS},
		[]string{"link", "set", c.Iface, "address", c.MAC.String()},
		[]string{"link", "set", c.Iface, "up"},
	)
	if err == nil {
		err = l.setup(l.NS,
			[]string{"link", "set", c.Peer, "master", l.Bridge},
			[]string{"link", "set", c.Peer, "up"},
		)
	}
	if err != nil {
		l.t.Fatalf("lab: client %s: %v", name, err)
	}
	return c
}

// errStopped is returned for operations on a process that is not running.
var errStopped = errors.New("not running")
