package cli

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
	"github.com/leasekeeper/leasekeeper/systemd"
)

func TestInstallShutdownUnitRoot(t *testing.T) {
	root := lktest.SystemdRoot(t, t.TempDir())
	unit := filepath.Join(root, "etc/systemd/system/leasekeeper-release.service")
	link := filepath.Join(root, "etc/systemd/system/multi-user.target.wants/leasekeeper-release.service")

	// No leasekeeper in the rootfs: a clear error, nothing written.
	_, stderr, code := run(t, "install-shutdown-unit", "--root", root)
	if code != 1 || !strings.Contains(stderr, "not installed in") || !strings.Contains(stderr, "--copy-binary") {
		t.Fatalf("code %d stderr %q", code, stderr)
	}
	if _, err := os.Stat(unit); err == nil {
		t.Fatal("unit written without a binary")
	}

	out, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--copy-binary", "--release-timeout", "7s")
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	for _, want := range []string{
		"copied leasekeeper to /usr/local/sbin/leasekeeper",
		"wrote /etc/systemd/system/leasekeeper-release.service in " + root,
		"enabled: /etc/systemd/system/multi-user.target.wants/leasekeeper-release.service",
		"next boot",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	text, err := os.ReadFile(unit)
	if err != nil || !strings.Contains(string(text), "\nExecStop=-/usr/local/sbin/leasekeeper release --only-at-shutdown --timeout=7s\n") ||
		!strings.Contains(string(text), "\nTimeoutStopSec=17s\n") {
		t.Fatalf("unit: %v\n%s", err, text)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/local/sbin/leasekeeper")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("copied binary: %v", err)
	}

	// Found in the rootfs now; same settings: nothing changes.
	out, _, code = run(t, "install-shutdown-unit", "--root", root, "--release-timeout", "7s")
	if code != 0 || !strings.Contains(out, "is up to date") || !strings.Contains(out, "already enabled") {
		t.Fatalf("second run %d:\n%s", code, out)
	}
	out, _, code = run(t, "install-shutdown-unit", "--root", root, "--release-timeout", "7s", "--no-enable")
	if code != 0 || !strings.Contains(out, "stays so") {
		t.Fatalf("--no-enable %d:\n%s", code, out)
	}
	if _, err := os.Readlink(link); err != nil {
		t.Fatalf("--no-enable removed the link: %v", err)
	}

	// --at-reboot goes to release: the unit changes.
	out, _, code = run(t, "install-shutdown-unit", "--root", root, "--release-timeout", "7s", "--at-reboot")
	text, _ = os.ReadFile(unit)
	if code != 0 || !strings.Contains(string(text), "\nExecStop=-/usr/local/sbin/leasekeeper release --only-at-shutdown --timeout=7s --at-reboot\n") {
		t.Fatalf("--at-reboot %d:\n%s\nunit:\n%s", code, out, text)
	}
}

func TestInstallShutdownUnitUsage(t *testing.T) {
	// Should a usage error slip through, no systemd is reached.
	sock := noSystemd(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"install-shutdown-unit", "--copy-binary"}, "needs --root"},
		{[]string{"install-shutdown-unit", "--root", "/nonexistent", "--binary", "relative/lk"}, "absolute"},
		{[]string{"install-shutdown-unit", "--root", "/nonexistent", "--binary", "/opt/a b"}, "only letters"},
		{[]string{"install-shutdown-unit", "extra"}, ""},
		// An unset $ROOT is not the running system.
		{append([]string{"install-shutdown-unit", "--root", ""}, sock...), "--root is empty"},
		{append([]string{"install-shutdown-unit", "--root=", "--copy-binary"}, sock...), "--root is empty"},
	} {
		_, stderr, code := run(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: code %d stderr %q", tc.args, code, stderr)
		}
	}
}

func TestInstallShutdownUnitForeign(t *testing.T) {
	root := lktest.SystemdRoot(t, t.TempDir())
	dir := filepath.Join(root, "etc/systemd/system")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "leasekeeper-release.service"), []byte("[Unit]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeExe(t, filepath.Join(root, "usr/sbin/leasekeeper"))
	out, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--binary", "/usr/sbin/leasekeeper")
	if code != 1 || !strings.Contains(stderr, "--force") || strings.Contains(out, "up to date") {
		t.Fatalf("code %d stdout %q stderr %q", code, out, stderr)
	}
	_, stderr, code = run(t, "install-shutdown-unit", "--root", root, "--binary", "/usr/sbin/leasekeeper", "--force")
	if code != 0 {
		t.Fatalf("--force: code %d stderr %q", code, stderr)
	}
}

// Without an answer from systemd, --only-at-shutdown releases nothing.
func TestReleaseOnlyAtShutdownNoSystemd(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(dir, "nobus"))
	lease := filepath.Join(dir, "dhclient.leases")
	if err := os.WriteFile(lease, []byte("lease {\n  interface \"eth0\";\n  fixed-address 203.0.113.9;\n  option dhcp-server-identifier 203.0.113.1;\n  expire never;\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, "release", "--only-at-shutdown", "--systemd-socket", filepath.Join(dir, "nosock"), "--lease-file", lease)
	if code != 1 || !strings.Contains(stderr, "nothing is released") || out != "" ||
		strings.Contains(stderr, "--root") || !strings.Contains(stderr, "leave --only-at-shutdown out") {
		t.Fatalf("code %d stdout %q stderr %q", code, out, stderr)
	}
}

// writeExe writes a stand-in executable at name.
func writeExe(t *testing.T, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// With --root, the unit is written only when --binary names an
// executable file in the root, its links resolved as the root's own
// system resolves them: ExecStop's "-" would hide a missing one at
// every shutdown.
func TestInstallShutdownUnitBinaryInRoot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root, host string)
		want  string // substring of stderr; "" = installed
	}{
		{"missing", func(*testing.T, string, string) {}, "--binary /usr/sbin/leasekeeper in "},
		{"directory", func(t *testing.T, root, _ string) {
			os.MkdirAll(filepath.Join(root, "usr/sbin/leasekeeper"), 0o755)
		}, "not a regular file"},
		{"not executable", func(t *testing.T, root, _ string) {
			writeExe(t, filepath.Join(root, "usr/sbin/leasekeeper"))
			os.Chmod(filepath.Join(root, "usr/sbin/leasekeeper"), 0o644)
		}, "not executable"},
		{"only on the host, by an absolute link", func(t *testing.T, root, host string) {
			writeExe(t, filepath.Join(host, "leasekeeper"))
			os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755)
			os.Symlink(filepath.Join(host, "leasekeeper"), filepath.Join(root, "usr/sbin/leasekeeper"))
		}, "no such file"},
		{"only on the host, by a relative link", func(t *testing.T, root, host string) {
			writeExe(t, filepath.Join(host, "leasekeeper"))
			os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755)
			os.Symlink("../../../host/leasekeeper", filepath.Join(root, "usr/sbin/leasekeeper"))
		}, "no such file"},
		{"regular", func(t *testing.T, root, _ string) {
			writeExe(t, filepath.Join(root, "usr/sbin/leasekeeper"))
		}, ""},
		{"absolute link inside the root", func(t *testing.T, root, _ string) {
			writeExe(t, filepath.Join(root, "opt/lk/leasekeeper"))
			os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755)
			os.Symlink("/opt/lk/leasekeeper", filepath.Join(root, "usr/sbin/leasekeeper"))
		}, ""},
		{"relative link through ..", func(t *testing.T, root, _ string) {
			writeExe(t, filepath.Join(root, "opt/lk/leasekeeper"))
			os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755)
			os.Symlink("../../../../opt/lk/leasekeeper", filepath.Join(root, "usr/sbin/leasekeeper"))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, host := filepath.Join(base, "rootfs"), filepath.Join(base, "host")
			lktest.SystemdRoot(t, root)
			tc.setup(t, root, host)
			out, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--binary", "/usr/sbin/leasekeeper")
			_, err := os.Stat(filepath.Join(root, "etc/systemd/system/leasekeeper-release.service"))
			if tc.want == "" {
				if code != 0 || err != nil {
					t.Fatalf("code %d, unit %v, stderr %q", code, err, stderr)
				}
				return
			}
			if code != 1 || !strings.Contains(stderr, tc.want) || out != "" {
				t.Errorf("code %d stdout %q stderr %q; want 1 and %q", code, out, stderr, tc.want)
			}
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("unit written for a binary that is not there: %v", err)
			}
		})
	}
}

// noSystemd makes the live install's D-Bus connection fail, so that a
// regression cannot install on the machine running the test.
func noSystemd(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(dir, "nobus"))
	return []string{"--systemd-socket", filepath.Join(dir, "nosock")}
}

// On a running system the binary must exist and be executable; one in a
// place that does not last is warned about. Without systemd, the error
// says what to do instead (--root).
func TestInstallShutdownUnitLiveBinary(t *testing.T) {
	sock := noSystemd(t)
	_, stderr, code := run(t, append([]string{"install-shutdown-unit", "--binary", "/nonexistent/leasekeeper"}, sock...)...)
	if code != 1 || !strings.Contains(stderr, "--binary /nonexistent/leasekeeper: no such file") || strings.Contains(stderr, "systemd") {
		t.Errorf("missing binary: code %d stderr %q", code, stderr)
	}

	dir, err := os.MkdirTemp("/tmp", "lk-bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "leasekeeper")
	writeExe(t, bin)
	_, stderr, code = run(t, append([]string{"install-shutdown-unit", "--binary", bin}, sock...)...)
	if code != 1 || !strings.Contains(stderr, "warning: the unit runs "+bin+", which is under /tmp") {
		t.Errorf("binary under /tmp: code %d stderr %q", code, stderr)
	}
	if !strings.Contains(stderr, "connect to systemd") || !strings.Contains(stderr, "use --root") {
		t.Errorf("no systemd: stderr %q lacks the hint", stderr)
	}
}

// binaryWarnings sees through /proc/PID/exe that an executable was
// deleted since it started.
func TestBinaryWarningsDeleted(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "lk")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	procExe := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "exe")
	if w := binaryWarnings("/usr/sbin/leasekeeper", "/usr/sbin/leasekeeper", procExe); len(w) != 0 {
		t.Fatalf("warnings while the file is there: %q", w)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	w := binaryWarnings("/usr/sbin/leasekeeper", "/usr/sbin/leasekeeper", procExe)
	if len(w) != 1 || !strings.Contains(w[0], "deleted or replaced since it started") {
		t.Fatalf("warnings %q", w)
	}
	if w := binaryWarnings("/usr/local/sbin/other", "/usr/sbin/leasekeeper", procExe); len(w) != 0 {
		t.Fatalf("warned about another binary: %q", w)
	}
}

// A refused install leaves nothing behind: the refusal is found before
// --copy-binary copies 19 MB in, and nothing says "up to date".
func TestInstallShutdownUnitRefusalLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root, host string)
		want  string
	}{
		{"foreign unit", func(t *testing.T, root, _ string) {
			os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/systemd/system/leasekeeper-release.service"), []byte("[Unit]\n"), 0o644)
		}, "--force"},
		{"unit dir leads out of the root", func(t *testing.T, root, host string) {
			os.MkdirAll(filepath.Join(root, "etc"), 0o755)
			os.Symlink(host, filepath.Join(root, "etc/systemd"))
		}, "/etc/systemd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, host := filepath.Join(base, "rootfs"), filepath.Join(base, "host")
			lktest.SystemdRoot(t, root)
			os.MkdirAll(host, 0o755)
			tc.setup(t, root, host)
			out, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--copy-binary")
			if code != 1 || !strings.Contains(stderr, tc.want) || strings.Contains(out, "up to date") {
				t.Errorf("code %d stdout %q stderr %q; want 1 and %q", code, out, stderr, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(root, "usr/local/sbin/leasekeeper")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("binary left in the root: %v", err)
			}
			if left, _ := os.ReadDir(host); len(left) != 0 {
				t.Errorf("wrote outside the root: %v", left)
			}
		})
	}
}

func TestReportInstall(t *testing.T) {
	const path = "/etc/systemd/system/leasekeeper-release.service"
	enable := systemd.Installer{Enable: true, Unit: systemd.ShutdownUnit{Binary: "/usr/sbin/leasekeeper"}}
	noEnable := systemd.Installer{Unit: enable.Unit}
	for _, tc := range []struct {
		name   string
		root   string
		res    systemd.InstallResult
		in     systemd.Installer
		err    error
		want   []string
		unwant []string
	}{
		{"up to date", "", systemd.InstallResult{Path: path, Enabled: true, Started: true}, enable, nil,
			[]string{path + " is up to date", "already enabled", "started"}, nil},
		{"refused", "/r", systemd.InstallResult{Path: path}, enable, systemd.ErrForeignUnit,
			nil, []string{"up to date", "next boot", "enabled"}},
		{"written, enable failed", "", systemd.InstallResult{Path: path, Written: true}, enable, errors.New("enable: no"),
			[]string{"wrote " + path}, []string{"up to date", "enabled"}},
		{"live, no-enable, enabled", "", systemd.InstallResult{Path: path, Enabled: true, EnableState: "enabled"}, noEnable, nil,
			[]string{"it was already enabled and stays so"}, []string{"not enabled"}},
		{"live, no-enable, disabled", "", systemd.InstallResult{Path: path, EnableState: "disabled"}, noEnable, nil,
			[]string{"not enabled (--no-enable; systemd reports it disabled)"}, nil},
		{"live, no-enable, state unknown", "", systemd.InstallResult{Path: path}, noEnable, nil,
			[]string{"enable state is left as it was"}, []string{"not enabled"}},
		{"root, no-enable", "/r", systemd.InstallResult{Path: path, Written: true}, noEnable, nil,
			[]string{"not enabled (--no-enable)"}, []string{"next boot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			reportInstall(&b, tc.root, tc.res, tc.in, tc.err)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.unwant {
				if strings.Contains(b.String(), w) {
					t.Errorf("output has %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// A root whose unit directory is on a read-only mount (an image mounted
// read-only) is refused before --copy-binary copies anything in, and
// nothing says "up to date". The mount is made in a mount namespace of
// the command's own (unshare), never on the host.
func TestInstallShutdownUnitReadOnlyRoot(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare (util-linux)")
	}
	root := lktest.SystemdRoot(t, t.TempDir())
	etc := filepath.Join(root, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	const mountRO = `mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99; shift; exec "$@"`
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", mountRO, "sh", etc,
		os.Args[0], "-test.run=^TestReleaseHelperProcess$", "--", "install-shutdown-unit", "--root", root, "--copy-binary")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	switch code := cmd.ProcessState.ExitCode(); {
	case code == 99 || strings.HasPrefix(errb.String(), "unshare:"):
		t.Skipf("cannot make a read-only mount here: %s", errb.String())
	case code != 1 || !strings.Contains(errb.String(), "/etc: read-only file system") || strings.Contains(out.String(), "up to date"):
		t.Fatalf("exit %d (%v), stdout %q, stderr %q; want 1 and a read-only refusal", code, err, out.String(), errb.String())
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/local/sbin/leasekeeper")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("binary left in the root: %v", err)
	}
}

// TestInstallShutdownUnitNoSystemd: a root with no systemd in it (a
// path given wrong, an image not mounted yet) is refused, nothing
// written; with /lib/systemd/systemd (no merged /usr) it is taken.
func TestInstallShutdownUnitNoSystemd(t *testing.T) {
	root := t.TempDir()
	_, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--copy-binary")
	if code != 1 || !strings.Contains(stderr, "has no systemd") {
		t.Fatalf("code %d stderr %q", code, stderr)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("refused, yet %d entries written in the root", len(entries))
	}
	lib := filepath.Join(root, "lib/systemd/systemd")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--copy-binary"); code != 0 {
		t.Errorf("with /lib/systemd/systemd: code %d stderr %q", code, stderr)
	}
}

// elfHeader is an ELF64 little-endian executable's header with no
// program or section headers, for machine m.
func elfHeader(m elf.Machine) []byte {
	h := make([]byte, 64)
	copy(h, []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_EXEC))
	binary.LittleEndian.PutUint16(h[18:], uint16(m))
	binary.LittleEndian.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	binary.LittleEndian.PutUint16(h[52:], 64) // e_ehsize
	binary.LittleEndian.PutUint16(h[54:], 56) // e_phentsize
	binary.LittleEndian.PutUint16(h[58:], 64) // e_shentsize
	return h
}

// TestInstallShutdownUnitOtherMachine: --copy-binary into a root whose
// systemd is built for another machine (an arm64 image made on an
// amd64 host) is refused before anything is copied; the copy would not
// run there. The same machine's is taken.
func TestInstallShutdownUnitOtherMachine(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	me, err := elf.Open(self)
	if err != nil {
		t.Skipf("this test binary is not ELF: %v", err)
	}
	mine, class, data := me.Machine, me.Class, me.Data
	me.Close()
	if class != elf.ELFCLASS64 || data != elf.ELFDATA2LSB {
		t.Skip("the stand-in header is 64-bit little-endian")
	}
	other := elf.EM_AARCH64
	if mine == other {
		other = elf.EM_X86_64
	}
	root := t.TempDir()
	systemdBin := filepath.Join(root, "usr/lib/systemd/systemd")
	if err := os.MkdirAll(filepath.Dir(systemdBin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(systemdBin, elfHeader(other), 0o755); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--copy-binary")
	if code != 1 || !strings.Contains(stderr, "would not run there") || !strings.Contains(stderr, other.String()) {
		t.Fatalf("code %d stderr %q", code, stderr)
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/local/sbin/leasekeeper")); err == nil {
		t.Error("refused, yet copied")
	}
	if err := os.WriteFile(systemdBin, elfHeader(mine), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--copy-binary"); code != 0 {
		t.Errorf("the same machine's systemd: code %d stderr %q", code, stderr)
	}
}
