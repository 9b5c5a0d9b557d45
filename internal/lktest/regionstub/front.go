package regionstub

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Front stands for the nginx in front of MAAS's internal API: port 5242
// is an nginx stream server that passes each TCP connection, TLS and all,
// to the internal API server's unix socket
// (src/maasserver/templates/http/regiond.nginx.stream.conf.template,
// written by src/maasserver/regiondservices/http.py). nginx runs as a
// service of its own, so while the API server restarts or is stopped
// nginx still accepts the connection, fails to reach its upstream, and
// closes it: the client sees the connection end before the TLS handshake
// does, not a refused connection.
//
// A Front listens on its own address and relays each connection to a
// backend address (a Server's Addr), closing the client's at once when
// nothing listens there.
type Front struct {
	ln      net.Listener
	backend string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	cutEvery  atomic.Int64 // CutEvery's n
	accepted  atomic.Int64
	downUntil atomic.Int64 // DownFor: Unix ns
}

// DownFor has the front behave for d as nginx does while the API server
// behind it is stopped: the connections it relays are cut (the server
// went away under them), and each new one is closed at once.
func (f *Front) DownFor(d time.Duration) {
	f.downUntil.Store(time.Now().Add(d).UnixNano())
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
}

// URL is u (a Server's URL) with its host and port the front's.
func (f *Front) URL(u string) string {
	return strings.Replace(u, f.backend, f.ln.Addr().String(), 1)
}

// CutEvery has the front close the first of every n connections at once,
// as nginx does when the API server's socket refuses it (its listen
// backlog full: a region struggling, not down); n < 2 stops it.
func (f *Front) CutEvery(n int) { f.cutEvery.Store(int64(n)) }

// StartFront listens on 127.0.0.1:0 and relays to backend.
func StartFront(backend string) (*Front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Front{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr is the address clients connect to.
func (f *Front) Addr() net.Addr { return f.ln.Addr() }

// Close stops listening and cuts every relayed connection.
func (f *Front) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

func (f *Front) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *Front) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
		c.Close()
	}
}

func (f *Front) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		k := f.accepted.Add(1) - 1
		if n := f.cutEvery.Load(); n >= 2 && k%n == 0 || time.Now().UnixNano() < f.downUntil.Load() {
			c.Close()
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			up, err := net.DialTimeout("tcp", f.backend, 5*time.Second)
			if err != nil {
				c.Close() // nginx: "connect() … failed … while connecting to upstream"
				return
			}
			if !f.track(c, up) {
				c.Close()
				up.Close()
				return
			}
			defer f.untrack(c, up)
			done := make(chan struct{}, 2)
			relay := func(dst, src net.Conn) {
				io.Copy(dst, src) //nolint:errcheck // ends when either side does
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite() //nolint:errcheck
				}
				done <- struct{}{}
			}
			go relay(up, c)
			go relay(c, up)
			<-done
			<-done
		}()
	}
}
