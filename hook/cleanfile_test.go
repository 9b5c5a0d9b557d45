package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runAs runs bin with args under cred (nil: as the test runs), with an
// empty environment, and kills it if it has not exited after 10 s.
func runAs(t *testing.T, bin string, cred *syscall.Credential, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s %q blocked for 10 s", bin, args)
	}
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return r
}

const (
	leaseBlock = "lease 203.0.113.5 {\n  starts 1 2026/11/23 10:00:00;\n  binding state free;\n}\n"
	hostBlock  = "host h1 {\n  dynamic;\n  hardware ethernet 02:00:00:00:00:01;\n  fixed-address 203.0.113.9;\n}\n"
	withHosts  = leaseBlock + hostBlock + leaseBlock
	cleaned    = leaseBlock + leaseBlock
)

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// dirEntries lists dir's names, to catch a temporary file left behind.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// oneLine checks that s is one line holding every want.
func oneLine(t *testing.T, s string, want ...string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("stderr is not one line: %q", s)
	}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("stderr %q lacks %q", s, w)
		}
	}
}

func TestCleanUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"clean"}, "missing the leases file"},
		{[]string{"clean", "a", "b"}, "more than one argument"},
		{[]string{"clean", "--force", "a"}, `unknown flag "--force"`},
		{[]string{"clean", ""}, "empty leases file name"},
		{[]string{"clean", "--"}, "missing the leases file"},
	} {
		r := runHook(t, nil, tc.args...)
		if r.code != exitUsage || r.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q", tc.args, r.code, r.stdout)
		}
		oneLine(t, r.stderr, "leasekeeper-hook: clean: ", tc.want, "want clean LEASES_FILE")
	}
	for _, args := range [][]string{{"clean", "--help"}, {"clean", "-h"}, {"clean", "x", "--help"}} {
		r := runHook(t, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "\n       leasekeeper-hook clean LEASES_FILE\n") || r.stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestCleanFile runs the built hook on files in every state it may find
// them in; it exits 0 in all of them.
func TestCleanFile(t *testing.T) {
	asRoot := os.Geteuid() == 0
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir, path string) // makes path
		content string                               // expected at path afterwards ("" = not checked)
		warn    []string                             // in the one line on stderr; nil = silent
		renamed bool                                 // the file was replaced
	}{
		{
			name:  "missing file",
			setup: func(*testing.T, string, string) {},
		},
		{
			name:  "missing directory",
			setup: func(t *testing.T, dir, path string) { os.Remove(dir) },
		},
		{
			name:    "no host statement: not rewritten",
			setup:   func(t *testing.T, _, path string) { write(t, path, cleaned, 0o640) },
			content: cleaned,
		},
		{
			name:    "empty file",
			setup:   func(t *testing.T, _, path string) { write(t, path, "", 0o664) },
			content: "",
		},
		{
			name:    "hosts removed, mode kept",
			setup:   func(t *testing.T, _, path string) { write(t, path, withHosts, 0o640) },
			content: cleaned,
			renamed: true,
		},
		{
			name:    "mode 0664 as MAAS's units leave it",
			setup:   func(t *testing.T, _, path string) { write(t, path, withHosts, 0o664) },
			content: cleaned,
			renamed: true,
		},
		{
			name: "symbolic link: neither followed nor replaced",
			setup: func(t *testing.T, dir, path string) {
				target := filepath.Join(dir, "target")
				write(t, target, withHosts, 0o644)
				if err := os.Symlink("target", path); err != nil {
					t.Fatal(err)
				}
			},
			warn: []string{"a symbolic link, not rewritten"},
		},
		{
			name: "FIFO: no blocking",
			setup: func(t *testing.T, _, path string) {
				if err := syscall.Mkfifo(path, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			warn: []string{"not a regular file"},
		},
		{
			name:  "directory",
			setup: func(t *testing.T, _, path string) { os.Mkdir(path, 0o755) },
			warn:  []string{"not a regular file"},
		},
		{
			name:    "torn last statement: cleaned up to it",
			setup:   func(t *testing.T, _, path string) { write(t, path, withHosts+"host h2 {\n  dyn", 0o644) },
			content: cleaned + "host h2 {\n  dyn",
			warn:    []string{"line 14: unfinished statement at the end of the file; the file from there on was left as it was"},
			renamed: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "dhcp")
			if err := os.Mkdir(dir, 0o775); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "dhcpd.leases")
			tc.setup(t, dir, path)
			var before *syscall.Stat_t
			if _, err := os.Lstat(path); err == nil {
				if asRoot {
					// Any owner: the cleaned copy must get it back.
					if err := os.Lchown(path, 4242, 4343); err != nil {
						t.Fatal(err)
					}
				}
				before = stat(t, path)
			}
			var names []string
			if _, err := os.Stat(dir); err == nil {
				names = dirEntries(t, dir)
			}

			r := runHook(t, nil, "clean", path)
			if r.code != 0 || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if tc.warn == nil && r.stderr != "" {
				t.Errorf("stderr %q, want none", r.stderr)
			}
			if tc.warn != nil {
				oneLine(t, r.stderr, append([]string{"leasekeeper-hook: clean \"" + path + "\": "}, tc.warn...)...)
			}
			if before == nil {
				if _, err := os.Lstat(path); err == nil {
					t.Errorf("%s was created", path)
				}
				return
			}
			after := stat(t, path)
			if tc.content != "" || tc.name == "empty file" {
				if got := readString(t, path); got != tc.content {
					t.Errorf("content %q, want %q", got, tc.content)
				}
			}
			if renamed := after.Ino != before.Ino; renamed != tc.renamed {
				t.Errorf("file replaced: %v, want %v", renamed, tc.renamed)
			}
			if after.Mode != before.Mode || after.Uid != before.Uid || after.Gid != before.Gid {
				t.Errorf("mode %o owner %d:%d, was %o %d:%d", after.Mode, after.Uid, after.Gid, before.Mode, before.Uid, before.Gid)
			}
			if got := dirEntries(t, dir); strings.Join(got, " ") != strings.Join(names, " ") {
				t.Errorf("directory holds %q, held %q", got, names)
			}
			if strings.Contains(tc.name, "symbolic") && readString(t, filepath.Join(dir, "target")) != withHosts {
				t.Error("the link's target changed")
			}
		})
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestCleanAsMAASHelper: run by the name MAAS's units use (the diverted
// path is a link to the hook), with the arguments they pass.
func TestCleanAsMAASHelper(t *testing.T) {
	dir := t.TempDir()
	maas := filepath.Join(dir, "maas-dhcp-helper")
	if err := os.Symlink(hookBin, maas); err != nil {
		t.Fatal(err)
	}
	leases := filepath.Join(dir, "dhcpd.leases")
	write(t, leases, withHosts, 0o664)
	cmd := exec.Command("/bin/sh", "-ec", `"$0" clean "$1"`, maas, leases)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("sh -ec maas-dhcp-helper clean: %v %q", err, out)
	}
	if got := readString(t, leases); got != cleaned {
		t.Errorf("content %q, want %q", got, cleaned)
	}
	// A leases file whose name looks like a flag MAAS's notify takes is
	// still the file (--socket is dropped for notify only).
	odd := filepath.Join(dir, "--socket")
	write(t, odd, withHosts, 0o644)
	cmd = exec.Command(maas, "clean", "--", odd)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 || readString(t, odd) != cleaned {
		t.Fatalf("clean -- %s: %v %q", odd, err, out)
	}
}

// unprivileged prepares a run of the hook that cannot write where root
// could: as root, a copy of the hook run as nobody in a directory nobody
// owns; otherwise the test's own user. It returns the directory (mode
// 0755, owned by the runner), the binary and the credentials.
func unprivileged(t *testing.T) (dir, bin string, cred *syscall.Credential, uid int) {
	t.Helper()
	base, err := os.MkdirTemp("", "lkclean")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Chmod(filepath.Join(base, "dhcp"), 0o755)
		os.RemoveAll(base)
	})
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(base, "leasekeeper-hook")
	copyExec(t, hookBin, bin)
	dir = filepath.Join(base, "dhcp")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	uid = os.Geteuid()
	if uid == 0 {
		const nobody = 65534
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		cred, uid = &syscall.Credential{Uid: nobody, Gid: nobody, NoSetGroups: true}, nobody
	}
	return dir, bin, cred, uid
}

func copyExec(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCleanReadOnlyDirectory: where no cleaned copy can be written, the
// file stays as it was, host statements included (dhcpd starts on it
// all the same), with one warning; exit 0.
func TestCleanReadOnlyDirectory(t *testing.T) {
	dir, bin, cred, uid := unprivileged(t)
	path := filepath.Join(dir, "dhcpd.leases")
	write(t, path, withHosts, 0o664)
	if err := os.Lchown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	before := stat(t, path)
	r := runAs(t, bin, cred, "clean", path)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	oneLine(t, r.stderr, "not cleaned: create dhcpd.leases"+tempSuffix, "permission denied", "left as it was, host statements included")
	after := stat(t, path)
	if got := readString(t, path); got != withHosts || after.Ino != before.Ino || after.Mtim != before.Mtim {
		t.Errorf("the file changed: %q", got)
	}
	if names := dirEntries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %q", names)
	}
}

// TestCleanOwnerNotKept: a copy that could not get the original's owner
// (the hook is not root, the file is root's) is not renamed into place:
// dhcpd's user might lose access to its own file.
func TestCleanOwnerNotKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a file owned by another user")
	}
	dir, bin, cred, _ := unprivileged(t)
	path := filepath.Join(dir, "dhcpd.leases")
	write(t, path, withHosts, 0o644) // root's, readable by nobody
	r := runAs(t, bin, cred, "clean", path)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	oneLine(t, r.stderr, "owner 0:0", "operation not permitted", "left as it was")
	if got := readString(t, path); got != withHosts {
		t.Errorf("the file changed: %q", got)
	}
	if names := dirEntries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %q", names)
	}
}

// TestUnchanged: the last check before the rename notices a file written
// to, or replaced, since it was read.
func TestUnchanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dhcpd.leases")
	write(t, path, withHosts, 0o644)
	check := func(what string, change func(), want string) {
		t.Helper()
		dirfd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(dirfd)
		fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		var st statxT
		if e := rawStat(fd, nil, &st, false); e != 0 {
			t.Fatal(e)
		}
		change()
		err = unchanged(dirfd, "dhcpd.leases", fd, &st)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", what, err, want)
		}
	}
	check("untouched", func() {}, "")
	check("appended to", func() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(leaseBlock)
		f.Close()
	}, "changed while it was being cleaned")
	check("replaced", func() {
		write(t, path+".new", withHosts, 0o644)
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}, "replaced while it was being cleaned")
	check("replaced by a link", func() {
		os.Remove(path)
		os.Symlink("elsewhere", path)
	}, "reopen")
}
