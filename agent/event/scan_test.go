package event

import (
	"encoding/json"
	"testing"
)

// The datagrams the hooks send take the fast path.
func TestScanDatagramTakesHookShapes(t *testing.T) {
	for _, in := range []string{
		// leasekeeper-hook (hook/encode.go)
		`{"action":"commit","mac":"02:00:00:00:00:01","ip_family":"ipv4","ip":"198.18.0.1","timestamp":1795000000,"lease_time":600,"hostname":"bench-1","timestamp_ns":1795000000123456789,"pid":4242}`,
		`{"action":"expiry","mac":"02:00:00:00:00:01","ip_family":"ipv4","ip":"198.18.0.1","timestamp":1795000000,"timestamp_ns":1795000000123456789,"pid":4242}`,
		// maas-dhcp-helper (Python's json.dumps separators)
		`{"action": "commit", "mac": "2:0:0:a:b:C", "ip_family": "ipv4", "ip": "203.0.113.5", "timestamp": 1795000000, "lease_time": 600, "hostname": "node-1"}`,
		`{"action": "commit", "mac": "2:0:0:a:b:C", "ip_family": "ipv6", "ip": "2001:db8::5", "timestamp": 1795000000, "lease_time": 600, "hostname": null}` + "\n",
	} {
		if _, ok := scanDatagram([]byte(in)); !ok {
			t.Errorf("scanDatagram refused %s", in)
		}
	}
}

// FuzzScanDatagram: whatever scanDatagram accepts, encoding/json reads
// the same way (it never accepts what encoding/json refuses, nor reads a
// value differently).
func FuzzScanDatagram(f *testing.F) {
	for _, s := range []string{
		`{"action":"commit","mac":"02:00:00:00:00:01","ip_family":"ipv4","ip":"198.18.0.1","timestamp":1795000000,"lease_time":600,"hostname":"bench-1","timestamp_ns":1795000000123456789,"pid":4242}`,
		`{"action": "commit", "mac": "2:0:0:a:b:C", "ip_family": "ipv4", "ip": "203.0.113.5", "timestamp": 1795000000, "lease_time": 600, "hostname": null}`,
		`{"Action":"commit","action":"expiry","ip":"203.0.113.5","timestamp":1}`,
		`{"action":"commit","action":"expiry","ip":"203.0.113.5","timestamp":1}`,
		`{"action":"commit","ip":"203.0.113.5","timestamp":01}`,
		`{"action":"commit","ip":"203.0.113.5","timestamp":1.0}`,
		`{"action":"commit","ip":"203.0.113.5","timestamp":"1"}`,
		`{"action":"commit","ip":"203.0.113.5","timestamp":1,"hostname":"a\u00e9"}`,
		`{"action":"commit","ip":"203.0.113.5","timestamp":1,"x":{"y":1}}`,
		`{"action":"commit","ip":"203.0.113.5","timestamp":1,"x":true,"y":false,"z":null,"w":-5}`,
		`{"action":"commit","ip":"203.0.113.5","timestamp":-0} `,
		`{"action":"commit"}}`,
		`{"action":"commit"} {}`,
		`{}`,
		` {"ip" : "::1" , "timestamp" : 99999999999999999999 } `,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		fast, ok := scanDatagram([]byte(in))
		if !ok {
			return
		}
		slow, err := decodeDatagram([]byte(in))
		if err != nil {
			t.Fatalf("scanDatagram accepted what encoding/json refuses (%v): %+v", err, fast)
		}
		if len(slow.hostnameJSON) > 0 && string(slow.hostnameJSON) != "null" {
			if err := json.Unmarshal(slow.hostnameJSON, &slow.Hostname); err != nil {
				t.Fatalf("scanDatagram accepted a hostname encoding/json refuses: %s", slow.hostnameJSON)
			}
		}
		if !fast.hasHostname {
			fast.Hostname = ""
		}
		if fast.Action != slow.Action || fast.MAC != slow.MAC || fast.Family != slow.Family || fast.IP != slow.IP ||
			fast.Timestamp != slow.Timestamp || fast.LeaseTime != slow.LeaseTime || fast.TimestampNS != slow.TimestampNS ||
			fast.Hostname != slow.Hostname {
			t.Fatalf("scanDatagram read %+v, encoding/json %+v", fast, slow)
		}
	})
}

func BenchmarkParseDatagram(b *testing.B) {
	in := []byte(`{"action":"commit","mac":"02:00:00:00:00:01","ip_family":"ipv4","ip":"198.18.0.1","timestamp":1795000000,"lease_time":600,"hostname":"bench-1","timestamp_ns":1795000000123456789,"pid":4242}`)
	b.Run("ParseDatagram", func(b *testing.B) {
		for b.Loop() {
			if _, err := ParseDatagram(in, SourceHook); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeDatagram(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzNormalizeMAC: the canonical-form shortcut gives what parsing and
// writing the octets gives.
func FuzzNormalizeMAC(f *testing.F) {
	for _, s := range []string{"02:00:00:0a:0b:0c", "2:0:0:a:b:C", "02:00:00:0A:0B:0C", "02", "02:", ":02", "0g:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeMAC(s)
		b, perr := parseOctets(s, 20)
		if (err == nil) != (perr == nil) || err == nil && got != hexOctets(b) {
			t.Fatalf("NormalizeMAC(%q) = %q, %v; parseOctets: %x, %v", s, got, err, b, perr)
		}
	})
}
