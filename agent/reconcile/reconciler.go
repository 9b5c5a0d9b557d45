package reconcile

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/internal/lograte"
	"github.com/leasekeeper/leasekeeper/internal/safefile"
	"github.com/leasekeeper/leasekeeper/parser"
)

// Config is what the reconciler takes from the agent's configuration.
type Config struct {
	Leases    string        // dhcpd.leases (dhcpd.leases)
	DhcpdConf string        // dhcpd.conf, scanned for hooks (dhcpd.config); "" = unknown (complement unless Mode says)
	PIDFile   string        // dhcpd's pid file (dhcpd.pid_file); "" = none
	Grace     time.Duration // reconcile.expiry_grace
	Poll      time.Duration // reconcile.poll_interval
	Mode      Mode          // reconcile.mode; "" = ModeAuto
	// Detect is what mode detection reads besides dhcpd.conf; the zero
	// value means DefaultDetectEnv.
	Detect *DetectEnv
	// Orphans receives the addresses whose dropped lease left every
	// range (State.TakeOrphans), in the transaction that queues their
	// expiry; nil = only the expiry is sent.
	Orphans OrphanSink
	// PairChannel: the failover pair's channel is configured ([pair]),
	// so a hook's end run while dhcpd recovers (PairReplay), and a hook
	// event older than the peer's news the file recorded first
	// (behindPeerRecord), are queued for the deliverer to judge, not
	// dropped.
	PairChannel bool
	// Family, when set (event.IPv4 or event.IPv6), is the one address
	// family this reconciler follows: the agent runs one for
	// dhcpd.leases and another for dhcpd.leases6, and hands each the
	// hook events of its family (FamilyOf). The state an agent that
	// followed one file for both left holds the other family's records:
	// they are dropped at start (dropFamily), else this reconciler would
	// end leases its file never shows (rule 3's unwritten ends). "": any.
	Family string
	// Bucket is the outbox bucket holding the state ("" = "reconcile";
	// the agent's second reconciler, dhcpd.leases6's, uses "reconcile6").
	Bucket string
	// Keys names, in what the reconciler logs, the configuration keys of
	// its leases file and dhcpd.conf (the zero value: dhcpd.leases's).
	Keys Keys
}

// Keys are configuration keys an operator is told to check or set.
type Keys struct {
	Leases, Conf string // "" = "dhcpd.leases", "dhcpd.config"
	NoModeKey    bool   // no key forces this reconciler's mode (else reconcile.mode does)
}

func (k Keys) leases() string { return cmp.Or(k.Leases, "dhcpd.leases") }
func (k Keys) conf() string   { return cmp.Or(k.Conf, "dhcpd.config") }

// FamilyOf is the family of ip as a Config.Family: an IPv4 address
// (mapped or not) is event.IPv4, any other event.IPv6.
func FamilyOf(ip netip.Addr) string {
	if ip.Unmap().Is4() {
		return event.IPv4
	}
	return event.IPv6
}

// bucket is the outbox bucket of the reconciler's state.
func (r *Reconciler) bucket() string { return cmp.Or(r.cfg.Bucket, bucketName) }

// OrphanSink keeps orphaned addresses for freeing (agent/orphans).
type OrphanSink interface {
	// Put stores them in tx, the outbox transaction of the commit.
	Put(tx *bbolt.Tx, o []Orphan, now time.Time) error
	// Wake says a commit with Put in it is on disk.
	Wake()
}

// Tunables.
const (
	// busyRound: after a read that found a block, the next read waits
	// until busyRound after it, so dhcpd under load costs the agent a few
	// rounds a second whatever its rate, and a lone lease (none read in
	// the last busyRound) is read at once: dhcpd writes a commit with
	// one write(2), and a rewrite's rename shows the new file whole (its
	// server-duid line, written after, comes in the next round). Reading
	// 2 ms after the event instead, to gather a burst, made a lone
	// hookless lease reach the region in 4.7 ms, not 2.4 (p50,
	// BenchmarkHooklessLatency/rate=1). Each round costs
	// the agent about the same whatever it read (an outbox commit and
	// its fsyncs, a request, the commit that acknowledges it): with a
	// round per lease, BenchmarkHooklessLease500 cost 765 µs an event.
	// 250 ms, not 100, cut the CPU of a hookless lease by about a sixth;
	// a file event under load reaches the region within about a quarter
	// of a second (MAAS's own rack agent holds lease events for up to
	// 5 s: maasagent/internal/dhcp, flushInterval). Until then the
	// directory's inotify watch is removed: dhcpd writes each lease with
	// a write of its own, and each would wake the agent (the watcher's
	// goroutine, then Run's) only to be ignored. The watch is added
	// again before the next read, so whatever is written after that read
	// is signalled as before.
	busyRound = 250 * time.Millisecond
	// flushDelay bounds how long a state change with no event to queue
	// (a block dhcpd appended, a new position) waits to be persisted. A
	// crash before loses nothing: the file is read again from the last
	// persisted position and yields the same changes.
	flushDelay = 2 * time.Second
	// defaultClassifyWait is how long after a rewrite a server-duid line
	// or a new pid may still show that dhcpd restarted.
	defaultClassifyWait = 3 * time.Second
	// stopTimeout bounds the last commit when the task stops.
	stopTimeout = 5 * time.Second
	// retryDelay is the pause after a failed commit.
	retryDelay = time.Second
	// persistFailLogEvery is how often commits that keep failing are
	// logged again: retried every second, a full disk otherwise repeats
	// the same error (and the outbox's) for as long as it lasts.
	persistFailLogEvery = 30 * time.Second
)

// Reconciler is the agent task that follows dhcpd.leases and synthesises
// what no hook reported (see the package documentation). It is also the
// hook socket's sink (Accept), so that the record of what the region was
// told covers every event queued, from any source, and is written in the
// same outbox transaction as the events.
type Reconciler struct {
	cfg   Config
	store *outbox.Store
	log   zerolog.Logger
	reg   prometheus.Registerer
	now   func() time.Time
	met   *metrics

	// mu guards everything below. It is held across a commit, so the
	// order of commits on disk is the order of changes in memory.
	mu       sync.Mutex
	st       *State
	pos      *Position // matches st; nil before the first read
	posDirty bool
	unsent   []event.Event // synthesised and recorded as told, not yet committed
	orphans  []Orphan      // taken from the state, not yet committed
	flushAt  time.Time     // zero: nothing waiting to be persisted
	flushNow bool          // a whole read was applied: persist it at once
	retryAt  time.Time     // after a failed commit
	hookless bool
	// readFailed: the last read of the leases file failed; wholeHeld: a
	// whole read is held unfinished. Either makes st.Unknown (core.go).
	readFailed, wholeHeld bool
	// notWhole: the last whole read found the file not whole, as logged
	// (false before any: the first read that is not whole is an error,
	// and the first that is says nothing of "again").
	notWhole bool
	// absentSince: when the leases file was first found missing (zero:
	// it exists, or was never looked for).
	absentSince time.Time
	// unreadableSince and readErr: since when reading the leases file
	// fails, and how, last (zero and "": it reads).
	unreadableSince time.Time
	readErr         string
	mode            atomic.Pointer[Detection] // the last detection, for status
	// keptBackWarned: kinds of kept-back events already explained at
	// warn level (later ones are logged at debug).
	keptBackWarned map[string]bool
	// persistFailing: commits failing (a full disk), retried every
	// second; logged when it begins, every persistFailLogEvery while it
	// lasts, and when a commit succeeds again.
	persistFailing *lograte.Episode

	fol        *follower
	loadedPos  *Position
	pid        string
	classifyAt time.Time // a rewrite not yet told restart or hourly
	// rewritePair and rewriteErr: dhcpd.conf's failover peers as the last
	// whole rewrite of the leases file read it (or why it could not),
	// kept for scanPair if that rewrite was dhcpd's restart.
	rewritePair     *Peers
	rewriteErr      error
	classifyWait    time.Duration
	watchWarned     bool
	lastSync        time.Time       // when the last read started
	started         time.Time       // New's time: events older were queued by an earlier run (Stale)
	partnerSpoke    map[string]bool // the peers whose partner the file showed, since the start, speaking for the pair (Stale)
	resumedRound    bool            // Run's first round, on the file as the last run left it, is done (State.UnwrittenUntil)
	unwrittenWarned bool            // rule 3 held for State.UnwrittenUntil was logged
	startupLogged   bool            // rule 3 held for State.StartupUntil was logged
	lastFound       bool            // it found a block (busyRound)
	busyRound       time.Duration
	progress        atomic.Int64

	// onRound, when set (tests, benchmarks), runs with mu held after each
	// round of file changes and decisions.
	onRound func(*State)

	// backlog, when set (AwaitBacklog), is closed once the hook events
	// that waited while no agent read them are taken; until then, or
	// until backlogUntil, nothing pending is sent (decide, Due).
	// backlogDone: no longer waited for. Set before Run.
	backlog      <-chan struct{}
	backlogMax   time.Duration // defaultBacklogMax; tests shorten it
	backlogUntil time.Time
	backlogDone  bool

	// read is closed once Run has applied its first read of the file;
	// ended when Run returns. Accept waits for read (see there).
	read, ended chan struct{}
	// catchUp asks Run to read what dhcpd appended now, and to close the
	// channel sent once it is applied (Accept, in a failover pair).
	catchUp chan chan struct{}
}

// errNotFollowing: hook events cannot be judged, the task stopped before
// it read the leases file.
var errNotFollowing = errors.New("reconcile: the reconciler stopped before it read the leases file")

// New loads the reconciler's persisted state from store and returns the
// task. reg receives its metrics (nil: none); now is the clock (nil:
// time.Now).
func New(cfg Config, store *outbox.Store, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time) (*Reconciler, error) {
	if cfg.Leases == "" || !filepath.IsAbs(cfg.Leases) {
		return nil, fmt.Errorf("reconcile: leases file %q is not an absolute path", cfg.Leases)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 10 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	r := &Reconciler{cfg: cfg, store: store, log: log, reg: reg, now: now, met: newMetrics(), fol: newFollower(cfg.Leases),
		classifyWait: defaultClassifyWait, backlogMax: defaultBacklogMax, busyRound: busyRound, read: make(chan struct{}), ended: make(chan struct{}),
		catchUp: make(chan chan struct{}), started: now(), persistFailing: lograte.NewEpisode(persistFailLogEvery, now)}
	var bad int
	err := store.View(r.bucket(), func(b *bbolt.Bucket) error {
		var err error
		r.st, r.loadedPos, bad, err = load(b, int64(cfg.Grace/time.Second))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: load state: %w", err)
	}
	if bad > 0 {
		r.met.problems.WithLabelValues(problemStateRead).Add(float64(bad))
		log.Warn().Int("records", bad).Msg("stored reconciler records did not decode; skipped")
	}
	r.pos = r.loadedPos
	if n := r.st.dropFamily(cfg.Family); n > 0 {
		log.Info().Int("addresses", n).Str("family", cfg.Family).
			Msg("dropped the stored records of addresses of the other family: another reconciler of this agent follows their leases file")
	}
	r.st.noteLoadedEnds(r.started.Unix())
	if err := r.met.register(reg); err != nil {
		return nil, fmt.Errorf("reconcile: metrics: %w", err)
	}
	r.publish()
	log.Info().Int("leases", len(r.st.File)).Int("told", len(r.st.Told)).Int("pending", r.st.PendingCount()).
		Bool("baselined", r.st.Baselined).Msg("reconciler state loaded")
	return r, nil
}

// Close unregisters the metrics.
func (r *Reconciler) Close() { r.met.unregister(r.reg) }

// LastProgress is when the main loop last went round (agent.Prober).
func (r *Reconciler) LastProgress() time.Time {
	ns := r.progress.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Accept is the hook socket's sink: it records ev as told, drops the
// stale ones (State.Superseded) and queues the rest, in one outbox
// transaction with the record. On error nothing is recorded: the caller
// retries the same events.
//
// It waits until Run has applied its first read of the leases file (or
// ctx ends, or Run stops before): events spooled while the agent was
// down are drained at start, and judging them before the file is read
// would judge them without what dhcpd wrote meanwhile — in a failover
// pair, the "my state recover" that marks the hooks of a server
// returning from its partner's partner-down as replays of news the
// survivor told (failover.go, pairRepeat).
func (r *Reconciler) Accept(ctx context.Context, evs []event.Event) error {
	select {
	case <-r.read:
	default:
		select {
		case <-r.read:
		case <-r.ended:
			return errNotFollowing
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	catchUp := slices.ContainsFunc(evs, func(ev event.Event) bool { return ev.Action != event.Commit && r.st.pairOf(ev.IP).InPair() }) ||
		slices.ContainsFunc(evs, r.st.BackAfterEnd)
	r.mu.Unlock()
	if catchUp {
		r.readUpToNow(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	type prev struct {
		t       Told
		ok      bool
		pending []Pending
	}
	undo := make(map[netip.Addr]prev, len(evs))
	save := func(ip netip.Addr) {
		if _, ok := undo[ip]; !ok {
			t, ok := r.st.Told[ip]
			undo[ip] = prev{t, ok, slices.Clone(r.st.Pending[ip])}
		}
	}
	keep := make([]event.Event, 0, len(evs))
	now := r.now()
	for _, ev := range evs {
		if err := ev.Deliverable(); err != nil {
			// Recorded as told all the same: the file would only yield
			// the same event again. The ends owed before it still go:
			// another client's lease on the address is over, and told
			// after this, rule 4 would drop it (a DHCPv6 client whose
			// DUID carries no MAC taking a dropped lease's address).
			r.keptBack(ev, err)
			save(ev.IP)
			keep = r.endedBefore(keep, ev, now)
			r.st.Hook(ev)
			continue
		}
		why := r.st.SupersededWhy(ev)
		if why == whyPairRepeat && r.cfg.PairChannel {
			// With the pair channel a recovering side's replay is queued
			// for the deliverer to judge (State.Replays, PairReplay)
			// rather than dropped.
			if own, ok := r.st.pairReplay(ev); ok {
				ev.Reason, why = ReasonPairReplay, ""
				r.st.queueReplay(ev, own)
				r.log.Info().Str("action", ev.Action).Stringer("ip", ev.IP).Str("mac", ev.MAC).Int64("timestamp", ev.Timestamp).
					Int64("own_at", own.Timestamp).
					Msg("a hook's end while dhcpd recovers: queued, and sent only if the failover peer's agent told nothing of the address since this agent's own news of it")
			}
		}
		if why != "" && r.cfg.PairChannel && r.st.behindPeerRecord(ev) {
			t := r.st.Told[ev.IP]
			r.log.Info().Str("action", ev.Action).Stringer("ip", ev.IP).Str("mac", ev.MAC).Int64("timestamp", ev.Timestamp).
				Str("told", t.Action).Str("told_mac", t.MAC).Int64("told_at", t.At).
				Msg("a hook event older than the peer's news the file recorded first: queued for the failover peer agent's word (sent ahead of that news if the peer has not delivered it, dropped if it has)")
			why = ""
		}
		if why != "" {
			t := r.st.Told[ev.IP]
			r.met.superseded.Inc()
			r.log.Info().Str("action", ev.Action).Stringer("ip", ev.IP).Str("mac", ev.MAC).Int64("timestamp", ev.Timestamp).
				Str("source", ev.Source.String()).Str("told", t.Action).Str("told_mac", t.MAC).Int64("told_at", t.At).
				Str("why", why).Msg("dropped a hook event: " + why)
			continue
		}
		if r.st.KeptCutEnd(ev) {
			r.met.superseded.Inc()
			r.log.Info().Stringer("ip", ev.IP).Str("mac", ev.MAC).Int64("timestamp", ev.Timestamp).
				Msg("failover: dropped a hook's expiry of a lease a partner's stale binding update cut: the client's next lease came before that lease's end")
			continue
		}
		save(ev.IP)
		if held, ok := r.st.HoldCut(ev); ok {
			r.log.Info().Stringer("ip", ev.IP).Str("mac", ev.MAC).Int64("timestamp", ev.Timestamp).
				Int64("lease_end", held.Until).Int64("held_until", held.Due).
				Msg("failover: a hook's expiry seconds into this side's own lease of the client (the partner's stale binding update of the life before): held until the grace after that lease's end (held_until), dropped if the client's next lease comes by then")
			continue
		}
		keep = r.endedBefore(keep, ev, now)
		r.st.Hook(ev)
		keep = r.appendRestated(keep, ev, now)
	}
	if err := r.commit(ctx, keep); err != nil {
		r.st.TakeAheadSent() // back in Pending below: told when next taken
		r.st.TakeCutKept()   // the same: dropped, if so, when next judged
		for ip, p := range undo {
			if p.ok {
				r.st.Told[ip] = p.t
			} else {
				delete(r.st.Told, ip)
			}
			if len(p.pending) > 0 {
				r.st.Pending[ip] = p.pending
			} else {
				delete(r.st.Pending, ip)
			}
		}
		return err
	}
	r.logAheadSent()
	return nil
}

// endedBefore appends to keep the ends owed ahead of ev, a hook's
// commit (State.TakeEndedBefore), each as a synthesised event with the
// commits it makes MAAS forget told again (appendRestated).
func (r *Reconciler) endedBefore(keep []event.Event, ev event.Event, now time.Time) []event.Event {
	for _, ex := range r.st.TakeEndedBefore(ev) {
		if ex, ok := r.synthesised(ex, now); ok {
			keep = r.appendRestated(keep, ex, now)
		}
	}
	return keep
}

// readUpToNow has Run read and apply what dhcpd appended to the file so
// far. In a failover pair a hook's expiry or release is judged against
// the file (pairRepeat): dhcpd writes and fsyncs its failover state
// records and the lease's blocks before it runs the hook, but the file's
// reader may not have got to them when the hook's datagram arrives —
// the "my state recover" that makes it a replay, or this side's own
// expired block that the hook's expiry follows. So is a hook's commit
// that may follow the end of its client's lease (State.BackAfterEnd).
// Without Run (stopped), the event is judged on what was read.
func (r *Reconciler) readUpToNow(ctx context.Context) {
	done := make(chan struct{})
	select {
	case r.catchUp <- done:
	case <-r.ended:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-r.ended:
	case <-ctx.Done():
	}
}

// defaultBacklogMax bounds how long, from Run's start, the hooks'
// backlog is waited for before what is pending is sent without it.
const defaultBacklogMax = 30 * time.Second

// AwaitBacklog has Run send nothing it synthesised until taken is closed
// (hooksock.Listener.Drained: the events the hooks queued in the socket
// or spooled while no agent read them are taken), or 30 s have
// passed. An event pending from before the start (a previous run read
// the file and stopped within the grace) is due at once; sent before the
// hooks' backlog, it would make news the backlog holds look old: a
// release the file shows, sent ahead of the hook's commit before it,
// and that commit then dropped as older (make chaos PAIR=1 seed 94: a
// lease life lost). Hook events are taken meanwhile, after the first
// read of the file (Accept). Call before Run.
func (r *Reconciler) AwaitBacklog(taken <-chan struct{}) { r.backlog = taken }

// backlogOver reports whether the hooks' backlog is no longer waited
// for (or never was). r.mu is held.
func (r *Reconciler) backlogOver() bool { return r.backlogDone || r.backlog == nil }

// backlogTaken reports whether decide may send what is due: the hooks'
// backlog is taken, or was waited for long enough. r.mu is held.
func (r *Reconciler) backlogTaken(now time.Time) bool {
	if r.backlogOver() {
		return true
	}
	select {
	case <-r.backlog:
		r.backlogDone = true
		return true
	default:
	}
	if now.Before(r.backlogUntil) {
		return false
	}
	r.backlogDone = true
	r.log.Warn().Dur("waited", r.backlogMax).
		Msg("the hooks' backlog (events queued in the socket or spooled while no agent read them) is not all taken yet: sending what the leases file shows without it; a hook event in it older than what is sent now will be dropped as older news")
	return true
}

// Run follows dhcpd.leases until ctx ends. ready is called once the
// file has been read (or found absent) and the watch is in place.
func (r *Reconciler) Run(ctx context.Context, ready func()) error {
	defer close(r.ended)
	defer r.fol.close()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("reconcile: inotify: %w", err)
	}
	defer w.Close()
	// The directory, never the file: dhcpd renames a new file onto it.
	dir := filepath.Dir(r.cfg.Leases)
	watching := r.watch(w, dir)
	r.mu.Lock()
	r.scanMode("start")
	r.backlogUntil = r.now().Add(r.backlogMax)
	r.mu.Unlock()
	r.pid = readPID(r.cfg.PIDFile)
	backlog := r.backlog // its case below fires once
	r.mu.Lock()
	// In a pair rule 3 waits, after a start, until dhcpd writes the
	// file, or UnwrittenWait (State.UnwrittenUntil).
	r.st.StartedAt = r.now().Unix()
	r.st.UnwrittenUntil = r.st.StartedAt + UnwrittenWait
	r.mu.Unlock()
	changes, err := r.fol.resume(r.loadedPos)
	r.round(ctx, changes, err)
	r.mu.Lock()
	r.resumedRound = true
	r.mu.Unlock()
	close(r.read)
	// Resumed on the file the last run read whole, and nothing found
	// wrong since: the file is as consistent as it was then.
	if err == nil && r.fol.resumed && !slices.ContainsFunc(changes, func(c change) bool { return c.kind == changeSnapshot && !c.complete }) {
		r.met.consistent.Store(true)
	}
	r.log.Info().Str("leases", r.cfg.Leases).Dur("poll_interval", r.cfg.Poll).Msg("following " + r.cfg.Keys.leases())
	ready()

	base := filepath.Base(r.cfg.Leases)
	poll := time.NewTicker(r.cfg.Poll)
	defer poll.Stop()
	roundEnd := time.NewTimer(time.Hour)
	roundEnd.Stop()
	waiting := false // a read is due when roundEnd fires
	// paused: the watch is off until the next read (busyRound).
	paused := false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	r.arm(timer)
	// read reads what dhcpd wrote; after a read that found a block, the
	// watch is off until the busy round ends (busyRound).
	read := func() {
		if paused {
			// Before the read: a write after it is signalled.
			paused, watching = false, r.watch(w, dir)
		}
		r.sync(ctx, false)
		if watching && r.lastFound && w.Remove(dir) == nil {
			paused, waiting = true, true
			roundEnd.Reset(max(0, r.busyRound-time.Since(r.lastSync)))
		}
		r.arm(timer)
	}
	for {
		r.progress.Store(r.now().UnixNano())
		// The timer is set again after each read and each tick, not
		// for the inotify events of other files in the directory (a
		// rewrite writes its temporary file in many pieces).
		select {
		case <-ctx.Done():
			r.shutdown(ctx)
			return nil
		case e, ok := <-w.Events:
			if !ok {
				return errors.New("reconcile: inotify watcher closed")
			}
			if filepath.Base(e.Name) != base || waiting {
				break
			}
			if wait := r.busyRound - time.Since(r.lastSync); r.lastFound && wait > 0 {
				waiting = true
				roundEnd.Reset(wait)
			} else {
				read()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("reconcile: inotify watcher closed")
			}
			kind := problemWatch
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				kind = problemOverflow
			}
			r.met.problems.WithLabelValues(kind).Inc()
			r.log.Warn().Err(err).Msg("inotify error: reading the leases file now; the poll covers what was missed")
			r.sync(ctx, false)
			r.arm(timer)
		case <-roundEnd.C:
			waiting = false
			read()
		case done := <-r.catchUp:
			r.sync(ctx, false)
			r.arm(timer)
			close(done)
		case <-poll.C:
			if !watching {
				watching = r.watch(w, dir)
			}
			r.sync(ctx, true)
			r.arm(timer)
		case <-timer.C:
			r.tick(ctx)
			r.arm(timer)
		case <-backlog:
			backlog = nil
			r.tick(ctx)
			r.arm(timer)
		}
	}
}

// watch adds the inotify watch on dir. Until it can (the directory does
// not exist yet: dhcpd not installed), the poll alone follows the file.
func (r *Reconciler) watch(w *fsnotify.Watcher, dir string) bool {
	err := w.Add(dir)
	if err == nil {
		return true
	}
	r.met.problems.WithLabelValues(problemWatch).Inc()
	ev := r.log.Debug()
	if !r.watchWarned {
		ev, r.watchWarned = r.log.Warn(), true
	}
	ev.Err(err).Str("dir", dir).Msg("cannot watch the leases directory; polling it and retrying")
	return false
}

// arm sets timer to the next thing to do besides reading the file: a
// synthesised event due, a flush, a retry, a rewrite to classify.
func (r *Reconciler) arm(timer *time.Timer) {
	r.mu.Lock()
	var next time.Time
	if at, ok := r.st.NextDue(); ok && r.backlogOver() {
		// (While the hooks' backlog is waited for, nothing is sent: the
		// second's tick below checks backlogUntil.)
		next = time.Unix(min(at, 1<<40), 0)
	}
	for _, t := range []time.Time{r.flushAt, r.retryAt, r.classifyAt} {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	r.mu.Unlock()
	// At least once a second, so LastProgress stays fresh for the
	// watchdog whatever poll_interval is.
	d := time.Second
	if !next.IsZero() {
		d = min(max(next.Sub(r.now()), 0), d)
	}
	if !timer.Stop() {
		select {
		case <-timer.C:
		default:
		}
	}
	timer.Reset(d)
}

// sync reads what changed in the file and acts on it.
func (r *Reconciler) sync(ctx context.Context, poll bool) {
	r.lastSync = time.Now()
	changes, err := r.fol.sync(poll)
	r.lastFound = slices.ContainsFunc(changes, func(c change) bool { return len(c.leases) > 0 })
	r.round(ctx, changes, err)
}

// round applies what the follower read, then decides and commits.
// written reports whether c, read after Run's first round, is dhcpd
// writing the file: statements appended to it, or a new file (another
// inode than the one the last run left off in: dhcpd's start or hourly
// rewrite) read whole. The file read whole again because the first
// round could not (a leases directory unreadable then) is not: what it
// shows may be a dead dhcpd's. r.mu is held.
func (r *Reconciler) written(c change) bool {
	switch c.kind {
	case changeAppend:
		return len(c.leases) > 0 && !c.oldFile
	case changeFailover:
		return true
	case changeSnapshot:
		pos, ok := r.fol.position()
		return c.complete && ok && (r.loadedPos == nil || pos.Dev != r.loadedPos.Dev || pos.Ino != r.loadedPos.Ino)
	}
	return false
}

func (r *Reconciler) round(ctx context.Context, changes []change, err error) {
	if err != nil {
		r.met.problems.WithLabelValues(problemRead).Inc()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	absent := r.fol.absent()
	r.noteAbsent(absent, r.fol.gone(), now)
	if absent && !r.st.Baselined {
		r.st.NoFile = true
	}
	r.noteUnreadable(err, absent, now)
	r.readFailed = err != nil
	for _, c := range changes {
		r.apply(c, now)
		if r.resumedRound && r.written(c) {
			r.st.FileWritten(now.Unix())
		}
	}
	r.st.Unknown = r.readFailed || r.wholeHeld
	if pos, ok := r.fol.position(); ok && (r.pos == nil || *r.pos != pos) {
		r.pos, r.posDirty = &pos, true
	}
	r.decide(ctx, now)
	if r.onRound != nil {
		r.onRound(r.st)
	}
}

// noteAbsent tells the operator when the leases file is missing and when
// it is back: a dhcpd that never ran, or a dhcpd.leases setting naming a
// file dhcpd does not write (MAAS's is /var/lib/maas/dhcp/dhcpd.leases:
// the -lf of MAAS's debian/maas-dhcp.maas-dhcpd.service), would otherwise
// look like a quiet network. `leasekeeper check-maas` names the file the
// running dhcpd has open.
//
// gone is the path naming no file while the file read is held: removed
// or moved away by hand (a cold review: status said nothing). dhcpd goes
// on writing the file it has open, which the agent reads on, until its
// next rewrite or restart puts a new one at the path.
func (r *Reconciler) noteAbsent(absent, gone bool, now time.Time) {
	switch {
	case (absent || gone) && r.absentSince.IsZero():
		r.absentSince = now
		r.met.absent.Store(true)
		if gone {
			r.log.Warn().Str("leases", r.cfg.Leases).
				Msg("the leases file is gone from its path (removed or moved away?): reading on in the file dhcpd has open, which dhcpd replaces at its next rewrite or restart; a restarted agent would find nothing to follow")
			break
		}
		r.log.Warn().Str("leases", r.cfg.Leases).
			Msg("the leases file does not exist: nothing to follow until dhcpd writes it (if dhcpd is running, " + r.cfg.Keys.leases() + " in the configuration names a file it does not write)")
	case !absent && !gone && !r.absentSince.IsZero():
		r.log.Info().Str("leases", r.cfg.Leases).Dur("missing_for", now.Sub(r.absentSince)).Msg("the leases file appeared")
		r.absentSince = time.Time{}
		r.met.absent.Store(false)
	}
}

// noteUnreadable tells the operator when reading the leases file fails
// (its permissions, a directory at its path, an I/O error) and when it
// reads again: once each, and again when the error changes, not at every
// poll. err is the round's read error (nil: it read, or found no file:
// absent, which noteAbsent tells). r.mu is held.
func (r *Reconciler) noteUnreadable(err error, absent bool, now time.Time) {
	switch {
	case err != nil && (r.unreadableSince.IsZero() || err.Error() != r.readErr):
		if r.unreadableSince.IsZero() {
			r.unreadableSince = now
		}
		r.readErr = err.Error()
		r.met.unreadable.Store(true)
		r.log.Error().Err(err).Str("leases", r.cfg.Leases).
			Msg("reading the leases file failed: every synthesised event is held until it reads again (hook events still go); retrying at each poll")
	case err == nil && !r.unreadableSince.IsZero():
		if !absent {
			r.log.Info().Str("leases", r.cfg.Leases).Dur("unreadable_for", now.Sub(r.unreadableSince)).
				Msg("the leases file reads again; following it")
		}
		r.unreadableSince, r.readErr = time.Time{}, ""
		r.met.unreadable.Store(false)
	}
}

// FileHealth is what LeasesFile reports of the leases file.
type FileHealth struct {
	Path string
	// AbsentSince: while it does not exist, since when it was found
	// missing (zero otherwise).
	AbsentSince time.Time
	// UnreadableSince and ReadError: while reading it fails, since when
	// and the last error (zero and "" otherwise).
	UnreadableSince time.Time
	ReadError       string
}

// LeasesFile is the leases file followed and whether it can be read.
func (r *Reconciler) LeasesFile() FileHealth {
	r.mu.Lock()
	defer r.mu.Unlock()
	return FileHealth{Path: r.cfg.Leases, AbsentSince: r.absentSince, UnreadableSince: r.unreadableSince, ReadError: r.readErr}
}

// tick runs on the timer: events due, flushes, rewrite classification.
func (r *Reconciler) tick(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if !r.classifyAt.IsZero() && !now.Before(r.classifyAt) {
		kind := "hourly"
		if r.pidChanged() {
			kind = "restart"
		}
		r.classified(kind, "pid file")
	}
	r.decide(ctx, now)
}

// apply folds one change into the state. r.mu is held.
func (r *Reconciler) apply(c change, now time.Time) {
	for _, err := range c.errs {
		kind := problemSyntax
		var se *parser.SyntaxError
		if !errors.As(err, &se) {
			kind = problemRead
			if c.oldFile {
				kind = problemOldTorn
			}
		}
		// Logged before counted: whoever sees the count finds the line.
		r.log.Warn().Err(err).Str("leases", r.cfg.Leases).Msg("leases file: statement skipped")
		r.met.problems.WithLabelValues(kind).Inc()
	}
	for _, what := range c.refused {
		r.log.Warn().Str("leases", r.cfg.Leases).Str("refused", what).
			Msg("leases file: a block dhcpd will refuse at its next start (it keeps the address's earlier one); skipped as dhcpd does")
		r.met.problems.WithLabelValues(problemRefused).Inc()
	}
	for _, what := range c.unknown {
		r.log.Warn().Str("leases", r.cfg.Leases).Str("statement", what).
			Msg("leases file: a statement dhcpd does not read (it logs \"Corrupt lease file\" at its next start): something else wrote to its file; skipped as dhcpd does")
		r.met.problems.WithLabelValues(problemUnknown).Inc()
	}
	switch c.kind {
	case changeFailover:
		r.failoverNoted(r.st.failoverSeen(c.failover))
	case changeAppend:
		r.st.Appended(c.leases, now.Unix())
		if c.duid && !r.classifyAt.IsZero() {
			r.classified("restart", "server-duid")
		}
	case changeSnapshot:
		start := time.Now()
		if c.complete && notLeasesFile(c.table) {
			// Not dhcpd's file (dhcpd.conf named for it, say): taken
			// for the truth, every lease the agent knows would vanish
			// from it. Held, as a read that is not whole is, until a
			// read of dhcpd's own file.
			r.wholeHeld = true
			r.st.Snapshot(c.table, false, now.Unix())
			r.met.snapshots.WithLabelValues("held").Inc()
			r.met.consistent.Store(false)
			r.notWhole = true
			r.wholeProblems(c.table)
			return
		}
		if !c.complete {
			r.wholeHeld = true
			r.st.Snapshot(c.table, false, now.Unix())
			r.met.snapshots.WithLabelValues("held").Inc()
			if c.torn {
				r.met.problems.WithLabelValues(problemTorn).Inc()
			}
			r.met.consistent.Store(false)
			if !r.notWhole || c.torn {
				r.log.Error().Str("leases", r.cfg.Leases).Str("why", c.why).Int("syntax_errors", len(c.errs)).Bool("torn", c.torn).
					Msg("leases file did not read whole: holding every decision on it, retrying at the next poll")
			} else {
				r.log.Warn().Str("why", c.why).Int("syntax_errors", len(c.errs)).Msg("leases file still does not read whole")
			}
			r.notWhole = true
			return
		}
		baseline := !r.st.Baselined
		r.st.OutOfRange = nil
		r.rewritePair, r.rewriteErr = nil, nil
		if r.cfg.DhcpdConf != "" {
			cfg, err := readConf(r.cfg.DhcpdConf)
			if err != nil {
				r.log.Warn().Err(err).Str("config", r.cfg.DhcpdConf).
					Msg("cannot read dhcpd.conf's ranges: a lease this rewrite dropped is expired, never freed in the region as one outside every range")
				r.rewriteErr = err
			} else {
				r.st.OutOfRange = outOfRange(cfg)
				p := PeersOf(cfg)
				r.rewritePair = &p
			}
		}
		r.wholeHeld = false
		vanished, fo := r.st.Snapshot(c.table, true, now.Unix())
		r.failoverNoted(fo)
		r.flushNow = true // rare and possibly large: not left for later
		r.met.snapshots.WithLabelValues("complete").Inc()
		r.met.consistent.Store(true)
		if r.notWhole {
			r.notWhole = false
			r.log.Info().Msg("leases file reads whole again")
		}
		r.log.Info().Str("why", c.why).Int("leases", c.table.Len()).Int("vanished", vanished).Bool("baseline", baseline).
			Dur("took", time.Since(start)).Msg("leases file read whole")
		r.wholeProblems(c.table)
		if c.why == whyReplaced {
			switch {
			case c.duid:
				r.classified("restart", "server-duid")
			case r.pidChanged():
				r.classified("restart", "pid file")
			default:
				r.classifyAt = now.Add(r.classifyWait)
			}
		}
	}
}

// wholeProblems tells what a whole read skipped as dhcpd skips it:
// blocks dhcpd refuses when it loads the file and statements it does not
// read in a leases file. dhcpd's own rewrite holds neither, so they were
// written since by something else (or the path names another file): one
// line for each kind, naming the first (a block dhcpd cannot start on
// first, at error level), and the count. r.mu is held.
func (r *Reconciler) wholeProblems(t *parser.Table) {
	if ref := t.Refused(); len(ref) > 0 {
		first, ev := ref[0], r.log.Warn()
		msg := "leases file: blocks dhcpd will refuse at its next start (it keeps each address's earlier one); skipped as dhcpd does"
		if i := slices.IndexFunc(ref, func(f *parser.Refused) bool { return f.Fatal }); i >= 0 {
			first, ev = ref[i], r.log.Error()
			msg = "leases file: a block dhcpd cannot start on (it exits at its next start): remove it; skipped"
		}
		ev.Str("leases", r.cfg.Leases).Int("refused", len(ref)).Str("first", first.String()).Msg(msg)
		r.met.problems.WithLabelValues(problemRefused).Add(float64(len(ref)))
	}
	u := t.Unknown()
	if len(u) == 0 {
		return
	}
	first := fmt.Sprintf("line %d: %s", u[0].Line, u[0].What)
	if notLeasesFile(t) {
		r.log.Error().Str("leases", r.cfg.Leases).Int("statements", t.UnknownCount()).Str("first", first).
			Msg("leases file holds no lease, only statements dhcpd does not read in a leases file: is " + r.cfg.Keys.leases() + " the file dhcpd writes (dhcpd.conf's lease-file-name, dhcpd -lf)? Every decision on it is held")
	} else {
		r.log.Warn().Str("leases", r.cfg.Leases).Int("statements", t.UnknownCount()).Str("first", first).
			Msg("leases file: statements dhcpd does not read (it logs \"Corrupt lease file\" at its next start): something else wrote to its file; skipped as dhcpd does")
	}
	r.met.problems.WithLabelValues(problemUnknown).Add(float64(t.UnknownCount()))
}

// notLeasesFile reports whether a whole read found statements dhcpd does
// not read in a leases file and nothing dhcpd writes there: no lease,
// host, failover state, refused block, and neither the byte order nor
// the server DUID dhcpd writes at the top of each rewrite. An empty file
// is none of this (a dhcpd that never ran).
func notLeasesFile(t *parser.Table) bool {
	return t.UnknownCount() > 0 && t.Blocks == 0 && t.Len() == 0 && t.ByteOrder == nil && t.ServerDUID == nil &&
		len(t.FailoverLog()) == 0 && len(t.Hosts()) == 0 && len(t.Refused()) == 0
}

// classified logs what a rewrite was. r.mu is held.
func (r *Reconciler) classified(kind, by string) {
	r.classifyAt = time.Time{}
	r.met.rewrites.WithLabelValues(kind).Inc()
	if kind == "restart" {
		r.log.Info().Str("by", by).Msg("dhcpd restarted (its start rewrote the leases file)")
		r.scanMode("dhcpd restart")
		return
	}
	r.log.Info().Msg("dhcpd's hourly rewrite of the leases file")
}

// logAheadSent says which dropped leases' ends the state sent ahead of
// the next commit of their address the file recorded as told
// (Pending.Ahead): in a failover pair no hook of either server reports
// those ends.
func (r *Reconciler) logAheadSent() {
	for _, ev := range r.st.TakeAheadSent() {
		r.log.Info().Stringer("ip", ev.IP).Str("mac", ev.MAC).Int64("ends", ev.Timestamp).
			Msg("failover: the end of a lease no hook of either server reports (a rewrite dropped it, or it expired while the partner was away) goes now, ahead of the next commit of its address")
	}
	for _, ev := range r.st.TakeCutKept() {
		r.log.Info().Stringer("ip", ev.IP).Str("mac", ev.MAC).Int64("ends", ev.Timestamp).
			Msg("failover: a held expiry (a partner's stale binding update) dropped: the client's next lease of the address came before the lease it cut ended")
	}
}

// synthesised readies an event the state synthesised for the outbox:
// checked, stamped, recorded as told, counted and logged. It is false
// for one not to queue (invalid, or one the region cannot take). r.mu is
// held.
func (r *Reconciler) synthesised(ev event.Event, now time.Time) (event.Event, bool) {
	if err := ev.Normalize(); err != nil {
		r.met.problems.WithLabelValues(problemInvalid).Inc()
		r.log.Error().Err(err).Str("action", ev.Action).Stringer("ip", ev.IP).Str("mac", ev.MAC).Str("reason", ev.Reason).
			Msg("synthesised event is invalid; dropped")
		return ev, false
	}
	ev.TimestampNS = now.UnixNano()
	r.st.Hook(ev)
	if err := ev.Deliverable(); err != nil {
		r.keptBack(ev, err)
		return ev, false
	}
	r.met.synthesised.WithLabelValues(ev.Reason).Inc()
	// In hookless mode the file is how every commit, release and expiry
	// reaches the region: one info line per lease is noise an operator
	// cannot act on (thousands a second under load, and ~14 % of the
	// agent's CPU per lease in BenchmarkHooklessLease -hookless.log
	// info), so those are debug; counted all the same.
	lvl := zerolog.InfoLevel
	if r.st.Hookless && (ev.Reason == ReasonMissedCommit || ev.Reason == ReasonMissedRelease || ev.Reason == ReasonMissedExpiry) {
		lvl = zerolog.DebugLevel
	}
	if l := r.log.WithLevel(lvl); l.Enabled() {
		// (Checked first: the address boxed for Stringer cost an
		// allocation per lease even with the line disabled.)
		l.Str("action", ev.Action).Stringer("ip", ev.IP).Str("mac", ev.MAC).Str("hostname", ev.Hostname).
			Int64("timestamp", ev.Timestamp).Str("reason", ev.Reason).Msg("synthesised event")
	}
	return ev, true
}

// restatement is State.Restatement, stamped, counted and logged: the
// commit to queue right after ev. r.mu is held.
func (r *Reconciler) restatement(ev event.Event, now time.Time) (event.Event, bool) {
	x, ok := r.st.Restatement(ev, now.Unix())
	if !ok {
		return x, false
	}
	x.TimestampNS = now.UnixNano()
	r.met.synthesised.WithLabelValues(ReasonRestated).Inc()
	r.log.Info().Stringer("ip", x.IP).Str("mac", x.MAC).Str("hostname", x.Hostname).Int64("timestamp", x.Timestamp).
		Str("after", ev.Action).Stringer("after_ip", ev.IP).
		Msg("this MAC's running lease queued again for the region, after the end of another of its addresses: MAAS drops a MAC's other addresses at each of its events")
	return x, true
}

// appendRestated appends ev, and its restatement if it has one. r.mu is
// held.
func (r *Reconciler) appendRestated(evs []event.Event, ev event.Event, now time.Time) []event.Event {
	evs = append(evs, ev)
	if x, ok := r.restatement(ev, now); ok {
		evs = append(evs, x)
	}
	return evs
}

// decide queues what is due, or schedules a flush. r.mu is held.
func (r *Reconciler) decide(ctx context.Context, now time.Time) {
	// Due's slice is this call's: what is to be queued is kept in it, in
	// place, instead of copied to another.
	var evs []event.Event
	if r.backlogTaken(now) {
		evs = r.st.Due(now.Unix())
	}
	n := 0
	var restated []event.Event // evs with each restatement after its end (rare)
	for _, ev := range evs {
		ev, ok := r.synthesised(ev, now)
		if !ok {
			continue
		}
		evs[n] = ev
		n++
		switch x, ok := r.restatement(ev, now); {
		case ok && restated == nil:
			restated = append(slices.Clone(evs[:n]), x)
		case ok:
			restated = append(restated, ev, x)
		case restated != nil:
			restated = append(restated, ev)
		}
	}
	clear(evs[n:])
	evs = evs[:n]
	if restated != nil {
		evs = restated
	}
	lapsed := r.st.TakeLapsed()
	for _, peer := range slices.Sorted(maps.Keys(lapsed)) {
		p := *r.st.pairNamed(peer)
		r.log.Info().Str("peer", p.Peer).Str("role", p.Role).Str("my_state", p.MyState).Str("partner_state", p.PartnerState).Int("dropped", lapsed[peer]).
			Msg("failover: expiries of leases a rewrite dropped, held in standby in case the primary went down before sending them, dropped: the primary had its time to send them")
	}
	r.logAheadSent()
	switch n := r.st.TakeHeldUnwritten(); {
	case n == 0:
	case r.st.UnwrittenUntil == 0:
		if !r.startupLogged {
			r.startupLogged = true
			r.log.Info().Int("leases", n).Dur("startup_wait", StartupWait*time.Second).
				Msg("failover: this side is the survivor by the state dhcpd wrote as it started, which repeats the state it saved: leases whose end passed are expired from the leases file once dhcpd records its pair's state anew (its partner answered), or startup_wait after its first write")
		}
	case !r.unwrittenWarned:
		r.unwrittenWarned = true
		r.log.Warn().Int("leases", n).Dur("unwritten_wait", UnwrittenWait*time.Second).
			Msg("failover: leases whose end passed are not expired from the leases file yet: dhcpd has not written it since this agent started (is dhcpd running?), and what it shows may be a dead dhcpd's while the partner spoke for the pair; they are once dhcpd writes it, or, if it does not, unwritten_wait after this agent's start")
	}
	for _, o := range r.st.TakeOrphans() {
		r.log.Info().Stringer("ip", o.IP).Str("mac", o.MAC).Int64("ends", o.Ends).
			Msg("orphaned address: its lease was dropped because the address left every range, and it has ended; the region ignores its expiry, so it is to be freed there")
		r.orphans = append(r.orphans, o)
	}
	waiting := len(r.unsent) > 0 || len(evs) > 0 || r.flushNow || len(r.orphans) > 0
	if !waiting && !r.retryAt.IsZero() && now.Before(r.retryAt) {
		r.publish()
		return
	}
	switch {
	case waiting, !r.flushAt.IsZero() && !now.Before(r.flushAt), !r.retryAt.IsZero() && !now.Before(r.retryAt):
		if err := r.commit(ctx, evs); err != nil {
			r.unsent = append(r.unsent, evs...)
			r.flushAt, r.retryAt = time.Time{}, now.Add(retryDelay)
			if ctx.Err() != nil {
				break // stopping: shutdown persists it, or says it cannot
			}
			r.met.problems.WithLabelValues(problemPersist).Inc()
			if log, left, since := r.persistFailing.Fail(); log {
				r.log.Error().Err(err).Int("events", len(r.unsent)).Time("failing_since", since).Int("not_logged_since_last", left).
					Msgf("cannot persist the reconciler's state and events; retrying (logged again every %s while it lasts)", persistFailLogEvery)
			}
		}
	case r.flushAt.IsZero() && (len(r.st.dirty) > 0 || r.st.metaDirty || r.posDirty):
		r.flushAt = now.Add(flushDelay)
	}
	r.publish()
}

// commit writes what changed (and the position) and queues r.unsent and
// evs, in one outbox transaction. r.mu is held. On success r.unsent is
// empty; on error what changed is marked again for the next commit and
// evs are the caller's to keep.
func (r *Reconciler) commit(ctx context.Context, evs []event.Event) error {
	d := r.st.TakeDirty()
	var pos *Position
	if r.posDirty {
		pos = r.pos
	}
	recs, err := records(r.st, d, pos)
	if err != nil {
		r.st.MarkDirty(d)
		return err
	}
	all := evs
	if len(r.unsent) > 0 {
		all = append(append([]event.Event(nil), r.unsent...), evs...)
	}
	orphans := r.orphans
	if r.cfg.Orphans == nil {
		orphans = nil
	}
	now := r.now()
	err = r.store.Update(ctx, r.bucket(), func(b *bbolt.Bucket) ([]event.Event, error) {
		if len(orphans) > 0 {
			if err := r.cfg.Orphans.Put(b.Tx(), orphans, now); err != nil {
				return nil, err
			}
		}
		return all, write(b, recs)
	})
	if err != nil {
		r.st.MarkDirty(d)
		return err
	}
	if ended, since, n := r.persistFailing.End(); ended {
		r.log.Info().Int("events", len(all)).Int("failures", n).Dur("failed_for", now.Sub(since)).
			Msg("the reconciler's state and events persisted again")
	}
	r.unsent, r.flushNow, r.orphans = nil, false, nil
	if len(orphans) > 0 {
		r.cfg.Orphans.Wake()
	}
	if pos != nil {
		r.posDirty = false
	}
	r.flushAt, r.retryAt = time.Time{}, time.Time{}
	return nil
}

// shutdown persists what is left.
func (r *Reconciler) shutdown(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.unsent) == 0 && len(r.orphans) == 0 && len(r.st.dirty) == 0 && !r.st.metaDirty && !r.posDirty {
		return
	}
	if err := r.commit(cctx, nil); err != nil {
		r.log.Error().Err(err).Int("events", len(r.unsent)).
			Msg("stopping without persisting the reconciler's last changes; the next start reads the file again")
	}
}

// publish refreshes the gauges. r.mu is held.
func (r *Reconciler) publish() {
	r.met.leases.Store(int64(len(r.st.File)))
	r.met.pending.Store(int64(r.st.PendingCount()))
}

// scanMode detects the mode from dhcpd.conf (or takes the forced one)
// and sets the grace and the core's complement flag accordingly: with no
// hook that can run, every change in the file is an event to send at
// once. r.mu is held, or the task is not running yet.
func (r *Reconciler) scanMode(when string) {
	env := DefaultDetectEnv()
	if r.cfg.Detect != nil {
		env = *r.cfg.Detect
	}
	d := Detect(r.cfg.DhcpdConf, r.cfg.Mode, env)
	switch {
	case d.Unreadable && !d.Forced && r.st.SureMode != "":
		// A dhcpd.conf unreadable for a moment (permissions being
		// changed, a package upgrade) says nothing new about the hooks:
		// the mode known for sure stays, persisted across restarts. Taken
		// for complement instead, a replacement rack's agent would
		// expire at once a dropped lease whose renewal's hook is on its
		// way (found by make chaos: leases-dir-unreadable and an agent
		// restart).
		d.Mode, d.Kept = r.st.SureMode, true
		d.Why = fmt.Sprintf("%s; keeping the mode last detected for sure, %s", strings.TrimSuffix(d.Why, unsureSuffix), d.Mode)
	case !d.Unsure && !d.Forced && r.st.SureMode != d.Mode:
		r.st.SureMode = d.Mode
		r.st.MarkMeta()
	}
	grace := r.cfg.Grace
	if d.Mode == ModeHookless {
		grace = 0
	}
	r.st.Grace = int64(grace / time.Second)
	complement, hookless := d.Mode == ModeComplement, d.Mode == ModeHookless
	if r.st.Complement != complement || r.st.Hookless != hookless {
		r.st.RulesChanged() // who tells from the file changed: rule 3's heap is rebuilt
	}
	r.st.Complement, r.st.Hookless, r.hookless = complement, hookless, hookless
	r.scanPair(when)
	r.met.hookless.Store(r.hookless)
	// A mode reconcile.mode forces is the operator's word: nothing to
	// alert on when detection cannot tell (README.Debian has a rack
	// whose dhcpd.conf the agent may not read set it).
	r.met.setMode(d.Mode, d.Unsure && !d.Forced)
	r.mode.Store(&d)
	r.logMode(d, grace, when)
}

// unsureSuffix ends the Why of a detection that could not tell (detect).
const unsureSuffix = ": complement mode, the safe side (nothing a hook may already have told the region is sent again)"

// logMode says which mode is in force and why. Detection that could
// not tell warns, with the fix. A mode reconcile.mode forces is the
// operator's choice, logged at info with no advice to set what is set
// (detection that could not tell contradicts nothing) — unless
// detection, sure, says otherwise: that warns, naming both, as a
// forced mode that differs from what dhcpd's hooks do sends second
// copies of hooked events or misses what no hook reports.
func (r *Reconciler) logMode(d Detection, grace time.Duration, when string) {
	ev, why := r.log.Info(), d.Why
	switch {
	case d.Forced && !d.Unsure && d.Detected != d.Mode:
		ev = r.log.Warn().Str("fix", fmt.Sprintf("make sure dhcpd's hooks do what %s mode means, or set reconcile.mode to \"auto\"; leasekeeper check-maas tells which", d.Mode))
		why = fmt.Sprintf("reconcile.mode forces %s, but dhcpd.conf says %s: %s", d.Mode, d.Detected, d.Why)
	case d.Forced && d.Unsure:
		why = fmt.Sprintf("reconcile.mode forces %s (detection could not tell: %s)", d.Mode, strings.TrimSuffix(d.Why, unsureSuffix))
	case d.Forced:
		why = fmt.Sprintf("reconcile.mode forces %s, as detected: %s", d.Mode, d.Why)
	case d.Unsure:
		fix := "set " + r.cfg.Keys.conf() + " to a dhcpd.conf the agent can read"
		if !r.cfg.Keys.NoModeKey {
			fix += ", or reconcile.mode"
		}
		ev = r.log.Warn().Str("fix", fix+"; leasekeeper check-maas tells which")
	}
	ev = ev.Str("mode", string(d.Mode)).Str("why", why).Dur("expiry_grace", grace).Str("when", when)
	if d.Forced {
		ev = ev.Str("detected", string(d.Detected)).Bool("forced", true)
	}
	ev.Msg(strings.Replace(modeMessage[d.Mode], "dhcpd.leases", r.cfg.Keys.leases(), 1))
}

var modeMessage = map[Mode]string{
	ModeReplacement: "reconciler mode: replacement — dhcpd's hooks reach the agent; the leases file fills in what they miss after the grace",
	ModeComplement:  "reconciler mode: complement — dhcpd's hooks tell the region through another program; the agent sends only what no hook reports (leases a dhcpd restart dropped)",
	ModeHookless:    "reconciler mode: hookless — every event comes from dhcpd.leases at once",
}

// Holds reports whether dhcpd holds ip again since the Unix second
// since (an orphaned lease's end), and whether that is known: the file
// was read whole once and its last read did not fail. Held is
// dhcpd.leases, as last read, having a block for ip, or a commit of ip
// told since then (a hook's, which comes before dhcpd's write reaches
// the file, and before this agent's next read of it: the orphans'
// releaser asks just before its request, and a lease the region heard
// of first would lose its record, MAAS deleting the observed record
// whatever MAC it has: src/maasserver/api/ip_addresses.py, release).
// dhcpd writes a block for an address of its ranges once it has a
// history there (a client, a lease, or a failover pair's backup state);
// a never-leased free address has none (write_leases4, server/mdb.c).
// An orphaned address (a range shrink dropped it) that dhcpd holds again
// is no orphan any more: its lease is the region's to keep
// (TestLabOrphanBack, TestHoldsToldCommit).
func (r *Reconciler) Holds(ip netip.Addr, since int64) (held, known bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, held = r.st.File[ip]
	if t, ok := r.st.Told[ip]; ok && t.Action == event.Commit && t.At >= since {
		held = true
	}
	return held, r.st.Baselined && !r.st.Unknown
}

// Mode is the last mode detection (nil before Run), for /status.
func (r *Reconciler) Mode() *Detection { return r.mode.Load() }

// PairStates is every failover pair dhcpd's pools use, the lead one
// first, with the states its leases file last recorded (none outside a
// pair), for /status.
func (r *Reconciler) PairStates() []Pair {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st.Pairs()
}

// KeptBack is the number of events kept back because the region cannot
// take them (no six-octet MAC), for /status.
func (r *Reconciler) KeptBack() int64 { return r.met.keptBackN.Load() }

// keptBack counts and explains an event the region cannot take: the first
// of each kind at warn level, with what it means; later ones at debug.
func (r *Reconciler) keptBack(ev event.Event, err error) {
	kind := event.NoMACEmpty
	var ne *event.NoMACError
	if errors.As(err, &ne) {
		kind = ne.Kind
	}
	r.met.keptBack.WithLabelValues(kind).Inc()
	r.met.keptBackN.Add(1)
	l := r.log.Debug()
	if r.keptBackWarned == nil {
		r.keptBackWarned = map[string]bool{}
	}
	if !r.keptBackWarned[kind] {
		r.keptBackWarned[kind] = true
		l = r.log.Warn().Str("means", "the region's leases API takes only six-octet MACs, so events like this one are not sent (never dead-lettered); counted in leasekeeper_events_kept_back_total; further ones are logged at debug level")
	}
	l.Str("action", ev.Action).Stringer("ip", ev.IP).Str("mac", ev.MAC).Str("duid", ev.DUID).Str("source", ev.Source.String()).
		Str("kind", kind).Err(err).Msg("event kept back: no MAC the region can take")
}

// readPID returns the pid file's content, "" if none.
func readPID(path string) string {
	if path == "" {
		return ""
	}
	b, err := safefile.ReadFile(path, safefile.FollowLinks, 64)
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// pidChanged reports whether dhcpd's pid file names a new process.
func (r *Reconciler) pidChanged() bool {
	p := readPID(r.cfg.PIDFile)
	if p == "" || p == r.pid {
		return false
	}
	r.pid = p
	return true
}
