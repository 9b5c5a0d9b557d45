package hooksock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
	"unsafe"
)

// soPeekOff is SO_PEEK_OFF (Linux), absent from package syscall.
const soPeekOff = 42

// sock reads datagrams off the hook socket without taking them out of
// its queue: with SO_PEEK_OFF each read peeks at the next datagram not yet
// seen, and a datagram is consumed only once the event it carries is
// stored. An agent killed at any moment leaves every unstored event in the
// socket (which outlives it under socket activation) for the next run;
// the price is at most a duplicate of a batch stored but not yet consumed.
// Without SO_PEEK_OFF reads consume at once and consume is a no-op.
type sock struct {
	conn *net.UnixConn
	rc   syscall.RawConn
	peek bool
}

func newSock(conn *net.UnixConn) (*sock, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &sock{conn: conn, rc: rc}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soPeekOff, 0)
	}); err != nil {
		return nil, err
	}
	s.peek = serr == nil
	return s, nil
}

// errNoData: nothing arrived within the wait.
var errNoData = errors.New("no datagram")

// next reads the next datagram not yet handed on into buf and oob,
// waiting at most wait (0: not at all). It returns errNoData when none
// came; ctx ending stops the wait.
func (s *sock) next(ctx context.Context, buf, oob []byte, wait time.Duration) (n, oobn, flags int, err error) {
	var deadline time.Time // none when not waiting: a passed one fails the read
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	// MSG_TRUNC makes a datagram longer than buf report its real length.
	flag := syscall.MSG_DONTWAIT | syscall.MSG_TRUNC
	if s.peek {
		flag |= syscall.MSG_PEEK
	}
	if ctx.Err() != nil {
		return 0, 0, 0, errNoData
	}
	if err := s.conn.SetReadDeadline(deadline); err != nil {
		return 0, 0, 0, err
	}
	// Nothing new to read: wait on the poller, even while datagrams
	// peeked before are still queued (not yet stored). Go's poller is
	// edge-triggered (epoll's EPOLLET), so it wakes the reader when a
	// datagram arrives, not while the queue merely holds some: the reader
	// goes on reading while the committer waits on the disk, and the next
	// group holds everything that came meanwhile (TestReadsWhilePeekedPending).
	var rerr error
	err = s.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, flags, _, rerr = syscall.Recvmsg(int(fd), buf, oob, flag)
			if rerr != syscall.EINTR {
				break
			}
		}
		return !(rerr == syscall.EAGAIN && wait > 0)
	})
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, 0, 0, errNoData
		}
		return 0, 0, 0, fmt.Errorf("hook socket: %w", err)
	}
	switch {
	case rerr == syscall.EAGAIN:
		return 0, 0, 0, errNoData
	case rerr != nil:
		return 0, 0, 0, fmt.Errorf("hook socket: %w", rerr)
	}
	if s.peek && n > len(buf) {
		// A peek moves the offset by what it copied: skip the rest of
		// the datagram, or the next peek returns it.
		if err := s.skip(n - len(buf)); err != nil {
			return 0, 0, 0, err
		}
	}
	if n > len(buf) {
		n, flags = len(buf), flags|syscall.MSG_TRUNC
	}
	return n, oobn, flags, nil
}

// skip moves the peek offset k bytes further.
func (s *sock) skip(k int) error {
	var err error
	cerr := s.rc.Control(func(fd uintptr) {
		var off int
		if off, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, soPeekOff); err == nil {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soPeekOff, off+k)
		}
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("hook socket: SO_PEEK_OFF: %w", err)
	}
	return nil
}

// consume takes k datagrams, already read by next, off the queue.
func (s *sock) consume(k int) error {
	if !s.peek || k == 0 {
		return nil
	}
	var err error
	cerr := s.rc.Control(func(fd uintptr) { err = drop(int(fd), k) })
	if cerr != nil {
		return cerr
	}
	return err
}

// mmsghdr is struct mmsghdr of recvmmsg(2).
type mmsghdr struct {
	hdr syscall.Msghdr
	len uint32
	_   [4]byte
}

// dropBatch bounds the datagrams one recvmmsg takes.
const dropBatch = 64

// drop takes k datagrams off the queue of the socket fd, up to dropBatch
// with each recvmmsg(2) (the standard library has no wrapper): one system
// call where a recv each took k. A byte of each is read, into the same
// place, and thrown away.
func drop(fd, k int) error {
	var one [1]byte
	iov := syscall.Iovec{Base: &one[0], Len: 1}
	var hdrs [dropBatch]mmsghdr
	for i := range hdrs {
		hdrs[i].hdr.Iov, hdrs[i].hdr.Iovlen = &iov, 1
	}
	for k > 0 {
		n, _, errno := syscall.Syscall6(syscall.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])),
			uintptr(min(k, dropBatch)), syscall.MSG_DONTWAIT, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("hook socket: consuming a stored datagram: %w", errno)
		}
		k -= int(n)
	}
	return nil
}
