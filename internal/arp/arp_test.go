//go:build linux

package arp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestRequestFrameAndClaims(t *testing.T) {
	self := net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}
	other := net.HardwareAddr{2, 0, 0, 0, 0, 0xbb}
	ip := netip.MustParseAddr("203.0.113.7")
	f := requestFrame(self, netip.Addr{}, ip)
	if len(f) != 42 {
		t.Fatalf("frame is %d bytes, want 42", len(f))
	}
	// RFC 5227: sender protocol address zero, target hardware zero.
	if got := f[28:32]; string(got) != "\x00\x00\x00\x00" {
		t.Errorf("sender IP %v, want 0.0.0.0", got)
	}
	if _, ok := claims(f, self, ip); ok {
		t.Error("our own probe counted as an answer")
	}
	reply := func(sha net.HardwareAddr, spa netip.Addr) []byte {
		r := append([]byte(nil), f...)
		copy(r[0:6], self)
		copy(r[6:12], sha)
		r[21] = 2 // reply
		copy(r[22:28], sha)
		a := spa.As4()
		copy(r[28:32], a[:])
		return r
	}
	// A request of the kernel's kind names its sender.
	if got := requestFrame(self, netip.MustParseAddr("203.0.113.9"), ip)[28:32]; string(got) != "\xcb\x00\x71\x09" {
		t.Errorf("sender IP %v, want 203.0.113.9", got)
	}
	for _, c := range []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"reply from the holder", reply(other, ip), true},
		{"reply for another address", reply(other, netip.MustParseAddr("203.0.113.8")), false},
		{"our own address", reply(self, ip), false},
		{"truncated", reply(other, ip)[:30], false},
	} {
		by, ok := claims(c.frame, self, ip)
		if ok != c.want || (ok && by.String() != other.String()) {
			t.Errorf("%s: got %v %v, want %v", c.name, by, ok, c.want)
		}
	}
}

// TestAskNotEthernet: an interface without a 6-byte hardware address
// (InfiniBand's are 20) or an IPv6 target is refused before any socket
// is opened, so no malformed frame is sent.
func TestAskNotEthernet(t *testing.T) {
	ib := make(net.HardwareAddr, 20)
	for _, tc := range []struct {
		name string
		hw   net.HardwareAddr
		ip   netip.Addr
	}{
		{"20-byte hardware address", ib, netip.MustParseAddr("203.0.113.1")},
		{"no hardware address", nil, netip.MustParseAddr("203.0.113.1")},
		{"IPv6 target", net.HardwareAddr{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("2001:db8::1")},
	} {
		if _, err := Ask(context.Background(), 1, tc.hw, netip.Addr{}, tc.ip, time.Millisecond); !errors.Is(err, ErrNotEthernet) {
			t.Errorf("%s: %v, want ErrNotEthernet", tc.name, err)
		}
	}
}
