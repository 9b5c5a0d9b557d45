package lab

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Link is a second link between a client's namespace and the server
// namespace, beside the bridge: a veth pair with an address on each end.
// A client with a Link is multi-homed; what it reaches through which
// link is up to the routes and the addresses the test chooses.
type Link struct {
	ClientIface string       // in the client's namespace
	ServerIface string       // in the server namespace
	ClientAddr  netip.Prefix // on ClientIface
	ServerAddr  netip.Prefix // on ServerIface
}

var ifaceName = regexp.MustCompile(`^[a-z][a-z0-9]{0,14}$`)

// AddLink joins the client's namespace to the server namespace with
// another veth pair, clientIface (addressed clientAddr) to serverIface
// (addressed serverAddr), both up. The two addresses must share one
// subnet inside an allowed range. The pair goes when the namespaces do.
// A dhcpd that should listen on serverIface must be started after
// AddLink, with serverIface among its interfaces (DhcpdConfig.ExtraArgs)
// and a subnet declaration for it.
func (c *Client) AddLink(clientIface, serverIface string, clientAddr, serverAddr netip.Prefix) (*Link, error) {
	l := c.lab
	for _, n := range []string{clientIface, serverIface} {
		if !ifaceName.MatchString(n) {
			return nil, fmt.Errorf("lab: link %s: interface name %q: want 1-15 lower-case letters or digits", clientIface, n)
		}
	}
	if !allowedPrefix(clientAddr) || !allowedPrefix(serverAddr) || clientAddr.Masked() != serverAddr.Masked() || clientAddr.Addr() == serverAddr.Addr() {
		return nil, fmt.Errorf("lab: link %s: addresses %s and %s: want two addresses of one subnet inside 203.0.113.0/24, 198.51.100.0/24 or 198.18.0.0/15", clientIface, clientAddr, serverAddr)
	}
	err := l.setup(c.NS,
		[]string{"link", "add", clientIface, "type", "veth", "peer", "name", serverIface, "netns", l.NS},
		[]string{"addr", "add", clientAddr.String(), "dev", clientIface},
		[]string{"link", "set", clientIface, "up"},
	)
	if err == nil {
		err = l.setup(l.NS,
			[]string{"addr", "add", serverAddr.String(), "dev", serverIface},
			[]string{"link", "set", serverIface, "up"},
		)
	}
	if err != nil {
		return nil, fmt.Errorf("lab: client %s: %w", c.Name, err)
	}
	return &Link{ClientIface: clientIface, ServerIface: serverIface, ClientAddr: clientAddr, ServerAddr: serverAddr}, nil
}

// IP runs `ip -n NS ARGS…` for each argument list, in order, in one of
// the lab's namespaces (the server's or a client's), e.g. to add a
// route. Addresses in the arguments are the caller's to keep inside the
// allowed ranges.
func (l *Lab) IP(ns string, cmds ...[]string) error {
	if err := l.own(ns); err != nil {
		return err
	}
	return l.setup(ns, cmds...)
}

var sysctlKey = regexp.MustCompile(`^net/ipv4/[a-z0-9_./-]+$`)

// Sysctl writes value to /proc/sys/KEY inside one of the lab's
// namespaces; only per-namespace IPv4 keys (net/ipv4/…) are accepted,
// e.g. "net/ipv4/conf/all/arp_ignore".
func (l *Lab) Sysctl(ns, key, value string) error {
	if err := l.own(ns); err != nil {
		return err
	}
	if !sysctlKey.MatchString(key) || strings.Contains(key, "..") {
		return fmt.Errorf("lab: sysctl %q: only net/ipv4/… keys", key)
	}
	if _, err := strconv.ParseUint(value, 10, 32); err != nil {
		return fmt.Errorf("lab: sysctl %s: value %q: want a number", key, value)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	if _, err := l.Exec(ctx, ns, "/bin/sh", "-c", "echo "+value+" > /proc/sys/"+key); err != nil {
		return fmt.Errorf("lab: sysctl %s=%s in %s: %w", key, value, ns, err)
	}
	return nil
}

// own refuses a namespace this lab did not create.
func (l *Lab) own(ns string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ns != "" && ns == l.NS {
		return nil
	}
	for _, c := range l.clients {
		if c.NS != "" && c.NS == ns {
			return nil
		}
	}
	return fmt.Errorf("lab: namespace %q is not one of this lab's", ns)
}
