package pair

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testKey = bytes.Repeat([]byte("k"), MinKeyLen)

func TestWireRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    Message
	}{
		{"query v4 and v6", Message{Primary: true, Nonce: [nonceLen]byte{1, 2, 3}, At: 1_700_000_000_123_456_789, Items: []Item{
			{IP: netip.MustParseAddr("203.0.113.7"), Key: 1_700_000_000_000_000_000},
			{IP: netip.MustParseAddr("2001:db8::7"), Key: 1_699_999_999_500_000_000},
		}}},
		{"empty query (a probe)", Message{At: 5}},
		{"answer", Message{Answer: true, Nonce: [nonceLen]byte{9}, At: -1, Items: []Item{{Key: 0}, {Key: 42, Delivered: 41, DeliveredTag: 0xfeedf00d}}}},
		{"most items", Message{Items: func() []Item {
			items := make([]Item, MaxItems)
			for i := range items {
				items[i] = Item{IP: netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}), Key: int64(i)}
			}
			return items
		}()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Encode(nil, &tc.m, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 1472 {
				t.Errorf("%d bytes: more than one Ethernet frame's UDP payload", len(b))
			}
			got, err := Decode(b, testKey)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.m
			if want.Items == nil {
				want.Items = []Item{}
			}
			if diff := cmp.Diff(&want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestWireRefused: a datagram not signed with the key, altered, cut or
// padded is refused; so is a query of too many items.
func TestWireRefused(t *testing.T) {
	m := &Message{Items: []Item{{IP: netip.MustParseAddr("203.0.113.7"), Key: 1}}}
	good, err := Encode(nil, m, testKey)
	if err != nil {
		t.Fatal(err)
	}
	flip := bytes.Clone(good)
	flip[len(magic)+3] ^= 1
	other := bytes.Repeat([]byte("o"), MinKeyLen)
	tests := []struct {
		name string
		b    []byte
		auth bool // the error wraps ErrAuth
	}{
		{"other key", func() []byte { b, _ := Encode(nil, m, other); return b }(), true},
		{"a bit flipped", flip, true},
		{"cut", good[:len(good)-1], true},
		{"padded", append(bytes.Clone(good), 0), true},
		{"short", good[:10], false},
		{"empty", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.b, testKey)
			if err == nil {
				t.Fatal("accepted")
			}
			if errors.Is(err, ErrAuth) != tc.auth {
				t.Errorf("error %v: ErrAuth %v, want %v", err, errors.Is(err, ErrAuth), tc.auth)
			}
		})
	}
	if _, err := Encode(nil, &Message{Items: make([]Item, MaxItems+1)}, testKey); err == nil {
		t.Error("a query of MaxItems+1 items encoded")
	}
	// The version before (its answers carried no tag), signed with the
	// pair's key: refused as another version, not misread.
	old := append([]byte("LKP1"), good[len(magic):len(good)-macLen]...)
	mac := hmac.New(sha256.New, testKey)
	mac.Write(old)
	if _, err := Decode(mac.Sum(old), testKey); !errors.Is(err, ErrVersion) {
		t.Errorf("an LKP1 datagram: error %v, want it refused as another version", err)
	}
}

// TestWireNoAmplification: an answer is never longer than its query,
// whatever the addresses: a spoofed query makes the channel send no more
// than it received.
func TestWireNoAmplification(t *testing.T) {
	for _, ip := range []string{"203.0.113.7", "2001:db8::7"} {
		q := &Message{Items: make([]Item, MaxItems)}
		a := &Message{Answer: true, Items: make([]Item, MaxItems)}
		for i := range q.Items {
			q.Items[i] = Item{IP: netip.MustParseAddr(ip)}
			a.Items[i] = Item{Key: 1, Delivered: 2, DeliveredTag: 3}
		}
		qb, err := Encode(nil, q, testKey)
		if err != nil {
			t.Fatal(err)
		}
		ab, err := Encode(nil, a, testKey)
		if err != nil {
			t.Fatal(err)
		}
		if len(ab) > len(qb) {
			t.Errorf("%s: an answer of %d bytes to a query of %d", ip, len(ab), len(qb))
		}
	}
}

// FuzzDecode: whatever body comes in, signed with the key so that the
// parser behind the HMAC check is what is fuzzed, Decode never panics,
// and what it accepts encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, m := range []*Message{
		{Items: []Item{{IP: netip.MustParseAddr("203.0.113.7"), Key: 1}, {IP: netip.MustParseAddr("2001:db8::1"), Key: 2}}},
		{Answer: true, Primary: true, Items: []Item{{Key: 3, Delivered: 2}}},
		{},
	} {
		b, _ := Encode(nil, m, testKey)
		f.Add(b[:len(b)-macLen])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		mac := hmac.New(sha256.New, testKey)
		mac.Write(body)
		b := mac.Sum(bytes.Clone(body))
		m, err := Decode(b, testKey)
		if err != nil {
			return
		}
		again, err := Encode(nil, m, testKey)
		if err != nil {
			t.Fatalf("accepted %x, cannot encode it: %v", b, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, encodes as %x", b, again)
		}
	})
}

func TestWireMapped(t *testing.T) {
	body := []byte(magic + "QS" + string(make([]byte, nonceLen)) + string(make([]byte, 8)) + "\x00\x01" +
		"\x10" + string(netip.MustParseAddr("::ffff:203.0.113.7").AsSlice()) + string(make([]byte, 8)))
	mac := hmac.New(sha256.New, testKey)
	mac.Write(body)
	if _, err := Decode(mac.Sum(body), testKey); err == nil {
		t.Error("a v4-mapped address accepted: it would not encode back the same")
	}
}
