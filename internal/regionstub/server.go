package regionstub

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// DefaultPath is where MAAS 3.6+ serves the internal leases endpoint.
const DefaultPath = "/MAAS/a/v3internal/leases"

// maxBody bounds a request body; MAAS's own limit is of this order.
const maxBody = 32 << 20

// Options configure a Server. The zero value is a stub on a random
// loopback port at DefaultPath that requires a client certificate.
type Options struct {
	Addr  string   // listen address; default "127.0.0.1:0"
	Path  string   // endpoint path; default DefaultPath
	PKI   *PKI     // certificates; nil makes a fresh PKI for Hosts
	Hosts []string // extra names or addresses for the server certificate

	// Token, when set, is a bearer token the stub accepts. With a token,
	// a client certificate becomes optional (verified if presented):
	// a request needs one or the other.
	Token string
	// NoClientCert stops the stub asking for client certificates at all;
	// then only Token (if set) authenticates.
	NoClientCert bool

	ErrorLog *log.Logger // http.Server's log (TLS handshake errors); nil discards
}

// Batch is one accepted request.
type Batch struct {
	At             time.Time
	IdempotencyKey string
	Items          []event.RegionItem
}

// Request is one request the stub saw, whatever became of it.
type Request struct {
	At             time.Time
	Status         int    // 0 when the connection was closed without an answer
	Fault          string // the injected fault, "" if none
	Items          int    // items in a valid body
	Accepted       bool   // the batch was recorded (even if its answer was then lost)
	IdempotencyKey string
	UserAgent      string
}

// Fault is a failure to inject.
type Fault struct {
	Status     int    // answer with this status (503, 429, 500, …)
	RetryAfter string // and this Retry-After header, if not ""
	Close      bool   // close the connection abruptly (RST) instead of answering
	// Accept makes the stub first accept and record the batch, then fail:
	// the region did the work but the agent never learns it (a lost
	// response, the only case where a duplicate is legitimate).
	Accept bool
}

func (f Fault) String() string {
	var s string
	if f.Close {
		s = "close"
	} else {
		s = fmt.Sprintf("status %d", f.Status)
		if f.RetryAfter != "" {
			s += " retry-after " + f.RetryAfter
		}
	}
	if f.Accept {
		s += " after accept"
	}
	return s
}

// Server is the region stub: an HTTPS server implementing the MAAS
// leases endpoint, recording what it accepted, with injectable faults.
type Server struct {
	opts    Options
	pki     *PKI
	srv     *http.Server
	ln      net.Listener
	url     string
	closing chan struct{}
	once    sync.Once

	mu       sync.Mutex
	batches  []Batch
	items    []event.RegionItem
	requests []Request
	changed  chan struct{} // closed and replaced whenever a batch is recorded

	// faults, under mu
	next       []Fault
	window     Fault
	windowEnds time.Time
	poison     map[string]int // IP → status
	delay      time.Duration
	flaky      float64
	rng        *rand.Rand
}

// Start makes a stub and starts serving it over TLS.
func Start(opts Options) (*Server, error) {
	s, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// New makes a stub without starting it; Handler serves it in-process.
func New(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if !strings.HasPrefix(opts.Path, "/") {
		return nil, fmt.Errorf("path %q does not start with /", opts.Path)
	}
	p := opts.PKI
	if p == nil {
		var err error
		if p, err = NewPKI(opts.Hosts...); err != nil {
			return nil, err
		}
	}
	if opts.ErrorLog == nil {
		opts.ErrorLog = log.New(io.Discard, "", 0)
	}
	s := &Server{
		opts:    opts,
		pki:     p,
		closing: make(chan struct{}),
		changed: make(chan struct{}),
		poison:  map[string]int{},
		rng:     rand.New(rand.NewPCG(1, 2)),
	}
	return s, nil
}

// TLSConfig is the server side TLS configuration, by Options.
func (s *Server) TLSConfig() *tls.Config {
	c := &tls.Config{
		Certificates: []tls.Certificate{s.pki.server},
		ClientCAs:    s.pki.caPool,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"}, // hijacking (the close fault) needs HTTP/1
	}
	switch {
	case s.opts.NoClientCert:
		c.ClientAuth = tls.NoClientCert
	case s.opts.Token != "":
		c.ClientAuth = tls.VerifyClientCertIfGiven
	default:
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// Start listens on Options.Addr and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return err
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         s.TLSConfig(),
		ErrorLog:          s.opts.ErrorLog,
		ReadHeaderTimeout: 10 * time.Second,
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	s.url = "https://" + net.JoinHostPort(host, port) + s.opts.Path
	go s.srv.Serve(tls.NewListener(ln, s.srv.TLSConfig)) //nolint:errcheck // ends with Close
	return nil
}

// URL is the endpoint's full URL (https://127.0.0.1:PORT/MAAS/a/v3internal/leases).
func (s *Server) URL() string { return s.url }

// Addr is the address the stub listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// PKI is the stub's certificates (for a client's ca_file, cert_file, key_file).
func (s *Server) PKI() *PKI { return s.pki }

// ClientTLSConfig is a client configuration the stub accepts.
func (s *Server) ClientTLSConfig() *tls.Config { return s.pki.ClientTLSConfig() }

// WriteFiles writes the stub's PEM files into dir.
func (s *Server) WriteFiles(dir string) (Files, error) { return s.pki.WriteFiles(dir) }

// Close stops the server at once, dropping open connections and ending
// any injected delay.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closing)
		if s.srv != nil {
			err = s.srv.Close()
		}
	})
	return err
}

// Handler serves the endpoint at Options.Path.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(s.opts.Path, s.serveLeases)
	if s.opts.Path != "/" {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
		})
	}
	return mux
}

// apiError is the MAAS v3 API error body.
type apiError struct {
	Kind    string        `json:"kind"`
	Code    int           `json:"code"`
	Message string        `json:"message"`
	Details []errorDetail `json:"details,omitempty"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Index   *int   `json:"index,omitempty"`
}

func writeError(w http.ResponseWriter, code int, msg string, details ...errorDetail) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(apiError{Kind: "Error", Code: code, Message: msg, Details: details}) //nolint:errcheck
}

func (s *Server) serveLeases(w http.ResponseWriter, r *http.Request) {
	req := Request{At: time.Now(), IdempotencyKey: r.Header.Get("Idempotency-Key"), UserAgent: r.UserAgent()}
	status := s.handle(w, r, &req)
	req.Status = status
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
}

// handle answers one request and returns the status sent (0: closed).
func (s *Server) handle(w http.ResponseWriter, r *http.Request, req *Request) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return http.StatusMethodNotAllowed
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, http.StatusUnauthorized, "no valid client certificate or bearer token")
		return http.StatusUnauthorized
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "content type must be application/json")
		return http.StatusUnsupportedMediaType
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "body too large")
			return http.StatusRequestEntityTooLarge
		}
		return 0 // the client went away
	}
	fault, faulty := s.pickFault(req)
	if d := s.currentDelay(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
		}
	}
	if faulty && !fault.Accept {
		return s.fail(w, fault)
	}
	items, err := Validate(body)
	if err != nil {
		var ie *ItemError
		d := errorDetail{Type: "ValidationError", Message: err.Error()}
		if errors.As(err, &ie) {
			d.Field = ie.Field
			if ie.Index >= 0 {
				d.Index = &ie.Index
			}
		}
		writeError(w, http.StatusUnprocessableEntity, "Failed to validate the request.", d)
		return http.StatusUnprocessableEntity
	}
	req.Items = len(items)
	if i, code, bad := s.poisoned(items); bad {
		writeError(w, code, fmt.Sprintf("item %d: ip %s: rejected", i, items[i].IP),
			errorDetail{Type: "PoisonError", Message: "poisoned address " + items[i].IP, Field: "ip", Index: &i})
		return code
	}
	s.record(Batch{At: time.Now(), IdempotencyKey: req.IdempotencyKey, Items: items})
	req.Accepted = true
	if faulty {
		return s.fail(w, fault)
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

func (s *Server) authorized(r *http.Request) bool {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	if s.opts.Token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
	}
	// Without a token, the TLS handshake already demanded a verified
	// certificate unless client certificates are off altogether.
	return s.opts.NoClientCert
}

func (s *Server) fail(w http.ResponseWriter, f Fault) int {
	if f.Close {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				abort(conn)
				return 0
			}
		}
		panic(http.ErrAbortHandler) // HTTP/2 or in-process: abort the stream
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	writeError(w, f.Status, "injected failure")
	return f.Status
}

// abort closes conn with a TCP reset, as a crashed or killed region would.
func abort(conn net.Conn) {
	c := conn
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		tcp.SetLinger(0) //nolint:errcheck
	}
	c.Close()
}

func (s *Server) pickFault(req *Request) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var f Fault
	switch {
	case len(s.next) > 0:
		f = s.next[0]
		s.next = s.next[1:]
	case time.Now().Before(s.windowEnds):
		f = s.window
	case s.flaky > 0 && s.rng.Float64() < s.flaky:
		switch s.rng.IntN(4) {
		case 0:
			f = Fault{Status: http.StatusServiceUnavailable}
		case 1:
			f = Fault{Status: http.StatusBadGateway, Accept: true} // a proxy lost the answer
		case 2:
			f = Fault{Close: true}
		default:
			f = Fault{Close: true, Accept: true}
		}
	default:
		return Fault{}, false
	}
	req.Fault = f.String()
	return f, true
}

func (s *Server) currentDelay() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delay
}

func (s *Server) poisoned(items []event.RegionItem) (int, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.poison) == 0 {
		return 0, 0, false
	}
	for i, it := range items {
		if code, ok := s.poison[it.IP]; ok {
			return i, code, true
		}
	}
	return 0, 0, false
}

func (s *Server) record(b Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, b)
	s.items = append(s.items, b.Items...)
	close(s.changed)
	s.changed = make(chan struct{})
}

// Faults, all safe to call while serving.

// FailFor makes every request in the next d fail with f.
func (s *Server) FailFor(d time.Duration, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window, s.windowEnds = f, time.Now().Add(d)
}

// FailNext makes the next n requests fail with f (before any FailFor window).
func (s *Server) FailNext(n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.next = append(s.next, f)
	}
}

// Unavailable answers 503 (with Retry-After if not "") for the next d.
func (s *Server) Unavailable(d time.Duration, retryAfter string) {
	s.FailFor(d, Fault{Status: http.StatusServiceUnavailable, RetryAfter: retryAfter})
}

// CloseFor closes every connection abruptly, without an answer, for the next d.
func (s *Server) CloseFor(d time.Duration) { s.FailFor(d, Fault{Close: true}) }

// Poison makes any batch holding ip fail with status (0 means 404).
func (s *Server) Poison(ip string, status int) {
	if status == 0 {
		status = http.StatusNotFound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poison[ip] = status
}

// Unpoison undoes Poison.
func (s *Server) Unpoison(ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.poison, ip)
}

// SetDelay delays every answer by d (the batch is processed after the delay).
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetFlaky makes a fraction p of requests fail at random — a 503, a 502
// after accepting, a reset before or after accepting — drawn from a
// generator seeded with seed.
func (s *Server) SetFlaky(p float64, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flaky = p
	s.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// ClearFaults ends every injected fault, delay and poison.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next, s.windowEnds, s.flaky, s.delay = nil, time.Time{}, 0, 0
	clear(s.poison)
}

// Records.

// Items is every accepted item, in the order accepted.
func (s *Server) Items() []event.RegionItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.RegionItem(nil), s.items...)
}

// ItemsFor is the accepted items for one IP, in order.
func (s *Server) ItemsFor(ip string) []event.RegionItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event.RegionItem
	for _, it := range s.items {
		if it.IP == ip {
			out = append(out, it)
		}
	}
	return out
}

// Batches is every accepted batch, in order.
func (s *Server) Batches() []Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Batch(nil), s.batches...)
}

// Requests is every request seen, in the order answered.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Len is the number of accepted items.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// WaitItems waits until at least n items were accepted, or ctx ends.
func (s *Server) WaitItems(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		have, ch := len(s.items), s.changed
		s.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("region stub: %d of %d items: %w", have, n, ctx.Err())
		}
	}
}

// WaitFunc waits until ok(items) holds for the accepted items, or ctx ends.
func (s *Server) WaitFunc(ctx context.Context, ok func([]event.RegionItem) bool) error {
	for {
		s.mu.Lock()
		done, ch := ok(s.items), s.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("region stub: %w", ctx.Err())
		}
	}
}
