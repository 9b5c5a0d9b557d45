package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSpoolNeverFollowed: whatever sits at the spool file's name, the
// hook (which may run as root) writes only to a regular file there: it
// appends to no file a symbolic link leads to, creates none through a
// dangling one, and does not block on a FIFO. With the agent down too,
// the event is reported lost (exit 1, one line on stderr), and the
// reconciler recovers it from dhcpd.leases.
func TestSpoolNeverFollowed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir, spoolFile string)
	}{
		{"symlink to a file", func(t *testing.T, dir, p string) {
			os.WriteFile(filepath.Join(dir, "target"), []byte("root's\n"), 0o600)
			os.Symlink(filepath.Join(dir, "target"), p)
		}},
		{"dangling symlink", func(t *testing.T, dir, p string) {
			os.Symlink(filepath.Join(dir, "target"), p)
		}},
		{"fifo", func(t *testing.T, dir, p string) {
			if err := syscall.Mkfifo(p, 0o640); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			spool := filepath.Join(dir, "spool")
			os.Mkdir(spool, 0o750)
			tc.plant(t, dir, filepath.Join(spool, spoolFile))
			before, beforeErr := os.ReadFile(filepath.Join(dir, "target"))
			r := runHook(t, nil, notifyArgs("--socket", filepath.Join(dir, "absent.sock"), "--spool", spool)...)
			if r.code != 1 || r.stderr == "" {
				t.Errorf("exit %d, stderr %q; want 1 and a reason", r.code, r.stderr)
			}
			after, afterErr := os.ReadFile(filepath.Join(dir, "target"))
			if string(after) != string(before) || (beforeErr == nil) != (afterErr == nil) {
				t.Errorf("the link's target changed: %q (%v) → %q (%v)", before, beforeErr, after, afterErr)
			}
		})
	}
}
