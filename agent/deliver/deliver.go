package deliver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

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
	DefaultBatchMax   = 100
	DefaultTimeout    = 10 * time.Second
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	DefaultWarnEvery  = 30 * time.Second
	DefaultUserAgent  = "leasekeeper/dev"

	// pollInterval re-checks the queue even without a Notify, in case a
	// wake-up was consumed elsewhere (Flush) or lost.
	pollInterval = 5 * time.Second
	// maxReason bounds the region's answer kept with a dead letter.
	maxReason = 512
)

// Config says where and how to deliver. Zero values take the defaults above.
type Config struct {
	URL       string // https://region:5443/MAAS/a/v3internal/leases
	CAFile    string // PEM CA bundle to trust; "" = the system's roots
	CertFile  string // client certificate (PEM), with KeyFile
	KeyFile   string
	TokenFile string // bearer token; must be mode 0600 or stricter

	BatchMax  int           // events per request
	Timeout   time.Duration // bound on each attempt, answer included
	UserAgent string        // "leasekeeper/VERSION"

	MinBackoff, MaxBackoff time.Duration // between retries of one batch
	WarnEvery              time.Duration // rate limit of "region unreachable" warnings
}

// Deliverer sends queued events to the region. Run and Flush may be
// called concurrently; they take turns, one batch at a time.
type Deliverer struct {
	cfg    Config
	q      Queue
	log    zerolog.Logger
	now    func() time.Time
	client *retryablehttp.Client
	hc     *http.Client
	token  string
	m      metrics
	reg    prometheus.Registerer

	turn   chan struct{} // held by whoever is sending: one batch in flight, ever
	last   atomic.Int64  // Unix ns of the last 2xx
	outage outage        // only touched by the holder of turn
}

// New checks cfg, loads the credentials and registers the metrics on reg
// (nil: none). now is the clock (nil: time.Now).
func New(cfg Config, q Queue, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time) (*Deliverer, error) {
	if q == nil {
		return nil, errors.New("deliver: no queue")
	}
	if now == nil {
		now = time.Now
	}
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = DefaultBatchMax
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
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
		return nil, fmt.Errorf("deliver: max backoff %v is below min backoff %v", cfg.MaxBackoff, cfg.MinBackoff)
	}
	if cfg.WarnEvery <= 0 {
		cfg.WarnEvery = DefaultWarnEvery
	}
	u, err := checkURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("deliver: %w", err)
	}
	tc, err := tlsConfig(&cfg)
	if err != nil {
		return nil, fmt.Errorf("deliver: %w", err)
	}
	d := &Deliverer{cfg: cfg, q: q, log: log, now: now, turn: make(chan struct{}, 1)}
	if cfg.TokenFile != "" {
		if d.token, err = readToken(cfg.TokenFile); err != nil {
			return nil, fmt.Errorf("deliver: %w", err)
		}
	}
	// Plain http, which checkURL allows to loopback only (a local stub,
	// tests), may go without credentials, as the config allows.
	if d.token == "" && len(tc.Certificates) == 0 && u.Scheme != "http" {
		return nil, errors.New("deliver: no credentials for the region: set cert_file and key_file, or token_file")
	}
	if d.token != "" && u.Scheme == "http" {
		d.log.Warn().Str("url", u.String()).Msg("sending the bearer token over plain http (loopback)")
	}
	d.cfg.URL = u.String()
	d.hc = newHTTPClient(&d.cfg, tc)
	d.client = d.newRetryClient(d.hc)
	d.m = newMetrics()
	if err := d.m.register(reg); err != nil {
		return nil, fmt.Errorf("deliver: metrics: %w", err)
	}
	d.reg = reg
	return d, nil
}

// Close unregisters the metrics and drops idle connections, so that a
// reload can build a new Deliverer. Call it after Run has returned.
func (d *Deliverer) Close() {
	d.m.unregister(d.reg)
	d.hc.CloseIdleConnections()
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
	d.log.Info().Str("url", d.cfg.URL).Int("batch_max", d.cfg.BatchMax).Msg("delivering to the region")
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	var wait time.Duration
	for {
		n, err := d.step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			wait = clamp(2*wait, d.cfg.MinBackoff, d.cfg.MaxBackoff)
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
	batch, err := d.q.Peek(d.cfg.BatchMax)
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
	return len(batch), d.deliver(ctx, batch, d.now())
}

// deliver sends batch: events that cannot be valid are dead-lettered
// first (the region never sees them, so order is unaffected), the rest
// goes out by send.
func (d *Deliverer) deliver(ctx context.Context, batch []event.Queued, peeked time.Time) error {
	good := batch[:0:0]
	for _, q := range batch {
		e := q.Event
		if err := e.Normalize(); err != nil {
			if err := d.deadLetter(ctx, q, "not sent: "+err.Error()); err != nil {
				return err
			}
			continue
		}
		q.Event = e
		good = append(good, q)
	}
	if len(good) == 0 {
		return nil
	}
	return d.send(ctx, good, peeked)
}

// send posts batch, retrying until a 2xx (ack) or a refusal (split).
func (d *Deliverer) send(ctx context.Context, batch []event.Queued, peeked time.Time) error {
	status, answer, err := d.post(ctx, batch)
	if err != nil {
		return err
	}
	if status >= 200 && status < 300 {
		return d.delivered(ctx, batch, peeked)
	}
	reason := fmt.Sprintf("HTTP %d: %s", status, answer)
	if len(batch) == 1 {
		return d.deadLetter(ctx, batch[0], reason)
	}
	d.log.Debug().Int("events", len(batch)).Str("answer", reason).Msg("region refused a batch; splitting it")
	mid := len(batch) / 2
	if err := d.send(ctx, batch[:mid], peeked); err != nil {
		return err
	}
	return d.send(ctx, batch[mid:], peeked)
}

// post sends one batch with retries and returns the final status and the
// start of the answer's body; an error only when ctx ended.
func (d *Deliverer) post(ctx context.Context, batch []event.Queued) (int, string, error) {
	items := make([]event.RegionItem, len(batch))
	for i := range batch {
		items[i] = batch[i].Event.Item()
	}
	body, err := json.Marshal(items)
	if err != nil {
		return 0, "", fmt.Errorf("encode batch: %w", err) // cannot happen: strings and ints
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, d.cfg.URL, body)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	req.Header.Set("Idempotency-Key", IdempotencyKey(batch))
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, "", ctx.Err()
		}
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4*maxReason))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // for connection reuse only
	return resp.StatusCode, oneLine(b, maxReason), nil
}

// IdempotencyKey names a batch by its Seqs: the same batch gets the same
// key on every retry and after a restart, a different batch (a half after
// a split) another.
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
		wait = clamp(2*wait, d.cfg.MinBackoff, d.cfg.MaxBackoff)
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

// outage keeps the "region unreachable" log readable: a warning at the
// first failure, then one every WarnEvery, and an info line on recovery.
type outage struct {
	since    time.Time // zero while the region answers
	lastWarn time.Time
	failures int
}

func (o *outage) failed(d *Deliverer, what string, config bool) {
	now := d.now()
	o.failures++
	lvl := zerolog.WarnLevel
	if config {
		lvl = zerolog.ErrorLevel
	}
	if o.since.IsZero() {
		o.since, o.lastWarn = now, now
		d.log.WithLevel(lvl).Str("error", what).Int("queued", d.depth()).
			Msg("region delivery failed; retrying until it answers")
		return
	}
	if now.Sub(o.lastWarn) < d.cfg.WarnEvery {
		return
	}
	o.lastWarn = now
	down := now.Sub(o.since).Round(time.Second)
	d.log.WithLevel(lvl).Str("error", what).Int("failed_attempts", o.failures).Int("queued", d.depth()).
		Dur("down_for", down).Msgf("region unreachable for %s, %s events queued", down, d.depthString())
}

func (o *outage) reachable(d *Deliverer) {
	if o.since.IsZero() {
		return
	}
	down := d.now().Sub(o.since).Round(time.Millisecond)
	d.log.Info().Dur("down_for", down).Int("failed_attempts", o.failures).Int("queued", d.depth()).
		Msgf("region reachable again after %s", down)
	*o = outage{}
}
