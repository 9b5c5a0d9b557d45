package hooksock

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestActivatedPathChild is the agent side of TestActivatedPath: it runs
// a Listener for the hook.socket it is given on the socket passed as
// systemd's socket activation passes it, and prints Run's error.
func TestActivatedPathChild(t *testing.T) {
	path := os.Getenv("HOOKSOCK_ACTIVATED_PATH")
	if path == "" {
		t.Skip("run by TestActivatedPath")
	}
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	l, err := New(Config{Path: path}, newSink(), zerolog.Nop(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = l.Run(ctx, func() { os.Stdout.WriteString("listening\n"); cancel() })
	os.Stdout.WriteString("run: " + errString(err) + "\n")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestActivatedPath: the agent takes the socket systemd passes only when
// it is hook.socket, by name or through a symbolic link; a socket at
// another path (leasekeeper.socket's ListenDatagram= not changed with
// hook.socket) is refused with both paths named, not read while the
// hooks send elsewhere (a cold review: it was taken and the log named
// hook.socket).
func TestActivatedPath(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "activated.sock")
	f := activationSocket(t, sock)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		refused    bool
	}{
		{"same path", sock, false},
		{"through a symbolic link", filepath.Join(link, "activated.sock"), false},
		{"another path", filepath.Join(dir, "hook.sock"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestActivatedPathChild$")
			cmd.Env = append(os.Environ(), "HOOKSOCK_ACTIVATED_PATH="+tc.path, "LISTEN_FDS=1")
			cmd.ExtraFiles = []*os.File{f}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			got := string(out)
			if !tc.refused {
				if !strings.Contains(got, "listening\n") || !strings.Contains(got, "run: <nil>") {
					t.Errorf("hook.socket %s, activated %s: want it taken; child said:\n%s", tc.path, sock, got)
				}
				return
			}
			if strings.Contains(got, "listening") || !strings.Contains(got, "hook.socket is "+tc.path) ||
				!strings.Contains(got, "passed the hook socket "+sock) {
				t.Errorf("hook.socket %s, activated %s: want a refusal naming both; child said:\n%s", tc.path, sock, got)
			}
			if _, err := os.Lstat(tc.path); err == nil {
				t.Errorf("the refused agent created %s", tc.path)
			}
		})
	}
}

// activationSocket binds a unix datagram socket at path as systemd's
// socket unit does with PassCredentials=yes (datagrams queued before an
// agent runs carry their sender's credentials), and returns it as the
// file a child is passed (fd 3, with LISTEN_FDS=1); both close with the
// test.
func activationSocket(t *testing.T, path string) *os.File {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	f, err := pc.(*net.UnixConn).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
