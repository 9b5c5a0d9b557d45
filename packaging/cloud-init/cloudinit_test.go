// Package cloudinit holds the tests of the cloud-init files shipped for
// nodes: the node script run against a real leasekeeper binary, and the
// multi-part user-data the README tells operators to build.
package cloudinit

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

const script = "leasekeeper-node.sh"

// build compiles leasekeeper as make build does (static).
func build(t *testing.T) (path, sum string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds leasekeeper")
	}
	path = lktest.BuildT(t, "cmd/leasekeeper")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return path, hex.EncodeToString(h[:])
}

func runScript(t *testing.T, env ...string) (string, error) {
	t.Helper()
	return runScriptPath(t, "/usr/sbin:/usr/bin:/sbin:/bin", env...)
}

// runScriptPath runs the script with PATH path.
func runScriptPath(t *testing.T, path string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", script)
	cmd.Env = append([]string{"PATH=" + path}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestNodeScriptInstallsIntoRoot(t *testing.T) {
	noHostLeasekeeper(t)
	bin, sum := build(t)
	root := lktest.SystemdRoot(t, t.TempDir())
	tmp := t.TempDir()
	env := []string{"LEASEKEEPER_URL=file://" + bin, "LEASEKEEPER_SHA256=" + sum, "LEASEKEEPER_ROOT=" + root, "TMPDIR=" + tmp}
	out, err := runScript(t, env...)
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	for _, want := range []string{"copied leasekeeper to /usr/local/sbin/leasekeeper in " + root, "wrote /etc/systemd/system/leasekeeper-release.service", "enabled: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/leasekeeper-release.service"))
	if err != nil || !strings.Contains(string(unit), "\nExecStop=-/usr/local/sbin/leasekeeper release --only-at-shutdown\n") {
		t.Fatalf("unit: %v\n%s", err, unit)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/local/sbin/leasekeeper")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("binary: %v", err)
	}
	if _, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/leasekeeper-release.service")); err != nil {
		t.Fatal(err)
	}

	// Second run (cloud-init "always" or by hand): nothing changes.
	out, err = runScript(t, env...)
	if err != nil || !strings.Contains(out, "is up to date") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	// The host's temporary download is gone.
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}

	// LEASEKEEPER_AT_REBOOT=1: the unit releases at a reboot too.
	out, err = runScript(t, append(env, "LEASEKEEPER_AT_REBOOT=1")...)
	unit, _ = os.ReadFile(filepath.Join(root, "etc/systemd/system/leasekeeper-release.service"))
	if err != nil || !strings.Contains(string(unit), "\nExecStop=-/usr/local/sbin/leasekeeper release --only-at-shutdown --at-reboot\n") {
		t.Fatalf("LEASEKEEPER_AT_REBOOT=1: %v\n%s\nunit:\n%s", err, out, unit)
	}
	if out, err := runScript(t, append(env, "LEASEKEEPER_AT_REBOOT=yes")...); err == nil || !strings.Contains(out, "want 1") {
		t.Errorf("LEASEKEEPER_AT_REBOOT=yes: %v\n%s", err, out)
	}
}

// A rootfs is not trusted: a symlink in it leading out must not make the
// script (or what it runs) write on the host.
func TestNodeScriptStaysInsideRoot(t *testing.T) {
	noHostLeasekeeper(t)
	bin, sum := build(t)
	base := t.TempDir()
	root, outside := filepath.Join(base, "rootfs"), filepath.Join(base, "host")
	for _, d := range []string{filepath.Join(root, "usr/local"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lktest.SystemdRoot(t, root)
	if err := os.Symlink(outside, filepath.Join(root, "usr/local/sbin")); err != nil {
		t.Fatal(err)
	}
	out, err := runScript(t, "LEASEKEEPER_URL=file://"+bin, "LEASEKEEPER_SHA256="+sum, "LEASEKEEPER_ROOT="+root)
	if err == nil {
		t.Fatalf("installed through a symlink leaving the root:\n%s", out)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("wrote outside the root: %v\n%s", entries, out)
	}
}

// noHostLeasekeeper skips when this machine has leasekeeper installed
// (the script would use it instead of fetching one) or has no curl.
func noHostLeasekeeper(t *testing.T) {
	t.Helper()
	noHostBinary(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
}

func noHostBinary(t *testing.T) {
	t.Helper()
	for _, c := range []string{"/usr/sbin/leasekeeper", "/usr/local/sbin/leasekeeper", "/usr/bin/leasekeeper", "/usr/local/bin/leasekeeper"} {
		if _, err := os.Stat(c); err == nil {
			t.Skipf("%s is installed on this machine; the script would use it", c)
		}
	}
}

// toolDir returns a directory for PATH holding the tools the script
// runs, and of the downloaders only those named: a node without curl.
func toolDir(t *testing.T, downloaders ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range append([]string{"cat", "chmod", "cp", "cut", "dirname", "mkdir", "mktemp", "mv", "rm", "sha256sum", "tr"}, downloaders...) {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s not installed", name)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestNodeScriptWgetOnly: on a node with wget and no curl, a file URL
// still works (wget has no file scheme), a failed download says why
// (wget -q said nothing), and the checksum may be upper case.
func TestNodeScriptWgetOnly(t *testing.T) {
	noHostBinary(t)
	path := toolDir(t, "wget")
	bin, sum := build(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/leasekeeper" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, bin)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name, url, sum string
		want           []string // in the output
		ok             bool
	}{
		{"file URL", "file://" + bin, sum, []string{"copied leasekeeper"}, true},
		{"file URL, upper-case checksum", "file://" + bin, strings.ToUpper(sum), []string{"copied leasekeeper"}, true},
		{"http, upper-case checksum", srv.URL + "/leasekeeper", strings.ToUpper(sum), []string{"copied leasekeeper"}, true},
		{"http, not found", srv.URL + "/nope", sum, []string{"404", "leasekeeper-node: cannot download " + srv.URL + "/nope"}, false},
		{"file URL, missing", "file:///nonexistent/leasekeeper", sum, []string{"leasekeeper-node: cannot copy file:///nonexistent/leasekeeper"}, false},
		{"wrong checksum", "file://" + bin, strings.Repeat("A", 64), []string{"checksum mismatch", "want " + strings.Repeat("a", 64)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := lktest.SystemdRoot(t, t.TempDir())
			out, err := runScriptPath(t, path, "LEASEKEEPER_URL="+tc.url, "LEASEKEEPER_SHA256="+tc.sum, "LEASEKEEPER_ROOT="+root, "TMPDIR="+t.TempDir())
			if (err == nil) != tc.ok {
				t.Errorf("err %v, want success %v:\n%s", err, tc.ok, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			_, err = os.Stat(filepath.Join(root, "etc/systemd/system/leasekeeper-release.service"))
			if (err == nil) != tc.ok {
				t.Errorf("unit installed: %v, want %v", err == nil, tc.ok)
			}
		})
	}
}

func TestNodeScriptRefuses(t *testing.T) {
	noHostLeasekeeper(t)
	bin, _ := build(t)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"no binary no url", nil, "LEASEKEEPER_URL is not set"},
		{"url without checksum", []string{"LEASEKEEPER_URL=file://" + bin}, "LEASEKEEPER_SHA256 must be set"},
		{"wrong checksum", []string{"LEASEKEEPER_URL=file://" + bin, "LEASEKEEPER_SHA256=" + strings.Repeat("0", 64)}, "checksum mismatch"},
		{"fetch fails", []string{"LEASEKEEPER_URL=file:///nonexistent/leasekeeper", "LEASEKEEPER_SHA256=" + strings.Repeat("0", 64)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := lktest.SystemdRoot(t, t.TempDir())
			out, err := runScript(t, append(tc.env, "LEASEKEEPER_ROOT="+root)...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("err %v, output %q, want failure mentioning %q", err, out, tc.want)
			}
			left, _ := filepath.Glob(filepath.Join(root, "usr/local/sbin/*"))
			if len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
			if _, err := os.Stat(filepath.Join(root, "etc")); err == nil {
				t.Fatal("installed a unit without a binary")
			}
		})
	}
}

// TestMultipartUserData builds the user-data the README describes with
// cloud-init's own tool and checks both parts survive with their types.
func TestMultipartUserData(t *testing.T) {
	ci, err := exec.LookPath("cloud-init")
	if err != nil {
		t.Skip("cloud-init not installed")
	}
	if out, err := exec.Command(ci, "schema", "-c", "example-user-data.yaml").CombinedOutput(); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	out, err := exec.Command(ci, "devel", "make-mime",
		"-a", "example-user-data.yaml:cloud-config",
		"-a", script+":x-shellscript").CombinedOutput()
	if err != nil {
		t.Fatalf("make-mime: %v\n%s", err, out)
	}
	for _, want := range []string{"Content-Type: text/cloud-config", "Content-Type: text/x-shellscript", `filename="` + script + `"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("user-data lacks %q", want)
		}
	}
}
