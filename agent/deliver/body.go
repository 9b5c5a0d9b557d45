package deliver

import (
	"encoding/json"
	"strconv"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// batchBody is the request body for batch: the JSON array of its
// event.Item()s, byte for byte what json.Marshal makes of them
// (TestBatchBodyIsMarshal). It appends the fields itself instead of
// going through encoding/json's reflection: every string of an item that
// has been through Normalize and Item (an action, a family, a
// lower-case MAC, an address, a hostname RegionHostname left to
// [a-z0-9-]) is plain ASCII that JSON writes as it is, and the encoding
// was a sizeable part of the CPU a hookless lease costs. A string that
// would need escaping (an event not normalized: only tests send those),
// or an address with a zone or none, has the whole batch go through
// json.Marshal. A change to event.Item must be made here too: the test
// compares the two.
func batchBody(batch []event.Queued) ([]byte, error) {
	// An item is ~150 bytes with a hostname of a dozen characters.
	b := make([]byte, 0, 16+len(batch)*160)
	b = append(b, '[')
	for i := range batch {
		// event.Item's fields, without its copies: the hostname is
		// usually RegionHostname's already (then returned as it is),
		// and the address is appended, not made a string first.
		e := &batch[i].Event
		host := event.RegionHostname(e.Hostname)
		if !plainJSON(e.Action) || !plainJSON(e.Family) || !plainJSON(host) || !plainJSON(e.MAC) || !e.IP.IsValid() || e.IP.Zone() != "" {
			return marshalItems(batch)
		}
		if i > 0 {
			b = append(b, ',')
		}
		// The fields in RegionItem's order, as json.Marshal writes them.
		b = append(b, `{"action":"`...)
		b = append(b, e.Action...)
		b = append(b, `","ip_family":"`...)
		b = append(b, e.Family...)
		b = append(b, `","hostname":"`...)
		b = append(b, host...)
		b = append(b, `","mac":"`...)
		b = append(b, e.MAC...)
		b = append(b, `","ip":"`...)
		b = e.IP.AppendTo(b) // as IP.String() (no zone: checked above)
		b = append(b, `","timestamp":`...)
		b = strconv.AppendInt(b, e.Timestamp, 10)
		b = append(b, `,"lease_time":`...)
		b = strconv.AppendInt(b, min(e.LeaseTime, event.MaxLeaseTime), 10)
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// marshalItems is batchBody through encoding/json.
func marshalItems(batch []event.Queued) ([]byte, error) {
	items := make([]event.RegionItem, len(batch))
	for i := range batch {
		items[i] = batch[i].Event.Item()
	}
	return json.Marshal(items)
}

// plainJSON reports whether json.Marshal writes s between its quotes
// unchanged: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML (<, >, &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
