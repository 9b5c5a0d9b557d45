package regionstub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// ItemError says which item of a batch is wrong and why. Index is -1 when
// the body as a whole is wrong (not a JSON array).
type ItemError struct {
	Index int
	Field string // "" for the item as a whole
	Msg   string
}

func (e *ItemError) Error() string {
	switch {
	case e.Index < 0:
		return "body: " + e.Msg
	case e.Field == "":
		return fmt.Sprintf("item %d: %s", e.Index, e.Msg)
	default:
		return fmt.Sprintf("item %d: %s: %s", e.Index, e.Field, e.Msg)
	}
}

// fields are the seven keys of a region item, in the order they are checked.
var fields = [...]string{"action", "ip_family", "hostname", "mac", "ip", "timestamp", "lease_time"}

// Validate decodes a request body the way the MAAS 3.6 leases endpoint
// does: a JSON array of objects with exactly the seven keys, each of the
// right type and value. The first problem found is returned as an
// *ItemError; the batch is all or nothing.
func Validate(body []byte) ([]event.RegionItem, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, &ItemError{Index: -1, Msg: "not a JSON array of objects: " + err.Error()}
	}
	items := make([]event.RegionItem, 0, len(raw))
	for i, r := range raw {
		it, err := validateItem(i, r)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func validateItem(i int, r json.RawMessage) (event.RegionItem, error) {
	fail := func(field, format string, args ...any) (event.RegionItem, error) {
		return event.RegionItem{}, &ItemError{Index: i, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	var obj map[string]json.RawMessage
	if !bytes.HasPrefix(bytes.TrimSpace(r), []byte("{")) || json.Unmarshal(r, &obj) != nil {
		return fail("", "not a JSON object")
	}
	for k := range obj {
		if !known(k) {
			return fail(k, "extra field not permitted")
		}
	}
	str := map[string]string{}
	num := map[string]int64{}
	for _, f := range fields {
		v, ok := obj[f]
		if !ok {
			return fail(f, "field required")
		}
		if f == "timestamp" || f == "lease_time" {
			d := json.NewDecoder(bytes.NewReader(v))
			d.UseNumber()
			var n any
			if err := d.Decode(&n); err != nil {
				return fail(f, "not valid JSON")
			}
			jn, isNum := n.(json.Number)
			if !isNum {
				return fail(f, "must be an integer, got %s", v)
			}
			x, err := jn.Int64()
			if err != nil {
				return fail(f, "must be an integer, got %s", v)
			}
			if x < 0 {
				return fail(f, "must not be negative, got %d", x)
			}
			num[f] = x
			continue
		}
		var s string
		if !bytes.HasPrefix(v, []byte(`"`)) || json.Unmarshal(v, &s) != nil {
			return fail(f, "must be a string, got %s", v)
		}
		str[f] = s
	}
	it := event.RegionItem{Action: str["action"], Family: str["ip_family"], Hostname: str["hostname"],
		MAC: str["mac"], IP: str["ip"], Timestamp: num["timestamp"], LeaseTime: num["lease_time"]}
	switch it.Action {
	case event.Commit, event.Expiry, event.Release:
	default:
		return fail("action", "%q is not one of commit, expiry, release", it.Action)
	}
	if it.Family != event.IPv4 && it.Family != event.IPv6 {
		return fail("ip_family", "%q is not one of ipv4, ipv6", it.Family)
	}
	if !validMAC(it.MAC) {
		return fail("mac", "%q is not a MAC address (lower-case, zero-padded aa:bb:cc:dd:ee:ff)", it.MAC)
	}
	ip, err := netip.ParseAddr(it.IP)
	if err != nil || ip.Zone() != "" {
		return fail("ip", "%q is not an IP address", it.IP)
	}
	if it.Family == event.IPv4 && !ip.Is4() || it.Family == event.IPv6 && (!ip.Is6() || ip.Is4In6()) {
		return fail("ip", "%s is not an %s address", it.IP, it.Family)
	}
	return it, nil
}

func known(k string) bool {
	for _, f := range fields {
		if f == k {
			return true
		}
	}
	return false
}

// validMAC accepts what MAAS stores: lower-case two-digit hex octets joined
// by colons, 6 (Ethernet), 8 (EUI-64) or 20 (InfiniBand) of them.
func validMAC(s string) bool {
	parts := strings.Split(s, ":")
	if n := len(parts); n != 6 && n != 8 && n != 20 {
		return false
	}
	for _, p := range parts {
		if len(p) != 2 {
			return false
		}
		for j := 0; j < 2; j++ {
			c := p[j]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}
