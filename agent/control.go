package agent

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/sockgroup"
)

// The control socket (control.socket) serves what changes or discloses
// the agent's state: the dead letters, besides /status and /healthz. It is
// a unix stream socket, so the caller is known: the kernel lets only root,
// the agent's user and control.group's members connect (the file's owner,
// group and mode), and every change is logged with the caller's uid and
// pid (SO_PEERCRED), like systemd's and Docker's control sockets.

// peerKey carries the caller's credentials in a request's context.
type peerKey struct{}

// Peer is who is on the other end of a control-socket connection.
type Peer struct {
	UID, GID uint32
	PID      int32
}

// peerOf returns the caller of a control-socket request.
func peerOf(r *http.Request) (Peer, bool) {
	p, ok := r.Context().Value(peerKey{}).(Peer)
	return p, ok
}

// serveControl is the control socket task.
func (a *Agent) serveControl(ctx context.Context, ready func()) error {
	cfg := a.Config().Control
	ln, err := listenControl(cfg.Socket, cfg.Group)
	if err != nil {
		return fmt.Errorf("control.socket: %w", err)
	}
	defer os.Remove(cfg.Socket)
	log := a.root.With().Str("component", "control").Logger()
	srv := &http.Server{
		Handler:           a.controlHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          newStdLog(log),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if p, ok := peerCred(c); ok {
				return context.WithValue(ctx, peerKey{}, p)
			}
			return ctx
		},
	}
	group := cfg.Group
	if group == "" {
		group = "(none: root and the agent's user only)"
	}
	log.Info().Str("socket", cfg.Socket).Str("group", group).Msg("control socket: /status, /healthz, /deadletters")
	ready()
	return serve(ctx, "control", srv, ln)
}

// listenControl binds the socket at path with the access it must have
// before anyone can connect: it is bound under a temporary name, given
// its group and mode, and only then renamed into place (the process's
// umask, shared by every goroutine, is left alone). A stale socket from a
// crashed agent is replaced; anything else at the path is refused.
func listenControl(path, group string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket (%s); refusing to replace it", path, fi.Mode().Type())
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another agent is listening on it", path)
		}
	}
	gid := -1
	mode := os.FileMode(0o600)
	if group != "" {
		var err error
		if gid, err = sockgroup.Lookup("control.group", group); err != nil {
			return nil, err
		}
		mode = 0o660
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the file is renamed; serveControl removes it
	fail := func(err error) (*net.UnixListener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if gid >= 0 {
		if err := sockgroup.Give(tmp, gid, "control.group", group); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return ln, nil
}

func peerCred(c net.Conn) (Peer, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, false
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || serr != nil {
		return Peer{}, false
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, true
}
