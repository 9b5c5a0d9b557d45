package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// Records are a version byte and then the fields in a fixed order:
// strings and byte strings as a uvarint length and the bytes, integers
// as varints. The order puts what coalescing needs (action, MAC, IP)
// first so a pass over a full queue decodes only that prefix.
//
//	event:       1 | action | family | mac | ip (MarshalBinary) | hostname |
//	             timestamp | lease_time | timestamp_ns | source (uvarint) | reason
//	dead letter: 1 | time (Unix ns) | reason | event record
const recordV1 = 1

var errRecord = errors.New("malformed record")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendEvent(b []byte, e *event.Event) []byte {
	b = append(b, recordV1)
	b = appendString(b, e.Action)
	b = appendString(b, e.Family)
	b = appendString(b, e.MAC)
	// The address as MarshalBinary writes it (4 or 16 bytes, then the
	// zone), appended in place.
	b = binary.AppendUvarint(b, uint64(e.IP.BitLen()/8+len(e.IP.Zone())))
	b, _ = e.IP.AppendBinary(b) // never fails
	b = appendString(b, e.Hostname)
	b = binary.AppendVarint(b, e.Timestamp)
	b = binary.AppendVarint(b, e.LeaseTime)
	b = binary.AppendVarint(b, e.TimestampNS)
	b = binary.AppendUvarint(b, uint64(e.Source))
	b = appendString(b, e.Reason)
	return b
}

func encodeEvent(e *event.Event) []byte {
	return appendEvent(make([]byte, 0, eventSize(e)), e)
}

// eventSize is about what appendEvent appends for e: 64 for the version,
// the length prefixes, the address and the integers.
func eventSize(e *event.Event) int {
	return 64 + len(e.Action) + len(e.Family) + len(e.MAC) + len(e.Hostname) + len(e.Reason)
}

// encodeEvents encodes evs into one buffer, one allocation for all of
// them instead of one each (the reconciler queues every lease of a
// round at once). Each record's capacity ends where it does.
func encodeEvents(evs []event.Event) [][]byte {
	n := 0
	for i := range evs {
		n += eventSize(&evs[i])
	}
	buf := make([]byte, 0, n)
	recs := make([][]byte, len(evs))
	for i := range evs {
		start := len(buf)
		buf = appendEvent(buf, &evs[i])
		recs[i] = buf[start:len(buf):len(buf)]
	}
	return recs
}

// reader walks a record; the first error sticks and later reads return
// zero values, so decoders check once at the end.
type reader struct {
	b   []byte
	err error
	// src, when set, is the whole record as one string: string then
	// returns a part of it instead of a copy of its own, one allocation
	// per record instead of one per string field (Peek decodes every
	// event it hands the deliverer).
	src string
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errRecord, what)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) { // a corrupt length never allocates
		r.fail(what)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string(what string) string {
	v := r.bytes(what)
	if r.src == "" || r.err != nil {
		return string(v)
	}
	// r.b is what follows v in the record src copies.
	end := len(r.src) - len(r.b)
	return r.src[end-len(v) : end]
}

// name is string for a field that is nearly always one of known: that
// one is returned, without an allocation.
func (r *reader) name(what string, known ...string) string {
	b := r.bytes(what)
	for _, k := range known {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

func (r *reader) version() {
	if len(r.b) == 0 {
		r.fail("empty")
		return
	}
	if r.b[0] != recordV1 {
		r.fail(fmt.Sprintf("version %d", r.b[0]))
		return
	}
	r.b = r.b[1:]
}

// head is the part of an event coalescing looks at.
type head struct {
	commit bool
	mac    string
	ip     netip.Addr
}

func (r *reader) head() head {
	var h head
	r.version()
	h.commit = string(r.bytes("action")) == event.Commit // no allocation
	r.bytes("family")
	h.mac = r.string("mac")
	if ip := r.bytes("ip"); r.err == nil {
		if err := h.ip.UnmarshalBinary(ip); err != nil {
			r.fail("ip")
		}
	}
	return h
}

func decodeHead(b []byte) (head, error) {
	r := reader{b: b}
	h := r.head()
	return h, r.err
}

func (r *reader) event() event.Event {
	var e event.Event
	r.version()
	e.Action = r.name("action", event.Commit, event.Expiry, event.Release)
	e.Family = r.name("family", event.IPv4, event.IPv6)
	e.MAC = r.string("mac")
	if ip := r.bytes("ip"); r.err == nil {
		if err := e.IP.UnmarshalBinary(ip); err != nil {
			r.fail("ip")
		}
	}
	e.Hostname = r.string("hostname")
	e.Timestamp = r.varint("timestamp")
	e.LeaseTime = r.varint("lease_time")
	e.TimestampNS = r.varint("timestamp_ns")
	src := r.uvarint("source")
	if src > 255 {
		r.fail("source")
	}
	e.Source = event.Source(src)
	e.Reason = r.string("reason")
	return e
}

func decodeEvent(b []byte) (event.Event, error) {
	r := reader{b: b, src: string(b)}
	e := r.event()
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return e, r.err
}

func encodeDeadLetter(d *DeadLetter) []byte {
	b := make([]byte, 0, 64+len(d.Reason)+len(d.Event.Hostname))
	b = append(b, recordV1)
	b = binary.AppendVarint(b, d.Time.UnixNano())
	b = appendString(b, d.Reason)
	return appendEvent(b, &d.Event)
}

func decodeDeadLetter(seq uint64, b []byte) (DeadLetter, error) {
	r := reader{b: b}
	r.version()
	d := DeadLetter{Seq: seq}
	d.Time = time.Unix(0, r.varint("time")).UTC()
	d.Reason = r.string("reason")
	d.Event = r.event()
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return d, r.err
}

func seqKey(seq uint64) []byte { return appendSeqKey(make([]byte, 0, 8), seq) }

// appendSeqKey appends seq's key to b (a caller's array, to spare the
// allocation).
func appendSeqKey(b []byte, seq uint64) []byte { return binary.BigEndian.AppendUint64(b, seq) }

func keySeq(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}
