package pools

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// Problem kinds reported by Check.
const (
	// KindOrphan: an active lease outside every configured range. dhcpd's
	// next rewrite drops it without running on-expiry, so the region keeps
	// the address forever unless something else reports it.
	KindOrphan = "orphan"
	// KindDuplicateMAC: one hardware address holds several active leases.
	KindDuplicateMAC = "duplicate-mac"
	// KindFixedAddress: an active dynamic lease on an address a host
	// declaration reserves.
	KindFixedAddress = "fixed-address"
)

// Problem is one finding of Check.
type Problem struct {
	Kind   string   `json:"kind"`
	IP     string   `json:"ip,omitempty"`
	IPs    []string `json:"ips,omitempty"`
	MAC    string   `json:"mac,omitempty"`
	Host   string   `json:"host,omitempty"`
	Detail string   `json:"detail"`
}

// Check finds the inconsistencies between a lease table and its
// configuration that an operator must act on, sorted by kind then address.
// Host fixed addresses written as DNS names cannot be checked without
// resolving them and are returned in unresolved.
func Check(cfg *dhcpdconf.Config, t *parser.Table, now parser.Time) (problems []Problem, unresolved []string) {
	idx := newIndex(cfg.Ranges)
	fixed := map[netip.Addr]string{}
	addFixed := func(name string, addrs []string) {
		for _, a := range addrs {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				unresolved = append(unresolved, name+": "+a)
				continue
			}
			fixed[ip] = name
		}
	}
	for _, h := range cfg.Hosts {
		addFixed(h.Name, h.FixedAddresses)
	}
	for _, h := range t.Hosts() {
		addFixed(h.Name, h.FixedAddresses)
	}

	byMAC := map[string][]*parser.Lease{}
	for _, l := range t.Leases() {
		if l.Binding(now) != parser.StateActive {
			continue
		}
		mac := parser.HexString(l.HardwareAddr)
		ip := l.Key().String()
		if l.PrefixLen == 0 {
			ip = l.IP.String()
		}
		if !idx.contains(l) {
			problems = append(problems, Problem{Kind: KindOrphan, IP: ip, MAC: mac,
				Detail: fmt.Sprintf("active lease %s (ends %s) is outside every configured range; dhcpd's next rewrite drops it without an expiry", ip, orNever(l.Ends))})
		}
		if host, ok := fixed[l.IP]; ok && l.PrefixLen == 0 {
			problems = append(problems, Problem{Kind: KindFixedAddress, IP: ip, MAC: mac, Host: host,
				Detail: fmt.Sprintf("active dynamic lease %s is host %s's fixed address", ip, host)})
		}
		if l.Family == parser.IPv4 && mac != "" {
			byMAC[mac] = append(byMAC[mac], l)
		}
	}
	for mac, ls := range byMAC {
		if len(ls) < 2 {
			continue
		}
		ips := make([]string, len(ls))
		for i, l := range ls {
			ips[i] = l.IP.String()
		}
		problems = append(problems, Problem{Kind: KindDuplicateMAC, MAC: mac, IPs: ips, IP: ips[0],
			Detail: fmt.Sprintf("%s holds %d active leases: %s", mac, len(ls), strings.Join(ips, ", "))})
	}
	slices.SortFunc(problems, func(a, b Problem) int {
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		ai, _ := netip.ParseAddr(a.IP)
		bi, _ := netip.ParseAddr(b.IP)
		return ai.Compare(bi)
	})
	slices.Sort(unresolved)
	return problems, unresolved
}

func orNever(t parser.Time) string {
	if s := t.String(); s != "" {
		return s
	}
	return "unknown"
}
