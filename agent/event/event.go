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
	"unicode"
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

// MaxLeaseTime is the largest lease_time the region stores: its column
// is a 32-bit signed integer (MAAS's staticipaddress.lease_time), and a
// larger value fails the whole batch. Longer lease times (dhcpd's
// "infinite" is 0xffffffff) are sent as this.
const MaxLeaseTime = 1<<31 - 1

// maxDUID bounds a DHCPv6 client DUID in octets: a 2-octet type and at
// most 128 octets of identifier (RFC 8415, section 11.1).
const maxDUID = 130

// Event is one lease event. The zero values of LeaseTime and Hostname mean
// "none", as in the region API.
type Event struct {
	Action    string     `json:"action"`
	Family    string     `json:"ip_family"`
	MAC       string     `json:"mac"` // lower-case, zero-padded aa:bb:cc:dd:ee:ff; "" if none (see Deliverable)
	IP        netip.Addr `json:"ip"`
	Hostname  string     `json:"hostname"`
	Timestamp int64      `json:"timestamp"`  // Unix seconds, when dhcpd acted
	LeaseTime int64      `json:"lease_time"` // seconds; 0 if none

	// Not sent to the region.
	TimestampNS int64  `json:"timestamp_ns,omitempty"` // finer time when the source had it
	Source      Source `json:"source,omitempty"`
	Reason      string `json:"reason,omitempty"` // why a synthesised event exists
	// DUID is the DHCPv6 client's DUID (lower-case hex octets) when the
	// source gave one instead of a MAC; MAC is then the link-layer
	// address inside it, or "". Kept for logs only.
	DUID string `json:"duid,omitempty"`
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

// Item returns the event as the region API wants it: lease_time at most
// MaxLeaseTime (events queued by an older agent were not clamped), the
// hostname as RegionHostname makes it.
func (e *Event) Item() RegionItem {
	return RegionItem{Action: e.Action, Family: e.Family, Hostname: RegionHostname(e.Hostname), MAC: e.MAC,
		IP: e.IP.String(), Timestamp: e.Timestamp, LeaseTime: min(e.LeaseTime, MaxLeaseTime)}
}

// MaxRegionHostname is the longest hostname the region keeps.
const MaxRegionHostname = 64

// RegionHostname is a lease's hostname as the region can take it. MAAS
// gives a committed lease's hostname to its DNS
// (maasservicelayer/services/dnsresources.py, update_dynamic_hostname),
// which first coerces it (maascommon/utils/network.py,
// coerce_to_valid_hostname: lower case, every run of characters other
// than ASCII letters, digits and '-' made one '-', '-' trimmed at both
// ends) and asserts that something of at most 64 characters is left:
// otherwise the whole batch fails with 500. So the name is sent coerced
// the same way — control characters, NUL, spaces and dots never reach
// the region — and "" (no hostname, as for dhcpd's "(none)") when
// nothing valid is left. Only Unicode letters whose lower case is ASCII
// can differ from MAAS's own result, in the name, never in validity.
func RegionHostname(h string) string {
	if regionReady(h) {
		return h // what coerceHostname makes of it, without a copy
	}
	return coerceHostname(h)
}

// coerceHostname is RegionHostname for any h.
func coerceHostname(h string) string {
	var b strings.Builder
	dash := false
	for _, r := range h {
		r = unicode.ToLower(r)
		valid := r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
		switch {
		case b.Len() == 0 && (!valid || r == '-'):
			continue // leading dashes are trimmed: not kept, not counted
		case valid:
			b.WriteRune(r)
			dash = false
			continue
		case !dash:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() > 4*MaxRegionHostname {
			return "" // far too long whatever follows
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "none" && h == "(none)" || len(out) > MaxRegionHostname {
		return ""
	}
	return out
}

// regionReady reports whether coerceHostname(h) is h itself: at most
// MaxRegionHostname of [a-z0-9-], neither starting nor ending with '-'
// (dhcpd's client-hostname is usually such a name already).
func regionReady(h string) bool {
	if len(h) > MaxRegionHostname || h != "" && (h[0] == '-' || h[len(h)-1] == '-') {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
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
// dhcpd's "(none)" placeholder, and at most MaxHostname bytes, lease_time
// at most MaxLeaseTime.
//
// The MAC may be empty (the hook passes on what dhcpd gave it, which can
// be nothing). For IPv6 it may be the client's DUID, as dhcpd's
// dhcp6.client-id gives it (packaging/dhcpd/leasekeeper6.conf): the DUID
// goes to the DUID field and MAC becomes the Ethernet address inside it
// (MACFromDUID), or "". Such events are valid; Deliverable says whether
// the region can take them. Normalize is idempotent.
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
	if err := e.normalizeMAC(); err != nil {
		return err
	}
	if e.LeaseTime < 0 {
		return invalid("negative lease_time %d", e.LeaseTime)
	}
	e.LeaseTime = min(e.LeaseTime, MaxLeaseTime)
	if e.Timestamp < 0 {
		return invalid("negative timestamp %d", e.Timestamp)
	}
	e.Hostname = CleanHostname(e.Hostname)
	return nil
}

// normalizeMAC puts e.MAC (and e.DUID) in canonical form.
func (e *Event) normalizeMAC() error {
	if e.MAC == "" {
		return nil
	}
	if e.Family != IPv6 {
		mac, err := NormalizeMAC(e.MAC)
		if err != nil {
			return err
		}
		e.MAC = mac
		return nil
	}
	b, err := parseOctets(e.MAC, maxDUID)
	if err != nil {
		return err
	}
	if len(b) == 6 {
		// A MAC already (no DUID is six octets long: the shortest with a
		// link-layer address, DUID-LL, has a 4-octet header).
		e.MAC = hexOctets(b)
		return nil
	}
	e.DUID = hexOctets(b)
	e.MAC = ""
	if hw, ok := MACFromDUID(b); ok {
		e.MAC = hexOctets(hw)
	}
	return nil
}

// DUID types with a link-layer address (RFC 8415, section 11), and the
// hardware type of Ethernet (IANA ARP hardware types).
const (
	duidLLT      = 1
	duidEN       = 2
	duidLL       = 3
	duidUUID     = 4
	hwEthernet   = 1
	ethernetSize = 6
)

// MACFromDUID returns the Ethernet address inside a DHCPv6 DUID: that of a
// DUID-LLT (type 1: hardware type, time, address) or a DUID-LL (type 3:
// hardware type, address) whose hardware type is Ethernet (1) and whose
// address is six octets. Other DUIDs (DUID-EN, DUID-UUID, other hardware)
// hold no MAC. The address is the one the client chose for its DUID,
// which RFC 8415 lets be any of its interfaces'; it is what identifies
// the client, as the MAC does in DHCPv4.
func MACFromDUID(duid []byte) ([]byte, bool) {
	if len(duid) < 4 {
		return nil, false
	}
	typ, hw := int(duid[0])<<8|int(duid[1]), int(duid[2])<<8|int(duid[3])
	var addr []byte
	switch typ {
	case duidLLT:
		if len(duid) < 8 {
			return nil, false
		}
		addr = duid[8:]
	case duidLL:
		addr = duid[4:]
	default:
		return nil, false
	}
	if hw != hwEthernet || len(addr) != ethernetSize {
		return nil, false
	}
	return addr, true
}

// DescribeDUID names a DUID's type for logs: "DUID-LLT", "DUID-EN", …
func DescribeDUID(duid []byte) string {
	if len(duid) < 2 {
		return "a DUID too short to have a type"
	}
	typ := int(duid[0])<<8 | int(duid[1])
	name := map[int]string{duidLLT: "DUID-LLT", duidEN: "DUID-EN", duidLL: "DUID-LL", duidUUID: "DUID-UUID"}[typ]
	if name == "" {
		return fmt.Sprintf("a DUID of unknown type %d", typ)
	}
	if (typ == duidLLT || typ == duidLL) && len(duid) >= 4 {
		return fmt.Sprintf("%s with hardware type %d", name, int(duid[2])<<8|int(duid[3]))
	}
	return name
}

// ErrNoMAC is wrapped by Deliverable's error: a valid event the region
// cannot take, because its leases API wants exactly six octets in mac
// (maasapiserver's LeaseInfoRequest; "" is accepted only from MAAS 3.8,
// so it is never sent).
var ErrNoMAC = errors.New("no six-octet MAC for the region")

// Kinds of NoMACError, the label of the kept-back metric.
const (
	NoMACEmpty      = "no-mac"       // the source gave none
	NoMACDUID       = "duid-no-mac"  // a DUID with no Ethernet address (DUID-EN, DUID-UUID, other hardware)
	NoMACNotSixByte = "not-ethernet" // a hardware address that is not six octets (InfiniBand, …)
)

// NoMACError says why an event cannot be delivered.
type NoMACError struct {
	Kind   string // NoMACEmpty, NoMACDUID or NoMACNotSixByte
	Detail string
}

func (e *NoMACError) Error() string { return e.Detail }
func (e *NoMACError) Unwrap() error { return ErrNoMAC }

// Deliverable reports whether the region's leases API can take the
// (normalised) event: its MAC must be six octets. The error is a
// *NoMACError saying why not; such events are kept back, never sent
// (the region would refuse the whole batch).
func (e *Event) Deliverable() error {
	switch n := strings.Count(e.MAC, ":") + 1; {
	case e.MAC == "" && e.DUID != "":
		b, _ := parseOctets(e.DUID, maxDUID)
		return &NoMACError{Kind: NoMACDUID, Detail: fmt.Sprintf("the client's DUID %s is %s: it holds no Ethernet address to send as the MAC", e.DUID, DescribeDUID(b))}
	case e.MAC == "":
		return &NoMACError{Kind: NoMACEmpty, Detail: "no MAC address (dhcpd gave the hook none)"}
	case n != ethernetSize:
		return &NoMACError{Kind: NoMACNotSixByte, Detail: fmt.Sprintf("hardware address %s has %d octets, not the six of an Ethernet MAC", e.MAC, n)}
	}
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
	if canonicalMAC(s, 20) {
		return s, nil
	}
	b, err := parseOctets(s, 20)
	if err != nil {
		return "", err
	}
	return hexOctets(b), nil
}

// canonicalMAC reports whether s is at most max octets as hexOctets
// writes them (two lower-case hex digits each, colon-separated), which
// parseOctets and hexOctets would give back unchanged.
func canonicalMAC(s string, max int) bool {
	if len(s)%3 != 2 || len(s) > 3*max-1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i%3 == 2 {
			if c != ':' {
				return false
			}
		} else if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// parseOctets reads colon-separated octets of one or two hex digits, at
// most max of them.
func parseOctets(s string, max int) ([]byte, error) {
	if s == "" {
		return nil, invalid("no mac")
	}
	if n := strings.Count(s, ":") + 1; n > max {
		return nil, invalid("mac %q is longer than %d octets", s, max)
	}
	out := make([]byte, 0, (len(s)+1)/3)
	for i, p := range strings.Split(s, ":") {
		if len(p) == 0 || len(p) > 2 {
			return nil, invalid("mac %q: octet %d is not one or two hex digits", s, i+1)
		}
		var v byte
		for j := 0; j < len(p); j++ {
			c := p[j]
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | (c - '0')
			case c >= 'a' && c <= 'f':
				v = v<<4 | (c - 'a' + 10)
			case c >= 'A' && c <= 'F':
				v = v<<4 | (c - 'A' + 10)
			default:
				return nil, invalid("mac %q: octet %d is not hex", s, i+1)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// hexOctets writes octets lower-case, zero-padded, colon-separated.
func hexOctets(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 3*len(b))
	for i, c := range b {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
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

// fields are a datagram's values as read, before validation.
type fields struct {
	Action, MAC, Family, IP           string
	Timestamp, LeaseTime, TimestampNS json.Number
	// Hostname when hasHostname (scanDatagram), else hostnameJSON
	// (encoding/json) if not empty or null.
	Hostname     string
	hasHostname  bool
	hostnameJSON json.RawMessage
}

// ParseDatagram decodes and normalises one hook datagram (or spool line).
func ParseDatagram(b []byte, src Source) (Event, error) {
	d, ok := scanDatagram(b)
	if !ok {
		var err error
		if d, err = decodeDatagram(b); err != nil {
			return Event{}, err
		}
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
	if d.hasHostname {
		e.Hostname = d.Hostname
	} else if len(d.hostnameJSON) > 0 && string(d.hostnameJSON) != "null" {
		if err := json.Unmarshal(d.hostnameJSON, &e.Hostname); err != nil {
			return Event{}, invalid("hostname is not a string")
		}
	}
	if err := e.Normalize(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// decodeDatagram reads any datagram with encoding/json: what
// scanDatagram leaves to it.
func decodeDatagram(b []byte) (fields, error) {
	var d datagram
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return fields{}, invalid("not a JSON object: %v", err)
	}
	if dec.More() {
		return fields{}, invalid("trailing data after the JSON object")
	}
	return fields{Action: d.Action, MAC: d.MAC, Family: d.Family, IP: d.IP,
		Timestamp: d.Timestamp, LeaseTime: d.LeaseTime, TimestampNS: d.TimestampNS, hostnameJSON: d.Hostname}, nil
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
