package hooksock

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReadsWhilePeekedPending: with datagrams peeked but not yet consumed
// (their batch is being stored), a datagram that arrives is read at once,
// not after the consume or the reader's deadline. Else the group commit
// holds only what was read before the previous one began, and a fraction
// of the socket's queue.
func TestReadsWhilePeekedPending(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sk, err := newSock(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !sk.peek {
		t.Skip("no SO_PEEK_OFF")
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
	ctx := context.Background()
	read := func(wait time.Duration) (string, error) {
		n, _, _, err := sk.next(ctx, buf, oob, wait)
		return string(buf[:n]), err
	}

	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if got, err := read(time.Second); err != nil || got != "first" {
		t.Fatalf("first read: %q, %v", got, err)
	}
	// "first" stays queued (peeked, not consumed). The next read waits
	// up to a minute; "second" comes 50 ms into it.
	type result struct {
		got string
		err error
		in  time.Duration
	}
	res := make(chan result, 1)
	start := time.Now()
	go func() {
		got, err := read(time.Minute)
		res <- result{got, err, time.Since(start)}
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.err != nil || r.got != "second" {
			t.Fatalf("second read: %q, %v", r.got, r.err)
		}
		t.Logf("second read after %v", r.in.Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("a datagram sent while another was peeked and not consumed was not read within 5 s")
	}
	// Nothing new: no datagram once the wait is over.
	if _, err := read(100 * time.Millisecond); err != errNoData {
		t.Fatalf("third read: %v, want errNoData", err)
	}
	// Both are still queued, in order, for consume.
	if err := sk.consume(2); err != nil {
		t.Fatal(err)
	}
	if _, err := read(0); err != errNoData {
		t.Fatalf("after consuming both: %v, want errNoData", err)
	}
}

// TestPeekBatchLongDatagrams: datagrams longer than a batch slot, among
// short ones, come out whole and in order (a longer one is read again
// alone), one longer than MaxDatagram comes out truncated, each with its
// sender's credentials, and all stay queued until consumed.
func TestPeekBatchLongDatagrams(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := passCred(conn); err != nil {
		t.Fatal(err)
	}
	sk, err := newSock(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !sk.peek {
		t.Skip("no SO_PEEK_OFF")
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetWriteBuffer(1 << 20); err != nil {
		t.Fatal(err)
	}
	sizes := []int{100, peekSlot + 1, peekSlot, 5000, 7, MaxDatagram + 10, 300, 3 * peekSlot, 50}
	for i, n := range sizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i + j)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	buf, oob := make([]byte, MaxDatagram+1), make([]byte, oobSize)
	ctx := context.Background()
	for round := range 2 {
		for i, want := range sizes {
			n, oobn, flags, err := sk.next(ctx, buf, oob, 0)
			if err != nil {
				t.Fatalf("round %d, datagram %d: %v", round, i, err)
			}
			if uid, ok := senderUID(oob[:oobn]); !ok || int(uid) != syscall.Getuid() {
				t.Errorf("round %d, datagram %d: credentials %v %v", round, i, uid, ok)
			}
			trunc := want > len(buf)
			if got := flags&syscall.MSG_TRUNC != 0; got != trunc || n != min(want, len(buf)) {
				t.Fatalf("round %d, datagram %d: %d bytes (truncated %v), want %d (%v)", round, i, n, got, want, trunc)
			}
			for j := range n {
				if buf[j] != byte(i+j) {
					t.Fatalf("round %d, datagram %d: byte %d is %d, want %d", round, i, j, buf[j], byte(i+j))
				}
			}
		}
		if _, _, _, err := sk.next(ctx, buf, oob, 0); err != errNoData {
			t.Fatalf("round %d: after the last: %v, want errNoData", round, err)
		}
		if round == 0 {
			// Still queued: read them all again from the start.
			setPeekOff(t, sk, 0)
		}
	}
	if err := sk.consume(len(sizes)); err != nil {
		t.Fatal(err)
	}
	setPeekOff(t, sk, 0)
	if _, _, _, err := sk.next(ctx, buf, oob, 0); err != errNoData {
		t.Fatalf("after consuming all: %v, want errNoData", err)
	}
}

func setPeekOff(t *testing.T, sk *sock, off int) {
	t.Helper()
	var serr error
	if err := sk.rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soPeekOff, off)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}
