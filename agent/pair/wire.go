package pair

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The datagram (all integers big-endian):
//
//	"LKP2" | kind 'Q' or 'A' | role 'P' or 'S' | nonce [12] | at int64 |
//	count uint16 | count items | HMAC-SHA256 [32] of everything before it
//
// A query's item is an address, the time key of the sender's oldest
// queued event for it and of the newest news of it the sender delivered
// (0 for none known): ip length (4 or 16) | ip | key int64 | delivered
// int64. An answer's item, in the query's order, is the key of the
// answerer's oldest held event for that address newer than the query's
// delivered (0 when it holds none), the key of the newest news of that
// address it knows it delivered (0 for none known) and that news's Tag
// (0 for not known): key int64 | delivered int64 | tag uint32 — 20
// bytes, no more than the query's shortest item (21, IPv4). at is the
// sender's clock (Unix ns); role is the sender's side of the pair, so
// that a datagram is never taken for one of the receiver's own. An answer
// carries its query's nonce: an old answer replayed is not an answer to
// a new query.
const (
	// magic names the format's version: LKP1 answers had no tag. Both
	// agents of a pair run one version; an agent refuses the other's
	// datagrams and, the peer silent, delivers alone after hold_max.
	magic     = "LKP2"
	kindQuery = 'Q'
	kindAnswr = 'A'
	rolePrim  = 'P'
	roleSec   = 'S'
	nonceLen  = 12
	headerLen = len(magic) + 1 + 1 + nonceLen + 8 + 2
	macLen    = sha256.Size
	// MaxItems bounds a query: at most this many addresses, so that a
	// query of IPv6 addresses stays within one 1500-byte Ethernet frame
	// (40 × 33 + 60 bytes).
	MaxItems = 40
	// MinKeyLen is the shortest shared secret accepted.
	MinKeyLen = 32
)

// Item is one address of a query: the time key of the querier's oldest
// queued event for it (Key, Unix ns) and of its newest delivered
// (Delivered, 0 for none known); or of an answer: the answerer's oldest
// held event for it newer than the query's Delivered (Key, 0 for none),
// its newest delivered (Delivered, 0 for none known) and that news's Tag
// (DeliveredTag, answers only: 0 for not known).
type Item struct {
	IP           netip.Addr
	Key          int64
	Delivered    int64
	DeliveredTag uint32
}

// Message is a query or an answer.
type Message struct {
	Answer  bool
	Primary bool // the sender is the pair's primary
	Nonce   [nonceLen]byte
	At      int64 // the sender's clock, Unix ns
	// Items: a query's addresses and keys; an answer's keys, in its
	// query's order (IP unset).
	Items []Item
}

// ErrAuth is wrapped by Decode's error for a datagram whose HMAC does not
// verify: not from a holder of the pair's key, or altered on the way.
var ErrAuth = errors.New("not signed with the pair's key")

// ErrVersion is wrapped by Decode's error for a datagram signed with the
// pair's key in another version of the format: the peer agent runs
// another version of leasekeeper.
var ErrVersion = errors.New("a pair datagram of another version")

// Encode appends m, signed with key, to b.
func Encode(b []byte, m *Message, key []byte) ([]byte, error) {
	if len(m.Items) > MaxItems {
		return nil, fmt.Errorf("pair: %d items, at most %d", len(m.Items), MaxItems)
	}
	start := len(b)
	b = append(b, magic...)
	b = append(b, kindOf(m.Answer), roleOf(m.Primary))
	b = append(b, m.Nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(m.At))
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Items)))
	for _, it := range m.Items {
		if !m.Answer {
			ip := it.IP.Unmap()
			if !ip.IsValid() {
				return nil, fmt.Errorf("pair: query item with no address")
			}
			s := ip.AsSlice()
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		b = binary.BigEndian.AppendUint64(b, uint64(it.Key))
		b = binary.BigEndian.AppendUint64(b, uint64(it.Delivered))
		if m.Answer {
			b = binary.BigEndian.AppendUint32(b, it.DeliveredTag)
		}
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(b[start:])
	return mac.Sum(b), nil
}

// Decode verifies and parses one datagram.
func Decode(b []byte, key []byte) (*Message, error) {
	if len(b) < headerLen+macLen {
		return nil, fmt.Errorf("pair: datagram of %d bytes, shorter than any message", len(b))
	}
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, fmt.Errorf("pair: datagram of %d bytes: %w", len(b), ErrAuth)
	}
	if string(body[:len(magic)]) != magic {
		return nil, fmt.Errorf("pair: %q, not %q: %w", body[:len(magic)], magic, ErrVersion)
	}
	m := &Message{}
	p := body[len(magic):]
	switch p[0] {
	case kindQuery:
	case kindAnswr:
		m.Answer = true
	default:
		return nil, fmt.Errorf("pair: kind %q", p[0])
	}
	switch p[1] {
	case rolePrim:
		m.Primary = true
	case roleSec:
	default:
		return nil, fmt.Errorf("pair: role %q", p[1])
	}
	p = p[2:]
	copy(m.Nonce[:], p)
	p = p[nonceLen:]
	m.At = int64(binary.BigEndian.Uint64(p))
	n := int(binary.BigEndian.Uint16(p[8:]))
	p = p[10:]
	if n > MaxItems {
		return nil, fmt.Errorf("pair: %d items, at most %d", n, MaxItems)
	}
	m.Items = make([]Item, 0, n)
	for range n {
		var it Item
		if !m.Answer {
			if len(p) < 1 {
				return nil, errShort
			}
			l := int(p[0])
			if l != 4 && l != 16 {
				return nil, fmt.Errorf("pair: address of %d bytes", l)
			}
			if len(p) < 1+l {
				return nil, errShort
			}
			it.IP, _ = netip.AddrFromSlice(p[1 : 1+l])
			if it.IP.Is4In6() {
				return nil, fmt.Errorf("pair: IPv4 address %s sent as IPv6", it.IP.Unmap())
			}
			p = p[1+l:]
		}
		n := 16
		if m.Answer {
			n = 20
		}
		if len(p) < n {
			return nil, errShort
		}
		it.Key = int64(binary.BigEndian.Uint64(p))
		it.Delivered = int64(binary.BigEndian.Uint64(p[8:]))
		if m.Answer {
			it.DeliveredTag = binary.BigEndian.Uint32(p[16:])
		}
		p = p[n:]
		m.Items = append(m.Items, it)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("pair: %d bytes after the last item", len(p))
	}
	return m, nil
}

var errShort = errors.New("pair: datagram ends inside an item")

func kindOf(answer bool) byte {
	if answer {
		return kindAnswr
	}
	return kindQuery
}

func roleOf(primary bool) byte {
	if primary {
		return rolePrim
	}
	return roleSec
}
