package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestLookupEnv: lookupEnv gives what syscall.Getenv gives, for every
// variable this process started with (tests here do not change the
// environment) and for one it did not; and on an environment of its own,
// the first of a key's entries counts, as for syscall.Getenv.
func TestLookupEnv(t *testing.T) {
	saved := environ
	t.Cleanup(func() { environ = saved })
	environ = runtimeEnvs()
	keys := []string{"LEASEKEEPER_NO_SUCH_VARIABLE"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	for _, k := range keys {
		v, ok := lookupEnv(k)
		want, wantOK := syscall.Getenv(k)
		if v != want || ok != wantOK {
			t.Errorf("lookupEnv(%q) = %q, %v; syscall.Getenv: %q, %v", k, v, ok, want, wantOK)
		}
	}

	environ = []string{"A=1", "AB=2", "A=3", "B", "C=", "=D"}
	for _, tc := range []struct {
		key, want string
		ok        bool
	}{
		{"A", "1", true},
		{"AB", "2", true},
		{"B", "", false},
		{"C", "", true},
		{"D", "", false},
		{"", "", false},
	} {
		if v, ok := lookupEnv(tc.key); v != tc.want || ok != tc.ok {
			t.Errorf("lookupEnv(%q) = %q, %v; want %q, %v", tc.key, v, ok, tc.want, tc.ok)
		}
	}
}

func TestCstring(t *testing.T) {
	var buf [pathMax]byte
	for _, tc := range []struct {
		parts []string
		want  string // "" for nil
	}{
		{[]string{"/var/spool/leasekeeper", "/", spoolFile}, "/var/spool/leasekeeper/events.jsonl"},
		{[]string{"/a\x00b"}, ""},
		{[]string{strings.Repeat("a", pathMax-1)}, strings.Repeat("a", pathMax-1)},
		{[]string{strings.Repeat("a", pathMax-1), "b"}, ""},
	} {
		p := cstring(&buf, tc.parts...)
		if (p == nil) != (tc.want == "") {
			t.Errorf("cstring(%.20q…) = %v", tc.parts, p)
			continue
		}
		if p != nil {
			n := 0
			for buf[n] != 0 {
				n++
			}
			if got := string(buf[:n]); got != tc.want {
				t.Errorf("cstring(%.20q…) = %.20q…", tc.parts, got)
			}
		}
	}
}

// TestStatSlow: the fallback of architectures without fstatat(2) gives
// what rawStat gives.
func TestStatSlow(t *testing.T) {
	dir := t.TempDir()
	file, link := dir+"/f", dir+"/l"
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(file, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	var buf [pathMax]byte
	for _, tc := range []struct {
		name     string
		fd       int
		path     string
		nofollow bool
	}{
		{"fd", fd, "", false},
		{"path", atFDCWD, file, false},
		{"link followed", atFDCWD, link, false},
		{"link itself", atFDCWD, link, true},
		{"missing", atFDCWD, dir + "/absent", true},
	} {
		var p *byte
		if tc.path != "" {
			p = cstring(&buf, tc.path)
		}
		var fast, slow syscall.Stat_t
		ef, es := rawStat(tc.fd, p, &fast, tc.nofollow), statSlow(tc.fd, p, &slow, tc.nofollow)
		if ef != es || fast.Ino != slow.Ino || fast.Mode != slow.Mode || fast.Size != slow.Size {
			t.Errorf("%s: rawStat %v (ino %d mode %o), statSlow %v (ino %d mode %o)", tc.name, ef, fast.Ino, fast.Mode, es, slow.Ino, slow.Mode)
		}
	}
}
