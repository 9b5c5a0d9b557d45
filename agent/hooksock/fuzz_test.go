package hooksock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// FuzzDatagram: whatever a local user sends to the hook socket, decode
// never panics, and what it accepts is an event the agent can store and
// encode (its JSON round-trips through the outbox's encoding).
func FuzzDatagram(f *testing.F) {
	f.Add(datagram(1, "c1"))
	f.Add([]byte(`{"action":"expiry","mac":"","ip_family":"ipv6","ip":"2001:db8::5","timestamp":1795000000}`))
	f.Add([]byte(`{"action":"commit","mac":"2:0:0:a:b:c","ip_family":"ipv4","ip":"203.0.113.5","timestamp":9223372036854775807,"lease_time":-1,"hostname":"\u0000x"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[1,2]`))
	l, err := New(Config{Path: "/nonexistent"}, nil, zerolog.Nop(), prometheus.NewRegistry(), nil)
	if err != nil {
		f.Fatal(err)
	}
	oob := syscall.UnixCredentials(&syscall.Ucred{Pid: 1, Uid: 0, Gid: 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, reason, err := l.decode(b, oob, 0)
		if (reason == "") != (err == nil) {
			t.Fatalf("reason %q with error %v", reason, err)
		}
		if reason != "" {
			return
		}
		if _, err := json.Marshal(ev.Item()); err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", b, err)
		}
		if !ev.IP.IsValid() {
			t.Fatalf("accepted %q without a valid IP", b)
		}
	})
}

// FuzzSpoolReader: any bytes in a spool file are read line by line with
// readLine exactly as bytes.Split would cut them (an overlong line is
// skipped whole, never split into events), and parseSpoolLine never
// panics.
func FuzzSpoolReader(f *testing.F) {
	f.Add([]byte(string(datagram(1, "a")) + "\n" + string(datagram(2, "b")) + "\n"))
	f.Add([]byte("torn{\"action\":\"commit\"" + string(datagram(3, "c")) + "\n\n\n"))
	f.Add([]byte("no newline at the end"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const size = 16 // bufio's smallest buffer: overlong lines are easy to reach
		r := bufio.NewReaderSize(bytes.NewReader(b), size)
		var got [][]byte
		longs := 0
		for {
			line, long, err := readLine(r)
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			if long > 0 {
				longs++
				got = append(got, nil)
			} else if len(line) > 0 || err == nil {
				got = append(got, append([]byte(nil), line...))
				_, _ = parseSpoolLine(line)
			}
			if errors.Is(err, io.EOF) {
				break
			}
		}
		var want [][]byte
		wantLong := 0
		parts := bytes.Split(b, []byte{'\n'})
		for i, p := range parts {
			last := i == len(parts)-1
			if last && len(p) == 0 {
				break
			}
			if len(p) >= size {
				wantLong++
				want = append(want, nil)
				continue
			}
			want = append(want, p)
		}
		if longs != wantLong || len(got) != len(want) {
			t.Fatalf("%d lines (%d long), want %d (%d long)", len(got), longs, len(want), wantLong)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d: %q, want %q", i, got[i], want[i])
			}
		}
	})
}
