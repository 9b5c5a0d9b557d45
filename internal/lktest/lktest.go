// Package lktest holds what the project's tests share and the product
// never imports: building the binaries as `make build` does, golden files
// with one -update flag, and (in its subpackages) the network-namespace
// lab, the region stub, the leases-file generator and a log sink.
package lktest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Module is the module's import path.
const Module = "github.com/leasekeeper/leasekeeper"

var update = flag.Bool("update", false, "rewrite golden files instead of comparing against them")

// Golden compares got with the golden file at path; with -update
// (go test ./pkg -update) it writes got there first.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// GoTool is the go command: the one on PATH, else where the README's
// machines have it.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := "/usr/local/go/bin/go"; fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ModuleRoot is the directory holding the project's go.mod, found from
// the test's working directory (its package directory).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("lktest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build builds the module's package pkg ("hook", "cmd/leasekeeper") into
// out as `make build` does: static (CGO_ENABLED=0) and -trimpath. With
// race it builds with the race detector instead, which needs cgo. It
// works from any directory inside the module; the go command's build
// cache makes every build after the first a link.
func Build(out, pkg string, race bool) error {
	args := []string{"build", "-trimpath", "-o", out}
	env := append(os.Environ(), "CGO_ENABLED=0")
	if race {
		args = append(args, "-race")
		env = env[:len(env)-1]
	}
	cmd := exec.Command(GoTool(), append(args, Module+"/"+pkg)...)
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// BuildT is Build into a directory of the test's, failing the test when
// the build fails; it returns the binary's path, named after pkg's last
// element ("cmd/leasekeeper": leasekeeper; "hook": leasekeeper-hook).
func BuildT(t testing.TB, pkg string) string {
	t.Helper()
	name := filepath.Base(pkg)
	if pkg == "hook" {
		name = "leasekeeper-hook"
	}
	bin := filepath.Join(t.TempDir(), name)
	if err := Build(bin, pkg, false); err != nil {
		t.Fatal(err)
	}
	return bin
}

// SystemdRoot makes dir a root file system with a systemd in it (what
// install-shutdown-unit --root asks of a root), and returns it.
func SystemdRoot(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "usr/lib/systemd/systemd")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
