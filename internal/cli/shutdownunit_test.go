package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallShutdownUnitRoot(t *testing.T) {
	root := t.TempDir()
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
}

func TestInstallShutdownUnitUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"install-shutdown-unit", "--copy-binary"}, "needs --root"},
		{[]string{"install-shutdown-unit", "--root", "/nonexistent", "--binary", "relative/lk"}, "absolute"},
		{[]string{"install-shutdown-unit", "--root", "/nonexistent", "--binary", "/opt/a b"}, "only letters"},
		{[]string{"install-shutdown-unit", "extra"}, ""},
	} {
		_, stderr, code := run(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: code %d stderr %q", tc.args, code, stderr)
		}
	}
}

func TestInstallShutdownUnitForeign(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/systemd/system")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "leasekeeper-release.service"), []byte("[Unit]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "install-shutdown-unit", "--root", root, "--binary", "/usr/sbin/leasekeeper")
	if code != 1 || !strings.Contains(stderr, "--force") {
		t.Fatalf("code %d stderr %q", code, stderr)
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
	if code != 1 || !strings.Contains(stderr, "nothing is released") || out != "" {
		t.Fatalf("code %d stdout %q stderr %q", code, out, stderr)
	}
}
