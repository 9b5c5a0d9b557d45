package rack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/parser"
)

// countingFile counts the bytes read through it.
type countingFile struct {
	*os.File
	n *atomic.Int64
}

func (f countingFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.n.Add(int64(n))
	return n, err
}

func (f countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.n.Add(int64(n))
	return n, err
}

func countingOpen(n *atomic.Int64) func(string) (leasesFile, error) {
	return func(path string) (leasesFile, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		return countingFile{f, n}, nil
	}
}

// busyPrefix is a leases file of other clients' blocks, about size bytes.
func busyPrefix(size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "lease 198.51.100.%d {\n  starts 0 2026/11/29 11:%02d:00;\n  ends 0 2026/11/29 12:%02d:00;\n  binding state active;\n  next binding state free;\n  hardware ethernet 02:00:00:01:00:%02x;\n  client-hostname \"busy-%d\";\n}\n",
			i%256, i%60, i%60, i%256, i)
	}
	return b.String()
}

const (
	activeBlock = `lease 203.0.113.100 {
  starts 0 2026/11/29 11:55:00;
  ends 0 2026/11/29 12:05:00;
  binding state active;
  next binding state free;
  hardware ethernet 02:00:00:00:00:01;
}
`
	releasedBlock = `lease 203.0.113.100 {
  starts 0 2026/11/29 11:55:00;
  ends 0 2026/11/29 12:00:00;
  tstp 0 2026/11/29 12:00:00;
  binding state free;
  hardware ethernet 02:00:00:00:00:01;
}
`
)

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWaitReleasedReadsAppendsOnly: after the check has read a big file
// once, verification reads only what dhcpd appends; a rewrite (a new
// file renamed onto the path) is read whole, once.
func TestWaitReleasedReadsAppendsOnly(t *testing.T) {
	ip := netip.MustParseAddr("203.0.113.100")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	prefix := busyPrefix(4 << 20)
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, path string) (wantRead int64)
		rereads int
	}{
		{name: "appended", change: func(t *testing.T, path string) int64 {
			other := "lease 198.51.100.7 {\n  binding state free;\n  hardware ethernet 02:00:00:01:00:07;\n}\n"
			appendFile(t, path, other+releasedBlock)
			return int64(len(other) + len(releasedBlock))
		}},
		{name: "appended torn, then completed", change: func(t *testing.T, path string) int64 {
			appendFile(t, path, releasedBlock[:40])
			done := make(chan struct{})
			t.Cleanup(func() { <-done })
			go func() {
				defer close(done)
				time.Sleep(3 * pollEvery)
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
				if err == nil {
					_, err = f.WriteString(releasedBlock[40:])
					f.Close()
				}
				if err != nil {
					t.Error(err)
				}
			}()
			return int64(len(releasedBlock))
		}},
		{name: "rewritten", rereads: 1, change: func(t *testing.T, path string) int64 {
			next := "# rewrite\n" + releasedBlock + "server-duid \"\\000\\001\";\n"
			tmp := path + ".1764417600"
			if err := os.WriteFile(tmp, []byte(next), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(path, path+"~"); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			return int64(len(next))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dhcpd.leases")
			if err := os.WriteFile(path, []byte(prefix+activeBlock+prefix), 0o644); err != nil {
				t.Fatal(err)
			}
			var n atomic.Int64
			r := newLeaseReader(path, ip, countingOpen(&n))
			defer r.close()
			opts := Options{IP: ip, MAC: mac, LeasesPath: path, Timeout: 10 * time.Second, Now: func() time.Time { return now }}
			ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
			defer cancel()
			before, err := r.current(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			// The file, and the blank tail after its last statement
			// again, to tell it from a torn block.
			if got, want := n.Load(), int64(2*len(prefix)+len(activeBlock)+r.dec.Pending()); got != want {
				t.Fatalf("check read %d bytes, want the file's %d", got, want)
			}

			n.Store(0)
			want := tc.change(t, path)
			res := Result{Interface: "test0"}
			if err := waitReleased(ctx, opts, before, r, &res); err != nil {
				t.Fatal(err)
			}
			if !res.Verified || res.State != parser.StateFree {
				t.Errorf("result %+v, want verified free", res)
			}
			if got := n.Load(); got != want {
				t.Errorf("verification read %d bytes, want %d (what changed), not the %d of the file", got, want, 2*len(prefix))
			}
			if r.rereads != tc.rereads {
				t.Errorf("%d whole reads after the first, want %d", r.rereads, tc.rereads)
			}
		})
	}
}

// TestCurrentUnreadable: a statement the parser had to skip after the
// address's last block may be the address's current block; the check
// refuses (nothing sent) instead of trusting the older block. A block
// dhcpd itself refuses is no such statement: dhcpd keeps the older block,
// and so does the check.
func TestCurrentUnreadable(t *testing.T) {
	ip := netip.MustParseAddr("203.0.113.100")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	badFor := func(addr string) string {
		return "lease " + addr + " {\n  starts 9 2026/13/29 11:55:00;\n  hardware ethernet 02:00:00:00:00:01;\n}\n"
	}
	refusedFor := func(addr string) string {
		return "lease " + addr + " {\n  binding state free;\n  bootp;\n  hardware ethernet 02:00:00:00:00:01;\n}\n"
	}
	for _, tc := range []struct {
		name string
		text string
		want error  // errors.Is; nil: the lease is returned
		msg  string // in the error
	}{
		{name: "bad block after", text: activeBlock + badFor("203.0.113.100"), want: ErrUnreadable,
			msg: `dhcpd.leases:9: lease 203.0.113.100: bad date "2026/13/29" "11:55:00"; after its block at line 1`},
		{name: "only a bad block", text: badFor("203.0.113.100"), want: ErrUnreadable, msg: "dhcpd.leases:2: lease 203.0.113.100"},
		{name: "torn block after", text: activeBlock + "lease 203.0.113.100 {\n  starts 0 2026/11/29 11:58:00;\n" + badFor("198.51.100.1"),
			want: ErrUnreadable, msg: "dhcpd.leases:8: lease 203.0.113.100: not closed before line 10 (torn write?)"},
		{name: "garbage after", text: activeBlock + "}} oops;\n", want: ErrUnreadable, msg: `dhcpd.leases:8: unexpected "}" at top level`},
		{name: "ends inside a block", text: activeBlock + "lease 203.0.113.100 {\n  starts 0 2026/11/29 11:58:00;\n",
			want: ErrUnreadable, msg: "ends inside a statement at line 8"},
		{name: "bad block before", text: badFor("203.0.113.100") + activeBlock},
		{name: "block dhcpd refuses after", text: activeBlock + refusedFor("203.0.113.100")},
		{name: "block dhcpd swallows after", text: activeBlock + refusedFor("203.0.113.101") + releasedBlock},
		{name: "other address's bad block", text: activeBlock + badFor("203.0.113.101") + badFor("198.51.100.100")},
		{name: "bad host after", text: activeBlock + "host h1 {\n  dynamic;\n  hardware ethernet zz;\n}\n"},
		{name: "unparsable address after", text: activeBlock + "lease 203.0.113.1OO {\n}\n"},
		{name: "blank and comment tail", text: activeBlock + "\n# a comment without a newline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dhcpd.leases")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			r := newLeaseReader(path, ip, nil)
			defer r.close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*pollEvery)
			defer cancel()
			l, err := r.current(ctx, Options{IP: ip, MAC: mac, LeasesPath: path, Now: func() time.Time { return now }})
			if tc.want == nil {
				if err != nil || l == nil || l.Line != strings.Count(tc.text[:strings.Index(tc.text, activeBlock)], "\n")+1 {
					t.Fatalf("current = %v, %v; want the active block", l, err)
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) || !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want a refusal for %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.HasSuffix(err.Error(), "; nothing sent") {
				t.Errorf("error %q, want it to say %q", err, tc.msg)
			}
		})
	}
}
