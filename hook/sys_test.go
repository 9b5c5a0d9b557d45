package main

import (
	"os"
	"slices"
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

// TestStatx: rawStat (statx) gives what package syscall's fstat, stat
// and lstat give, of a file, a link and a file missing.
func TestStatx(t *testing.T) {
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
	// statSlow is the stat of package syscall (fstatat(2)) matching what
	// rawStat is asked.
	statSlow := func(fd int, path string, st *syscall.Stat_t, nofollow bool) error {
		switch {
		case path == "":
			return syscall.Fstat(fd, st)
		case nofollow:
			return syscall.Lstat(path, st)
		default:
			return syscall.Stat(path, st)
		}
	}
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
		var fast statxT
		var slow syscall.Stat_t
		ef, es := rawStat(tc.fd, p, &fast, tc.nofollow), statSlow(tc.fd, tc.path, &slow, tc.nofollow)
		if es != nil {
			if ef == 0 || uintptr(ef) != uintptr(es.(syscall.Errno)) || ef.Error() != es.Error() {
				t.Errorf("%s: rawStat %v, syscall's %v", tc.name, ef, es)
			}
			continue
		}
		got := []uint64{fast.Ino, uint64(fast.Mode), fast.Size, uint64(fast.Uid), uint64(fast.Gid), uint64(fast.Nlink),
			uint64(fast.Mtime.Sec), uint64(fast.Mtime.Nsec), makedev(fast.DevMajor, fast.DevMinor)}
		want := []uint64{slow.Ino, uint64(slow.Mode), uint64(slow.Size), uint64(slow.Uid), uint64(slow.Gid), uint64(slow.Nlink),
			uint64(slow.Mtim.Sec), uint64(slow.Mtim.Nsec), uint64(slow.Dev)}
		if ef != 0 || !slices.Equal(got, want) {
			t.Errorf("%s: rawStat %v: ino, mode, size, uid, gid, nlink, mtime, dev %v; syscall's %v", tc.name, ef, got, want)
		}
	}
}

// makedev is a dev_t from its major and minor numbers, as glibc's
// makedev(3) makes it.
func makedev(major, minor uint32) uint64 {
	return uint64(major&0xfff)<<8 | uint64(major&^0xfff)<<32 | uint64(minor&0xff) | uint64(minor&^0xff)<<12
}

// TestStatErr: where statx is missing or refused, the hook's message says
// what it needs; any other error is the errno itself.
func TestStatErr(t *testing.T) {
	for _, tc := range []struct {
		e    errno
		want string
	}{
		{_ENOSYS, "statx: function not implemented (leasekeeper-hook needs Linux 4.11 or later, with statx(2) allowed)"},
		{_EPERM, "statx: operation not permitted (leasekeeper-hook needs Linux 4.11 or later, with statx(2) allowed)"},
		{_EACCES, "permission denied"},
	} {
		if got := statErr(tc.e).Error(); got != tc.want {
			t.Errorf("statErr(%d) = %q, want %q", tc.e, got, tc.want)
		}
	}
	if statErr(_ENOENT) != error(_ENOENT) {
		t.Errorf("statErr(ENOENT) is not ENOENT itself")
	}
}
