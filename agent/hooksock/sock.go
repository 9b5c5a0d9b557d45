package hooksock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
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
//
// With SO_PEEK_OFF, next peeks at up to peekBatch datagrams with one
// recvmmsg(2) and hands them out one by one: a system call costs more
// than the datagram it reads.
type sock struct {
	conn *net.UnixConn
	rc   syscall.RawConn
	peek bool

	// offMu orders the changes to the peek offset made here (skip,
	// rewind: read it, set it) with consume's, which lowers it.
	offMu sync.Mutex
	ahead peeked // peeked by the last recvmmsg, not yet handed out
}

// Peeking in batches: peekBatch datagrams of up to peekSlot bytes each
// per recvmmsg. A longer one (the hooks' are under 1 KiB) is read again
// alone, whole, into the caller's buffer.
const (
	peekBatch = 32
	peekSlot  = 2048
)

var oobSize = syscall.CmsgSpace(syscall.SizeofUcred)

// peeked is a batch of datagrams peeked at by one recvmmsg.
type peeked struct {
	hdrs      [peekBatch]mmsghdr
	iovs      [peekBatch]syscall.Iovec
	bufs, oob []byte
	n, next   int // datagrams in the batch; the next one to hand out
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
	if s.ahead.next < s.ahead.n {
		n, oobn, flags = s.ahead.take(buf, oob)
		return n, oobn, flags, nil
	}
	if ctx.Err() != nil {
		return 0, 0, 0, errNoData
	}
	var deadline time.Time // none when not waiting: a passed one fails the read
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	if err := s.conn.SetReadDeadline(deadline); err != nil {
		return 0, 0, 0, err
	}
	if !s.peek {
		return s.recv(buf, oob, wait)
	}
	k, err := s.peekBatch(wait)
	if err != nil {
		return 0, 0, 0, err
	}
	// A datagram longer than its slot was read in slot-sized pieces, and
	// so was what followed it: hand out what came before it, then read
	// it again alone.
	for i, h := range s.ahead.hdrs[:k] {
		if h.len > peekSlot {
			var back int
			for _, h := range s.ahead.hdrs[i:k] {
				back += min(int(h.len), peekSlot)
			}
			if err := s.moveOffset(-back); err != nil {
				return 0, 0, 0, err
			}
			k = i
			break
		}
	}
	s.ahead.n, s.ahead.next = k, 0
	if k == 0 {
		return s.recv(buf, oob, 0)
	}
	n, oobn, flags = s.ahead.take(buf, oob)
	return n, oobn, flags, nil
}

// recv reads one datagram into buf and oob (peeking, with SO_PEEK_OFF)
// and waits for one on the poller up to the deadline set when wait > 0.
func (s *sock) recv(buf, oob []byte, wait time.Duration) (n, oobn, flags int, err error) {
	// MSG_TRUNC makes a datagram longer than buf report its real length.
	flag := syscall.MSG_DONTWAIT | syscall.MSG_TRUNC
	if s.peek {
		flag |= syscall.MSG_PEEK
	}
	var rerr error
	err = s.read(wait, func(fd int) error {
		n, oobn, flags, _, rerr = syscall.Recvmsg(fd, buf, oob, flag)
		return rerr
	})
	if err != nil {
		return 0, 0, 0, err
	}
	if s.peek && n > len(buf) {
		// A peek moves the offset by what it copied: skip the rest of
		// the datagram, or the next peek returns it.
		if err := s.moveOffset(n - len(buf)); err != nil {
			return 0, 0, 0, err
		}
	}
	if n > len(buf) {
		n, flags = len(buf), flags|syscall.MSG_TRUNC
	}
	return n, oobn, flags, nil
}

// peekBatch peeks at up to peekBatch datagrams into s.ahead and returns
// how many; their lengths are the datagrams' own (MSG_TRUNC), which may
// exceed peekSlot.
func (s *sock) peekBatch(wait time.Duration) (int, error) {
	a := &s.ahead
	if a.bufs == nil {
		a.bufs, a.oob = make([]byte, peekBatch*peekSlot), make([]byte, peekBatch*oobSize)
		for i := range a.hdrs {
			a.iovs[i] = syscall.Iovec{Base: &a.bufs[i*peekSlot]}
			a.iovs[i].SetLen(peekSlot)
			a.hdrs[i].hdr.Iov = &a.iovs[i]
			a.hdrs[i].hdr.Iovlen = 1
			a.hdrs[i].hdr.Control = &a.oob[i*oobSize]
		}
	}
	for i := range a.hdrs {
		a.hdrs[i].hdr.SetControllen(oobSize)
		a.hdrs[i].hdr.Flags = 0
	}
	var k int
	err := s.read(wait, func(fd int) error {
		r, _, errno := syscall.Syscall6(syscall.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&a.hdrs[0])), peekBatch,
			syscall.MSG_DONTWAIT|syscall.MSG_TRUNC|syscall.MSG_PEEK, 0, 0)
		if errno != 0 {
			return errno
		}
		k = int(r)
		return nil
	})
	return k, err
}

// take hands out the next datagram of the batch, copied into buf and oob.
func (a *peeked) take(buf, oob []byte) (n, oobn, flags int) {
	h := &a.hdrs[a.next]
	i := a.next
	a.next++
	n = copy(buf, a.bufs[i*peekSlot:i*peekSlot+int(h.len)])
	oobn = copy(oob, a.oob[i*oobSize:i*oobSize+int(h.hdr.Controllen)])
	flags = int(h.hdr.Flags)
	if n < int(h.len) {
		flags |= syscall.MSG_TRUNC
	}
	return n, oobn, flags
}

// read runs recv on the socket until it does not fail with EINTR, and
// while it fails with EAGAIN, when wait > 0, waits on the poller for a
// datagram, up to the deadline; errNoData when none came.
//
// It waits even while datagrams peeked before are still queued (not yet
// stored): Go's poller is edge-triggered (epoll's EPOLLET), so it wakes
// the reader when a datagram arrives, not while the queue merely holds
// some. The reader thus goes on reading while the committer waits on the
// disk, and the next group holds everything that came meanwhile
// (TestReadsWhilePeekedPending).
func (s *sock) read(wait time.Duration, recv func(fd int) error) error {
	var rerr error
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			if rerr = recv(int(fd)); rerr != syscall.EINTR {
				break
			}
		}
		return !(rerr == syscall.EAGAIN && wait > 0)
	})
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return errNoData
		}
		return fmt.Errorf("hook socket: %w", err)
	}
	switch {
	case rerr == syscall.EAGAIN:
		return errNoData
	case rerr != nil:
		return fmt.Errorf("hook socket: %w", rerr)
	}
	return nil
}

// moveOffset moves the peek offset k bytes (back when k < 0).
func (s *sock) moveOffset(k int) error {
	s.offMu.Lock()
	defer s.offMu.Unlock()
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
	s.offMu.Lock()
	defer s.offMu.Unlock()
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
