// Package event is the lease event the agent moves from its sources (the
// hook socket, the hook's spool, the leases-file reconciler) through the
// durable outbox to the region: its validation, its normalised form and
// its two encodings (the datagram maas-dhcp-helper and leasekeeper-hook
// send, and the item of the region's leases API).
package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// Actions, as the region API names them.
const (
	Commit  = "commit"
	Expiry  = "expiry"
	Release = "release"
)

// Families, as the region API names them.
const (
	IPv4 = "ipv4"
	IPv6 = "ipv6"
)

// Source says where an event came from.
type Source uint8

const (
	SourceHook  Source = iota + 1 // a datagram on the hook socket
	SourceSpool                   // the hook's spool, written while the agent was down
	SourceFile                    // synthesised from dhcpd.leases by the reconciler
)

var sourceNames = [...]string{"", "hook", "spool", "file"}

func (s Source) String() string {
	if int(s) < len(sourceNames) && s > 0 {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// MaxHostname bounds a hostname; longer ones are cut (a DNS name is at
// most 253 bytes, so nothing legitimate is lost).
const MaxHostname = 4096

// Event is one lease event. The zero values of LeaseTime and Hostname mean
// "none", as in the region API.
type Event struct {
	Action    string     `json:"action"`
	Family    string     `json:"ip_family"`
	MAC       string     `json:"mac"` // lower-case, zero-padded aa:bb:cc:dd:ee:ff
	IP        netip.Addr `json:"ip"`
	Hostname  string     `json:"hostname"`
	Timestamp int64      `json:"timestamp"`  // Unix seconds, when dhcpd acted
	LeaseTime int64      `json:"lease_time"` // seconds; 0 if none

	// Not sent to the region.
	TimestampNS int64  `json:"timestamp_ns,omitempty"` // finer time when the source had it
	Source      Source `json:"source,omitempty"`
	Reason      string `json:"reason,omitempty"` // why a synthesised event exists
}

// RegionItem is one element of the region API's JSON array: exactly these
// seven keys, always present.
type RegionItem struct {
	Action    string `json:"action"`
	Family    string `json:"ip_family"`
	Hostname  string `json:"hostname"`
	MAC       string `json:"mac"`
	IP        string `json:"ip"`
	Timestamp int64  `json:"timestamp"`
	LeaseTime int64  `json:"lease_time"`
}

// Item returns the event as the region API wants it.
func (e *Event) Item() RegionItem {
	return RegionItem{Action: e.Action, Family: e.Family, Hostname: e.Hostname, MAC: e.MAC,
		IP: e.IP.String(), Timestamp: e.Timestamp, LeaseTime: e.LeaseTime}
}

// Key is what the region keys rows by: the IP address alone.
func (e *Event) Key() netip.Addr { return e.IP }

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid event")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Normalize validates e and puts it in canonical form: MAC lower-case and
// zero-padded, hostname valid UTF-8 (invalid bytes replaced), without
// dhcpd's "(none)" placeholder, and at most MaxHostname bytes.
func (e *Event) Normalize() error {
	switch e.Action {
	case Commit, Expiry, Release:
	default:
		return invalid("action %q is not commit, expiry or release", e.Action)
	}
	switch {
	case !e.IP.IsValid():
		return invalid("no IP address")
	case e.IP.Zone() != "":
		return invalid("IP address %s has a zone", e.IP)
	}
	switch e.Family {
	case IPv4:
		if !e.IP.Is4() {
			return invalid("ip %s is not IPv4", e.IP)
		}
	case IPv6:
		if !e.IP.Is6() || e.IP.Is4In6() {
			return invalid("ip %s is not IPv6", e.IP)
		}
	default:
		return invalid("ip_family %q is not ipv4 or ipv6", e.Family)
	}
	mac, err := NormalizeMAC(e.MAC)
	if err != nil {
		return err
	}
	e.MAC = mac
	if e.LeaseTime < 0 {
		return invalid("negative lease_time %d", e.LeaseTime)
	}
	if e.Timestamp < 0 {
		return invalid("negative timestamp %d", e.Timestamp)
	}
	e.Hostname = CleanHostname(e.Hostname)
	return nil
}

// CleanHostname maps dhcpd's "(none)" to "", replaces invalid UTF-8 and
// cuts the name to MaxHostname bytes on a rune boundary.
func CleanHostname(h string) string {
	if h == "(none)" {
		return ""
	}
	h = strings.ToValidUTF8(h, "\uFFFD")
	if len(h) > MaxHostname {
		cut := MaxHostname
		for cut > 0 && !utf8.RuneStart(h[cut]) {
			cut--
		}
		h = h[:cut]
	}
	return h
}

// NormalizeMAC accepts a hardware address of colon-separated octets of
// one or two hex digits (binary-to-ascii writes them unpadded: 2:0:0:a:b:c)
// and returns it lower-case and zero-padded. Six octets is Ethernet; other
// lengths (InfiniBand's 20) are accepted when well-formed.
func NormalizeMAC(s string) (string, error) {
	if s == "" {
		return "", invalid("no mac")
	}
	parts := strings.Split(s, ":")
	if len(parts) > 20 {
		return "", invalid("mac %q is longer than 20 octets", s)
	}
	var b strings.Builder
	b.Grow(3 * len(parts))
	for i, p := range parts {
		if len(p) == 0 || len(p) > 2 {
			return "", invalid("mac %q: octet %d is not one or two hex digits", s, i+1)
		}
		for j := 0; j < len(p); j++ {
			if !isHex(p[j]) {
				return "", invalid("mac %q: octet %d is not hex", s, i+1)
			}
		}
		if i > 0 {
			b.WriteByte(':')
		}
		if len(p) == 1 {
			b.WriteByte('0')
		}
		b.WriteString(strings.ToLower(p))
	}
	return b.String(), nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// datagram is the JSON object maas-dhcp-helper and leasekeeper-hook send.
// lease_time and hostname are only present on commit. Unknown keys are
// ignored, so newer senders stay compatible.
type datagram struct {
	Action      string          `json:"action"`
	MAC         string          `json:"mac"`
	Family      string          `json:"ip_family"`
	IP          string          `json:"ip"`
	Timestamp   json.Number     `json:"timestamp"`
	LeaseTime   json.Number     `json:"lease_time"`
	Hostname    json.RawMessage `json:"hostname"`
	TimestampNS json.Number     `json:"timestamp_ns"`
}

// ParseDatagram decodes and normalises one hook datagram (or spool line).
func ParseDatagram(b []byte, src Source) (Event, error) {
	var d datagram
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return Event{}, invalid("not a JSON object: %v", err)
	}
	if dec.More() {
		return Event{}, invalid("trailing data after the JSON object")
	}
	e := Event{Action: d.Action, Family: d.Family, MAC: d.MAC, Source: src}
	var err error
	if e.IP, err = netip.ParseAddr(d.IP); err != nil {
		return Event{}, invalid("ip %q: %v", d.IP, err)
	}
	if e.Timestamp, err = intField("timestamp", d.Timestamp, true); err != nil {
		return Event{}, err
	}
	if e.LeaseTime, err = intField("lease_time", d.LeaseTime, false); err != nil {
		return Event{}, err
	}
	if e.TimestampNS, err = intField("timestamp_ns", d.TimestampNS, false); err != nil {
		return Event{}, err
	}
	if len(d.Hostname) > 0 && string(d.Hostname) != "null" {
		if err := json.Unmarshal(d.Hostname, &e.Hostname); err != nil {
			return Event{}, invalid("hostname is not a string")
		}
	}
	if err := e.Normalize(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// intField reads an integer JSON number; MAAS's helper sends lease_time
// as a number, older ones as a numeric string is not accepted.
func intField(name string, n json.Number, required bool) (int64, error) {
	if n == "" {
		if required {
			return 0, invalid("no %s", name)
		}
		return 0, nil
	}
	v, err := n.Int64()
	if err != nil {
		// Accept a whole float (1.7e9) as Python's json may write.
		f, ferr := n.Float64()
		if ferr != nil || f != float64(int64(f)) {
			return 0, invalid("%s %q is not an integer", name, n)
		}
		v = int64(f)
	}
	return v, nil
}

// Queued is an event in the durable outbox: Seq orders it among all
// events the agent accepted (strictly increasing, never reused).
type Queued struct {
	Seq   uint64
	Event Event
}
