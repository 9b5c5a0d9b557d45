package parser

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecodeLeases checks that decoding is independent of how the input
// arrives: the whole file in one Feed, the same bytes in random chunks
// (the agent tails a live file), and the parallel whole-file decoder with
// tiny segments must all produce the same statements, errors and table.
// Lines reported must lie within the input.
func FuzzDecodeLeases(f *testing.F) {
	files, _ := filepath.Glob("testdata/leases/*.leases")
	more, _ := filepath.Glob("testdata/differential/*.leases")
	files = append(files, more...)
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint64(1))
	}
	f.Add([]byte("lease 1.2.3.4 {\n  binding state active;\n"), uint64(7))
	f.Add([]byte("x {\nlease 1.2.3.4 {\n}\n"), uint64(3))
	// A refused block whose recovery swallows the next one, across the
	// smallest segments.
	f.Add([]byte("lease 1.2.3.4 {\n  bootp;\n}\nlease 1.2.3.5 {\n}\nlease 1.2.3.6 {\n}\n"), uint64(5))
	f.Add([]byte("ia-na \"\\001\\000\\000\\000x\" {\n  iaaddr 2001:db8::1 {\n    binding state backup;\n  }\n  iaaddr 2001:db8::2 {\n  }\n}\nia-na 01:00:00:00:02 {\n}\n"), uint64(9))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		whole := decodeAll(data, nil)
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		var cuts []int
		for pos := 0; pos < len(data); {
			pos += 1 + rng.IntN(64)
			if pos < len(data) {
				cuts = append(cuts, pos)
			}
		}
		chunked := decodeAll(data, cuts)
		if a, b := strings.Join(whole, "\n"), strings.Join(chunked, "\n"); a != b {
			t.Fatalf("chunked decode differs (cuts %v):\nwhole:\n%s\nchunked:\n%s", cuts, a, b)
		}
		lines := bytes.Count(data, []byte{'\n'}) + 1
		for _, l := range whole {
			if i := strings.Index(l, "line "); (strings.HasPrefix(l, "error: ") || strings.HasPrefix(l, "refused: ")) && i >= 0 {
				var n int
				for _, c := range l[i+5:] {
					if c < '0' || c > '9' {
						break
					}
					n = n*10 + int(c-'0')
				}
				if n < 1 || n > lines {
					t.Fatalf("error line %d outside 1..%d: %s", n, lines, l)
				}
			}
		}
		checkParallel(t, data)
	})
}
