package deliver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
)

// Queue is what the Deliverer needs from the outbox.
type Queue interface {
	// Peek returns up to max of the oldest queued events, in Seq order,
	// without removing them.
	Peek(max int) ([]event.Queued, error)
	// Ack removes delivered events.
	Ack(seqs ...uint64) error
	// DeadLetter moves a refused event out of the queue into the dead
	// letters, with the reason.
	DeadLetter(q event.Queued, reason string) error
	// Notify wakes the Deliverer after new events were appended.
	Notify() <-chan struct{}
}

// depther is a Queue that knows its length (the outbox does), for logs.
type depther interface{ Depth() int }

// Defaults for the zero values of Config.
const (
	// DefaultBatchMax: MAAS's own rack agent posts every notification
	// queued in its 5 s flush interval in one request, unbounded
	// (src/maasagent/internal/dhcp/service.go queueFlush,
	// internal/dhcpd/listener.go), and the region's handler takes any
	// number (maasapiserver/v3/api/internal/handlers/leases.py). Under
	// load a request of up to 1 000 is one outbox commit to acknowledge
	// it instead of ten: most of what a hookless lease cost the agent.
	DefaultBatchMax       = 1000
	DefaultTimeout        = 10 * time.Second
	DefaultAnswerTimeout  = 5 * time.Minute
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultWarnEvery      = 30 * time.Second
	DefaultPoisonAttempts = 5
	DefaultPoisonConfirm  = 30
	DefaultPoisonSpan     = 30 * time.Second
	DefaultUserAgent      = "leasekeeper/dev"

	// slowAnswer: a request unanswered this long is logged, once, and
	// shown by Asking (status) until it ends.
	slowAnswer = 30 * time.Second
	// pollInterval re-checks the queue even without a Notify, in case a
	// wake-up was consumed elsewhere (Flush) or lost.
	pollInterval = 5 * time.Second
	// maxReason bounds the region's answer kept with a dead letter.
	maxReason = 512
	// maxProbes bounds the neighbours tried, one by one, to tell a poison
	// event from a region failing everything.
	maxProbes = 3
)

// Config says where and how to deliver. Zero values take the defaults above.
type Config struct {
	URL string // https://region:5242/MAAS/a/v3internal/leases
	// OtherURLs: the same API on the region's other controllers, used in
	// turn when the one in use cannot be reached (regions.go).
	OtherURLs  []string
	ServerName string // the name to verify in the region's certificate; "" = the URL's host (MAAS: "maas")
	CAFile     string // PEM CA bundle to trust; "" = the system's roots
	CertFile   string // client certificate (PEM), with KeyFile: MAAS's only credentials
	KeyFile    string
	TokenFile  string // bearer token (not MAAS's); must be mode 0600 or stricter
	// AwaitCredentials, when set, is what to tell while CertFile,
	// KeyFile or CAFile does not exist yet (a MAAS rack not registered
	// yet: MAAS writes them when it registers): the link then waits for
	// them (StateWaiting, with this hint; nothing is sent, Flush returns
	// at once) instead of New and Prepare failing. A reload with the
	// files there delivers.
	AwaitCredentials string

	BatchMax      int           // events per request
	Timeout       time.Duration // bound on connecting and the TLS handshake
	AnswerTimeout time.Duration // bound on waiting for an answer on a live connection
	UserAgent     string        // "leasekeeper/VERSION"

	MinBackoff, MaxBackoff time.Duration // between retries of one batch
	WarnEvery              time.Duration // rate limit of repeated problem logs
	// PoisonAttempts is how many times an event alone must fail with 500
	// before a neighbour is tried to tell a poison event from a failing
	// region.
	PoisonAttempts int
	// PoisonConfirm and PoisonSpan: once an event failed with 500 right
	// after a neighbour was accepted, it is retried alone PoisonConfirm
	// times over PoisonSpan before it may be dead-lettered (lone): a
	// region failing some requests at random, or everything for a
	// moment, must cost retries, never a dead letter.
	PoisonConfirm int
	PoisonSpan    time.Duration
	// InflightFile records a request's start until its answer, and the
	// highest Seq the region may have applied, across a crash
	// (inflight.go); "" keeps no record. UnansweredHold is how long
	// after the start of a request the previous run left unanswered the
	// first request of this run waits.
	InflightFile   string
	UnansweredHold time.Duration
}

// link is one configuration's way to the region; Reload swaps it whole.
type link struct {
	cfg        Config
	u          *url.URL    // region.url
	serverName string      // region.url's
	tls        *tls.Config // nil for plain http
	hc         *http.Client
	token      string
	// controllers are region.url then region.other_urls; cur indexes the
	// one in use (regions.go).
	controllers []controller
	cur         atomic.Int32
	// awaiting is why the link cannot send yet: a credential file that
	// does not exist yet (Config.AwaitCredentials); nil when it can.
	awaiting error
}

// Deliverer sends queued events to the region. Run and Flush may be
// called concurrently; they take turns, one batch at a time.
type Deliverer struct {
	q   Queue
	log zerolog.Logger
	// asking: when the request awaiting its answer was sent (UnixNano;
	// 0 when none), and its events (Asking).
	asking, askingN atomic.Int64
	slowAfter       time.Duration // slowAnswer; tests shorten it
	now             func() time.Time
	m               metrics
	reg             prometheus.Registerer

	link     atomic.Pointer[link]
	reloaded chan struct{} // a retry waiting for its backoff tries the new link at once
	// probeEvery: while the region is down, how often its return is
	// probed for (probe.go); 0: never.
	probeEvery time.Duration
	// probedBack: the last wait was ended by a probe that found the
	// region back. If the attempt it brought forward fails as down again
	// (a proxy that closes only some connections: nginx with the API
	// server's backlog full), the next wait is the backoff's in full, not
	// probed (probe.go).
	probedBack atomic.Bool

	turn   chan struct{} // held by whoever is sending: one batch in flight, ever
	last   atomic.Int64  // Unix ns of the last 2xx
	health health

	// stale, if set, judges a queued event before it is sent (SetStale).
	stale atomic.Pointer[StaleFunc]
	// superseded, if set, is told of each event taken off the queue
	// unsent as stale (SetStale).
	superseded func(event.Event)
	// gate, if set, orders deliveries with the other agent of a failover
	// pair (SetGate).
	gate Gate
	// recheck: a batch the gate cleared this long ago is cleared and
	// judged again before it is sent (overtaken); recheckAfter.
	recheck time.Duration

	inflight  *inflight     // nil: no record kept
	hold      time.Duration // Config.UnansweredHold, with its default
	holdUntil atomic.Int64  // Unix ns before which nothing is sent; 0: none
	// doubt is the highest Seq the region may have applied without the
	// agent knowing (a request sent and never answered, in this run or
	// the last): a batch with such events is split only where no
	// address or MAC straddles the cut (split.go). doubtFirst: the
	// previous run's unanswered request is of unknown content; the
	// first batch sent is taken to be it. Both only under turn.
	doubt      atomic.Uint64
	doubtFirst bool
	// unacked is the last Seq of a batch the region took (2xx) whose Ack
	// is not in the outbox yet (0: none): a stop while the Ack fails (a
	// full disk) has the Flush send it again, a kill -9 the next run, so
	// until then it is in doubt too (inDoubt). Kept apart from doubt,
	// which is never lowered: a batch acknowledged is doubtful no more,
	// and an event a pair's gate held back while it went was never sent.
	unacked atomic.Uint64
}

// inDoubt is the highest Seq the region may have applied without the
// outbox knowing: doubt, or a batch taken and not yet acknowledged.
func (d *Deliverer) inDoubt() uint64 { return max(d.doubt.Load(), d.unacked.Load()) }

// New checks cfg, loads the credentials and registers the metrics on reg
// (nil: none). now is the clock (nil: time.Now).
func New(cfg Config, q Queue, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time) (*Deliverer, error) {
	if q == nil {
		return nil, errors.New("no queue")
	}
	if now == nil {
		now = time.Now
	}
	l, err := newLink(cfg)
	if err != nil {
		return nil, err
	}
	d := &Deliverer{q: q, log: log, now: now, turn: make(chan struct{}, 1), reloaded: make(chan struct{}, 1), recheck: recheckAfter,
		probeEvery: DefaultProbeInterval, slowAfter: slowAnswer}
	d.health.h.State = StateUnknown
	d.setLink(l)
	d.m = newMetrics(func() float64 {
		since, _ := d.Asking()
		if since.IsZero() {
			return 0
		}
		return d.now().Sub(since).Seconds()
	})
	if err := d.m.register(reg); err != nil {
		return nil, fmt.Errorf("deliver: metrics: %w", err)
	}
	d.reg = reg
	if cfg.InflightFile != "" {
		in, u, err := openInflight(cfg.InflightFile)
		if err != nil {
			return nil, err
		}
		d.inflight = in
		hold := cfg.UnansweredHold
		if hold <= 0 {
			hold = DefaultUnansweredHold
		}
		d.hold = hold
		if until := holdUntil(u.started, u.set, now(), hold); !until.IsZero() {
			d.holdUntil.Store(until.UnixNano())
		}
		switch {
		case u.last != 0 && !knows(q, u.last):
			// The record names events this outbox never held: it is a new
			// one (the old moved aside, restored from a backup). Its
			// events are no older request's (the hold, if any, stays).
			log.Info().Uint64("last", u.last).Msg("the in-flight record names events this outbox never held (a new outbox?): ignored")
		case u.set:
			// The region may have applied that request: its events are
			// in doubt (split.go). Of unknown content, it was at most the
			// batch this run sends first.
			d.doubt.Store(u.last)
			d.doubtFirst = u.last == 0
		case u.last != 0:
			// Answered, and perhaps applied, but not yet acknowledged in
			// the outbox when the previous run stopped.
			d.doubt.Store(u.last)
		}
	}
	return d, nil
}

// Check does what New does with cfg's values and files — the URL, the CA,
// the client certificate and key, the token — without delivering.
func Check(cfg Config) error {
	l, err := newLink(cfg)
	if err != nil {
		return err
	}
	l.hc.CloseIdleConnections()
	return nil
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = DefaultBatchMax
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.AnswerTimeout <= 0 {
		cfg.AnswerTimeout = DefaultAnswerTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		return cfg, fmt.Errorf("max backoff %v is below min backoff %v", cfg.MaxBackoff, cfg.MinBackoff)
	}
	if cfg.WarnEvery <= 0 {
		cfg.WarnEvery = DefaultWarnEvery
	}
	if cfg.PoisonAttempts <= 0 {
		cfg.PoisonAttempts = DefaultPoisonAttempts
	}
	if cfg.PoisonConfirm <= 0 {
		cfg.PoisonConfirm = DefaultPoisonConfirm
	}
	if cfg.PoisonSpan <= 0 {
		cfg.PoisonSpan = DefaultPoisonSpan
	}
	return cfg, nil
}

// credentialError is newLink's error for the region's CA, certificate or
// key files (tlsConfig's).
type credentialError struct{ err error }

func (e *credentialError) Error() string { return e.err.Error() }
func (e *credentialError) Unwrap() error { return e.err }

// allMissing reports whether every problem err joins (tlsConfig tells
// the CA's and the client certificate's together) is a file that does
// not exist: one there but unusable is refused, awaited or not.
func allMissing(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !allMissing(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, fs.ErrNotExist)
}

func newLink(cfg Config) (*link, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	u, err := config.RegionURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	l := &link{u: u, serverName: cfg.ServerName}
	if l.serverName == "" {
		l.serverName = u.Hostname()
	}
	if l.controllers, err = controllersOf(cfg, u); err != nil {
		return nil, err
	}
	if cfg.TokenFile != "" {
		if l.token, err = readToken(cfg.TokenFile); err != nil {
			return nil, err
		}
	}
	// Plain http, which config.RegionURL allows to loopback only (a local
	// stub, tests), uses no TLS file at all and may go without credentials.
	var tc *tls.Config
	if u.Scheme == "https" {
		host := u.Hostname()
		if len(l.controllers) > 1 {
			host = "" // the transport verifies each controller's own (cfg.ServerName, else its URL's host)
		}
		switch tc, err = tlsConfig(&cfg, host); {
		case err != nil && cfg.AwaitCredentials != "" && allMissing(err):
			l.awaiting, tc = err, nil
			if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
				l.awaiting = fmt.Errorf("%s does not exist", pe.Path)
			}
		case err != nil:
			return nil, &credentialError{err}
		case l.token == "" && len(tc.Certificates) == 0:
			return nil, errors.New("no credentials for the region: set cert_file and key_file (MAAS), or token_file")
		}
	}
	cfg.URL = u.String()
	l.cfg = cfg
	l.tls = tc
	l.hc = newHTTPClient(&l.cfg, tc)
	return l, nil
}

func (d *Deliverer) setLink(l *link) {
	// A reload keeps to the controller in use, if it is still named:
	// region.url's may be the one that is down. Again after the swap: an
	// attempt or a probe may have moved the old link on meanwhile.
	keep := func(old *link) {
		if old == nil || len(old.controllers) < 2 {
			return
		}
		inUse := config.EndpointKey(old.controller().u)
		if i := slices.IndexFunc(l.controllers, func(c controller) bool { return config.EndpointKey(c.u) == inUse }); i >= 0 {
			l.use(i)
		}
	}
	keep(d.link.Load())
	if old := d.link.Swap(l); old != nil {
		keep(old)
		old.hc.CloseIdleConnections()
	}
	if l.token != "" && strings.Contains(l.u.Path, "/v3internal/") {
		d.log.Warn().Str("url", l.cfg.URL).Msg("region.token_file is set, but MAAS's internal API takes no bearer token: only the client certificate counts")
	}
	for _, w := range credentialWarnings(&l.cfg, l.tls, d.now()) {
		d.log.Warn().Msg(w)
	}
}

// Reload puts a new configuration in force: the next attempt (a retry
// waiting for its backoff at once) uses it. On error the running one
// stays.
func (d *Deliverer) Reload(cfg Config) error {
	apply, err := d.Prepare(cfg)
	if err != nil {
		return err
	}
	apply()
	return nil
}

// Prepare is Reload in two steps: it reads cfg's files and returns what
// puts cfg in force, or why it cannot (then nothing changes).
func (d *Deliverer) Prepare(cfg Config) (apply func(), err error) {
	l, err := newLink(cfg)
	if err != nil {
		if ce := (*credentialError)(nil); errors.As(err, &ce) && d.link.Load().awaiting != nil {
			// The files awaited came, unusable: say so, or status goes on
			// asking whether the rack is registered.
			d.health.awaitFailed(d, err)
		}
		return nil, err
	}
	return func() {
		was := d.link.Load()
		d.setLink(l)
		d.log.Info().Str("url", l.cfg.URL).Strs("other_urls", l.cfg.OtherURLs).Str("server_name", l.serverName).Msg("region settings reloaded")
		switch {
		case l.awaiting != nil:
			d.health.awaiting(d, l)
		case was.awaiting != nil:
			d.health.awaited(d)
		}
		select {
		case d.reloaded <- struct{}{}:
		default:
		}
	}, nil
}

// Close unregisters the metrics and drops idle connections, so that a
// reload can build a new Deliverer. Call it after Run has returned.
func (d *Deliverer) Close() {
	d.m.unregister(d.reg)
	d.link.Load().hc.CloseIdleConnections()
	d.inflight.close()
}

// Asking is the request awaiting the region's answer: when it was sent
// (zero when none) and how many events it holds. A region that is slow
// or stuck shows here, while its state is still the last answer's.
func (d *Deliverer) Asking() (since time.Time, events int) {
	ns := d.asking.Load()
	if ns == 0 {
		return time.Time{}, 0
	}
	return time.Unix(0, ns), int(d.askingN.Load())
}

// LastDelivery is when the region last accepted a batch (zero if never).
func (d *Deliverer) LastDelivery() time.Time {
	ns := d.last.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Run delivers until ctx ends, then returns nil. A batch in flight when
// ctx ends stays queued (it is sent again on the next start). Outbox
// errors are logged and retried with backoff, never returned: the agent
// must stay up through a full disk.
func (d *Deliverer) Run(ctx context.Context) error {
	if l := d.link.Load(); l.awaiting != nil {
		d.health.awaiting(d, l)
	} else {
		d.log.Info().Str("url", l.cfg.URL).Strs("other_urls", l.cfg.OtherURLs).Str("server_name", l.serverName).Int("batch_max", l.cfg.BatchMax).Msg("delivering to the region")
	}
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	var wait time.Duration
	for {
		n, err := d.step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			l := d.link.Load()
			wait = clamp(2*wait, l.cfg.MinBackoff, l.cfg.MaxBackoff)
			d.log.Error().Err(err).Dur("retry_in", wait).Msg("delivery stalled; retrying")
			if !sleep(ctx, wait) {
				return nil
			}
			continue
		}
		wait = 0
		if n > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.q.Notify():
		case <-poll.C:
		}
	}
}

// Flush delivers what is queued now, until the queue is empty (nil) or
// ctx ends (an error wrapping ctx.Err()). For a bounded flush at SIGTERM,
// after Run has stopped or while it runs.
func (d *Deliverer) Flush(ctx context.Context) error {
	if l := d.link.Load(); l.awaiting != nil {
		// Nothing can go: not worth the flush's wait.
		if d.depth() == 0 {
			return nil
		}
		return fmt.Errorf("deliver: flush: %s still queued: %w", d.depthString(), l.awaiting)
	}
	total := 0
	for {
		n, err := d.step(ctx)
		total += n
		if ctx.Err() != nil {
			return fmt.Errorf("deliver: flush: %d events handled, %s still queued: %w", total, d.depthString(), ctx.Err())
		}
		if err != nil {
			return fmt.Errorf("deliver: flush: %w", err)
		}
		if n == 0 {
			return nil
		}
	}
}

// SetStale has the deliverer ask f, before sending a queued event,
// whether it is old news no longer to send (the reconciler's Stale: in a
// failover pair, older than what the peer told since it was queued); such
// an event is removed from the queue unsent. Set before Run.
func (d *Deliverer) SetStale(f StaleFunc) { d.stale.Store(&f) }

// OnSuperseded has the deliverer call f with each event it takes off the
// queue unsent because the stale check found it old news, once that is
// on disk (the reconciler's Dropped: the pair channel's answers must not
// name it as delivered). Only that drop: an event the check also judged
// stale but which went out (with newer news after it), or which is
// judged again later, is not told. Set before Run.
func (d *Deliverer) OnSuperseded(f func(event.Event)) { d.superseded = f }

// Gate orders this agent's deliveries with another sender's: the other
// agent of a failover pair (agent/pair). Clear returns the events of
// batch that may be sent now, in batch order, waiting while none may: at
// least one unless ctx ends (nil). An event it holds back holds back
// every later one that shares its address or MAC (split.go: MAAS applies
// an event against those alone); the others may go past it.
//
// While none may go, Clear calls more (if not nil) before judging again:
// more returns the queue's head peeked anew when events were queued
// after batch (batch's events first, then the newer ones), else nil, and
// Clear then judges that longer batch. So news queued behind a batch the
// gate holds whole (a silent peer's, for up to hold_max) goes when the
// gate lets it, not when the held batch does.
type Gate interface {
	Clear(ctx context.Context, batch []event.Queued, more func() []event.Queued) []event.Queued
	// ClearPieces is Clear for a batch the region may have applied
	// already: it returns only whole pieces (the events whose piece,
	// piece[i], may go in full), waiting while none may.
	ClearPieces(ctx context.Context, batch []event.Queued, piece []int) []event.Queued
	// Delivered is told of every batch the region accepted.
	Delivered(batch []event.Queued)
}

// SetGate has every batch cleared by g before it is sent: only what g
// lets go now is sent (the rest stays queued, in its place). Of a batch
// the region may have applied already (sent before and never answered),
// only whole pieces go (split.go: events linked by an address or a MAC):
// a piece sent alone takes its addresses and MACs to their newest state
// in one request, while a part of a piece could take the region back
// from the rest of it. Set before Run.
func (d *Deliverer) SetGate(g Gate) { d.gate = g }

// StaleFunc reports whether e, a queued event about to be sent, is old
// news: sent alone it would take the region back from newer news another
// sender told. newest, if valid (its IP set), is that newer news: e is
// then sent after all, with newest right after the address's last such
// event in the batch, so that the region, applying the request in one
// transaction, is left on newest and still hears of e. Otherwise e is
// taken off the queue unsent.
type StaleFunc func(ctx context.Context, e event.Event) (stale bool, newest event.Event)

// step takes the turn, peeks one batch and delivers it. It returns the
// number of events handled (delivered, dead-lettered or dropped), 0 when
// the queue was empty.
func (d *Deliverer) step(ctx context.Context) (int, error) {
	select {
	case d.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, nil
	}
	defer func() { <-d.turn }()
	batchMax := d.link.Load().cfg.BatchMax
	batch, err := d.q.Peek(batchMax)
	if err != nil {
		var ce *outbox.CorruptError
		if errors.As(err, &ce) {
			// It never decoded, so it cannot be sent or dead-lettered.
			d.log.Error().Err(err).Uint64("seq", ce.Seq).Msg("dropping an outbox record that does not decode")
			return 1, d.persist(ctx, func() error { return d.q.Ack(ce.Seq) })
		}
		return 0, fmt.Errorf("peek: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	if d.gate != nil {
		start := d.now()
		first := batch
		more := d.more(&first, batchMax)
		if batch = d.cleared(ctx, first, more); batch == nil {
			return 0, nil // ctx ended
		}
		if len(first) < batchMax && d.now().Sub(start) >= regateAfter {
			// The gate held the batch a while: take what was queued
			// meanwhile too, so that an event's own newer news goes in
			// the same request (not restated after it, and then sent
			// again: a duplicate).
			if again, err := d.q.Peek(batchMax); err == nil && len(again) > len(first) && again[0].Seq == first[0].Seq {
				// The fresh answer decides, longer or not; if it holds
				// it all, what is queued meanwhile is taken as before.
				if b := d.cleared(ctx, again, d.more(&again, batchMax)); b != nil {
					batch = b
				}
			}
		}
	}
	if err := d.deliver(ctx, batch, d.now()); err != nil && !errors.Is(err, errRepeek) {
		return len(batch), err
	}
	return len(batch), nil
}

// regateAfter: a batch the pair's gate held this long is peeked again.
const regateAfter = 100 * time.Millisecond

// more is the gate's more (Gate) for the batch *cur, peeked with max:
// once the queue told of events appended since, the queue's head peeked
// again if it is *cur and more (then *cur), else nil. The turn is held
// meanwhile, so nothing leaves the queue's head.
func (d *Deliverer) more(cur *[]event.Queued, max int) func() []event.Queued {
	return func() []event.Queued {
		if len(*cur) >= max {
			return nil
		}
		select {
		case <-d.q.Notify():
		default:
			return nil
		}
		again, err := d.q.Peek(max)
		if err != nil || len(again) <= len(*cur) || again[0].Seq != (*cur)[0].Seq {
			return nil // (a peek that fails fails again in step's next turn, which says so)
		}
		*cur = again
		return again
	}
}

// cleared is what of batch the gate lets go now: of the events the
// region may have applied already (Seq up to doubt; the whole batch when
// the last run's unanswered request is of unknown content), whole pieces
// (split.go) — and those alone, so that no piece that may go waits for
// the rest of the batch —; else of the rest what the gate clears, with
// more (Gate; nil: batch is all). nil when ctx ended.
func (d *Deliverer) cleared(ctx context.Context, batch []event.Queued, more func() []event.Queued) []event.Queued {
	if d.doubtFirst {
		// The last run's unanswered request was at most this batch:
		// pieces of it may go apart, so its bound is set now, not from
		// the first request sent (post).
		d.doubtFirst = false
		d.markDoubt(batch[len(batch)-1].Seq)
	}
	k := 0 // the doubtful prefix
	for k < len(batch) && batch[k].Seq <= d.inDoubt() {
		k++
	}
	if k == 0 {
		return d.gate.Clear(ctx, batch, more) // nil only when ctx ended
	}
	return d.gate.ClearPieces(ctx, batch[:k], pieces(batch[:k])) // nil when ctx ended
}

// errRepeek ends a batch early: the queue's head changed in a way the
// batch in hand does not know (a neighbour was delivered out of its
// place to test a suspect), so the rest is peeked again.
var errRepeek = errors.New("peek again")

// bisection is what one batch's delivery, splits included, knows.
type bisection struct {
	peeked  time.Time // when the batch was taken, for latency
	cleared time.Time // when the pair's gate last cleared it (overtaken)
	logged  bool      // the 500 that started the search was logged
	// sentStale are the events deliver judged stale and sends all the
	// same, with the newer news after them or their own newer event:
	// judged stale again they are no change (overtaken).
	sentStale map[uint64]bool
}

// recheckAfter: in a failover pair, a batch cleared by the gate this long
// ago is cleared and judged again before it is sent (a retry after an
// outage or a failing region, the second half of a split).
const recheckAfter = time.Second

// overtaken reports whether batch, cleared by the pair's gate at
// b.cleared, may no longer go as it is: cleared again, the gate holds part
// of it back, or the stale check finds one of its events older than news
// the peer told since. While this agent retried (the region away, or
// failing every event), the peer may have delivered newer news of the
// same address; the batch sent then would take the region back from it
// (make chaos PAIR=1 SEED=21: six old expiries delivered 15 s after the
// peer's newer commits). The caller then returns errRepeek: step peeks,
// clears and judges the queue afresh. False outside a pair, and within
// d.recheck of the last clearing.
func (d *Deliverer) overtaken(ctx context.Context, batch []event.Queued, b *bisection) bool {
	if d.gate == nil || len(batch) == 0 || d.now().Sub(b.cleared) < d.recheck {
		return false
	}
	out := d.cleared(ctx, batch, nil) // (a batch in flight does not grow: its splits are its own)
	if out == nil {
		return false // ctx ended: the caller's next post says so
	}
	b.cleared = d.now()
	if len(out) < len(batch) {
		return true
	}
	f := d.stale.Load()
	if f == nil {
		return false
	}
	for i, q := range batch {
		if b.sentStale[q.Seq] || i > 0 && batch[i-1].Seq == q.Seq {
			continue // judged stale already and sent all the same, or the newer news restated after one (withNewest)
		}
		if stale, _ := (*f)(ctx, q.Event); stale {
			return true
		}
	}
	return false
}

// deliver sends batch: events that cannot be valid are dead-lettered
// first (the region never sees them, so order is unaffected), the rest
// goes out by send.
func (d *Deliverer) deliver(ctx context.Context, batch []event.Queued, peeked time.Time) error {
	// Room for the whole batch at once: grown one event at a time it
	// was a twelfth of what the agent allocated per hookless lease.
	good := make([]event.Queued, 0, len(batch))
	var restate map[netip.Addr]restatement
	b := &bisection{peeked: peeked, cleared: peeked}
	for _, q := range batch {
		e := q.Event
		if err := e.Normalize(); err != nil {
			if err := d.deadLetter(ctx, q, "not sent: "+err.Error()); err != nil {
				return err
			}
			continue
		}
		if err := e.Deliverable(); err != nil {
			// Valid, but the region cannot take it: not sent, and not
			// a dead letter either (every such DHCPv6 lease would be one).
			if err := d.persist(ctx, func() error { return d.q.Ack(q.Seq) }); err != nil {
				return err
			}
			d.m.keptBack.Inc()
			d.log.Warn().Uint64("seq", q.Seq).Str("ip", e.IP.String()).Str("action", e.Action).Err(err).
				Msg("queued event the region cannot take; not sent (leasekeeper_deliver_kept_back_total)")
			continue
		}
		if f := d.stale.Load(); f != nil {
			if stale, newest := (*f)(ctx, e); stale {
				// Newest news the region cannot take (no six-octet MAC)
				// is none to restate: e alone would take the region
				// back, so it goes as when there is none.
				if !newest.IP.IsValid() || newest.Deliverable() != nil {
					if err := d.persist(ctx, func() error { return d.q.Ack(q.Seq) }); err != nil {
						return err
					}
					d.m.superseded.Inc()
					if d.superseded != nil {
						d.superseded(e)
					}
					d.log.Info().Uint64("seq", q.Seq).Str("ip", e.IP.String()).Str("action", e.Action).Str("mac", e.MAC).
						Int64("timestamp", e.Timestamp).Str("reason", e.Reason).Msg("queued event not sent: in a failover pair, the peer told the region newer news of its address since, or this same news (leasekeeper_deliver_superseded_total)")
					continue
				}
				d.log.Info().Uint64("seq", q.Seq).Str("ip", e.IP.String()).Str("action", e.Action).Str("mac", e.MAC).
					Int64("timestamp", e.Timestamp).Str("newest", newest.Action).Str("newest_mac", newest.MAC).Int64("newest_timestamp", newest.Timestamp).
					Msg("queued event older than news the peer told since, in a failover pair: sent with that news after it, in one request")
				q.Event = e
				good = append(good, q)
				if b.sentStale == nil {
					b.sentStale = map[uint64]bool{}
				}
				b.sentStale[q.Seq] = true
				if restate == nil {
					restate = map[netip.Addr]restatement{}
				}
				restate[e.IP] = restatement{after: len(good) - 1, q: event.Queued{Seq: q.Seq, Event: newest}}
				continue
			}
		}
		q.Event = e
		good = append(good, q)
		delete(restate, e.IP) // news of its own follows the stale events: newer than the peer's
	}
	if len(good) == 0 {
		return nil
	}
	return d.send(ctx, withNewest(good, restate), b)
}

// restatement is newer news to send after a stale event (StaleFunc):
// after the event at index after of the batch. Its Seq is that event's:
// acknowledged with it, and never queued on its own.
type restatement struct {
	after int
	q     event.Queued
}

// withNewest inserts each restatement after its event.
func withNewest(batch []event.Queued, restate map[netip.Addr]restatement) []event.Queued {
	if len(restate) == 0 {
		return batch
	}
	after := make(map[int]event.Queued, len(restate))
	for _, r := range restate {
		after[r.after] = r.q
	}
	out := make([]event.Queued, 0, len(batch)+len(restate))
	for i, q := range batch {
		out = append(out, q)
		if r, ok := after[i]; ok {
			out = append(out, r)
		}
	}
	return out
}

// send posts batch until the region answers for its content: a 2xx acks
// it; a 422 or a 500 splits it in halves sent in order (a lone event
// refused or failing goes to lone);
// anything else (no answer, an outage status, a configuration problem)
// is waited out and the same batch sent again.
//
// A batch the region may have applied already (Deliverer.doubt) that
// cannot be split without showing the region an older state (split.go)
// is sent whole again after a 500, with backoff, PoisonAttempts times in
// all — the region failing everything for a while is the likely cause —
// before it is cut in the middle all the same, with a warning.
func (d *Deliverer) send(ctx context.Context, batch []event.Queued, b *bisection) error {
	whole := 0 // 500s answered to this batch sent whole, in doubt
	for attempt := 0; ; attempt++ {
		if d.gate != nil && !d.waitHold(ctx) {
			// (The first request of a run waits out the last run's
			// unanswered one, as post does; waited here, the batch is
			// cleared again after it.)
			return ctx.Err()
		}
		if d.overtaken(ctx, batch, b) {
			return errRepeek
		}
		o, err := d.post(ctx, batch)
		if err != nil {
			return err
		}
		switch o.kind {
		case kindOK:
			return d.delivered(ctx, batch, b.peeked)
		case kindRefused, kindFailed:
			if len(batch) == 1 {
				return d.lone(ctx, batch[0], o, b)
			}
			if o.kind == kindRefused {
				d.log.Debug().Int("events", len(batch)).Str("answer", o.what).Msg("region refused a batch; splitting it")
			} else if !b.logged {
				b.logged = true
				d.log.Warn().Int("events", len(batch)).Str("answer", o.what).
					Msg("region failed a batch (HTTP 500, or its service layer's 404); splitting it to find an event it cannot place")
			}
			first, second, ok := d.parts(batch)
			if !ok {
				cfg := d.link.Load().cfg
				if whole++; o.kind == kindFailed && whole < cfg.PoisonAttempts {
					d.log.Debug().Int("events", len(batch)).Str("answer", o.what).
						Msg("region failed a batch it may have applied already, which no cut divides safely; sending it whole again")
					if !d.pause(ctx, jitter(cfg.MinBackoff, cfg.MaxBackoff, whole-1), false, false) {
						return ctx.Err()
					}
					continue
				}
				d.m.unsafeSplits.Inc()
				d.log.Warn().Int("events", len(batch)).Str("answer", o.what).Uint64("first_seq", batch[0].Seq).
					Msg("splitting a batch the region may have applied already, though no cut keeps each address and MAC on one side: until the second half lands, the region may show some of them an older state (leasekeeper_deliver_unsafe_splits_total)")
				mid := len(batch) / 2
				first, second = batch[:mid], batch[mid:]
			}
			if err := d.send(ctx, first, b); err != nil {
				return err
			}
			return d.send(ctx, second, b)
		default:
			if !d.pause(ctx, d.retryDelay(o, attempt), false, o.down) {
				return ctx.Err()
			}
		}
	}
}

// parts divides a batch the region failed or refused (split.go): at a
// clean cut, else in the middle if nothing in it is in doubt, else into
// independent parts; false when none of these applies.
func (d *Deliverer) parts(batch []event.Queued) (first, second []event.Queued, ok bool) {
	if k, ok := cleanCut(batch); ok {
		return batch[:k], batch[k:], true
	}
	if batch[0].Seq > d.inDoubt() {
		// (Seq order: the first is the lowest.)
		mid := len(batch) / 2
		return batch[:mid], batch[mid:], true
	}
	return independent(batch)
}

// lone handles one event the region failed (500) or refused (422) on its
// own, at the head of the queue. A 500 is a poison event (an address in
// no subnet) or the region failing everything (its database away) or
// some requests (one broken worker behind a balancer); a 422 is an event
// its schema refuses, or a region refusing everything (a schema this
// agent does not know). Only a poison event may cost a dead letter.
//
// An event failing with 500 is retried alone, with backoff,
// PoisonAttempts times in all (a 422 is not: retried, it would be
// refused again); if it still fails, a neighbour is sent alone (the next
// queued event sharing no IP or MAC with it or with anything skipped: it
// may overtake the suspect without changing what the region ends with),
// and the suspect once more right after. The neighbour accepted and the
// suspect failing right after is a proof that the failure is the
// event's own. One proof dead-letters a refused event, with the region's
// answer. A failed one is then retried alone PoisonConfirm times over
// PoisonSpan, and dead-lettered only if every one of those fails and a
// neighbour, if one is queued, is accepted once more with the suspect
// failing right after: a region that fails requests at random, or fails
// everything for a moment, costs retries, never a dead letter. When no
// neighbour is accepted the region is taken to be failing (or refusing)
// everything: the suspect is retried with growing backoff, forever,
// nothing is dead-lettered, and what proofs there were count no more.
func (d *Deliverer) lone(ctx context.Context, q event.Queued, first outcome, b *bisection) (err error) {
	one := []event.Queued{q}
	fails, last, outages, rounds := 1, first, 0, 0
	consumed := false    // a neighbour went out of turn: the batch in hand is stale
	evidence := false    // a neighbour was just accepted: the next failure is the suspect's own
	var proved time.Time // the first proof; zero before it
	since := 0           // the suspect's failures alone since proved
	defer func() {
		if err == nil && consumed {
			err = errRepeek
		}
	}()
	cfg := d.link.Load().cfg
	delay, wake, down := jitter(cfg.MinBackoff, cfg.MaxBackoff, 0), false, false
	for {
		if !d.pause(ctx, delay, wake, down) {
			return ctx.Err()
		}
		if d.overtaken(ctx, one, b) {
			return errRepeek
		}
		cfg, wake, down = d.link.Load().cfg, false, false
		// A proved suspect's rounds: PoisonConfirm of them over PoisonSpan.
		round := max(cfg.PoisonSpan/time.Duration(cfg.PoisonConfirm), cfg.MinBackoff)
		o, err := d.post(ctx, one)
		if err != nil {
			return err
		}
		switch o.kind {
		case kindOK:
			return d.delivered(ctx, one, b.peeked)
		case kindRefused, kindFailed:
			fails, last, outages = fails+1, o, 0
			if !proved.IsZero() {
				since++
			}
			confirmed := !proved.IsZero() && since >= cfg.PoisonConfirm && d.now().Sub(proved) >= cfg.PoisonSpan
			switch {
			case evidence && o.kind == kindRefused:
				return d.deadLetter(ctx, q, fmt.Sprintf("%s (refused alone; the region accepted another event in between)", last.what))
			case evidence && confirmed:
				return d.deadLetter(ctx, q, fmt.Sprintf("%s (failed alone %d times over %s; the region accepted another event in between, and again since)",
					last.what, fails, d.now().Sub(proved).Round(time.Millisecond)))
			case evidence:
				evidence = false
				if proved.IsZero() {
					proved, since = d.now(), 1
					d.log.Info().Uint64("suspect_seq", q.Seq).Str("suspect_ip", q.Event.IP.String()).Dur("for", cfg.PoisonSpan).
						Msg("region failed an event right after accepting another: retrying it before dead-lettering it (a region failing at random must not cost a dead letter)")
				}
				delay = round
				continue
			case proved.IsZero() && o.kind == kindFailed && fails < cfg.PoisonAttempts:
				delay = jitter(cfg.MinBackoff, cfg.MaxBackoff, fails-1)
				continue
			}
			// (Judging a proved suspect, each round also sends the
			// neighbours queued since: the queue moves on meanwhile.)
			p, err := d.probe(ctx, q, b)
			if err != nil {
				return err
			}
			switch {
			case p.accepted:
				// Once more, right after: a region that just came back
				// takes the suspect now.
				consumed, evidence, delay = true, true, 0
				continue
			case p.outage != nil:
				// Says nothing either way: wait it out and start over.
				outages++
				delay, down = d.retryDelay(*p.outage, outages-1), p.outage.down
				continue
			case p.tried == 0 && confirmed:
				// Nothing left to compare it with: the proof and the
				// failures since it are the verdict.
				return d.deadLetter(ctx, q, fmt.Sprintf("%s (failed alone %d times over %s; the region accepted another event in between)",
					last.what, fails, d.now().Sub(proved).Round(time.Millisecond)))
			case p.tried == 0 && !proved.IsZero():
				delay, wake = round, true // a new event makes a neighbour to try
				continue
			}
			proved, since = time.Time{}, 0
			rounds++
			why := fmt.Sprintf("the region fails every event it is sent with HTTP %d", last.status)
			if last.kind == kindRefused {
				why = "the region refuses every event it is sent with HTTP 422 (its schema: a MAAS version this agent does not know?)"
			}
			if p.tried == 0 {
				why = fmt.Sprintf("the region fails this event with HTTP %d, and no other event is queued to tell whether it fails them all", last.status)
				wake = true // a new event makes a neighbour to try
			}
			d.health.failing(d, last.what, why+"; nothing is dead-lettered: see regiond's log for the cause")
			delay = jitter(cfg.MinBackoff, cfg.MaxBackoff, cfg.PoisonAttempts+rounds)
		default:
			outages, evidence = outages+1, false // stale after an outage
			delay, down = d.retryDelay(o, outages-1), o.down
		}
	}
}

// probed is what probe found.
type probed struct {
	accepted bool     // neighbours were accepted (and acked)
	tried    int      // requests of neighbours sent
	outage   *outcome // a neighbour got no answer about itself: nothing learnt
}

// probe sends the neighbours of the suspect q, all of them in one request
// (up to BatchMax), then, if the region fails that, one by one until one
// is accepted, maxProbes requests in all. A neighbour is an event queued after q
// sharing neither IP nor MAC with q, with an event it would overtake, or
// with a neighbour that failed; in a failover pair it is also one the
// pair's gate clears and the stale check passes (neighbours).
func (d *Deliverer) probe(ctx context.Context, q event.Queued, b *bisection) (p probed, err error) {
	queued, err := d.q.Peek(d.link.Load().cfg.BatchMax + 1)
	if err != nil {
		return p, fmt.Errorf("peek: %w", err)
	}
	if len(queued) == 0 || queued[0].Seq != q.Seq {
		return p, errRepeek // cannot happen: only the holder of the turn removes events
	}
	ips := map[netip.Addr]bool{q.Event.IP: true}
	macs := map[string]bool{q.Event.MAC: true}
	cands, err := d.neighbours(ctx, queued[1:], ips, macs)
	if err != nil {
		return p, err
	}
	// The neighbours that may go, in queue order: sent together first, so
	// that while a suspect is being judged the rest of the queue moves on;
	// one by one (as many as maxProbes) if the region fails them together.
	var group []event.Queued
	for _, c := range cands {
		e := c.Event
		if ips[e.IP] || macs[e.MAC] || d.gate != nil && d.staleNeighbour(ctx, e) {
			ips[e.IP], macs[e.MAC] = true, true
			continue
		}
		group = append(group, c)
	}
	if len(group) > 1 {
		p.tried++
		o, err := d.post(ctx, group)
		if err != nil {
			return p, err
		}
		switch o.kind {
		case kindOK:
			d.log.Info().Uint64("suspect_seq", q.Seq).Str("suspect_ip", q.Event.IP.String()).Int("neighbours", len(group)).
				Msg("region accepted the neighbours of an event it fails: trying the suspect once more")
			p.accepted = true
			return p, d.delivered(ctx, group, b.peeked)
		case kindRefused, kindFailed:
		default:
			p.outage = &o
			return p, nil
		}
	}
	ips, macs = map[netip.Addr]bool{}, map[string]bool{}
	for _, c := range group {
		if p.tried >= maxProbes {
			break
		}
		e := c.Event
		if ips[e.IP] || macs[e.MAC] {
			continue
		}
		p.tried++
		o, err := d.post(ctx, []event.Queued{c})
		if err != nil {
			return p, err
		}
		switch o.kind {
		case kindOK:
			d.log.Info().Uint64("suspect_seq", q.Seq).Str("suspect_ip", q.Event.IP.String()).Uint64("neighbour_seq", c.Seq).
				Msg("region accepted a neighbour of an event it fails: trying the suspect once more")
			p.accepted = true
			return p, d.delivered(ctx, []event.Queued{c}, b.peeked)
		case kindRefused, kindFailed:
			ips[e.IP], macs[e.MAC] = true, true
		default:
			p.outage = &o
			return p, nil
		}
	}
	return p, nil
}

// staleNeighbour reports whether e, a neighbour about to be sent out of
// its turn, is old news (StaleFunc): sent alone, it would take the region
// back from the newer news. It waits for its own turn, where deliver
// decides its fate.
func (d *Deliverer) staleNeighbour(ctx context.Context, e event.Event) bool {
	f := d.stale.Load()
	if f == nil {
		return false
	}
	stale, _ := (*f)(ctx, e)
	return stale
}

// neighbours are the events of queued that may be tried as neighbours of
// a suspect, in queue order, normalised: the valid ones the region can
// take (Deliverable: one it cannot is kept back in its turn), and in a
// failover pair only those the pair's gate clears, outside the doubt
// (the region may have applied a later event of their address in the
// request it never answered), sharing no address or MAC with ips and
// macs. A neighbour goes out of its turn: sent while the peer holds older
// news of its address it would take the region back as any event would.
// An event left out for these reasons is no neighbour, and its address
// and MAC go into ips and macs (nothing of them may overtake it); Clear
// holds back the later events of what it holds back. (probe judges each
// neighbour stale or not just before it is sent.)
func (d *Deliverer) neighbours(ctx context.Context, queued []event.Queued, ips map[netip.Addr]bool, macs map[string]bool) ([]event.Queued, error) {
	out := make([]event.Queued, 0, len(queued))
	for _, c := range queued {
		e := c.Event
		if e.Normalize() != nil || e.Deliverable() != nil {
			continue // dead-lettered, or kept back, in its turn; never sent
		}
		c.Event = e
		if d.gate != nil && (ips[e.IP] || macs[e.MAC] || c.Seq <= d.inDoubt()) {
			ips[e.IP], macs[e.MAC] = true, true
			continue
		}
		out = append(out, c)
	}
	if d.gate == nil || len(out) == 0 {
		return out, nil
	}
	cleared := d.gate.Clear(ctx, out, nil)
	if cleared == nil {
		return nil, ctx.Err()
	}
	return cleared, nil
}

// retryDelay is the wait before attempt+1 after o: the region's
// Retry-After when it gave one (at least MinBackoff, at most
// MaxRetryAfter), else exponential backoff with jitter.
func (d *Deliverer) retryDelay(o outcome, attempt int) time.Duration {
	cfg := d.link.Load().cfg
	if o.retryOK {
		return clamp(o.retryAfter, cfg.MinBackoff, MaxRetryAfter)
	}
	return jitter(cfg.MinBackoff, cfg.MaxBackoff, attempt)
}

// pause waits d, or less when the region settings were reloaded (or,
// with onNotify, when new events were queued; with down, when the region,
// which could not be reached, accepts connections again: probe.go).
// False when ctx ended.
func (d *Deliverer) pause(ctx context.Context, wait time.Duration, onNotify, down bool) bool {
	if wait <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	var notify, back <-chan struct{}
	if onNotify {
		notify = d.q.Notify()
	}
	if down && d.probedBack.Swap(false) {
		down = false // the probe's "back" was wrong last time: back off
	}
	if down {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		back = d.whenBack(pctx)
	}
	select {
	case <-t.C:
	case <-d.reloaded:
	case <-notify:
	case <-back:
		d.probedBack.Store(true)
	case <-ctx.Done():
		return false
	}
	return true
}

// post sends one batch once and says what came of it; an error only when
// ctx ended.
func (d *Deliverer) post(ctx context.Context, batch []event.Queued) (outcome, error) {
	l := d.link.Load()
	if l.awaiting != nil {
		// Nothing is sent, nor counted as an attempt: the batch waits
		// for the files (a reload ends the pause). Health says so
		// (awaiting).
		return outcome{kind: kindConfig, what: l.awaiting.Error(), hint: l.cfg.AwaitCredentials}, nil
	}
	body, err := batchBody(batch)
	if err != nil {
		return outcome{}, fmt.Errorf("encode batch: %w", err) // cannot happen: strings and ints
	}
	actx, cancel := context.WithTimeout(ctx, l.cfg.Timeout+l.cfg.AnswerTimeout)
	defer cancel()
	// wrote: the request was written whole, into the connection's buffer
	// (Request.write reports it before the transport flushes). A
	// connection that fails before that never carried the request.
	var wrote atomic.Bool
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
		},
	})
	c := l.controller()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.raw, bytes.NewReader(body))
	if err != nil {
		return outcome{}, err
	}
	// Never sent again by the transport itself: net/http replays a
	// request that looks idempotent (an Idempotency-Key header is enough)
	// when a reused connection closes before the answer, on a new one,
	// unseen here — a copy whose start inflight.begin never recorded, so
	// a stop soon after held too short and the next copy overlapped it
	// (make chaos PAIR=1 seed 2). Without GetBody it is not replayable;
	// the deliverer's own retry sends it again, recorded.
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", l.cfg.UserAgent)
	req.Header.Set("Idempotency-Key", IdempotencyKey(batch))
	if l.token != "" {
		req.Header.Set("Authorization", "Bearer "+l.token)
	}
	if !d.waitHold(ctx) {
		return outcome{}, ctx.Err()
	}
	start := d.now()
	last := batch[len(batch)-1].Seq
	if d.doubtFirst {
		d.doubtFirst = false
		d.markDoubt(last)
	}
	if err := d.inflight.begin(start, max(last, d.inDoubt())); err != nil {
		d.log.Error().Err(err).Msg("cannot record the request's start in the state directory; sending it all the same (a restart during it may send newer news before the region is done with it)")
	}
	var o outcome
	d.askingN.Store(int64(len(batch)))
	d.asking.Store(start.UnixNano())
	slow := time.AfterFunc(d.slowAfter, func() {
		d.log.Warn().Int("events", len(batch)).Dur("waited", d.slowAfter).Dur("answer_timeout", l.cfg.AnswerTimeout).
			Msgf("the region has not answered a request of %d events for %s: waiting for its answer (it may be applying it), not sending it again before the answer timeout", len(batch), d.slowAfter)
	})
	resp, err := l.hc.Do(req)
	d.asking.Store(0)
	if !slow.Stop() {
		d.log.Info().Int("events", len(batch)).Dur("waited", d.now().Sub(start).Round(time.Millisecond)).Msg("the slow request ended")
	}
	answered := ctx.Err() == nil
	if !answered {
		d.markDoubt(last)
		if d.inflight != nil {
			// Abandoned with the region perhaps applying it: a Flush at
			// SIGTERM, after Run stopped here, holds like the next run.
			d.holdUntil.Store(start.Add(d.hold).UnixNano())
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return outcome{}, ctx.Err()
		}
		o = classifyErr(err, wrote.Load(), &l.cfg, c.u, c.serverName)
	} else {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 4*maxReason))
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // for connection reuse only
		resp.Body.Close()
		if rerr != nil {
			// An answer cut off (the connection reset within a body its
			// header announced) is no answer: a 2xx so cut is no proof
			// that the region stored the batch.
			err = fmt.Errorf("HTTP %d, then reading the answer: %w", resp.StatusCode, rerr)
			o = classifyErr(err, true, &l.cfg, c.u, c.serverName)
		} else {
			o = classify(resp, oneLine(b, maxReason), d.now(), c.u)
		}
	}
	if !o.down {
		d.probedBack.Store(false) // the region answered, or is up and struggling
	}
	if o.down || o.kind == kindConfig {
		// Another controller may be up, or set up right (a certificate
		// it does not trust, a proxy in front of it answering 404): the
		// next attempt goes there. One that answers, even 5xx, stays.
		if next, ok := l.passOn(c); ok {
			d.log.Warn().Str("url", c.raw).Str("next", next.raw).Str("error", o.what).
				Msg("region controller cannot be reached, or refuses this rack's settings: the next attempt goes to the next one")
		}
	}
	if mayHaveApplied(o, err) {
		d.markDoubt(last)
	}
	if o.kind == kindOK {
		d.unacked.Store(last) // until delivered stores the Ack
	}
	if answered {
		// Answered, or failed: either way this run, not a restarted one,
		// decides what comes next (no hold). Left set when the agent
		// stops with the request out (ctx ended): the next run holds.
		d.inflight.answered(d.inDoubt()) //nolint:errcheck // a stale record only delays the next start
	}
	d.m.attempts.WithLabelValues(resultLabel[o.kind]).Inc()
	d.health.observe(d, o)
	return o, nil
}

// knows reports whether q has given Seqs up to seq: false only for an
// outbox that can say so (NextSeq) and has not.
func knows(q Queue, seq uint64) bool {
	n, ok := q.(interface{ NextSeq() uint64 })
	return !ok || seq < n.NextSeq()
}

// markDoubt records that the events up to seq may have been applied by
// the region without the agent knowing (Deliverer.doubt). Under turn.
func (d *Deliverer) markDoubt(seq uint64) { d.doubt.Store(max(d.doubt.Load(), seq)) }

// mayHaveApplied reports whether a request that ended in o (err: its
// transport error) may have been applied by the region all the same: it
// went out and no answer came (a timeout, a connection cut), or an
// answer came from something between the agent and the region (a
// proxy's 502, 503 or 504). A region down never got it (o.down: a
// refused connection, or one closed before the request was written). A
// timeout counts as perhaps applied even before the request was all
// written: the transport may still be writing it when the attempt gives
// up. MAAS's own answers are definite: 2xx applied, 422 refused before
// anything was applied, 500 rolled back (one transaction per request,
// inflight.go).
func mayHaveApplied(o outcome, err error) bool {
	if err != nil {
		return !o.down && o.kind != kindConfig
	}
	return o.status > 500
}

// IdempotencyKey names a batch by its Seqs: the same batch gets the same
// key on every retry and after a restart, a different batch (a half after
// a split) another. MAAS ignores it; it lets a region or a proxy that
// honours it drop a duplicate, and tests tell retries apart.
func IdempotencyKey(batch []event.Queued) string {
	h := sha256.New()
	var b [8]byte
	for _, q := range batch {
		binary.BigEndian.PutUint64(b[:], q.Seq)
		h.Write(b[:])
	}
	return "lk-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// oneLine makes a region's answer fit a log line and a dead letter:
// valid UTF-8, no line breaks, at most n bytes.
func oneLine(b []byte, n int) string {
	s := strings.ToValidUTF8(string(bytes.TrimSpace(b)), "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func (d *Deliverer) delivered(ctx context.Context, batch []event.Queued, peeked time.Time) error {
	seqs := make([]uint64, len(batch))
	for i, q := range batch {
		seqs[i] = q.Seq
	}
	if err := d.persist(ctx, func() error { return d.q.Ack(seqs...) }); err != nil {
		return err
	}
	if d.unacked.CompareAndSwap(seqs[len(seqs)-1], 0) {
		// Acknowledged: the record goes back to what is still in doubt.
		d.inflight.answered(d.doubt.Load()) //nolint:errcheck // a stale record only makes a restart split with more care
	}
	if d.gate != nil {
		d.gate.Delivered(batch)
	}
	now := d.now()
	d.last.Store(now.UnixNano())
	d.m.delivered.Add(float64(len(batch)))
	d.m.lastDelivery.Set(float64(now.UnixNano()) / 1e9)
	for _, q := range batch {
		from := peeked
		if q.Event.TimestampNS > 0 {
			from = time.Unix(0, q.Event.TimestampNS)
		}
		d.m.latency.Observe(max(now.Sub(from), 0).Seconds())
	}
	return nil
}

func (d *Deliverer) deadLetter(ctx context.Context, q event.Queued, reason string) error {
	if err := d.persist(ctx, func() error { return d.q.DeadLetter(q, reason) }); err != nil {
		return err
	}
	d.m.deadlettered.Inc()
	d.log.Warn().Uint64("seq", q.Seq).Str("ip", q.Event.IP.String()).Str("action", q.Event.Action).
		Str("mac", q.Event.MAC).Str("reason", reason).Msg("region refused an event; dead-lettered, delivery goes on")
	return nil
}

// persist runs an outbox write (Ack, DeadLetter) until it succeeds: the
// next batch must not go out before the outbox knows this one's fate, or
// a crash would resend it after a later one. It tries at least once even
// if ctx has ended; it gives up only when ctx ends.
func (d *Deliverer) persist(ctx context.Context, write func() error) error {
	wait := time.Duration(0)
	for {
		err := write()
		if err == nil {
			return nil
		}
		cfg := d.link.Load().cfg
		wait = clamp(2*wait, cfg.MinBackoff, cfg.MaxBackoff)
		d.log.Error().Err(err).Dur("retry_in", wait).Msg("outbox write failed after delivery; retrying before the next batch")
		if !sleep(ctx, wait) {
			return fmt.Errorf("outbox write: %w (%w)", err, ctx.Err())
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (d *Deliverer) depth() int {
	if q, ok := d.q.(depther); ok {
		return q.Depth()
	}
	return -1
}

func (d *Deliverer) depthString() string {
	if n := d.depth(); n >= 0 {
		return fmt.Sprintf("%d", n)
	}
	return "some"
}
