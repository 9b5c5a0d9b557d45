package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "file")
	os.WriteFile(reg, []byte("content"), 0o600)
	os.Symlink(reg, filepath.Join(dir, "link"))
	os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "dir"), 0o700)
	for _, tc := range []struct {
		name   string
		follow Follow
		want   error // nil: opens and reads "content"
	}{
		{"file", NoFollow, nil},
		{"file", FollowLinks, nil},
		{"link", FollowLinks, nil},
		{"link", NoFollow, ErrSymlink},
		{"dangling", NoFollow, ErrSymlink},
		{"dangling", FollowLinks, fs.ErrNotExist},
		{"fifo", FollowLinks, ErrNotRegular}, // and it did not block
		{"dir", FollowLinks, ErrNotRegular},
		{"absent", FollowLinks, fs.ErrNotExist},
	} {
		done := make(chan struct{})
		var b []byte
		var err error
		go func() {
			defer close(done)
			b, err = ReadFile(filepath.Join(dir, tc.name), tc.follow, 0)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s (follow %v): the open blocked", tc.name, tc.follow)
		}
		switch {
		case tc.want == nil && (err != nil || string(b) != "content"):
			t.Errorf("%s (follow %v): %q, %v", tc.name, tc.follow, b, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s (follow %v): error %v, want %v", tc.name, tc.follow, err, tc.want)
		case tc.want != nil && !strings.Contains(err.Error(), tc.name):
			t.Errorf("%s: the error does not name the path: %v", tc.name, err)
		}
	}
}

func TestReadFileLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte(strings.Repeat("x", 100)), 0o600)
	if b, err := ReadFile(p, NoFollow, 100); err != nil || len(b) != 100 {
		t.Errorf("at the limit: %d bytes, %v", len(b), err)
	}
	if _, err := ReadFile(p, NoFollow, 99); err == nil {
		t.Error("over the limit: no error")
	}
}
