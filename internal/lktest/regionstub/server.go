package regionstub

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// LeasesPath is where MAAS 3.6+ serves the internal leases endpoint, on
// the region's port 5242 (src/maasagent/internal/client/client.go:
// apiURL "/MAAS/a/v3internal", plus "/leases").
const LeasesPath = "/MAAS/a/v3internal/leases"

// DefaultPath is LeasesPath (the name older callers use).
const DefaultPath = LeasesPath

// maxBody bounds a request body.
const maxBody = 32 << 20

// The region's own words (src/maasapiserver/common/api/models/responses/errors.py,
// src/maasapiserver/v3/middlewares/client_certificate.py, FastAPI's
// defaults for an unknown route or method).
const (
	MsgClientCertRequired = "Client certificate required."
	MsgInternalError      = "Unexpected internal server error. Please check the server logs for more details."
	MsgValidation         = "Failed to validate the request."
)

// Options configure a Server. The zero value is a stub of the newest MAAS
// on a random loopback port with DefaultSubnets.
type Options struct {
	Addr string // listen address; default "127.0.0.1:0" (MAAS: port 5242)
	PKI  *PKI   // certificates; nil makes a fresh PKI

	// Version is the MAAS version to behave as: "3.6", "3.7", "3.8" or
	// later; "" is the newest. Before 3.8 the TLS handshake itself
	// requires a client certificate and an empty mac is refused; from 3.8
	// a request without one is answered 403 and mac "" is accepted.
	Version string

	// Subnets are MAAS's subnets and their IP ranges; nil is
	// DefaultSubnets(), an empty non-nil slice none at all.
	Subnets []Subnet

	ErrorLog *log.Logger // http.Server's log (TLS handshake errors); nil discards

	// Clock is the region's clock: what a client can see of it (the Date
	// header, a Retry-After date). nil is time.Now; SetSkew moves it while
	// serving. The stub's records (Request.At, Batch.At) and its fault
	// windows keep the host's time: they are the test's observations.
	Clock func() time.Time
}

// Batch is one request the region took (204).
type Batch struct {
	At             time.Time
	IdempotencyKey string
	ClientCN       string             // the sender's client certificate CN (one rack's agent)
	Items          []event.RegionItem // every item, as MAAS read it (mac normalised)
	Ignored        int                // items for addresses outside every range of their subnet
}

// Request is one request the stub saw, whatever became of it.
type Request struct {
	At             time.Time // when it arrived
	Done           time.Time // when it was answered (or closed)
	Method, Path   string
	ClientCN       string // the client certificate's CN, "" without one
	Status         int    // 0 when the connection was closed without an answer
	Fault          string // the injected fault, "" if none
	Items          int    // items in a valid body
	Ignored        int    // of which outside every range of their subnet
	Accepted       bool   // the batch was recorded (even if its answer was then lost)
	Error          string // why the region refused or failed, as its log would say
	IdempotencyKey string
	UserAgent      string
}

// Fault is a failure to inject.
type Fault struct {
	Status     int    // answer with this status (503, 429, 500, …)
	RetryAfter string // and this Retry-After header, if not ""
	// RetryAt, if not 0, makes Retry-After an HTTP date this far ahead on
	// the region's clock (Now), as a proxy or a region may send it.
	RetryAt time.Duration
	Close   bool // close the connection abruptly (RST) instead of answering
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
		if f.RetryAt > 0 {
			s += " retry-after date +" + f.RetryAt.String()
		}
	}
	if f.Accept {
		s += " after accept"
	}
	return s
}

// Server is the region stub: an HTTPS server implementing the MAAS
// internal leases endpoint, recording every request, with injectable
// faults.
type Server struct {
	opts    Options
	version version
	pki     *PKI
	srv     *http.Server
	ln      net.Listener
	url     string
	closing chan struct{}
	once    sync.Once

	mu       sync.Mutex
	subnets  []Subnet
	view     view
	batches  []Batch
	items    []event.RegionItem
	requests []Request
	changed  chan struct{} // closed and replaced whenever a batch is recorded
	api2     api2State     // the public API 2.0 stand-in (api2.go)

	// faults, under mu
	next       []Fault
	window     Fault
	windowEnds time.Time
	poison     map[string]int // IP → status
	delay      time.Duration
	flaky      float64
	rng        *rand.Rand
	skew       time.Duration // added to Options.Clock

	delaying atomic.Int32 // requests in SetDelay's delay now (Delaying)
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

// New makes a stub without starting it.
func New(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	v, err := parseVersion(opts.Version)
	if err != nil {
		return nil, err
	}
	p := opts.PKI
	if p == nil {
		if p, err = NewPKI(); err != nil {
			return nil, err
		}
	}
	if opts.ErrorLog == nil {
		opts.ErrorLog = log.New(io.Discard, "", 0)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	subnets := opts.Subnets
	if subnets == nil {
		subnets = DefaultSubnets()
	}
	s := &Server{
		opts:    opts,
		version: v,
		pki:     p,
		subnets: slices.Clone(subnets),
		view:    newView(),
		closing: make(chan struct{}),
		changed: make(chan struct{}),
		poison:  map[string]int{},
		rng:     rand.New(rand.NewPCG(1, 2)),
	}
	return s, nil
}

// TLSConfig is the server side TLS configuration. MAAS's uvicorn verifies
// a client certificate against its CA; before 3.8 it requires one
// (ssl.CERT_REQUIRED), from 3.8 on it takes one if given
// (ssl.CERT_OPTIONAL) and RequireClientCertMiddleware answers 403 without
// (src/maasapiserver/main.py, craft_internal_app).
func (s *Server) TLSConfig() *tls.Config {
	c := &tls.Config{
		Certificates: []tls.Certificate{s.pki.server},
		ClientCAs:    s.pki.caPool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"}, // uvicorn speaks HTTP/1.1; hijacking (the close fault) needs it
	}
	if !s.version.atLeast(3, 8) {
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
		Handler:           s,
		TLSConfig:         s.TLSConfig(),
		ErrorLog:          s.opts.ErrorLog,
		ReadHeaderTimeout: 10 * time.Second,
		// uvicorn's default keep-alive: MAAS's internal API server sets
		// no timeout_keep_alive (src/maasapiserver/app.py).
		IdleTimeout: 5 * time.Second,
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	s.url = "https://" + net.JoinHostPort(host, port) + LeasesPath
	go s.srv.Serve(tls.NewListener(ln, s.srv.TLSConfig)) //nolint:errcheck // ends with Close
	return nil
}

// URL is the endpoint's full URL (https://127.0.0.1:PORT/MAAS/a/v3internal/leases).
// The certificate does not name that address: a client must verify it
// for ServerName ("maas").
func (s *Server) URL() string { return s.url }

// Addr is the address the stub listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// PKI is the stub's certificates (for a client's ca_file, cert_file, key_file).
func (s *Server) PKI() *PKI { return s.pki }

// Version is the MAAS version the stub behaves as ("3.8").
func (s *Server) Version() string { return s.version.String() }

// ClientTLSConfig is a client configuration the stub accepts.
func (s *Server) ClientTLSConfig() *tls.Config { return s.pki.ClientTLSConfig() }

// WriteFiles writes the stub's PEM files into dir.
func (s *Server) WriteFiles(dir string) (Files, error) { return s.pki.WriteFiles(dir) }

// WriteRackFiles is WriteFiles with a client certificate of its own
// for CN cn (PKI.WriteRackFiles).
func (s *Server) WriteRackFiles(dir, cn string) (Files, error) { return s.pki.WriteRackFiles(dir, cn) }

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

// ServeHTTP answers as MAAS's internal API app (on any port: nginx's
// stream proxy on 5242 passes TLS through to it) and records the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := Request{At: time.Now(), Method: r.Method, Path: r.URL.Path,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), UserAgent: r.UserAgent()}
	// net/http would date the answer by the host's clock; the region's
	// own may be off.
	w.Header().Set("Date", s.Now().UTC().Format(http.TimeFormat))
	req.Status = s.handle(w, r, &req)
	req.Done = time.Now()
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
}

// clientCN is the verified client certificate's CN, as MAAS's patched
// uvicorn puts it in the request scope (src/maasapiserver/tls.py).
func clientCN(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.CommonName
}

// handle answers one request and returns the status sent (0: closed).
func (s *Server) handle(w http.ResponseWriter, r *http.Request, req *Request) int {
	// The middlewares run before routing: any path without a client
	// certificate (or one without a CN) is a 403.
	req.ClientCN = clientCN(r.TLS)
	if req.ClientCN == "" {
		req.Error = "no client certificate CN"
		return writeJSON(w, http.StatusForbidden, map[string]string{"detail": MsgClientCertRequired})
	}
	switch r.URL.Path {
	case LeasesPath:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			return writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
		}
	case LeasesPath + "/":
		// Starlette's redirect_slashes.
		w.Header().Set("Location", LeasesPath)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return http.StatusTemporaryRedirect
	default:
		return writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"detail": "Request Entity Too Large"})
		}
		return 0 // the client went away
	}
	fault, faulty := s.pickFault(req)
	if d := s.currentDelay(); d > 0 {
		// The region goes on with the request even if the client gives
		// up: it does not watch the connection.
		s.delaying.Add(1)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
		}
		s.delaying.Add(-1)
	}
	if faulty && !fault.Accept {
		return s.fail(w, fault)
	}
	items, details := validate(body, s.version)
	if details != nil {
		req.Error = fmt.Sprintf("%d validation errors, first %s: %s", len(details), details[0].Field, details[0].Message)
		return writeJSON(w, http.StatusUnprocessableEntity, errorBody{Kind: "Error", Code: 422, Message: MsgValidation, Details: details})
	}
	req.Items = len(items)
	if i, code, bad := s.poisoned(items); bad {
		req.Error = fmt.Sprintf("injected poison: item %d, ip %s", i, items[i].IP)
		if code == http.StatusInternalServerError {
			return writeJSON(w, code, internalError())
		}
		return writeJSON(w, code, errorBody{Kind: "Error", Code: code, Message: "injected poison " + items[i].IP})
	}
	ignored, err := s.store(items, req.IdempotencyKey, req.ClientCN)
	if err != nil {
		req.Error = err.Error()
		return writeJSON(w, http.StatusInternalServerError, internalError())
	}
	req.Accepted, req.Ignored = true, ignored
	if faulty {
		return s.fail(w, fault)
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// errorBody is MAAS's v3 error body (ErrorBodyResponse).
type errorBody struct {
	Kind    string             `json:"kind"`
	Code    int                `json:"code"`
	Message string             `json:"message"`
	Details []ValidationDetail `json:"details"`
}

func internalError() errorBody {
	return errorBody{Kind: "Error", Code: http.StatusInternalServerError, Message: MsgInternalError}
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) //nolint:errcheck
	return code
}

// store runs a valid batch as one transaction: every item is checked
// first (the checks depend on the configuration only), so a failure
// leaves nothing applied, like MAAS's rollback; then the items are
// applied in order and the batch recorded.
func (s *Server) store(items []item, key, cn string) (ignored int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	skip := make([]bool, len(items))
	for i := range items {
		if skip[i], err = place(s.subnets, &items[i]); err != nil {
			return 0, err
		}
	}
	b := Batch{At: time.Now(), IdempotencyKey: key, ClientCN: cn, Items: make([]event.RegionItem, len(items))}
	for i := range items {
		b.Items[i] = items[i].RegionItem
		if skip[i] {
			b.Ignored++
			continue
		}
		s.view.apply(&items[i])
	}
	s.batches = append(s.batches, b)
	s.items = append(s.items, b.Items...)
	close(s.changed)
	s.changed = make(chan struct{})
	return b.Ignored, nil
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
	if f.RetryAt > 0 {
		w.Header().Set("Retry-After", s.Now().Add(f.RetryAt).UTC().Format(http.TimeFormat))
	}
	if f.Status == http.StatusInternalServerError {
		return writeJSON(w, f.Status, internalError())
	}
	return writeJSON(w, f.Status, errorBody{Kind: "Error", Code: f.Status, Message: "injected failure"})
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

// Delaying is the number of requests read whole and held by SetDelay's
// delay now: a test that stops a client mid-request waits for one.
func (s *Server) Delaying() int { return int(s.delaying.Load()) }

func (s *Server) currentDelay() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delay
}

func (s *Server) poisoned(items []item) (int, int, bool) {
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

// Configuration, safe to change while serving.

// SetSubnets replaces MAAS's subnets (as an operator adding or removing
// one in MAAS).
func (s *Server) SetSubnets(subnets []Subnet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subnets = slices.Clone(subnets)
}

// AddSubnet adds a subnet after the others.
func (s *Server) AddSubnet(sub Subnet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subnets = append(s.subnets, sub)
}

// Subnets is MAAS's subnets now.
func (s *Server) Subnets() []Subnet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.subnets)
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

// Poison makes any valid batch holding ip fail with status (0 means 500,
// with MAAS's body), whatever the subnets say. A real poison item needs
// no injection: an address in no subnet is one.
func (s *Server) Poison(ip string, status int) {
	if status == 0 {
		status = http.StatusInternalServerError
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

// SetDelay delays every answer by d; the batch is processed after the
// delay even if the client has gone (as MAAS's handler would).
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

// SetSkew sets the region's clock d ahead of Options.Clock (behind if
// negative), as a region whose clock is off.
func (s *Server) SetSkew(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skew = d
}

// Now is the region's clock: Options.Clock plus the skew.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Clock().Add(s.skew)
}

// ClearFaults ends every injected fault, delay, poison and clock skew.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next, s.windowEnds, s.flaky, s.delay, s.skew = nil, time.Time{}, 0, 0, 0
	clear(s.poison)
}

// Records.

// Items is every item of every batch the region took (204), in order,
// including those it ignored (outside every range).
func (s *Server) Items() []event.RegionItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.items)
}

// ItemsFor is the taken items for one IP, in order.
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

// Batches is every batch taken, in order.
func (s *Server) Batches() []Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// Requests is every request seen, in the order answered.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Len is the number of items taken.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// Leases is the region's view now: the current lease of every address
// that has one, after applying what it took in arrival order.
func (s *Server) Leases() map[string]Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Lease, s.view.Len())
	for _, ip := range s.view.IPs() {
		out[ip], _ = s.view.lease(ip)
	}
	return out
}

// Lease is the region's view of one address.
func (s *Server) Lease(ip netip.Addr) (Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view.lease(ip.String())
}

// WaitItems waits until at least n items were taken, or ctx ends.
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

// WaitFunc waits until ok(items) holds for the taken items, or ctx ends.
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
