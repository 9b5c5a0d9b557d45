package regionstub

// What MAAS does with a batch, in its own terms. Each rule names the MAAS
// file it mirrors (canonical/maas, branches 3.6–3.8 and master):
//
//   - the schema, all or nothing, answered 422:
//     src/maasapiserver/v3/api/internal/models/requests/leases.py
//     (LeaseInfoRequest; pydantic ignores extra keys),
//     src/maasservicelayer/models/fields.py (MacAddress: MAC_FIELD_RE of
//     src/maascommon/fields.py; "" only from 3.8 on),
//     src/maasapiserver/common/middlewares/exceptions.py (the 422 body);
//   - the items, in order, in one transaction, answered 500 and rolled
//     back when one cannot be placed:
//     src/maasservicelayer/services/leases.py (store_lease_info: "No subnet
//     exists for", the family check, datetime.fromtimestamp, the IP-range
//     gate, then the MAC's interfaces and discovered addresses),
//     src/maasservicelayer/db/repositories/subnets.py (find_best_subnet_for_ip),
//     src/maasservicelayer/db/repositories/ipranges.py (get_dynamic_range_for_ip),
//     src/maasservicelayer/db/tables.py (staticipaddress.lease_time: Integer),
//     src/maascommon/utils/network.py (coerce_to_valid_hostname) and
//     src/maasservicelayer/services/dnsresources.py
//     (update_dynamic_hostname asserts a commit's hostname coerces),
//     src/maasapiserver/common/middlewares/db.py (TransactionMiddleware).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/maasmodel"
)

// Subnet is a MAAS subnet and its IP ranges.
type Subnet struct {
	CIDR netip.Prefix
	// Ranges are the subnet's IP ranges. An event for an address outside
	// all of them is accepted (204) and ignored. MAAS's check is named
	// get_dynamic_range_for_ip but takes every range of the subnet,
	// reserved ones too.
	Ranges []Range
}

// Range is an inclusive range of addresses.
type Range struct{ First, Last netip.Addr }

// Contains says whether a is in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.First.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

func (r Range) String() string { return r.First.String() + "-" + r.Last.String() }

// WholeSubnet is the subnet cidr with one range covering all of it.
func WholeSubnet(cidr string) Subnet {
	p := netip.MustParsePrefix(cidr).Masked()
	return Subnet{CIDR: p, Ranges: []Range{{p.Addr(), lastAddr(p)}}}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// DefaultSubnets are the subnets a stub has when Options.Subnets is nil:
// the test lab's address ranges (docs/design.md, "Test lab") and the IPv6
// documentation prefix, each one range from end to end.
func DefaultSubnets() []Subnet {
	return []Subnet{
		WholeSubnet("203.0.113.0/24"),
		WholeSubnet("198.51.100.0/24"),
		WholeSubnet("198.18.0.0/15"),
		WholeSubnet("2001:db8::/32"),
	}
}

// ParseSubnet reads "CIDR" (one range over the whole subnet) or
// "CIDR=FIRST-LAST[+FIRST-LAST…]" (those ranges; "CIDR=" for none).
func ParseSubnet(s string) (Subnet, error) {
	cidr, ranges, hasRanges := strings.Cut(strings.TrimSpace(s), "=")
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return Subnet{}, fmt.Errorf("subnet %q: %w", s, err)
	}
	if !hasRanges {
		return WholeSubnet(p.Masked().String()), nil
	}
	sub := Subnet{CIDR: p.Masked()}
	for r := range strings.SplitSeq(ranges, "+") {
		if r == "" {
			continue
		}
		first, last, ok := strings.Cut(r, "-")
		f, err1 := netip.ParseAddr(first)
		l, err2 := netip.ParseAddr(last)
		if !ok || err1 != nil || err2 != nil || f.Is4() != l.Is4() || l.Less(f) || !p.Contains(f) || !p.Contains(l) {
			return Subnet{}, fmt.Errorf("subnet %q: range %q is not FIRST-LAST inside %s", s, r, p)
		}
		sub.Ranges = append(sub.Ranges, Range{f, l})
	}
	return sub, nil
}

// Version is the MAAS version a stub behaves as.
type version struct{ major, minor int }

func parseVersion(v string) (version, error) {
	if v == "" {
		return version{3, 8}, nil
	}
	maj, min, ok := strings.Cut(v, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil {
		return version{}, fmt.Errorf("MAAS version %q is not MAJOR.MINOR", v)
	}
	if a < 3 || a == 3 && b < 6 {
		return version{}, fmt.Errorf("MAAS %s has no internal leases API (3.6 and later have)", v)
	}
	return version{a, b}, nil
}

func (v version) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

func (v version) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// ValidationDetail is one problem of a refused (422) batch, as MAAS
// words it: pydantic's error type and message, the location ("body") and
// the field ("0.mac": item 0, key mac).
type ValidationDetail struct {
	Type     string `json:"type"`
	Message  string `json:"message"`
	Field    string `json:"field"`
	Location string `json:"location"`
}

// maxDetails bounds the problems listed for one batch.
const maxDetails = 100

// macRE is MAAS's MAC_FIELD_RE (src/maascommon/fields.py): six octets of
// one or two hex digits separated by colons or dashes, or three groups of
// three or four joined by any one character, in either case.
var macRE = regexp.MustCompile(`^(?:(?:[0-9a-fA-F]{1,2}:){5}[0-9a-fA-F]{1,2}|(?:[0-9a-fA-F]{1,2}-){5}[0-9a-fA-F]{1,2}|(?:[0-9a-fA-F]{3,4}.){2}[0-9a-fA-F]{3,4})$`)

// item is one valid item, with what the region computes from it.
type item struct {
	event.RegionItem
	ip      netip.Addr
	tsOK    bool // the timestamp makes a Python datetime
	leaseOK bool // lease_time fits the 32-bit column
}

// Python's datetime covers years 1 to 9999; fromtimestamp fails outside.
const (
	minTimestamp = -62135596800 // 0001-01-01T00:00:00Z
	maxTimestamp = 253402300799 // 9999-12-31T23:59:59Z
)

// validate checks a body as MAAS 3.6+ does (List[LeaseInfoRequest]) and
// returns the items, or every problem found.
func validate(body []byte, v version) ([]item, []ValidationDetail) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return nil, []ValidationDetail{{Type: "list_type", Message: "Input should be a valid list", Location: "body"}}
		}
		return nil, []ValidationDetail{{Type: "json_invalid", Message: "JSON decode error", Location: "body"}}
	}
	var (
		items   = make([]item, 0, len(raw))
		details []ValidationDetail
	)
	for i, r := range raw {
		it, ds := validateItem(i, r, v)
		details = append(details, ds...)
		if len(ds) == 0 {
			items = append(items, it)
		}
	}
	if len(details) > 0 {
		return nil, details[:min(len(details), maxDetails)]
	}
	return items, nil
}

func validateItem(i int, r json.RawMessage, v version) (item, []ValidationDetail) {
	var ds []ValidationDetail
	bad := func(field, typ, msg string) {
		ds = append(ds, ValidationDetail{Type: typ, Message: msg, Field: fmt.Sprintf("%d.%s", i, field), Location: "body"})
	}
	var obj map[string]json.RawMessage
	if !bytes.HasPrefix(bytes.TrimSpace(r), []byte("{")) || json.Unmarshal(r, &obj) != nil {
		return item{}, []ValidationDetail{{Type: "model_attributes_type", Message: "Input should be a valid dictionary or object to extract fields from",
			Field: strconv.Itoa(i), Location: "body"}}
	}
	var it item
	str := func(key string) (string, bool) {
		raw, ok := obj[key]
		if !ok {
			bad(key, "missing", "Field required")
			return "", false
		}
		var s string
		if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) || json.Unmarshal(raw, &s) != nil {
			bad(key, "string_type", "Input should be a valid string")
			return "", false
		}
		return s, true
	}
	if s, ok := str("action"); ok {
		switch s {
		case event.Commit, event.Expiry, event.Release:
			it.Action = s
		default:
			bad("action", "enum", "Input should be 'commit', 'expiry' or 'release'")
		}
	}
	if s, ok := str("ip_family"); ok {
		switch s {
		case event.IPv4, event.IPv6:
			it.Family = s
		default:
			bad("ip_family", "enum", "Input should be 'ipv4' or 'ipv6'")
		}
	}
	if s, ok := str("hostname"); ok {
		it.Hostname = s
	}
	if s, ok := str("mac"); ok {
		switch {
		case s == "" && v.atLeast(3, 8):
			it.MAC = ""
		case macRE.MatchString(s):
			it.MAC = normaliseMAC(s)
		default:
			bad("mac", "string_pattern_mismatch", "String should match pattern '"+macRE.String()+"'")
		}
	}
	if s, ok := str("ip"); ok {
		a, err := netip.ParseAddr(s)
		if err != nil {
			bad("ip", "ip_any_address", "value is not a valid IPv4 or IPv6 address")
		} else {
			it.ip, it.IP = a, a.String()
		}
	}
	if n, ok := integer(obj, "timestamp", bad); ok {
		it.Timestamp = n
		it.tsOK = n >= minTimestamp && n <= maxTimestamp
	}
	if n, ok := integer(obj, "lease_time", bad); ok {
		it.LeaseTime = n
		it.leaseOK = n >= math.MinInt32 && n <= math.MaxInt32
	}
	return it, ds
}

// integer reads an int as pydantic 2 does in lax mode: a JSON integer of
// any size, a float without a fraction, or a string of decimal digits.
// Values beyond int64 are kept saturated (they fail later, as in MAAS).
func integer(obj map[string]json.RawMessage, key string, bad func(field, typ, msg string)) (int64, bool) {
	raw, ok := obj[key]
	if !ok {
		bad(key, "missing", "Field required")
		return 0, false
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var x any
	if d.Decode(&x) != nil {
		bad(key, "int_type", "Input should be a valid integer")
		return 0, false
	}
	var s string
	switch v := x.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = strings.TrimSpace(v)
	default:
		bad(key, "int_type", "Input should be a valid integer")
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	} else if errors.Is(err, strconv.ErrRange) {
		if strings.HasPrefix(s, "-") {
			return math.MinInt64, true
		}
		return math.MaxInt64, true
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		bad(key, "int_parsing", "Input should be a valid integer, unable to parse string as an integer")
	case f != math.Trunc(f) || math.IsInf(f, 0):
		bad(key, "int_from_float", "Input should be a valid integer, got a number with a fractional part")
	case f >= math.MaxInt64:
		return math.MaxInt64, true
	case f <= math.MinInt64:
		return math.MinInt64, true
	default:
		return int64(f), true
	}
	return 0, false
}

// normaliseMAC is MAAS's normalise_macaddress: lower case, colons, two
// digits an octet; three groups (aabb.ccdd.eeff) are two octets each.
func normaliseMAC(mac string) string {
	tokens := strings.FieldsFunc(strings.ToLower(mac), func(r rune) bool { return r == ':' || r == '-' || r == '.' })
	pad := func(s string, n int) string { return strings.Repeat("0", max(n-len(s), 0)) + s }
	var octets []string
	for _, t := range tokens {
		if len(tokens) == 3 {
			t = pad(t, 4)
			octets = append(octets, t[:2], t[2:])
		} else {
			octets = append(octets, pad(t, 2))
		}
	}
	return strings.Join(octets, ":")
}

// Lease is the region's view of one address: what a DISCOVERED IP address
// of MAAS holds after the events it took.
type Lease struct {
	IP string `json:"ip"`
	// MAC is the MAC whose interface holds the address; when MAAS has
	// linked it to more than one (an address committed to B while A's
	// lease of it was never ended: internal/maasmodel), their MACs joined
	// by commas, in link order.
	MAC       string `json:"mac"`
	Hostname  string `json:"hostname"`
	LeaseTime int64  `json:"lease_time"`
	Timestamp int64  `json:"timestamp"` // the last commit's event time (not MAAS's "created": see maasmodel's Lease)
}

// place finds why the region could not store an item (the 500 cases of
// store_lease_info), or whether it ignores it (an address outside every
// range of its subnet). It depends on the configuration only, so a batch
// is checked whole before anything of it is applied: the same outcome as
// MAAS's rollback.
func place(subnets []Subnet, it *item) (ignored bool, err error) {
	ip := it.ip.WithZone("")
	if ip.Is4In6() { // find_best_subnet_for_ip: ip.ipv4_mapped
		ip = ip.Unmap()
	}
	var sub *Subnet
	for i := range subnets {
		// Postgres's cidr >> inet: strictly contains, so a /32 holds no address.
		if p := subnets[i].CIDR; p.Contains(ip) && p.Bits() < ip.BitLen() {
			sub = &subnets[i]
			break
		}
	}
	if sub == nil {
		return false, fmt.Errorf("LeaseUpdateError: No subnet exists for: %s", it.IP)
	}
	if (it.Family == event.IPv4) != sub.CIDR.Addr().Is4() {
		return false, fmt.Errorf("LeaseUpdateError: Family for the subnet does not match. Expected: %s", it.Family)
	}
	if !it.tsOK {
		return false, fmt.Errorf("ValueError: year is out of range (timestamp %d)", it.Timestamp)
	}
	in := false
	for _, r := range sub.Ranges {
		in = in || r.Contains(ip)
	}
	if !in {
		return true, nil
	}
	if it.Action == event.Commit && !it.leaseOK {
		return false, fmt.Errorf("DataError: invalid input for query argument: %d (value out of int32 range)", it.LeaseTime)
	}
	if it.Action == event.Commit && validHostname(it.Hostname) && coerceHostname(it.Hostname) == "" {
		return false, fmt.Errorf("AssertionError: update_dynamic_hostname: coerce_to_valid_hostname(%q) is None", it.Hostname)
	}
	return false, nil
}

// validHostname is _is_valid_hostname of src/maasservicelayer/services/
// leases.py: a commit's hostname MAAS gives to its DNS.
func validHostname(h string) bool {
	return h != "" && h != "(none)" && strings.TrimFunc(h, pyspace) != ""
}

// pyspace is Python's str.isspace for one character: Unicode's white
// space and the ASCII separators \x1c to \x1f.
func pyspace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// coerceHostname is coerce_to_valid_hostname of
// src/maascommon/utils/network.py, "" for its None: lower case, every run
// of characters other than ASCII letters, digits and '-' one '-', '-'
// trimmed; None when nothing, or more than 64 characters, is left.
// src/maasservicelayer/services/dnsresources.py, update_dynamic_hostname,
// asserts it is not None: the batch fails with 500.
func coerceHostname(h string) string {
	h = hostnameJunk.ReplaceAllString(strings.ToLower(h), "-")
	h = strings.Trim(h, "-")
	if h == "" || len(h) > 64 {
		return ""
	}
	return h
}

var hostnameJunk = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// view is the region's DISCOVERED addresses: internal/maasmodel, which
// applies an item as store_lease_info does (and names the files it
// mirrors).
type view struct{ *maasmodel.Region }

func newView() view { return view{maasmodel.New()} }

// apply is store_lease_info after its checks, in arrival order and with
// no timestamp comparison: a late event overwrites newer state.
func (v view) apply(it *item) {
	v.Apply(maasmodel.Event{Action: it.Action, IP: it.ip.String(), MAC: it.MAC, Hostname: it.Hostname,
		LeaseTime: it.LeaseTime, Timestamp: it.Timestamp})
}

// lease is the address's row as a Lease.
func (v view) lease(ip string) (Lease, bool) {
	l, ok := v.Lease(ip)
	if !ok {
		return Lease{}, false
	}
	return Lease{IP: l.IP, MAC: l.MAC(), Hostname: l.Hostname, LeaseTime: l.LeaseTime, Timestamp: l.Timestamp}, true
}
