package config

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeAtomic writes as MAAS's atomic_write does
// (src/provisioningserver/utils/fs.py): a temporary file renamed onto the
// path.
func writeAtomic(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestLookChanged: what counts as a change of a followed file.
func TestLookChanged(t *testing.T) {
	dir := t.TempDir()
	conf, marker, leases := filepath.Join(dir, "rackd.conf"), filepath.Join(dir, "rackd"), filepath.Join(dir, "dhcpd6.leases")
	secret := filepath.Join(dir, "agent.key")
	srcs := []Source{{conf, true}, {marker, false}, {leases, false}, {secret, true}}
	writeAtomic(t, conf, "maas_url: http://203.0.113.2:5240/MAAS\n")
	writeAtomic(t, marker, "")
	writeAtomic(t, secret, "key 1")
	for _, tc := range []struct {
		name string
		do   func(t *testing.T)
		want []string
	}{
		{"nothing done", func(*testing.T) {}, nil},
		{"the same bytes written again (another inode, another mtime)", func(t *testing.T) {
			writeAtomic(t, conf, "maas_url: http://203.0.113.2:5240/MAAS\n")
		}, nil},
		{"touched", func(t *testing.T) {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(conf, later, later); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"other bytes", func(t *testing.T) { writeAtomic(t, conf, "maas_url: http://203.0.113.3:5240/MAAS\n") }, []string{conf}},
		{"other bytes of the same size, written in place", func(t *testing.T) {
			if err := os.WriteFile(conf, []byte("maas_url: http://203.0.113.4:5240/MAAS\n"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, []string{conf}},
		{"an existence source rewritten", func(t *testing.T) { writeAtomic(t, marker, "another build") }, nil},
		{"an existence source gone", func(t *testing.T) { os.Remove(marker) }, []string{marker}},
		{"an existence source appears", func(t *testing.T) { writeAtomic(t, leases, "") }, []string{leases}},
		{"dhcpd writes its leases", func(t *testing.T) {
			f, err := os.OpenFile(leases, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("lease 203.0.113.5 {\n}\n")
			f.Close()
		}, nil},
		{"unreadable now, the same bytes", func(t *testing.T) {
			if os.Geteuid() == 0 {
				t.Skip("root reads a file of mode 0")
			}
			os.Chmod(secret, 0)
		}, []string{secret}},
		{"a content source gone", func(t *testing.T) { os.Remove(secret) }, []string{secret}},
		{"a content source appears", func(t *testing.T) { writeAtomic(t, secret, "key 2") }, []string{secret}},
		{"the two at once", func(t *testing.T) {
			writeAtomic(t, conf, "maas_url: http://203.0.113.5:5240/MAAS\n")
			writeAtomic(t, secret, "key 3")
		}, []string{conf, secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := Look(nil, srcs, time.Now())
			tc.do(t)
			after := Look(before, srcs, time.Now())
			if diff := cmp.Diff(tc.want, Changed(before, after, srcs)); diff != "" {
				t.Errorf("Changed (-want +got):\n%s", diff)
			}
			// Read afresh, the file says the same.
			if diff := cmp.Diff(Changed(before, after, srcs), Changed(before, Look(nil, srcs, time.Now()), srcs)); diff != "" {
				t.Errorf("Look's stat shortcut missed a change (-shortcut +fresh):\n%s", diff)
			}
		})
	}
}

// TestLookShortcut: a file stat says is unchanged is not read again
// only when its last change was well before the read Look remembers; one
// changed in the tick of that read (which a kernel stamping by clock
// ticks would not tell from a write just after it) is read again.
func TestLookShortcut(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.crt")
	writeAtomic(t, path, "cert 2")
	srcs := []Source{{path, true}}
	now := Look(nil, srcs, time.Now())[path]
	ctime := time.Unix(0, now.ctime)
	for _, tc := range []struct {
		name string
		read time.Time // when the remembered content ("cert 1") was read
		size int64     // what stat said then
		want []string
	}{
		{"read well after the change: trusted, not read", ctime.Add(racyWindow), now.size, nil},
		{"read in the change's tick: read again", ctime, now.size, []string{path}},
		{"read just under the window: read again", ctime.Add(racyWindow - time.Millisecond), now.size, []string{path}},
		{"another size: read again", ctime.Add(time.Hour), now.size + 1, []string{path}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := now
			prev.sum, prev.read, prev.size = sha256.Sum256([]byte("cert 1")), tc.read, tc.size
			before := Files{path: prev}
			if diff := cmp.Diff(tc.want, Changed(before, Look(before, srcs, time.Now()), srcs)); diff != "" {
				t.Errorf("Changed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLookFIFO: a FIFO at a followed path does not block the look (no
// writer ever opens it), and counts as there.
func TestLookFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.key")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan Files, 1)
	go func() { done <- Look(nil, []Source{{path, true}}, time.Now()) }()
	select {
	case f := <-done:
		if !f[path].exists {
			t.Errorf("the FIFO is not there: %+v", f[path])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Look blocked on a FIFO")
	}
}

// TestFollowingStep: a change is reported once it holds for a look, or
// after settleMax looks of one that does not; a change undone before
// then is none; a source new to the list is no change.
func TestFollowingStep(t *testing.T) {
	srcs := []Source{{"a", true}, {"b", true}}
	at := func(a, b byte, extra ...string) Files {
		f := Files{"a": {content: true, exists: true, sum: [32]byte{a}}, "b": {content: true, exists: true, sum: [32]byte{b}}}
		for _, p := range extra {
			f[p] = fileState{exists: true}
		}
		return f
	}
	for _, tc := range []struct {
		name  string
		looks []Files
		want  [][]string // what each look reports
	}{
		{"still", []Files{at(0, 0), at(0, 0)}, [][]string{nil, nil}},
		{"one change, held", []Files{at(1, 0), at(1, 0), at(1, 0)}, [][]string{nil, {"a"}, nil}},
		{"a certificate, then its key", []Files{at(1, 0), at(1, 1), at(1, 1)}, [][]string{nil, nil, {"a", "b"}}},
		{"undone before it held", []Files{at(1, 0), at(0, 0), at(0, 0)}, [][]string{nil, nil, nil}},
		{"changing at every look", []Files{at(1, 0), at(2, 0), at(3, 0), at(4, 0), at(5, 0), at(6, 0), at(6, 0)},
			[][]string{nil, nil, nil, nil, nil, {"a"}, nil}},
		{"changed again after a report", []Files{at(1, 0), at(1, 0), at(0, 0), at(0, 0)}, [][]string{nil, {"a"}, nil, {"a"}}},
		{"a new source", []Files{at(0, 0, "c"), at(0, 0, "c")}, [][]string{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFollowing(at(0, 0))
			all := append(slices.Clone(srcs), Source{"c", false})
			var got [][]string
			for _, l := range tc.looks {
				got = append(got, f.step(l, all))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWatcher: the watcher running on real files reports a rename onto
// a followed file, as MAAS writes rackd.conf, and follows the sources
// it is given at each look.
func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	conf, cert := filepath.Join(dir, "rackd.conf"), filepath.Join(dir, "agent.crt")
	writeAtomic(t, conf, "maas_url: http://203.0.113.2:5240/MAAS\n")
	srcs := make(chan []Source, 1)
	srcs <- []Source{{conf, true}}
	var looks atomic.Int64
	w := Watcher{Interval: 10 * time.Millisecond, Sources: func() []Source {
		looks.Add(1)
		s := <-srcs
		srcs <- s
		return s
	}}
	// lookedAgain waits until the watcher has looked twice more: the
	// files as they are now are its baseline.
	lookedAgain := func() {
		for n := looks.Load(); looks.Load() < n+2; {
			time.Sleep(time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	changed := make(chan []string)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, changed) }()
	lookedAgain()
	expect := func(want ...string) {
		t.Helper()
		select {
		case got := <-changed:
			if !slices.Equal(got, want) {
				t.Fatalf("reported %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing reported, want %v", want)
		}
	}
	writeAtomic(t, conf, "maas_url: http://203.0.113.3:5240/MAAS\n")
	expect(conf)
	// A certificate followed from now on: taken as it is, then changed.
	writeAtomic(t, cert, "cert 1")
	<-srcs
	srcs <- []Source{{conf, true}, {cert, true}}
	lookedAgain()
	writeAtomic(t, cert, "cert 2")
	expect(cert)
	select {
	case got := <-changed:
		t.Fatalf("reported %v after nothing changed", got)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	if err := (Watcher{Sources: func() []Source { return nil }}).Run(context.Background(), changed); err == nil || !strings.Contains(err.Error(), "Interval") {
		t.Errorf("Run without an interval: %v", err)
	}
}

// TestSources: what an agent on a MAAS rack follows, besides the files
// its keys name.
func TestSources(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"etc/maas/rackd.conf", "usr/sbin/rackd"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte("maas_url: http://203.0.113.2:5240/MAAS\n"), 0o644)
	}
	r := FindMAASRack(root)
	if r == nil {
		t.Fatal("no rack")
	}
	cfg := Default()
	cfg.Rack = r
	cfg.Region.CertFile, cfg.Region.KeyFile, cfg.Region.CAFile = r.CertFile, r.KeyFile, r.CAFile // as ParseOn gives them
	cfg.Region.TokenFile = "/etc/leasekeeper/region.token"
	cfg.Release.TokenFile = "/etc/leasekeeper/release.token"
	var got []string
	for _, s := range Sources(cfg) {
		if s.Content {
			got = append(got, strings.TrimPrefix(s.Path, root)+" content")
		} else {
			got = append(got, strings.TrimPrefix(s.Path, root)+" exists")
		}
	}
	d := "/var/lib/maas/certificates/"
	want := []string{
		d + "ca.pem content", d + "agent.crt content", d + "agent.key content", "/etc/leasekeeper/region.token content",
		"/etc/leasekeeper/release.token content", "/etc/maas/rackd.conf content", "/usr/sbin/rackd exists",
		d + "cluster.pem exists", d + "cluster.key exists", d + "cacerts.pem exists",
		"/var/lib/maas/dhcp/dhcpd6.leases exists", "/var/lib/maas/dhcpd6.conf exists",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sources (-want +got):\n%s", diff)
	}
}

// BenchmarkLook: what following a MAAS deb rack's files costs a look
// (one every 5 s in the agent): "steady", files unchanged since the last
// look (a stat each), and "changed", every file read and hashed (a look
// after they all changed).
//
//	go test ./agent/config -run '^$' -bench Look
func BenchmarkLook(b *testing.B) {
	root := b.TempDir()
	write := func(p, s string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o640); err != nil {
			b.Fatal(err)
		}
	}
	write("etc/maas/rackd.conf", "maas_url: http://203.0.113.2:5240/MAAS\n")
	write("usr/sbin/rackd", "")
	pem := strings.Repeat("MIIBkTCB+wIJAKHHIG...", 100) // a certificate's size
	for _, f := range []string{"agent.crt", "agent.key", "ca.pem"} {
		write("var/lib/maas/certificates/"+f, pem)
	}
	r := FindMAASRack(root)
	cfg := Default()
	cfg.Rack = r
	cfg.Region.CertFile, cfg.Region.KeyFile, cfg.Region.CAFile = r.CertFile, r.KeyFile, r.CAFile
	srcs := Sources(cfg)
	later := time.Now().Add(2 * racyWindow) // the files written well before
	base := Look(nil, srcs, later)
	b.Run("steady", func(b *testing.B) {
		for b.Loop() {
			Look(base, srcs, later)
		}
		b.ReportMetric(float64(len(srcs)), "files")
	})
	b.Run("changed", func(b *testing.B) {
		for b.Loop() {
			Look(nil, srcs, later)
		}
		b.ReportMetric(float64(len(srcs)), "files")
	})
}
