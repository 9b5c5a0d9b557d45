package systemd

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

func TestShutdownUnitGolden(t *testing.T) {
	u := ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}
	got, err := u.Render()
	if err != nil {
		t.Fatal(err)
	}
	lktest.Golden(t, filepath.Join("testdata", ShutdownUnitName), got)
}

// The unit must not hold up the boot: multi-user.target wants it, and a
// target is ordered after what it wants, so After=network-online.target
// here would make every boot wait for the network to be online. At
// shutdown it stops (and releases) after what is ordered after
// network-online.target (Before=), and before the network services and
// network.target go (After=).
func TestShutdownUnitBootOrdering(t *testing.T) {
	b, err := ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}.Render()
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "After=network-online") {
		t.Errorf("unit is ordered after network-online.target:\n%s", s)
	}
	for _, want := range []string{"\nBefore=network-online.target\n", "\nAfter=network.target\n", "\nAfter=systemd-networkd.service\n", "\nAfter=NetworkManager.service\n", "\nAfter=networking.service\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("unit lacks %q:\n%s", want, s)
		}
	}
}

func TestShutdownUnitValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    ShutdownUnit
		want string // substring of the error; "" = valid
	}{
		{"ok", ShutdownUnit{Binary: "/usr/local/sbin/leasekeeper", ReleaseArgs: []string{"--timeout=10s"}}, ""},
		{"relative", ShutdownUnit{Binary: "leasekeeper"}, "absolute"},
		{"empty", ShutdownUnit{}, "absolute"},
		{"space", ShutdownUnit{Binary: "/opt/lease keeper"}, "only letters"},
		{"percent", ShutdownUnit{Binary: "/opt/%n"}, "only letters"},
		{"dollar arg", ShutdownUnit{Binary: "/usr/sbin/leasekeeper", ReleaseArgs: []string{"$HOME"}}, "release argument"},
		{"newline", ShutdownUnit{Binary: "/usr/sbin/x\nExecStart=/bin/sh"}, "only letters"},
		{"negative timeout", ShutdownUnit{Binary: "/usr/sbin/leasekeeper", StopTimeout: -time.Second}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.u.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestShutdownUnitArgsAndTimeout(t *testing.T) {
	b, err := ShutdownUnit{Binary: "/b/lk", ReleaseArgs: []string{"--timeout=5s"}, StopTimeout: 1500 * time.Millisecond}.Render()
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"\nExecStop=-/b/lk release --only-at-shutdown --timeout=5s\n", "\nTimeoutStopSec=2s\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("unit lacks %q:\n%s", want, s)
		}
	}
}

// TestShutdownUnitVerifies runs systemd's own checker on the rendered unit.
func TestShutdownUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	// verify wants the ExecStop binary to exist: use this test binary.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	text, err := ShutdownUnit{Binary: self}.Render()
	if err != nil {
		t.Skipf("test binary path %q cannot be a unit's binary: %v", self, err)
	}
	dir := t.TempDir()
	unitPath := filepath.Join(dir, ShutdownUnitName)
	if err := os.WriteFile(unitPath, text, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", unitPath).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestInstallOffline(t *testing.T) {
	root := t.TempDir()
	u := ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}
	ctx := context.Background()
	unitFile := filepath.Join(root, "etc/systemd/system", ShutdownUnitName)
	link := filepath.Join(root, "etc/systemd/system/multi-user.target.wants", ShutdownUnitName)

	res, err := Installer{Root: root, Unit: u, Enable: true}.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Written || len(res.Links) != 1 || !res.Enabled || res.Started {
		t.Fatalf("first install: %+v", res)
	}
	want, _ := u.Render()
	got, err := os.ReadFile(unitFile)
	if err != nil || string(got) != string(want) {
		t.Fatalf("unit file: %v\n%s", err, got)
	}
	if fi, err := os.Stat(unitFile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("unit mode: %v %v", fi.Mode(), err)
	}
	if target, err := os.Readlink(link); err != nil || target != "/etc/systemd/system/"+ShutdownUnitName {
		t.Fatalf("enable link: %q %v", target, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(unitFile)); len(entries) != 2 {
		t.Errorf("unit dir holds %d entries, want the unit and the wants dir (no temporary files)", len(entries))
	}

	// Idempotent.
	res, err = Installer{Root: root, Unit: u, Enable: true}.Install(ctx)
	if err != nil || res.Written || len(res.Links) != 0 || !res.Enabled {
		t.Fatalf("second install: %+v %v", res, err)
	}
	// --no-enable removes nothing.
	res, err = Installer{Root: root, Unit: u}.Install(ctx)
	if err != nil || res.Written || !res.Enabled {
		t.Fatalf("--no-enable: %+v %v", res, err)
	}
	if _, err := os.Readlink(link); err != nil {
		t.Fatalf("--no-enable removed the enable link: %v", err)
	}
	// A changed unit (other binary) is rewritten in place.
	res, err = Installer{Root: root, Unit: ShutdownUnit{Binary: "/usr/local/bin/leasekeeper"}, Enable: true}.Install(ctx)
	if err != nil || !res.Written {
		t.Fatalf("rewrite: %+v %v", res, err)
	}
}

func TestInstallNoEnableFresh(t *testing.T) {
	root := t.TempDir()
	res, err := Installer{Root: root, Unit: ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}}.Install(context.Background())
	if err != nil || !res.Written || res.Enabled || len(res.Links) != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system/multi-user.target.wants")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("wants dir made without enable: %v", err)
	}
}

func TestInstallRefusesForeignUnit(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/systemd/system")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := "[Service]\nExecStart=/usr/bin/someone-elses\n"
	if err := os.WriteFile(filepath.Join(dir, ShutdownUnitName), []byte(foreign), 0o644); err != nil {
		t.Fatal(err)
	}
	in := Installer{Root: root, Unit: ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}, Enable: true}
	if _, err := in.Install(context.Background()); !errors.Is(err, ErrForeignUnit) {
		t.Fatalf("err = %v, want ErrForeignUnit", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ShutdownUnitName)); string(b) != foreign {
		t.Fatal("foreign unit changed")
	}
	if _, err := os.Lstat(filepath.Join(dir, "multi-user.target.wants")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("enabled although the unit was refused")
	}
	in.Force = true
	if res, err := in.Install(context.Background()); err != nil || !res.Written {
		t.Fatalf("--force: %+v %v", res, err)
	}
}

func TestInstallRefusesForeignLink(t *testing.T) {
	root := t.TempDir()
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(wants, ShutdownUnitName)); err != nil {
		t.Fatal(err)
	}
	_, err := Installer{Root: root, Unit: ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}, Enable: true}.Install(context.Background())
	if err == nil || !strings.Contains(err.Error(), "/dev/null") {
		t.Fatalf("err = %v, want a refusal naming the other target", err)
	}
}

// A rootfs is not trusted: a symlink leading out of it must not make the
// installer write on the host.
func TestInstallStaysInsideRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "rootfs")
	outside := filepath.Join(base, "host-etc")
	for _, d := range []string{filepath.Join(root, "etc"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"relative": "../../host-etc",
		"absolute": outside,
	} {
		t.Run(name, func(t *testing.T) {
			link := filepath.Join(root, "etc/systemd")
			os.Remove(link)
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			_, err := Installer{Root: root, Unit: ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}, Enable: true}.Install(context.Background())
			if err == nil {
				t.Fatal("installed through a symlink leaving the root")
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Fatalf("wrote outside the root: %v", entries)
			}
		})
	}
}

func TestInstallBadRoot(t *testing.T) {
	_, err := Installer{Root: filepath.Join(t.TempDir(), "missing"), Unit: ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}}.Install(context.Background())
	if err == nil || !strings.Contains(err.Error(), "root") {
		t.Fatalf("err = %v", err)
	}
}

// Check finds, writing nothing, what would make Install refuse: callers
// run it before copying a binary into the root, so that a refusal leaves
// nothing behind.
func TestInstallCheck(t *testing.T) {
	u := ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root, outside string)
		force bool
		want  string // substring of the error; "" = none
	}{
		{"empty root", func(*testing.T, string, string) {}, false, ""},
		{"foreign unit", func(t *testing.T, root, _ string) {
			write(t, filepath.Join(root, "etc/systemd/system", ShutdownUnitName), "[Unit]\n")
		}, false, "not written by leasekeeper"},
		{"foreign unit, forced", func(t *testing.T, root, _ string) {
			write(t, filepath.Join(root, "etc/systemd/system", ShutdownUnitName), "[Unit]\n")
		}, true, ""},
		{"our unit, other content", func(t *testing.T, root, _ string) {
			write(t, filepath.Join(root, "etc/systemd/system", ShutdownUnitName), unitMarker+"\n[Unit]\n")
		}, false, ""},
		{"symlink out of the root", func(t *testing.T, root, outside string) {
			mkdir(t, filepath.Join(root, "etc"))
			if err := os.Symlink(outside, filepath.Join(root, "etc/systemd")); err != nil {
				t.Fatal(err)
			}
		}, false, "/etc/systemd"},
		{"enable link taken", func(t *testing.T, root, _ string) {
			mkdir(t, filepath.Join(root, "etc/systemd/system/multi-user.target.wants"))
			if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/multi-user.target.wants", ShutdownUnitName)); err != nil {
				t.Fatal(err)
			}
		}, false, "points at /dev/null"},
		{"file in the way", func(t *testing.T, root, _ string) {
			write(t, filepath.Join(root, "etc/systemd"), "")
		}, false, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, outside := filepath.Join(base, "rootfs"), filepath.Join(base, "host")
			mkdir(t, root)
			mkdir(t, outside)
			tc.setup(t, root, outside)
			before := tree(t, base)
			err := Installer{Root: root, Unit: u, Enable: true, Force: tc.force}.Check()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if after := tree(t, base); after != before {
				t.Fatalf("Check wrote:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func write(t *testing.T, name, text string) {
	t.Helper()
	mkdir(t, filepath.Dir(name))
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// tree lists every path under dir.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		paths = append(paths, strings.TrimPrefix(p, dir))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(paths, " ")
}
