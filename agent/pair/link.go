package pair

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lograte"
)

// Config is the channel to the other agent of the pair.
type Config struct {
	Listen string // host:port this agent answers on (UDP)
	Peer   string // host:port of the other agent's Listen
	Key    []byte // the shared secret, at least MinKeyLen bytes
	// HoldMax bounds every wait on the peer: how long a silent peer
	// holds this agent's deliveries before it goes on alone, and how
	// long one event waits behind the peer's older news.
	HoldMax time.Duration
	// Primary reports whether this side is the pair's primary (it wins
	// ties). Read at each decision: dhcpd.conf can change.
	Primary func() bool
	// Ready reports whether the link may answer: before that (the agent
	// starting, its spool not yet stored) the peer's queries go
	// unanswered and the peer waits, as it would for a dead agent, up to
	// its hold_max. nil = always.
	Ready func() bool
	// Margin: an event goes only once it is this much older than the
	// query; 0 = DefaultMargin.
	Margin time.Duration
	// AnswerTimeout: how long a query waits for its answer before it is
	// sent again; 0 = DefaultAnswerTimeout.
	AnswerTimeout time.Duration
	// IdleProbe: how often Run asks a silent peer whether it is back
	// while this agent delivers alone, deliveries or not (Clear asks too
	// as it delivers); 0 = DefaultIdleProbe.
	IdleProbe time.Duration
	// Memory, if set, keeps this agent's newest delivered news of each
	// address across its restarts: the answers name it by its tag, so
	// that the peer takes its copy of that news for one (CopyOf) after
	// this agent restarted, too. It also keeps how long each piece of
	// the peer's news has held this agent's back (Wait), so that
	// hold_max bounds that wait across this agent's restarts.
	Memory Memory
}

// Memory keeps what Link.Delivered learned across the agent's restarts
// (saved every second and at Close). Losing the last entries (a crash)
// costs only what they tell: the peer's copies of that news wait, as
// they did without a memory.
type Memory interface {
	Load() (map[netip.Addr]News, error)
	// Save stores the entries changed since the last Save.
	Save(map[netip.Addr]News) error
	// LoadWaits returns what SaveWaits stored: how long each piece of
	// the peer's news had held this agent's back when last seen doing
	// so.
	LoadWaits() (map[Wait]time.Duration, error)
	// SaveWaits forgets the waits in drop, then stores those in add
	// (seen or seen longer since the last SaveWaits). Losing them (a
	// crash) costs a wait counted again from what was stored, or from
	// this run's first sight, as without a memory.
	SaveWaits(add map[Wait]time.Duration, drop []Wait) error
}

// saveEvery is how often the delivered news changed since the last save
// is handed to Config.Memory.
const saveEvery = time.Second

// Defaults.
const (
	DefaultMargin        = 50 * time.Millisecond
	DefaultAnswerTimeout = 250 * time.Millisecond
	// recheck is how often a held-back batch asks again.
	recheck = 100 * time.Millisecond
	// probeEvery is how often an agent delivering alone asks a silent
	// peer whether it is back.
	probeEvery = time.Second
	// DefaultIdleProbe is how often Run asks it, so that an agent with
	// nothing to deliver learns of the peer's return too (its state,
	// leasekeeper_pair_peer_answering, and the first delivery after it).
	DefaultIdleProbe = 5 * time.Second
)

// HeldFunc gives, for each address, the key of the oldest event this
// agent still holds for it (queued, in flight, or waiting to be queued)
// that is newer than after[i] — news the peer has already overtaken in
// the region holds nothing back — 0 for none, and the key of the newest
// news of it this agent knows it delivered before this run (the link
// itself remembers this run's, and with Config.Memory earlier runs' too:
// see Delivered), 0 for none known.
type HeldFunc func(ips []netip.Addr, after []int64) ([]Holding, error)

// Holding is what HeldFunc gives for one address.
type Holding struct {
	Oldest    int64
	Delivered int64
}

// Link is both ends of the channel: it answers the peer's queries about
// this agent's held events, and asks the peer before this agent
// delivers (Clear).
type Link struct {
	cfg   Config
	peer  *net.UDPAddr
	conn  *net.UDPConn
	held  HeldFunc
	log   zerolog.Logger
	limit *lograte.Limiter
	now   func() time.Time
	met   metrics

	mu         sync.Mutex
	waiters    map[[nonceLen]byte]chan *Message
	probeNonce [nonceLen]byte // the last probe's (while alone)
	readDone   chan struct{}  // closed when read returns

	alone       atomic.Bool  // the peer was silent for HoldMax: deliveries do not wait for it
	heard       atomic.Int64 // Unix ns of the peer's last authenticated datagram (0: none yet)
	waiting     atomic.Int64 // Unix ns since when Clear holds every event back (0: not now)
	silentSince time.Time    // Clear's: first unanswered query since the last answer
	lastProbe   time.Time    // Clear's: last query sent while alone
	// Clear's: when each piece of the peer's news that held this
	// agent's back was first seen (with Config.Memory, taken as long ago
	// as it had held it back in earlier runs: restoreWaits), and those
	// waited for hold_max.
	seen   map[Wait]time.Time
	gaveUp map[Wait]bool
	// stuck: the first event Clear held back for its own sake (too
	// recent, or beyond a query's addresses), by Seq, and since when;
	// once held for hold_max it goes whatever the rule says.
	stuck      uint64
	stuckSince time.Time
	stuckGone  bool // logged and counted as forced

	dmu       sync.Mutex
	delivered map[netip.Addr]News // the newest delivered news per address (Delivered; with Config.Memory, before this run too)
	unsaved   map[netip.Addr]News // of delivered, what Config.Memory has not stored yet
	// Of seen, what Config.Memory has not stored yet, and what it must
	// forget.
	unsavedWaits map[Wait]time.Duration
	droppedWaits []Wait
	// peerDelivered: the peer's newest delivered key per address, from
	// the answers since this agent's last delivery (a batch can be
	// cleared by more than one question: the deliverer asks again about
	// a batch the gate held a while, with what was queued meanwhile),
	// for PeerDelivered.
	peerDelivered map[netip.Addr]int64
	// copies: the events Clear let go as copies of the peer's delivered
	// news (Verdict.Copy) since the last delivery, for Copy.
	copies map[copyID]bool
}

// copyID names an event Clear took for a copy.
type copyID struct {
	ip  netip.Addr
	key int64
	tag uint32
}

func idOf(e event.Event) copyID { return copyID{e.IP.Unmap(), Key(e), Tag(e)} }

// Copy reports whether Clear let e go as this agent's copy of the peer's
// delivered news since the last delivery: the deliverer drops it unsent
// (agent: judgePair). The judgment is Clear's alone, made with the
// batch's order in view (Verdict.Copy).
func (l *Link) Copy(e event.Event) bool {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	return l.copies != nil && l.copies[idOf(e)] // the tag is hashed only when there are copies
}

// Delivered records that the region accepted batch: the answers tell
// the peer the newest news of each address delivered (of the pair's
// addresses: a DHCPv6 one is never asked about, outsidePair).
func (l *Link) Delivered(batch []event.Queued) {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	l.peerDelivered, l.copies = nil, nil // the next batch is asked about afresh
	for _, q := range batch {
		ip := q.Event.IP.Unmap()
		if k := Key(q.Event); !outsidePair(ip) && k > l.delivered[ip].Key {
			if len(l.delivered) >= maxDelivered {
				clear(l.delivered) // what HeldFunc knows takes over
			}
			l.delivered[ip] = News{Key: k, Tag: Tag(q.Event)}
			if l.cfg.Memory != nil {
				l.unsaved[ip] = l.delivered[ip]
			}
		}
	}
}

// maxDelivered bounds Link.delivered: beyond it the map starts again.
const maxDelivered = 1 << 16

// PeerDelivered reports, from the peer's answers since the last delivery,
// the key of the newest news of e's address the peer has delivered (0
// for none) — newer than e, the region may hold it already, so that e
// alone would take it back: the deliverer's StaleFunc then decides — and whether the peer answered
// about e's address at all (known false: the peer was silent, or e was
// not in the query: judge as if alone).
func (l *Link) PeerDelivered(e event.Event) (delivered int64, known bool) {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.peerDelivered == nil || l.alone.Load() {
		return 0, false
	}
	k, ok := l.peerDelivered[e.IP.Unmap()]
	return k, ok
}

// New binds the channel's socket.
func New(cfg Config, held HeldFunc, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time) (*Link, error) {
	if len(cfg.Key) < MinKeyLen {
		return nil, fmt.Errorf("pair: key of %d bytes, at least %d", len(cfg.Key), MinKeyLen)
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.AnswerTimeout == 0 {
		cfg.AnswerTimeout = DefaultAnswerTimeout
	}
	if cfg.IdleProbe == 0 {
		cfg.IdleProbe = DefaultIdleProbe
	}
	if cfg.Primary == nil {
		cfg.Primary = func() bool { return false }
	}
	if cfg.Ready == nil {
		cfg.Ready = func() bool { return true }
	}
	if now == nil {
		now = time.Now
	}
	peer, err := net.ResolveUDPAddr("udp", cfg.Peer)
	if err != nil {
		return nil, fmt.Errorf("pair.peer: %w", err)
	}
	laddr, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("pair.listen: %w", err)
	}
	conn, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("pair.listen: %w", err)
	}
	l := &Link{cfg: cfg, peer: peer, conn: conn, held: held, log: log, limit: lograte.New(time.Minute, now), now: now,
		met: newMetrics(), waiters: map[[nonceLen]byte]chan *Message{},
		seen: map[Wait]time.Time{}, gaveUp: map[Wait]bool{}, delivered: map[netip.Addr]News{},
		readDone: make(chan struct{})}
	if err := l.met.register(reg); err != nil {
		conn.Close()
		return nil, err
	}
	if cfg.Memory != nil {
		l.unsaved = map[netip.Addr]News{}
		if m, err := cfg.Memory.Load(); err != nil {
			// Only the peer's copies of that news wait, as before.
			log.Warn().Err(err).Msg("pair channel: what this agent delivered before its restart is not known; the peer's copies of that news wait for hold_max")
		} else {
			for ip, n := range m {
				if len(l.delivered) >= maxDelivered {
					break
				}
				l.delivered[ip.Unmap()] = n
			}
		}
		l.unsavedWaits = map[Wait]time.Duration{}
		if w, err := cfg.Memory.LoadWaits(); err != nil {
			log.Warn().Err(err).Msg("pair channel: how long the peer's news has held this agent's back before its restart is not known; those waits count from now, up to hold_max")
		} else {
			l.restoreWaits(w)
		}
	}
	go l.read()
	return l, nil
}

// restoreWaits takes the waits an earlier run stored as seen: each as
// first seen as long ago as it had held this agent's back then, so that
// the time this agent was down does not count (the peer's own start-up
// judgment may hold its news for a while: hold_max is the wait's, not
// the outage's), nor a clock stepped meanwhile. The maxWaits longest
// are kept; the rest are dropped from the memory at the next save.
func (l *Link) restoreWaits(stored map[Wait]time.Duration) {
	now := l.now()
	ws := slices.Collect(maps.Keys(stored))
	slices.SortFunc(ws, func(a, b Wait) int { return cmp.Compare(stored[b], stored[a]) })
	for i, w := range ws {
		if i >= maxWaits {
			l.droppedWaits = append(l.droppedWaits, w)
			continue
		}
		l.seen[w] = now.Add(-max(stored[w], 0))
	}
}

// save hands what Delivered learned since the last save to Config.Memory,
// and the waits first seen or forgotten since.
func (l *Link) save() {
	l.saveWaits()
	l.dmu.Lock()
	if len(l.unsaved) == 0 {
		l.dmu.Unlock()
		return
	}
	m := l.unsaved
	l.unsaved = map[netip.Addr]News{}
	l.dmu.Unlock()
	if err := l.cfg.Memory.Save(m); err != nil {
		if ok, suppressed := l.limit.Allow("memory"); ok {
			l.log.Warn().Err(err).Int("suppressed", suppressed).Msg("pair channel: what this agent delivered is not stored; after a restart the peer's copies of that news wait for hold_max")
		}
		l.dmu.Lock()
		for ip, n := range m {
			if _, newer := l.unsaved[ip]; !newer {
				l.unsaved[ip] = n
			}
		}
		l.dmu.Unlock()
	}
}

// saveWaits is save's part for the waits.
func (l *Link) saveWaits() {
	l.dmu.Lock()
	if len(l.unsavedWaits) == 0 && len(l.droppedWaits) == 0 {
		l.dmu.Unlock()
		return
	}
	add, drop := l.unsavedWaits, l.droppedWaits
	l.unsavedWaits, l.droppedWaits = map[Wait]time.Duration{}, nil
	l.dmu.Unlock()
	if err := l.cfg.Memory.SaveWaits(add, drop); err != nil {
		if ok, suppressed := l.limit.Allow("memory-waits"); ok {
			l.log.Warn().Err(err).Int("suppressed", suppressed).Msg("pair channel: how long the peer's news has held this agent's back is not stored; after a restart those waits count from what was")
		}
		l.dmu.Lock()
		forgotten := make(map[Wait]bool, len(l.droppedWaits))
		for _, w := range l.droppedWaits {
			forgotten[w] = true
		}
		for w, d := range add {
			if _, newer := l.unsavedWaits[w]; !newer && !forgotten[w] {
				l.unsavedWaits[w] = d
			}
		}
		for _, w := range drop { // (not of unsavedWaits: one seen again since is stored after the drops)
			if len(l.droppedWaits) < maxWaits {
				l.droppedWaits = append(l.droppedWaits, w)
			}
		}
		l.dmu.Unlock()
	}
}

// Health is the channel as `leasekeeper status` shows it.
type Health struct {
	Peer string // pair.peer
	// Alone: the peer agent was silent for hold_max, and this agent
	// delivers without waiting for it (it probes every second as it
	// delivers, and every Config.IdleProbe whatever it does).
	Alone bool
	// Heard is when the peer agent's last authenticated datagram came
	// (zero: none since this agent started).
	Heard time.Time
	// Waiting is since when every event due for the region has been held
	// back for the peer's older news (zero: none is).
	Waiting time.Time
}

// Health reports the channel's state.
func (l *Link) Health() Health {
	h := Health{Peer: l.cfg.Peer, Alone: l.alone.Load()}
	if ns := l.heard.Load(); ns != 0 {
		h.Heard = time.Unix(0, ns)
	}
	if ns := l.waiting.Load(); ns != 0 {
		h.Waiting = time.Unix(0, ns)
	}
	return h
}

// Addr is the address the link answers on.
func (l *Link) Addr() net.Addr { return l.conn.LocalAddr() }

// Close closes the socket, waits for the reader to stop, and hands what
// Delivered learned since Run's last save to Config.Memory: a stopping
// agent's last flush delivers after its tasks' context ended. Call it
// before the memory's store closes.
func (l *Link) Close() error {
	err := l.conn.Close()
	<-l.readDone
	if l.cfg.Memory != nil {
		l.save()
	}
	return err
}

// Run logs the channel up and waits for ctx, handing what Delivered
// learned to Config.Memory every second (and Close, the rest), and
// asking a silent peer whether it is back every Config.IdleProbe while
// this agent delivers alone. The socket is read by the link's own
// reader from New until Close: the answers a stopping agent's last flush
// waits for come after its tasks' context has ended.
func (l *Link) Run(ctx context.Context, ready func()) error {
	l.log.Info().Stringer("listen", l.conn.LocalAddr()).Str("peer", l.cfg.Peer).Dur("hold_max", l.cfg.HoldMax).
		Msg("failover pair channel up: deliveries are ordered with the peer agent's")
	ready()
	var save <-chan time.Time
	if l.cfg.Memory != nil {
		t := time.NewTicker(saveEvery)
		defer t.Stop()
		save = t.C
	}
	probe := time.NewTicker(l.cfg.IdleProbe)
	defer probe.Stop()
	for {
		select {
		case <-save:
			l.save()
		case <-probe.C:
			if l.alone.Load() {
				l.probe() // the answer ends the solitude (read)
			}
		case <-ctx.Done():
			if l.cfg.Memory != nil {
				l.save()
			}
			return nil
		}
	}
}

// read reads the socket until Close: queries are answered (by answerer,
// one at a time, so that a slow answer never delays the answers this
// agent waits for), answers handed to the Clear waiting for them.
func (l *Link) read() {
	defer close(l.readDone)
	queries := make(chan query, 1)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for q := range queries {
			l.answer(q.m, q.from)
		}
	}()
	defer func() { close(queries); <-answered }() // Close returns after the last answer
	buf := make([]byte, 2048)
	for {
		n, from, err := l.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.log.Warn().Err(err).Msg("pair channel: read")
			time.Sleep(10 * time.Millisecond)
			continue
		}
		m, err := Decode(buf[:n], l.cfg.Key)
		switch {
		case errors.Is(err, ErrAuth):
			l.refused("refused", from, fmt.Errorf("%w (a different pair.key_file on the peer?)", err))
			continue
		case errors.Is(err, ErrVersion):
			l.refused("version", from, fmt.Errorf("%w (the peer's agent runs another version of leasekeeper: both racks of a pair run the same; until then each delivers alone after hold_max)", err))
			continue
		case err != nil:
			l.refused("refused", from, err)
			continue
		}
		if m.Primary == l.cfg.Primary() {
			// Both sides claim the same role: a misconfigured pair, or
			// one of this agent's own datagrams sent back to it.
			l.refused("role", from, errors.New("from a sender of this agent's own role (both dhcpd primary, or both secondary? With several partner racks, each channel's role is this side's on the failover peer, of those the channel orders, whose name sorts first: do pair.partners on both racks name the same peers for this channel?)"))
			continue
		}
		l.heard.Store(l.now().UnixNano())
		if m.Answer {
			l.met.datagrams.WithLabelValues("answer").Inc()
			l.mu.Lock()
			w := l.waiters[m.Nonce]
			delete(l.waiters, m.Nonce)
			probe := l.probeNonce != [nonceLen]byte{} && m.Nonce == l.probeNonce
			if probe {
				l.probeNonce = [nonceLen]byte{} // one answer ends one probe: a replayed copy ends nothing
			}
			l.mu.Unlock()
			if w != nil {
				w <- m
			} else if probe && l.alone.Load() {
				l.back() // the answer to the last probe: the peer is back
			}
			continue
		}
		l.met.datagrams.WithLabelValues("query").Inc()
		select {
		case queries <- query{m, from}:
		default:
			// Still answering the last: the peer asks again after its
			// answer timeout.
			l.met.datagrams.WithLabelValues("busy").Inc()
		}
	}
}

type query struct {
	m    *Message
	from netip.AddrPort
}

// refused counts and logs (at most once a minute per kind) a datagram
// refused.
func (l *Link) refused(kind string, from netip.AddrPort, err error) {
	l.met.datagrams.WithLabelValues("refused").Inc()
	if ok, suppressed := l.limit.Allow(kind); ok {
		l.log.Warn().Err(err).Stringer("from", from).Int("suppressed", suppressed).Msg("pair channel: datagram refused")
	}
}

// answer answers query m, which came from from. The answer goes to
// pair.peer, whatever the source: a query replayed from a spoofed source
// must not make this agent send anything elsewhere (the peer's queries
// come from its listen socket, pair.peer).
func (l *Link) answer(m *Message, from netip.AddrPort) {
	if !l.cfg.Ready() {
		l.met.datagrams.WithLabelValues("unready").Inc()
		return // starting: the peer waits as for a dead agent
	}
	ips := make([]netip.Addr, len(m.Items))
	after := make([]int64, len(m.Items))
	for i, it := range m.Items {
		ips[i], after[i] = it.IP, it.Delivered
	}
	held, err := l.held(ips, after)
	if err != nil {
		// Unanswered: the peer waits, then goes on alone.
		l.log.Error().Err(err).Msg("pair channel: cannot read what this agent holds; the peer's query goes unanswered")
		return
	}
	a := &Message{Answer: true, Primary: l.cfg.Primary(), Nonce: m.Nonce, At: l.now().UnixNano(), Items: make([]Item, len(held))}
	l.dmu.Lock()
	for i, h := range held {
		a.Items[i] = Item{Key: h.Oldest, Delivered: h.Delivered}
		if d := l.delivered[ips[i].Unmap()]; d.Key >= h.Delivered {
			// What HeldFunc knows of before this run has no tag.
			a.Items[i].Delivered, a.Items[i].DeliveredTag = d.Key, d.Tag
		}
	}
	l.dmu.Unlock()
	b, err := Encode(nil, a, l.cfg.Key)
	if err != nil {
		l.log.Error().Err(err).Msg("pair channel: answer")
		return
	}
	if _, err := l.conn.WriteToUDP(b, l.peer); err != nil {
		l.log.Warn().Err(err).Stringer("to", l.peer).Stringer("query_from", from).Msg("pair channel: answer not sent")
	}
}

// ask sends a query for items and waits for its answer, up to the answer
// timeout; nil when none came.
func (l *Link) ask(ctx context.Context, items []Item) (*Message, error) {
	q := &Message{Primary: l.cfg.Primary(), At: l.now().UnixNano(), Items: items}
	rand.Read(q.Nonce[:])
	b, err := Encode(nil, q, l.cfg.Key)
	if err != nil {
		return nil, err
	}
	w := make(chan *Message, 1)
	l.mu.Lock()
	l.waiters[q.Nonce] = w
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.waiters, q.Nonce)
		l.mu.Unlock()
	}()
	if _, err := l.conn.WriteToUDP(b, l.peer); err != nil {
		// The peer's host unreachable is silence too.
		l.log.Debug().Err(err).Msg("pair channel: query not sent")
	}
	t := time.NewTimer(l.cfg.AnswerTimeout)
	defer t.Stop()
	select {
	case a := <-w:
		l.noteClock(q.At, a.At, l.now().UnixNano())
		if len(a.Items) != len(items) {
			// Counted as no answer (after the timeout's wait: never a
			// busy loop).
			if ok, _ := l.limit.Allow("items"); ok {
				l.log.Warn().Int("items", len(a.Items)).Int("asked", len(items)).Msg("pair channel: an answer of the wrong length; taken for no answer")
			}
			sleep(ctx, l.cfg.AnswerTimeout)
			return nil, nil
		}
		return a, nil
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, nil
	}
}

// probe asks a silent peer, without waiting: Run's receipt of the
// answer ends the agent's delivering alone.
func (l *Link) probe() {
	q := &Message{Primary: l.cfg.Primary(), At: l.now().UnixNano()}
	rand.Read(q.Nonce[:])
	l.mu.Lock()
	l.probeNonce = q.Nonce
	l.mu.Unlock()
	if b, err := Encode(nil, q, l.cfg.Key); err == nil {
		l.conn.WriteToUDP(b, l.peer)
	}
}

// ClockSkewWarn is how far apart the two agents' clocks may be, beyond
// the answer's round trip, before the agent warns: the channel orders
// the racks' news of one address by their clocks (hook nanoseconds, or
// dhcpd's seconds), and a skew larger than two events' distance puts
// them in the wrong order.
const ClockSkewWarn = time.Second

// noteClock estimates the peer's clock offset from a query sent at sent
// and its answer, stamped at by the peer and received at recv (Unix ns,
// this agent's clock): the peer stamped it within the round trip, so its
// clock is at - (sent+recv)/2 ahead, give or take half the round trip.
// Shown as leasekeeper_pair_clock_offset_seconds; beyond ClockSkewWarn
// (past that margin) it is logged, at most once a minute.
func (l *Link) noteClock(sent, at, recv int64) {
	if at == 0 || recv < sent {
		return
	}
	offset := time.Duration(at - (sent+recv)/2)
	l.met.offset.Set(offset.Seconds())
	margin := time.Duration(recv-sent) / 2
	if offset.Abs()-margin <= ClockSkewWarn {
		return
	}
	if ok, suppressed := l.limit.Allow("clock"); ok {
		how := "ahead of"
		if offset < 0 {
			how = "behind"
		}
		l.log.Warn().Dur("offset", offset).Dur("round_trip", 2*margin).Int("suppressed", suppressed).
			Msgf("pair channel: the peer agent's clock is %s %s this one's: the channel orders the two racks' news of one address by their clocks, and news closer together than that may reach the region in the wrong order; check NTP on both racks", offset.Abs().Round(time.Millisecond), how)
	}
}

func (l *Link) back() {
	if l.alone.CompareAndSwap(true, false) {
		l.met.answering.Set(1)
		l.log.Info().Str("peer", l.cfg.Peer).Msg("the peer agent answers again: deliveries wait for its older news once more")
	}
}

// Clear returns the events of batch that may go to the region now, in
// batch order: those the pair's rule lets go (Clear, the function) and,
// past those it holds back, every later one that shares neither address
// nor MAC with a held one. It waits while none may go. An event is held
// back at most until the peer's news that holds it back has been seen
// held for HoldMax — the wait is the peer's news's, not each event's:
// all events held back by one piece of the peer's news go together once
// it has been held that long, so a peer stuck on a few addresses delays
// this agent's news by HoldMax, not HoldMax per event — or, held for
// its own sake (dated ahead of the horizon, or beyond a query's
// addresses), until it has been the first held for HoldMax. It returns
// at least one event of a non-empty batch unless ctx ends (nil). While
// none may go, before each new round it takes the longer batch more
// returns, if any (more may be nil): news queued behind the held batch
// goes when the rule lets it. Called by one deliverer at a time.
func (l *Link) Clear(ctx context.Context, batch []event.Queued, more func() []event.Queued) []event.Queued {
	return l.clear(ctx, batch, nil, more)
}

// ClearPieces is Clear for a batch the region may have applied already,
// where only whole pieces may go (piece[i] labels event i's piece: a
// part of one could take the region back from the rest of it): it
// returns the events of the pieces that may go in full, in batch order,
// waiting while none may, each wait bounded as Clear's. A piece with an
// address beyond the query's MaxItems waits to be asked about: the
// batch's doubt is a bound on Seq, and may cover events held back before
// and never sent. nil when ctx ended.
func (l *Link) ClearPieces(ctx context.Context, batch []event.Queued, piece []int) []event.Queued {
	return l.clear(ctx, batch, piece, nil)
}

func (l *Link) clear(ctx context.Context, batch []event.Queued, piece []int, more func() []event.Queued) []event.Queued {
	if len(batch) == 0 {
		return nil
	}
	defer l.waiting.Store(0)
	var blockedSince time.Time
	for ctx.Err() == nil {
		now := l.now()
		r, ok := l.round(ctx, batch, outsidePair)
		if !ok {
			return nil
		}
		if r.All {
			return batch
		}
		out := r.V.Subset(batch)
		if piece != nil {
			out = r.V.Pieces(batch, piece)
		}
		if len(out) > 0 {
			if !blockedSince.IsZero() {
				l.met.held.Add(l.now().Sub(blockedSince).Seconds())
				l.waiting.Store(0)
			}
			return out
		}
		if r.Wait > 0 {
			// (0: asked again at once, the answer timeout was the wait)
			if blockedSince.IsZero() {
				blockedSince = now
				l.waiting.Store(now.UnixNano())
			}
			if !sleep(ctx, r.Wait) {
				return nil
			}
		}
		if more != nil {
			if b := more(); b != nil {
				batch = b
			}
		}
	}
	return nil
}

// Round is one judgment of a batch by a link (Judge).
type Round struct {
	// All: every event of the batch may go as far as this link is
	// concerned (none of the batch's addresses is its to ask about, or
	// the agent delivers alone).
	All bool
	// V is the verdict, unless All. With no answer from the peer, every
	// event of the link's addresses is held back (and, as always, the
	// later events of their MACs).
	V Verdict
	// Wait is how long to wait before judging again if nothing goes:
	// 0 after a query left unanswered (its timeout was the wait).
	Wait time.Duration
}

// Judge is one round of Clear's judgment for a gate over several links
// (agent: pairLinks, one link a partner rack), which combines the links'
// verdicts, cuts the pieces and waits itself: each link judges the whole
// batch, so that a copy (Verdict.Copy) one link lets go alone is not held
// with its piece by another, and every link's answers are as fresh as
// the round. It asks the peer about the addresses of batch outside
// reports false for (outside must report true for DHCPv6 addresses and
// invalid ones too: outsidePair); the others go as they come, held back
// only behind a held event of their MAC. ok is false when ctx ended.
// Called by one gate at a time; SetWaiting and AddHeld keep the link's
// status and metrics.
func (l *Link) Judge(ctx context.Context, batch []event.Queued, outside func(netip.Addr) bool) (r Round, ok bool) {
	return l.round(ctx, batch, func(ip netip.Addr) bool { return outsidePair(ip) || outside(ip) })
}

// SetWaiting records since when every event due has been held back
// (status's "waiting"); zero: none is.
func (l *Link) SetWaiting(since time.Time) {
	if since.IsZero() {
		l.waiting.Store(0)
		return
	}
	l.waiting.Store(since.UnixNano())
}

// AddHeld counts a wait of the deliveries for the peer's news
// (leasekeeper_pair_held_seconds_total).
func (l *Link) AddHeld(d time.Duration) { l.met.held.Add(d.Seconds()) }

// round asks the peer once about batch's addresses that are not outside
// and judges the batch.
func (l *Link) round(ctx context.Context, batch []event.Queued, outside func(netip.Addr) bool) (Round, bool) {
	items := queryOf(batch, outside)
	if len(items) == 0 {
		return Round{All: true}, true
	}
	now := l.now()
	if l.alone.Load() {
		if now.Sub(l.lastProbe) >= probeEvery {
			l.lastProbe = now
			l.probe()
		}
		return Round{All: true}, true
	}
	l.dmu.Lock()
	for i := range items {
		items[i].Delivered = l.delivered[items[i].IP].Key
	}
	l.dmu.Unlock()
	a, err := l.ask(ctx, items)
	if err != nil {
		l.log.Warn().Err(err).Msg("pair channel: answer refused")
	}
	if a == nil {
		if ctx.Err() != nil {
			return Round{}, false
		}
		if l.silentSince.IsZero() {
			l.silentSince = now
			l.met.answering.Set(0)
		}
		if s := l.now().Sub(l.silentSince); s >= l.cfg.HoldMax {
			l.mu.Lock()
			l.probeNonce = [nonceLen]byte{} // no answer from before this silence ends it
			l.mu.Unlock()
			l.alone.Store(true)
			l.silentSince = time.Time{}
			l.lastProbe = l.now()
			l.met.gaveUp.WithLabelValues("silent").Inc()
			l.log.Warn().Str("peer", l.cfg.Peer).Dur("silent", s).
				Msg("the peer agent does not answer: delivering alone; news it holds may reach the region after newer news of the same address (sent with the newest state the file knows after it)")
			return Round{All: true}, true
		}
		// Every asked address's news waits; what is not the peer's to
		// order (DHCPv6, or another partner's: Judge) need not, unless
		// it shares a MAC with one that does.
		all := make([]int64, len(items))
		for i := range all {
			all[i] = 1 // older than any event
		}
		return Round{V: clearBatch(batch, items, all, nil, true, math.MaxInt64, nil, outside)}, true
	}
	if !l.silentSince.IsZero() {
		l.silentSince = time.Time{}
		l.met.answering.Set(1)
	}
	horizon := now.Add(-l.cfg.Margin).UnixNano()
	l.dmu.Lock()
	if l.peerDelivered == nil {
		l.peerDelivered = make(map[netip.Addr]int64, len(a.Items))
	}
	delivered := make([]News, len(a.Items))
	for i, it := range a.Items {
		delivered[i] = News{Key: it.Delivered, Tag: it.DeliveredTag}
		l.peerDelivered[items[i].IP] = it.Delivered
	}
	l.dmu.Unlock()
	held := make([]int64, len(a.Items))
	for i, it := range a.Items {
		held[i] = it.Key
		if it.Key != 0 && l.overdue(items[i].IP, it.Key, now) {
			held[i] = 0 // waited for long enough
		}
	}
	v := clearBatch(batch, items, held, delivered, l.cfg.Primary(), horizon, l.forced, outside)
	if v.Why == "" || v.Why == WhyPeerOlder {
		l.stuckSince, l.stuckGone = time.Time{}, false // a wait of its own starts again
	} else if l.stuckFor(batch[v.First], v.Why, now) {
		v = clearBatch(batch, items, held, delivered, l.cfg.Primary(), horizon, l.forced, outside)
	}
	if v.Copy != nil {
		l.dmu.Lock()
		if l.copies == nil {
			l.copies = map[copyID]bool{}
		}
		for i, c := range v.Copy {
			if c {
				l.copies[idOf(batch[i].Event)] = true
			}
		}
		l.dmu.Unlock()
	}
	wait := recheck
	if v.Why == WhyRecent {
		wait = l.cfg.Margin
	}
	return Round{V: v, Wait: wait}, true
}

// stuckFor reports whether q, the first event held back for its own
// sake (why), has been for HoldMax: it then goes whatever the rule says
// (forced), logged and counted once.
func (l *Link) stuckFor(q event.Queued, why string, now time.Time) bool {
	if q.Seq != l.stuck || l.stuckSince.IsZero() {
		l.stuck, l.stuckSince, l.stuckGone = q.Seq, now, false
		return false
	}
	w := now.Sub(l.stuckSince)
	if w < l.cfg.HoldMax {
		return false
	}
	if l.stuckGone {
		return true
	}
	l.stuckGone = true
	l.met.gaveUp.WithLabelValues(why).Inc()
	l.log.Warn().Stringer("ip", q.Event.IP).Str("action", q.Event.Action).Str("why", why).Dur("waited", w).
		Msg("an event waited hold_max for the pair's order: the channel holds it back no longer (another partner's channel, with pair.partners, may still hold it behind its MAC's news)")
	return true
}

// forced reports whether q goes whatever the pair's rule says: it is
// the event stuckFor found held for HoldMax.
func (l *Link) forced(q event.Queued) bool {
	return l.stuckGone && q.Seq == l.stuck
}

// Wait is one piece of the peer's news, as its answers name it, that
// held this agent's news of its address back.
type Wait struct {
	IP  netip.Addr
	Key int64
}

// maxWaits bounds Link.seen: beyond it the oldest are forgotten (a
// forgotten one still held by the peer is waited for once more).
const maxWaits = 4096

// overdue reports whether the peer's news key for ip has been seen held
// for HoldMax: this agent's news of ip no longer waits for it. The first
// time it is, the wait is logged and counted.
func (l *Link) overdue(ip netip.Addr, key int64, now time.Time) bool {
	b := Wait{ip, key}
	first, ok := l.seen[b]
	if !ok {
		if len(l.seen) >= maxWaits {
			var oldest Wait
			for k, t := range l.seen {
				if oldest.IP == (netip.Addr{}) || t.Before(l.seen[oldest]) {
					oldest = k
				}
			}
			delete(l.seen, oldest)
			l.forget(oldest)
		}
		l.seen[b] = now
		l.remember(b, 0)
		return false
	}
	w := now.Sub(first)
	l.remember(b, w)
	if w < l.cfg.HoldMax {
		return false
	}
	if !l.gaveUp[b] {
		if len(l.gaveUp) >= maxWaits {
			clear(l.gaveUp)
		}
		l.gaveUp[b] = true
		l.met.gaveUp.WithLabelValues(WhyPeerOlder).Inc()
		l.log.Warn().Stringer("ip", ip).Int64("peer_key", key).Dur("waited", w).
			Msg("the peer agent has held older news of the address for hold_max: this agent's news of it goes on without waiting")
	}
	return true
}

// remember has Config.Memory store that w has held this agent's news
// back for d by now.
func (l *Link) remember(w Wait, d time.Duration) {
	if l.cfg.Memory == nil {
		return
	}
	l.dmu.Lock()
	defer l.dmu.Unlock()
	l.unsavedWaits[w] = d
}

// forget has Config.Memory forget w.
func (l *Link) forget(w Wait) {
	if l.cfg.Memory == nil {
		return
	}
	l.dmu.Lock()
	defer l.dmu.Unlock()
	delete(l.unsavedWaits, w)
	if len(l.droppedWaits) < maxWaits { // (saves failing: one stored beyond maxWaits is dropped at the next start)
		l.droppedWaits = append(l.droppedWaits, w)
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
