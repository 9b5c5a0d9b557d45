package release

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// Format is a lease file's format.
type Format int

const (
	FormatUnknown  Format = iota
	FormatDhclient        // ISC dhclient (also NetworkManager's dhclient backend)
	FormatNetworkd        // systemd-networkd KEY=VALUE (also NetworkManager's internal client)
	FormatJSON            // a JSON file (networkd's DHCP server's leases; no client's): recognised, not read
	FormatDhcpcd          // dhcpcd: the server's DHCPACK as received
)

func (f Format) String() string {
	switch f {
	case FormatDhclient:
		return "dhclient"
	case FormatNetworkd:
		return "networkd"
	case FormatJSON:
		return "json"
	case FormatDhcpcd:
		return "dhcpcd"
	}
	return "unknown"
}

// Lease is one DHCPv4 lease as a client recorded it.
type Lease struct {
	// Interface is the interface the file names ("" when the format
	// does not record it: networkd and NetworkManager name it in the
	// file's name instead).
	Interface string
	Address   netip.Addr // the leased address (ciaddr of the release)
	Server    netip.Addr // server identifier (option 54); invalid if not recorded
	// ClientID is the client identifier (option 61) recorded with the
	// lease, nil if none.
	ClientID []byte
	// HWAddr is the Ethernet address the client leased with (chaddr),
	// as the file records it (dhcpcd's DHCPACK, whose chaddr the server
	// copies from the request: RFC 2131, table 3); nil when it does not
	// (dhclient, networkd), and the interface's address stands in.
	HWAddr net.HardwareAddr
	// Expire is when the lease ends, zero if the file does not say
	// (networkd records Lifetime only) or the lease never ends (Never).
	Expire time.Time
	Never  bool
	// Lifetime is the lease time the server granted (networkd's
	// LIFETIME, option 51 of dhcpcd's DHCPACK), 0 if not recorded.
	Lifetime time.Duration
	Line     int // where the lease starts in its file (1-based)
	// Written is when the lease's file was last written, for a format
	// that keeps one lease a file and rewrites it at every renewal
	// (dhcpcd); zero otherwise. dhcpcd keeps a file per wireless network
	// (IFACE-SSID.lease) and leaves the others: the newest is current.
	Written time.Time
}

// Expiry returns when the lease ends, and whether the file says. A
// networkd lease records its LIFETIME and no time: the file's
// modification time is no start, as networkd saves a renewal only when
// the file's content changes (sd-dhcp-lease.c, dhcp_lease_save:
// conservative_rename keeps the old file, and its time, when the new
// one is the same), and a server granting the same lease time every
// time makes it the same. Its end is unknown; the address still on the
// interface tells it has not passed (networkd removes it at the end,
// and gives the kernel the lease's lifetime as the address's). A dhcpcd
// lease is read the same way (ParseDhcpcd says why).
func (l Lease) Expiry() (time.Time, bool) {
	if l.Never || l.Expire.IsZero() {
		return time.Time{}, false
	}
	return l.Expire, true
}

// Detect tells a lease file's format from its content: dhclient files
// are made of "lease {…}" blocks (and "lease6", "default-duid"),
// networkd's of KEY=VALUE lines, newer systemd's are a JSON object,
// dhcpcd's a binary DHCP reply.
func Detect(content []byte) Format {
	if isDhcpcdLease(content) {
		return FormatDhcpcd
	}
	for _, line := range bytes.Split(content, []byte("\n")) {
		// Empty dhclient statements (";") say nothing about the format.
		line = bytes.TrimLeft(bytes.TrimSpace(line), "; \t")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		switch {
		case line[0] == '{':
			return FormatJSON
		case hasWord(line, "lease"), hasWord(line, "lease6"), hasWord(line, "default-duid"):
			return FormatDhclient
		}
		if i := bytes.IndexByte(line, '='); i > 0 && isKey(line[:i]) {
			return FormatNetworkd
		}
		return FormatUnknown
	}
	return FormatUnknown
}

func hasWord(line []byte, w string) bool {
	if !bytes.HasPrefix(line, []byte(w)) {
		return false
	}
	rest := line[len(w):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '{' || rest[0] == '"'
}

func isKey(b []byte) bool {
	for _, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Parse reads a lease file of any supported format. For dhclient files
// it returns every lease block, in file order (the last one per
// interface is the current one: see Current); networkd and dhcpcd
// files hold one lease. Leases are returned with the error when part of the file could
// be read (a torn last block).
func Parse(r io.Reader) (Format, []Lease, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxFile+1))
	if err != nil {
		return FormatUnknown, nil, err
	}
	if len(b) > maxFile {
		return FormatUnknown, nil, fmt.Errorf("larger than %d bytes: not a lease file", maxFile)
	}
	f := Detect(b)
	switch f {
	case FormatDhclient:
		ls, err := ParseDhclient(bytes.NewReader(b))
		return f, ls, err
	case FormatNetworkd:
		l, err := ParseNetworkd(bytes.NewReader(b))
		if err != nil {
			return f, nil, err
		}
		return f, []Lease{l}, nil
	case FormatDhcpcd:
		l, err := ParseDhcpcd(b)
		if err != nil {
			return f, nil, err
		}
		return f, []Lease{l}, nil
	case FormatJSON:
		return f, nil, fmt.Errorf("a JSON file (the format of networkd's DHCP server leases, not a client's): not supported")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return f, nil, nil
	}
	return f, nil, fmt.Errorf("not a dhclient, systemd-networkd, NetworkManager or dhcpcd lease file")
}

// maxFile bounds what Parse reads: dhclient appends a block per renewal
// and trims the file only when it restarts, but never to megabytes.
const maxFile = 16 << 20

// Current returns the current lease per interface: the last block that
// names it, in order of first appearance. Leases without an interface
// are returned as they are, in order.
func Current(leases []Lease) []Lease {
	last := map[string]int{}
	var order []string
	var out []Lease
	for i, l := range leases {
		if l.Interface == "" {
			continue
		}
		if _, ok := last[l.Interface]; !ok {
			order = append(order, l.Interface)
		}
		last[l.Interface] = i
	}
	for _, l := range leases {
		if l.Interface == "" {
			out = append(out, l)
		}
	}
	for _, name := range order {
		out = append(out, leases[last[name]])
	}
	return out
}
