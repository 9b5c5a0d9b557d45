package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	testSec  = 1764417600
	testNsec = 1764417600123456789
	testPid  = 4242
)

func TestAppendEvent(t *testing.T) {
	commit := event{action: "commit", mac: "02:00:00:0a:0b:0c", family: "ipv4", ip: "203.0.113.5", leaseTime: 600, hostname: "c1"}
	expiry := commit
	expiry.action = "expiry"
	none := commit
	none.hostname = "(none)"
	// As dhcpd passes them: the MAC unpadded, the IPv6 address with every group.
	raw := event{action: "release", mac: "0:1:0:1:2A:3b:4c:5d:2:0:0:a:b:c", family: "ipv6", ip: "2001:DB8:0:0:0:0:0:5"}
	for _, tc := range []struct {
		name string
		e    event
		want string
	}{
		{"commit", commit, `{"action":"commit","mac":"02:00:00:0a:0b:0c","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1764417600,"lease_time":600,"hostname":"c1","timestamp_ns":1764417600123456789,"pid":4242}`},
		// maas-dhcp-helper sends neither lease_time nor hostname unless committing.
		{"expiry", expiry, `{"action":"expiry","mac":"02:00:00:0a:0b:0c","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1764417600,"timestamp_ns":1764417600123456789,"pid":4242}`},
		{"no hostname", none, `{"action":"commit","mac":"02:00:00:0a:0b:0c","ip_family":"ipv4","ip":"203.0.113.5","timestamp":1764417600,"lease_time":600,"hostname":"","timestamp_ns":1764417600123456789,"pid":4242}`},
		{"normalised", raw, `{"action":"release","mac":"00:01:00:01:2a:3b:4c:5d:02:00:00:0a:0b:0c","ip_family":"ipv6","ip":"2001:db8::5","timestamp":1764417600,"timestamp_ns":1764417600123456789,"pid":4242}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(appendEvent(nil, &tc.e, testSec, testNsec, testPid))
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("invalid JSON: %s", got)
			}
		})
	}
}

func TestHostnameEncoding(t *testing.T) {
	long := strings.Repeat("h", 64<<10)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "node-1.maas", "node-1.maas"},
		{"none", "(none)", ""},
		{"empty", "", ""},
		{"blank", " \t\n", ""},
		{"unicode blank", "\u00a0\u2003", ""},
		{"(none) with text", "(none)x", "(none)x"},
		{"quotes", `a"b"c`, `a"b"c`},
		{"backslash", `a\b`, `a\b`},
		{"json injection", `x","action":"expiry`, `x","action":"expiry`},
		{"newline", "a\nb", "a\nb"},
		{"carriage return", "a\rb", "a\rb"},
		{"NUL", "a\x00b", "a\x00b"},
		{"controls", "\x01\x1f\x7f", "\x01\x1f\x7f"},
		{"utf8", "nœud-é", "nœud-é"},
		{"line separator", "a\u2028b", "a\u2028b"},
		{"invalid utf8", "a\xffb\xc3", "a\ufffdb\ufffd"},
		{"overlong", "\xc0\xaf", "\ufffd\ufffd"},
		{"surrogate", "\xed\xa0\x80", "\ufffd\ufffd\ufffd"},
		{"64 KiB", long, long[:maxHostname]},
		{"cut before escape", strings.Repeat("h", 254) + `"`, strings.Repeat("h", 254)},
		{"escape fits exactly", strings.Repeat("h", 253) + `"x`, strings.Repeat("h", 253) + `"`},
		{"cut before control escape", strings.Repeat("h", 250) + "\n", strings.Repeat("h", 250)},
		{"cut before rune", strings.Repeat("h", 254) + "é", strings.Repeat("h", 254)},
		{"all controls", strings.Repeat("\x01", 100), strings.Repeat("\x01", 42)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := appendHostname(nil, tc.in)
			var got string
			if err := json.Unmarshal(enc, &got); err != nil {
				t.Fatalf("invalid JSON string %q: %v", enc, err)
			}
			if got != tc.want {
				t.Errorf("decoded %q, want %q (encoded %q)", got, tc.want, enc)
			}
			if n := len(enc) - 2; n > maxHostname {
				t.Errorf("encoded hostname is %d bytes, over %d", n, maxHostname)
			}
		})
	}
}

// TestDatagramFitsMAASBuffer pins the size bound doc.go promises: the
// largest IPv4 event with a 20-byte hardware address (MAAS's snippet
// passes 6) stays within 512 bytes, what
// MAAS's Go rack agent reads per datagram (a json.Decoder over the
// socket: its first read is 512 bytes, the rest of a longer datagram is
// lost and garbles the next one).
func TestDatagramFitsMAASBuffer(t *testing.T) {
	worst := event{action: "release", mac: strings.Repeat("ff:", 19) + "ff", family: "ipv4", ip: "255.255.255.255",
		leaseTime: 4294967295, hostname: strings.Repeat("\x01", 1000)}
	for _, action := range []string{"commit", "expiry", "release"} {
		worst.action = action
		b := appendEvent(nil, &worst, 1<<33, 1<<62, 1<<22)
		if len(b) > 512 {
			t.Errorf("%s: %d bytes > 512: %s", action, len(b), b)
		}
		t.Logf("%s: worst case %d bytes", action, len(b))
	}
	// And the largest event of all fits the stack buffer.
	worst.action, worst.family, worst.ip = "commit", "ipv6", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	worst.mac = strings.Repeat("ff:", maxHWBytes-1) + "ff"
	if b := appendEvent(nil, &worst, 1<<33, 1<<62, 1<<22); len(b) > maxLine {
		t.Errorf("largest event %d bytes > maxLine %d", len(b), maxLine)
	}
}

// datagram is what a receiver decodes: MAAS's fields and ours.
type datagram struct {
	Action      string  `json:"action"`
	MAC         string  `json:"mac"`
	IPFamily    string  `json:"ip_family"`
	IP          string  `json:"ip"`
	Timestamp   int64   `json:"timestamp"`
	LeaseTime   *uint32 `json:"lease_time"`
	Hostname    *string `json:"hostname"`
	TimestampNS int64   `json:"timestamp_ns"`
	PID         int     `json:"pid"`
}

// FuzzEvent checks the whole path from arguments to JSON: any arguments
// either fail with a one-line error or give a valid JSON object whose
// fields are the normalised arguments, with the host name sanitised and
// cut as documented.
func FuzzEvent(f *testing.F) {
	f.Add("commit", "2:0:0:a:b:c", "ipv4", "203.0.113.5", "600", "c1")
	f.Add("commit", "02:00:00:0A:0B:0C", "ipv4", "198.51.100.1", "0", "(none)")
	f.Add("expiry", "0:1:0:1:2a:3b:4c:5d:2:0:0:a:b:c", "ipv6", "2001:db8:0:0:0:0:0:5", "", "")
	f.Add("release", "", "ipv4", "198.18.0.1", "4294967295", "a\"b\\c\n\x00\xff")
	f.Fuzz(func(t *testing.T, action, mac, family, ip, leaseTime, hostname string) {
		args := []string{"notify", "--action", action, "--mac", mac, "--ip-family", family, "--ip", ip, "--hostname", hostname}
		if leaseTime != "" {
			args = append(args, "--lease-time", leaseTime)
		}
		var cfg config
		err := parseArgs(&cfg, args, env())
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		b := appendEvent(nil, &cfg.event, testSec, testNsec, testPid)
		var d datagram
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("invalid event JSON %q: %v", b, err)
		}
		wantMAC, _ := normaliseMAC(mac)
		wantIP, _ := parseIP(ip, family)
		if d.Action != action || d.IPFamily != family || d.MAC != wantMAC || d.IP != wantIP {
			t.Fatalf("decoded %+v from %q", d, b)
		}
		if action != "commit" {
			if d.LeaseTime != nil || d.Hostname != nil {
				t.Fatalf("%s carries lease_time or hostname: %s", action, b)
			}
			return
		}
		if d.LeaseTime == nil || *d.LeaseTime != cfg.leaseTime || d.Hostname == nil {
			t.Fatalf("commit without lease_time %d or hostname: %s", cfg.leaseTime, b)
		}
		checkHostname(t, hostname, *d.Hostname)
	})
}

// checkHostname checks a decoded host name against the raw one: "" for
// no name, else the longest prefix of the raw name, each invalid byte
// read as U+FFFD, whose encoding fits maxHostname.
func checkHostname(t *testing.T, raw, got string) {
	t.Helper()
	if noHostname(raw) {
		if got != "" {
			t.Fatalf("no-name %q decoded as %q", raw, got)
		}
		return
	}
	var want strings.Builder
	n := 0
	for _, r := range raw { // range yields U+FFFD for each invalid byte
		size := utf8.RuneLen(r)
		switch {
		case r == '"' || r == '\\':
			size = 2
		case r < 0x20:
			size = 6
		}
		if n+size > maxHostname {
			break
		}
		n += size
		want.WriteRune(r)
	}
	if got != want.String() {
		t.Fatalf("host name %q decoded as %q, want %q", raw, got, want.String())
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	e := event{action: "commit", mac: "02:00:00:0a:0b:0c", family: "ipv4", ip: "203.0.113.5", leaseTime: 600, hostname: "node-1.maas"}
	var buf [maxLine]byte
	for b.Loop() {
		appendEvent(buf[:0], &e, testSec, testNsec, testPid)
	}
}

// TestIsSpace pins isSpace to Python's str.isspace, which MAAS's region
// uses to ignore blank host names; the list is Python 3's.
func TestIsSpace(t *testing.T) {
	python := map[rune]bool{}
	for _, r := range []rune{0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680,
		0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000} {
		python[r] = true
	}
	for r := rune(0); r <= 0x10ffff; r++ {
		if isSpace(r) != python[r] {
			t.Errorf("isSpace(%U) = %v", r, isSpace(r))
		}
	}
}
