package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// TestStdlibOnly: the hook imports nothing outside the standard library,
// and none of the standard packages whose initialisation or size showed
// in its start-up (it runs once per lease while dhcpd waits; see doc.go).
func TestStdlibOnly(t *testing.T) {
	out, err := exec.Command(lktest.GoTool(), "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	heavy := map[string]bool{
		"os": true, "time": true, "internal/godebug": true, "internal/poll": true,
		"syscall": true, "sync": true, // sys.go
		"net": true, "net/netip": true, "unique": true, "unicode": true,
		"fmt": true, "flag": true, "reflect": true, "encoding/json": true, "log": true,
	}
	self := "github.com/leasekeeper/leasekeeper/hook"
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, std, _ := strings.Cut(line, " ")
		n++
		if pkg == self {
			continue
		}
		if std != "true" {
			t.Errorf("the hook depends on %s, outside the standard library", pkg)
		}
		if heavy[pkg] {
			t.Errorf("the hook depends on %s: keep it off the hook's start-up path", pkg)
		}
	}
	t.Logf("%d packages", n)
}

// TestBuildsForRackArchitectures: the hook makes its system calls itself,
// numbered per architecture (abi_*.go); it builds and links for each
// Debian architecture the package names in debian/control (i386 is not
// one: its socket calls go through socketcall), and its tests compile
// for each, which checks that architecture's numbers (TestABI).
func TestBuildsForRackArchitectures(t *testing.T) {
	control, err := os.ReadFile(filepath.Join(lktest.ModuleRoot(t), "debian", "control"))
	if err != nil {
		t.Fatal(err)
	}
	var archs []string
	for _, line := range strings.Split(string(control), "\n") {
		if v, ok := strings.CutPrefix(line, "Architecture:"); ok {
			archs = strings.Fields(v)
		}
	}
	// Debian's names for Go's.
	goarchs := map[string][]string{
		"amd64": {"GOARCH=amd64"}, "arm64": {"GOARCH=arm64"}, "armel": {"GOARCH=arm", "GOARM=5"},
		"armhf": {"GOARCH=arm", "GOARM=7"}, "loong64": {"GOARCH=loong64"}, "ppc64el": {"GOARCH=ppc64le"},
		"riscv64": {"GOARCH=riscv64"}, "s390x": {"GOARCH=s390x"},
	}
	if len(archs) == 0 {
		t.Fatal("debian/control: no Architecture field")
	}
	for _, arch := range archs {
		goarch, ok := goarchs[arch]
		if !ok {
			t.Errorf("debian/control names %q: no GOARCH known for it here", arch)
			continue
		}
		env := append([]string{"CGO_ENABLED=0", "GOOS=linux", "GOFLAGS="}, goarch...) // no -race from the caller's GOFLAGS
		for _, args := range [][]string{{"build", "-o", os.DevNull, "."}, {"test", "-c", "-o", os.DevNull, "."}} {
			cmd := exec.Command(lktest.GoTool(), args...)
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: go %s: %v\n%s", arch, args[0], err, out)
			}
		}
	}
}

// TestRuntimeArgs: the runtime's hand-offs (start.go) give what os.Args
// and os.Environ give, the test binary's own here.
func TestRuntimeArgs(t *testing.T) {
	if d := cmp.Diff(os.Args, runtimeArgs()); d != "" {
		t.Errorf("(-os.Args +runtimeArgs)\n%s", d)
	}
	if d := cmp.Diff(os.Environ(), runtimeEnvs()); d != "" {
		t.Errorf("(-os.Environ +runtimeEnvs)\n%s", d)
	}
}

// TestLockCurrent covers the two ways the agent's drain can catch a hook
// between its open and its write: the file renamed away before the lock,
// or held exclusively (renamed and being read).
func TestLockCurrent(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, spoolFile)
	open := func(p string) int {
		fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_CLOEXEC, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	check := func(what string, fd int, p string, want bool) {
		t.Helper()
		var buf [pathMax]byte
		var held statxT
		if e := rawStat(fd, nil, &held, false); e != 0 {
			t.Fatal(e)
		}
		ok, err := lockCurrent(fd, &held, cstring(&buf, p))
		if ok != want || err != nil {
			t.Errorf("%s: lockCurrent = %v, %v; want %v", what, ok, err, want)
		}
		syscall.Close(fd) // drops the shared lock, as appendSpool does
	}
	check("fresh file", open(path), path, true)

	fd := open(path)
	if err := os.Rename(path, path+".draining"); err != nil {
		t.Fatal(err)
	}
	check("renamed away, nothing at the path", fd, path, false)
	syscall.Close(open(path)) // a new file at the path
	check("renamed away, another file at the path", open(path+".draining"), path, false)

	f, err := os.Open(path + ".draining")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("drain lock: %v", err)
	}
	check("held exclusively by the drain", open(path+".draining"), path+".draining", false)
}
