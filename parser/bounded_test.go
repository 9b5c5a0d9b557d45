package parser

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// endless yields n bytes of one repeated pattern without holding them.
type endless struct {
	pattern []byte
	n, off  int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.off >= e.n {
		return 0, io.EOF
	}
	k := int64(len(p))
	if k > e.n-e.off {
		k = e.n - e.off
	}
	for i := range p[:k] {
		p[i] = e.pattern[(e.off+int64(i))%int64(len(e.pattern))]
	}
	e.off += k
	return int(k), nil
}

// TestDecoderBoundedOnGarbage: files with no statement boundary (NUL
// bytes, one endless word, endless white space or comment) are read with
// a held tail that never exceeds one statement's bound plus one read,
// whatever their size, and every byte is consumed; a statement after the
// garbage is still found.
func TestDecoderBoundedOnGarbage(t *testing.T) {
	const size = 24 << 20
	lease := []byte("\nlease 203.0.113.9 {\n  starts 3 2026/01/07 10:00:00;\n  ends 3 2026/01/07 11:00:00;\n  binding state active;\n}\n")
	for _, tc := range []struct {
		name    string
		pattern []byte
	}{
		{"NUL bytes", []byte{0}},
		{"one word", []byte("x")},
		{"spaces", []byte(" ")},
		{"blank lines", []byte("\n")},
		{"a comment", append([]byte("#"), bytes.Repeat([]byte("c"), 1000)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder()
			maxPending, stmts := 0, 0
			h := func(s Statement, err error) {
				if s != nil {
					stmts++
				}
			}
			r := &endless{pattern: tc.pattern, n: size}
			buf := make([]byte, 256<<10)
			for {
				n, err := r.Read(buf)
				d.Feed(buf[:n], h)
				maxPending = max(maxPending, d.Pending())
				if err == io.EOF {
					break
				}
			}
			d.Feed(lease, h)
			if err := d.Close(h); err != nil {
				t.Errorf("Close: %v", err)
			}
			if limit := MaxStatement + len(buf); maxPending > limit {
				t.Errorf("held %d bytes at most, want ≤ %d", maxPending, limit)
			}
			if stmts != 1 {
				t.Errorf("%d statements after the garbage, want the one lease", stmts)
			}
			if d.Offset() != size+int64(len(lease)) {
				t.Errorf("offset %d, want %d", d.Offset(), size+len(lease))
			}
		})
	}
}

// TestParseLeasesGarbageLikeDecoder: a whole-file read that meets more
// garbage than any statement can hold goes on in one streaming decoder,
// and finds exactly what a single decoder finds: the same statements, the
// same errors, the same byte count.
func TestParseLeasesGarbageLikeDecoder(t *testing.T) {
	lease := func(ip string) string {
		return "lease " + ip + " {\n  starts 3 2026/01/07 10:00:00;\n  ends 3 2026/01/07 11:00:00;\n  binding state active;\n}\n"
	}
	garbage := bytes.Repeat([]byte{0}, 3*MaxStatement)
	for _, tc := range []struct{ name, input string }{
		{"garbage between leases", lease("203.0.113.1") + string(garbage) + "\n" + lease("203.0.113.2") + lease("203.0.113.3")},
		{"garbage at the end", lease("203.0.113.1") + string(garbage)},
		{"garbage lines", lease("203.0.113.1") + string(bytes.Repeat([]byte("x y z\n"), MaxStatement)) + lease("203.0.113.2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			d := NewDecoder()
			record := func(out *[]string) Handler {
				return func(s Statement, err error) {
					if err != nil {
						if len(err.Error()) > 300 {
							t.Errorf("an error of %d bytes", len(err.Error()))
						}
						*out = append(*out, "error: "+err.Error())
					} else {
						*out = append(*out, fmt.Sprintf("%T %v", s, s.(*Lease).IP))
					}
				}
			}
			d.Feed([]byte(tc.input), record(&want))
			if err := d.Close(record(&want)); err != nil {
				want = append(want, "incomplete: "+err.Error())
			}
			for _, seg := range []int{64, 4096, segmentSize} {
				var got []string
				n, inc, err := decodeParallel(strings.NewReader(tc.input), 3, seg, record(&got))
				if err != nil {
					t.Fatal(err)
				}
				if inc != nil {
					got = append(got, "incomplete: "+inc.Error())
				}
				if n != int64(len(tc.input)) {
					t.Errorf("segments of %d: %d bytes read, want %d", seg, n, len(tc.input))
				}
				if !slices.Equal(got, want) {
					t.Errorf("segments of %d:\n got %q\nwant %q", seg, got, want)
				}
			}
		})
	}
}
