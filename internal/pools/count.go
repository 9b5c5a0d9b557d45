package pools

import (
	"math/big"
	"net/netip"

	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// Count is an exact number of addresses (of delegated prefixes, for
// prefix6). An IPv6 range may hold up to 2^128 addresses — a single /64
// holds 2^64, more than an int64 — so sizes are never rounded or
// saturated. The zero Count is 0.
//
// In JSON a Count is an integer written out in full, e.g. 18446744073709551616
// for a /64: the number is exact, but may exceed what an int64 (2^63-1)
// or a double (exact to 2^53) holds, so consumers that need it exactly
// must decode it as a big integer (Python's json does; Go: json.Number or
// big.Int; jq 1.7 and later keep integer literals it does not compute on).
type Count struct{ n *big.Int }

// CountOf returns n as a Count.
func CountOf(n int64) Count { return Count{big.NewInt(n)} }

func (c Count) big() *big.Int {
	if c.n == nil {
		return new(big.Int)
	}
	return c.n
}

// Add returns c + d.
func (c Count) Add(d Count) Count { return Count{new(big.Int).Add(c.big(), d.big())} }

// Sub returns c - d.
func (c Count) Sub(d Count) Count { return Count{new(big.Int).Sub(c.big(), d.big())} }

// Cmp compares c and d: -1, 0 or +1.
func (c Count) Cmp(d Count) int { return c.big().Cmp(d.big()) }

// Equal reports c == d (go-cmp uses it).
func (c Count) Equal(d Count) bool { return c.Cmp(d) == 0 }

// Int64 returns c and whether it fits an int64.
func (c Count) Int64() (int64, bool) {
	b := c.big()
	return b.Int64(), b.IsInt64()
}

// Big returns c as a new big.Int.
func (c Count) Big() *big.Int { return new(big.Int).Set(c.big()) }

// String writes c in decimal.
func (c Count) String() string { return c.big().String() }

// Ratio returns n/c, or false when c is not positive.
func (c Count) Ratio(n int64) (float64, bool) {
	if c.big().Sign() <= 0 {
		return 0, false
	}
	f, _ := new(big.Rat).SetFrac(big.NewInt(n), c.big()).Float64()
	return f, true
}

// MarshalJSON writes the integer in full.
func (c Count) MarshalJSON() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalJSON reads an integer of any size.
func (c *Count) UnmarshalJSON(b []byte) error {
	n := new(big.Int)
	if err := n.UnmarshalJSON(b); err != nil {
		return err
	}
	c.n = n
	return nil
}

// size is the number of addresses in a range, or of prefixes for prefix6.
func size(r dhcpdconf.Range) Count {
	first, last := addrInt(r.First), addrInt(r.Last)
	d := new(big.Int).Sub(last, first)
	if r.Kind == dhcpdconf.RangeKindPrefix6 {
		d.Rsh(d, uint(128-r.PrefixLen))
	}
	return Count{d.Add(d, big.NewInt(1))}
}

func addrInt(a netip.Addr) *big.Int {
	b := a.As16()
	return new(big.Int).SetBytes(b[:])
}
