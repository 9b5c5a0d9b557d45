package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// TestStateDirError: an outbox that cannot be opened names state.dir and
// says what to do about the usual causes.
func TestStateDirError(t *testing.T) {
	const dir = "/var/lib/leasekeeper"
	open := func(errno error) error {
		return fmt.Errorf("outbox %s/outbox.db: %w", dir, &fs.PathError{Op: "open", Path: dir + "/outbox.db", Err: errno})
	}
	who := agentUser()
	tests := []struct {
		name string
		err  error
		want string // the whole message
	}{
		{"not the agent's", open(syscall.EACCES),
			"state.dir: outbox /var/lib/leasekeeper/outbox.db: open /var/lib/leasekeeper/outbox.db: permission denied: the agent's user (" + who + " here; leasekeeper in the package) must own it: chown -R " + who + ": /var/lib/leasekeeper"},
		{"mkdir refused", &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.EPERM}, "state.dir: mkdir /var/lib/leasekeeper: operation not permitted: the agent's user"},
		{"read-only", open(syscall.EROFS), "read-only file system: it is on a read-only file system, and the agent writes there at every event: remount it read-write, or set state.dir to a writable directory"},
		{"full", open(syscall.ENOSPC), "no space left on device: its file system is full: free space on it (df -h /var/lib/leasekeeper)"},
		// bbolt formats the cause of a failed growth into a string.
		{"full, as a string", fmt.Errorf("outbox x: file resize error: %s", &fs.PathError{Op: "truncate", Path: "x", Err: syscall.ENOSPC}), "its file system is full"},
		{"over quota", open(syscall.EDQUOT), "its file system is full"},
		{"other", open(syscall.ENOTDIR), "state.dir: outbox /var/lib/leasekeeper/outbox.db: open /var/lib/leasekeeper/outbox.db: not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := stateDirError(dir, tc.err)
			if !strings.HasPrefix(got.Error(), "state.dir: ") || !strings.Contains(got.Error(), tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap %v", got, tc.err)
			}
			if tc.name == "other" && got.Error() != tc.want {
				t.Errorf("a hint for %v: %q", tc.err, got)
			}
		})
	}
}

// TestAssembleStateDir: the agent's start on a state.dir it cannot
// write, for real: a read-only and a full file system.
func TestAssembleStateDir(t *testing.T) {
	mount := func(t *testing.T, flags uintptr) string {
		dir := t.TempDir()
		lktest.Tmpfs(t, dir, "64k", 0o755, flags)
		return dir
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}{
		{"read-only", func(t *testing.T) string { return mount(t, syscall.MS_RDONLY) },
			"read-only file system: it is on a read-only file system"},
		{"full", func(t *testing.T) string {
			dir := mount(t, 0)
			f, err := os.Create(filepath.Join(dir, "ballast"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for {
				if _, err := f.Write(make([]byte, 4096)); err != nil {
					break
				}
			}
			return dir
		}, "its file system is full: free space on it (df -h "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.State.Dir = tc.setup(t)
			_, err := newAgent(t, cfg).Assemble()
			t.Log(err)
			if err == nil || !strings.HasPrefix(err.Error(), "state.dir: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Assemble = %v, want a state.dir error saying %q", err, tc.want)
			}
		})
	}
}
