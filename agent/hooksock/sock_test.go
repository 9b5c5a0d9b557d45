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
