package cli

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// run executes the command tree at a fixed clock and returns stdout,
// stderr and the exit status main would use.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runIn(t, t.TempDir(), args...) // no MAAS rack, whatever this machine has
}

// runIn is run on a host whose files are under dir (a MAAS rack's, say).
func runIn(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := New(Env{
		Version: "test",
		Root:    dir,
		Stdout:  &out,
		Stderr:  &errb,
		Now:     func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) },
	})
	root.SetArgs(args)
	err := root.Execute()
	code := ExitCode(err, &errb)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	lktest.Golden(t, filepath.Join("testdata", name), []byte(got))
}

func TestCommands(t *testing.T) {
	const leases, conf = "testdata/dhcpd.leases", "testdata/dhcpd.conf"
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string // substring
	}{
		{"leases.json", []string{"leases", "--json", leases}, 0, "line 45: incomplete statement"},
		{"leases-active.txt", []string{"leases", "--state", "active", leases}, 0, ""},
		{"pools.json", []string{"pools", "--json", "--leases", leases, "--config", conf}, 0, ""},
		{"pools.txt", []string{"pools", "--leases", leases, "--config", conf}, 0, ""},
		{"check.json", []string{"check", "--json", "--leases", leases, "--config", conf}, 1, ""},
		{"check.txt", []string{"check", "--leases", leases, "--config", conf}, 1, ""},
		{"pools6.json", []string{"pools", "--json", "--leases", "testdata/dhcpd6.leases", "--config", "testdata/dhcpd6.conf"}, 0,
			"dhcpd6.leases:line 21: ia-na iaid 3 duid 00:01:00:01:2f:00:00:01:02:00:00:00:00:03: dhcpd refuses the whole IA: iaaddr 2001:db8:2::100 has no ends"},
		{"pools6.txt", []string{"pools", "--leases", "testdata/dhcpd6.leases", "--config", "testdata/dhcpd6.conf"}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := run(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, tc.code, stderr)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr %q lacks %q", stderr, tc.stderr)
			}
			golden(t, tc.name, out)
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"bad state", []string{"leases", "--state", "sideways", "x"}, 2, "not a binding state"},
		{"no file", []string{"leases"}, 2, "accepts 1 arg"},
		{"unknown flag", []string{"leases", "--nope", "x"}, 2, "unknown flag"},
		{"missing file", []string{"leases", "testdata/does-not-exist"}, 1, "no such file"},
		{"pools needs config", []string{"pools", "--leases", "x"}, 2, `"config" not set`},
		{"bad config", []string{"pools", "--leases", "testdata/dhcpd.leases", "--config", "testdata/dhcpd.leases"}, 1, "testdata/dhcpd.leases:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := run(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Errorf("exit %d stderr %q; want %d and %q", code, stderr, tc.code, tc.msg)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	var b bytes.Buffer
	if ExitCode(nil, &b) != 0 || ExitCode(ErrProblems, &b) != 1 || b.Len() != 0 {
		t.Errorf("nil/ErrProblems: printed %q", b.String())
	}
	if ExitCode(usageError{errors.New("x")}, &b) != 2 || ExitCode(errors.New("y"), &b) != 1 {
		t.Error("usage/other codes")
	}
}
