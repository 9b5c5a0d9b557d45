package rack

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/leasekeeper/leasekeeper/parser"
)

// Reasons Release refuses; a *RefusedError wraps one of them.
var (
	// ErrNoLease: the leases file has no lease for the address.
	ErrNoLease = errors.New("no lease for this address in dhcpd's leases file")
	// ErrNotActive: the address's lease is not active (free, released,
	// expired, abandoned, backup, …), or it has already ended and dhcpd's
	// pool timer will expire it; dhcpd ignores a release for it.
	ErrNotActive = errors.New("the lease is not active")
	// ErrMACMismatch: the lease belongs to another hardware address.
	ErrMACMismatch = errors.New("the lease belongs to another MAC")
	// ErrInUse: something still answers ARP for the address on the
	// interface dhcpd serves it on: the client is not gone (or another
	// host took the address), and dhcpd would hand out an address in use.
	ErrInUse = errors.New("the address is in use: something answers ARP for it")
)

// RefusedError is returned when Release sent nothing because the lease
// does not match the request. Lease is the lease found (nil for
// ErrNoLease).
type RefusedError struct {
	IP     netip.Addr
	MAC    net.HardwareAddr
	Reason error // ErrNoLease, ErrNotActive, ErrMACMismatch or ErrUnreadable
	Detail string
	Lease  *parser.Lease
}

func (e *RefusedError) Error() string {
	s := fmt.Sprintf("refusing to release %s for %s: %v", e.IP, e.MAC, e.Reason)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s + "; nothing sent"
}

func (e *RefusedError) Unwrap() error { return e.Reason }

// CheckLease returns the lease for ip in t if dhcpd would release it for
// a DHCPRELEASE from mac: the last block for ip is active, has not ended
// at now, and its hardware address is the Ethernet address mac. Otherwise
// it returns a *RefusedError.
func CheckLease(t *parser.Table, ip netip.Addr, mac net.HardwareAddr, now time.Time) (*parser.Lease, error) {
	refuse := func(reason error, l *parser.Lease, format string, args ...any) error {
		return &RefusedError{IP: ip, MAC: mac, Reason: reason, Lease: l, Detail: fmt.Sprintf(format, args...)}
	}
	l, ok := t.Lookup(netip.PrefixFrom(ip, 32))
	if !ok {
		return nil, refuse(ErrNoLease, nil, "")
	}
	pnow := parser.TimeOf(now)
	if st := l.Binding(pnow); st != parser.StateActive {
		return nil, refuse(ErrNotActive, l, "binding state %s", st)
	}
	// dhcprelease() releases only leases with ends > now.
	if l.Ends.IsSet() && !l.Ends.IsNever() && l.Ends <= pnow {
		return nil, refuse(ErrNotActive, l, "it ended at %s; dhcpd expires it itself", l.Ends.Time().UTC().Format(time.RFC3339))
	}
	if (l.HardwareType != "" && l.HardwareType != "ethernet") || !bytes.Equal(l.HardwareAddr, mac) {
		owner := parser.HexString(l.HardwareAddr)
		if owner == "" {
			owner = "no hardware address"
		}
		if l.HardwareType != "" && l.HardwareType != "ethernet" {
			owner = l.HardwareType + " " + owner
		}
		return nil, refuse(ErrMACMismatch, l, "its lease is held by %s", owner)
	}
	return l, nil
}

// released reports whether the file's current block for an address shows
// the lease that was checked (before) released: it is no longer active,
// or it is active for another client (freed and handed out again).
func released(before, now *parser.Lease, at parser.Time) bool {
	if now == nil {
		// A rewrite dropped it (address left every range): not a release.
		return false
	}
	if now.Binding(at) != parser.StateActive {
		return true
	}
	return !bytes.Equal(now.HardwareAddr, before.HardwareAddr)
}
