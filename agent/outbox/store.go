package outbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lograte"
)

// DefaultMaxEvents is the bound on queued events when Options.MaxEvents is 0.
const DefaultMaxEvents = 1_000_000

// formatVersion is the layout of the buckets below; Open refuses a file
// written with a newer one rather than misreading it.
const formatVersion = 1

// Buckets and meta keys (see doc.go, "Layout").
var (
	bucketQueue = []byte("queue")
	bucketDead  = []byte("dead")
	bucketMeta  = []byte("meta")
	bucketKV    = []byte("kv")
	keyNextSeq  = []byte("next_seq")
	keyVersion  = []byte("version")
)

// initialMmap is the outbox file's first mapping (bbolt's
// InitialMmapSize).
const initialMmap = 64 << 20

// Tuning of the group commit.
const (
	requestQueue   = 4096   // pending requests the writer can be behind by
	maxGroupEvents = 32_768 // events per transaction, to bound its size and latency
)

// Errors callers branch on.
var (
	ErrClosed   = errors.New("outbox closed")
	ErrNotFound = errors.New("no such dead letter")
	ErrCorrupt  = errors.New("outbox record does not decode")
	ErrLocked   = errors.New("outbox file is locked by another process")
	ErrDamaged  = errors.New("outbox file is damaged: a page bbolt cannot read")
)

// damaged turns a panic of bbolt reading a damaged page (it panics on a
// page of an unknown type, a free list that does not read) into
// ErrDamaged, so that the agent stops with what to do rather than a
// stack trace. A panic inside bbolt.Open leaves its file open and locked
// in this process: the caller is to stop, not to open it again.
func damaged(path string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("outbox %s: %w (%v): stop the agent and move the file aside, with region-request beside it; a new one is made at the next start, and the events it still held, undelivered, and the reconciler's state are lost with it", path, ErrDamaged, p)
	}
}

// CorruptError names a queued record that does not decode; Peek stops at
// it. Ack its Seq to drop it (it never decoded, so it cannot be sent).
type CorruptError struct {
	Seq uint64
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("outbox: seq %d: %v: %v", e.Seq, ErrCorrupt, e.Err)
}

func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// Options configure a Store.
type Options struct {
	MaxEvents  int                   // bound on queued events; 0 = DefaultMaxEvents
	Logger     zerolog.Logger        // component=outbox already set by the caller
	Registerer prometheus.Registerer // may be nil
	Now        func() time.Time      // nil = time.Now
}

// DeadLetter is an event the region refused, kept for an operator.
type DeadLetter struct {
	Seq    uint64 // its Seq when it was queued
	Event  event.Event
	Reason string    // the region's answer
	Time   time.Time // when it was dead-lettered
}

// Store is the durable outbox. Its methods are safe for concurrent use.
type Store struct {
	path string
	db   *bbolt.DB
	max  int
	log  zerolog.Logger
	now  func() time.Time

	mu     sync.RWMutex // held for reading while sending on reqs; Close takes it to close reqs
	closed bool
	reqs   chan *request
	done   chan struct{} // closed when the writer has exited

	notify chan struct{}
	depth  atomic.Int64
	dead   atomic.Int64
	over   atomic.Bool   // over MaxEvents even after coalescing
	oldest atomic.Int64  // Unix ns the oldest queued event was accepted; 0 when empty
	next   atomic.Uint64 // w.nextSeq, for readers (NextSeq)

	w   writerState // owned by the writer goroutine
	met metrics
}

// writerState is touched only by the writer goroutine (and Open, before
// it starts).
type writerState struct {
	nextSeq        uint64
	sincePass      int   // events appended since the last coalescing pass
	episode        bool  // a coalescing episode is under way
	episodeDropped int64 // events coalesced during it
	overLogged     bool
	accepted       []acceptedAt // commits with events still queued, oldest first
	// failing: commits failing (a full disk), logged when it begins,
	// every commitFailLogEvery while it lasts, and when one succeeds.
	failing *lograte.Episode
}

// commitFailLogEvery is how often commits that keep failing are logged
// again. Every caller retries (the hook socket every 5 s, the
// reconciler every second): logged at each, a full disk filled the
// journal with the same error for as long as it lasted.
const commitFailLogEvery = 30 * time.Second

type acceptedAt struct {
	last uint64 // the commit's last Seq
	at   time.Time
}

// Open opens (creating if needed) the outbox file at path and starts its
// writer. The directory is created (0700) if missing. A second Open of the
// same file, from this or another process, fails with ErrLocked after a
// second.
func Open(path string, opts Options) (*Store, error) {
	s := &Store{
		path:   path,
		max:    opts.MaxEvents,
		log:    opts.Logger,
		now:    opts.Now,
		reqs:   make(chan *request, requestQueue),
		done:   make(chan struct{}),
		notify: make(chan struct{}, 1),
	}
	if s.max <= 0 {
		s.max = DefaultMaxEvents
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.w.failing = lograte.NewEpisode(commitFailLogEvery, s.now)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)

	db, err := openDB(path)
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("outbox %s: %w", path, ErrLocked)
		}
		if errors.Is(err, ErrDamaged) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox %s: %w", path, err)
	}
	s.db = db
	if err := s.loadChecked(path); err != nil {
		db.Close()
		if errors.Is(err, ErrDamaged) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox %s: %w", path, err)
	}
	if created {
		// The new file's directory entry must survive a power cut too.
		if err := syncDir(dir); err != nil {
			db.Close()
			return nil, fmt.Errorf("outbox %s: %w", path, err)
		}
	}
	s.met = newMetrics(s)
	if err := s.met.register(opts.Registerer); err != nil {
		db.Close()
		return nil, fmt.Errorf("outbox: metrics: %w", err)
	}
	go s.writer()
	s.log.Info().Str("path", path).Int64("depth", s.depth.Load()).
		Int64("dead_letters", s.dead.Load()).Uint64("next_seq", s.w.nextSeq).
		Int("max_events", s.max).Msg("outbox open")
	return s, nil
}

// loadChecked is load, a damaged page an error.
func (s *Store) loadChecked(path string) (err error) {
	defer damaged(path, &err)
	return s.load()
}

// openDB opens the bbolt file, a damaged page an error.
func openDB(path string) (db *bbolt.DB, err error) {
	defer damaged(path, &err)
	return bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:      time.Second,
		FreelistType: bbolt.FreelistMapType,
		// Address space only (the file does not grow with it): a file
		// that grows within it is never mapped again. bbolt otherwise
		// maps a growing file anew at each doubling, and every page
		// read after that faults in again (a new agent's first minutes
		// under load: the reconciler's records and the queue grow).
		InitialMmapSize: initialMmap,
	})
}

// load creates the buckets, checks the format and reads the counters.
func (s *Store) load() error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketQueue, bucketDead, bucketMeta, bucketKV} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyVersion); v != nil {
			if got := keySeq(v); got != formatVersion {
				return fmt.Errorf("format version %d, this program reads %d", got, formatVersion)
			}
		} else if err := meta.Put(keyVersion, seqKey(formatVersion)); err != nil {
			return err
		}
		s.w.nextSeq = 1
		if v := meta.Get(keyNextSeq); v != nil {
			s.w.nextSeq = keySeq(v)
		}
		// The counter is written in every transaction that assigns a Seq;
		// the queue's last key is a second witness should it ever lag.
		if k, _ := tx.Bucket(bucketQueue).Cursor().Last(); k != nil && keySeq(k) >= s.w.nextSeq {
			s.w.nextSeq = keySeq(k) + 1
		}
		if k, _ := tx.Bucket(bucketDead).Cursor().Last(); k != nil && keySeq(k) >= s.w.nextSeq {
			s.w.nextSeq = keySeq(k) + 1
		}
		s.next.Store(s.w.nextSeq)
		s.depth.Store(int64(tx.Bucket(bucketQueue).Stats().KeyN))
		s.dead.Store(int64(tx.Bucket(bucketDead).Stats().KeyN))
		// Every page of the others' buckets read once too (the
		// reconciler's state): a damaged one is found here, as
		// ErrDamaged, not as a panic when its owner first reads it.
		tx.Bucket(bucketKV).Stats()
		s.w.sincePass = s.slack()
		if s.depth.Load() > 0 {
			// Acceptance times are not stored; what was queued before
			// this start counts from it.
			s.w.accepted = []acceptedAt{{last: s.w.nextSeq - 1, at: s.now()}}
			s.oldest.Store(s.w.accepted[0].at.UnixNano())
		}
		return nil
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Close stops taking requests, commits those already handed to the
// writer, and closes the file. It is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	close(s.reqs)
	s.mu.Unlock()
	<-s.done
	s.met.unregister()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("outbox %s: close: %w", s.path, err)
	}
	return nil
}

// Path is the file the store lives in.
func (s *Store) Path() string { return s.path }

// Depth is the number of queued events, without I/O.
func (s *Store) Depth() int { return int(s.depth.Load()) }

// DeadLetterCount is the number of dead letters, without I/O.
func (s *Store) DeadLetterCount() int { return int(s.dead.Load()) }

// OldestPending is when the oldest queued event was accepted (zero when
// the queue is empty), without I/O: the agent reports the time since as
// the delivery lag. Events queued before this Open count from the Open.
func (s *Store) OldestPending() time.Time {
	ns := s.oldest.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// NextSeq is the Seq the next event queued will get: every Seq below it
// was given by this file. The deliverer checks its in-flight record
// against it (a record naming Seqs a new outbox never gave is stale).
func (s *Store) NextSeq() uint64 { return s.next.Load() }

// Notify receives after each commit that added events to the queue; it
// has room for one wake-up, so a slow reader sees one, not a backlog. It
// is never closed.
func (s *Store) Notify() <-chan struct{} { return s.notify }

// Append stores evs at the end of the queue, in order, and returns once
// they are on disk (fsync'd): from then on they are accepted. Each event
// needs a valid IP (the coalescing key); otherwise nothing is stored.
//
// ctx bounds only the wait for the writer to take the request (it is
// behind when the disk is slow); once taken, Append waits for the commit
// so that an error means "not stored" (but for a failed fdatasync of the
// commit's meta page, after which the events may be queued all the same:
// doc.go, "Full disk"; retried, they are queued twice, never lost).
func (s *Store) Append(ctx context.Context, evs ...event.Event) error {
	_, err := s.AppendSeq(ctx, evs...)
	return err
}

// AppendSeq is Append returning the Seq given to evs[0]; the others follow
// one by one. With no events it returns 0 and does nothing.
func (s *Store) AppendSeq(ctx context.Context, evs ...event.Event) (uint64, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	for i := range evs {
		if !evs[i].IP.IsValid() {
			return 0, fmt.Errorf("outbox: event %d has no IP address: %w", i, event.ErrInvalid)
		}
	}
	recs := encodeEvents(evs)
	var first uint64
	err := s.do(ctx, len(recs), func(t *txn) error {
		first = t.seq
		for _, rec := range recs {
			if err := t.push(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return first, nil
}

// Peek returns up to max queued events, oldest first, without removing
// them. A record that does not decode ends the list; if it comes first,
// Peek returns a *CorruptError naming it.
func (s *Store) Peek(max int) ([]event.Queued, error) {
	if max <= 0 {
		return nil, nil
	}
	var out []event.Queued
	if n := min(max, s.Depth()); n > 0 {
		out = make([]event.Queued, 0, n) // room for all at once
	}
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketQueue).Cursor()
		for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
			e, err := decodeEvent(v)
			if err != nil {
				if len(out) == 0 {
					return &CorruptError{Seq: keySeq(k), Err: err}
				}
				break
			}
			out = append(out, event.Queued{Seq: keySeq(k), Event: e})
		}
		return nil
	})
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox %s: peek: %w", s.path, err)
	}
	return out, nil
}

// Oldest gives, for each of ips, the smallest key(event) above after[i]
// among the queued events for that address (in flight included: they
// stay queued until acked), 0 for none, and whether any event of it is
// queued at all. It reads the whole queue: the failover pair's channel
// asks it once per batch the peer is about to send (agent/pair).
func (s *Store) Oldest(ips []netip.Addr, after []int64, key func(event.Event) int64) ([]int64, []bool, error) {
	out := make([]int64, len(ips))
	queued := make([]bool, len(ips))
	if len(ips) == 0 || s.Depth() == 0 {
		return out, queued, nil
	}
	at := make(map[netip.Addr]int, len(ips))
	for i, ip := range ips {
		at[ip.Unmap()] = i
	}
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketQueue).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			h, err := decodeHead(v)
			if err != nil {
				continue
			}
			i, ok := at[h.ip.Unmap()]
			if !ok {
				continue
			}
			queued[i] = true
			e, err := decodeEvent(v)
			if err != nil {
				continue
			}
			if k := key(e); k > after[i] && (out[i] == 0 || k < out[i]) {
				out[i] = k
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("outbox %s: oldest: %w", s.path, err)
	}
	return out, queued, nil
}

// Ack removes delivered events. Seqs no longer queued (acked before, or
// coalesced away while they were in flight) are ignored.
func (s *Store) Ack(seqs ...uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	return s.do(context.Background(), 0, func(t *txn) error {
		for _, seq := range seqs {
			if err := t.remove(seq); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeadLetter atomically moves q from the queue to the dead letters, with
// the region's answer and the time. It records q even when q.Seq is no
// longer queued (coalesced away while in flight): the refusal is still
// worth an operator's look.
func (s *Store) DeadLetter(q event.Queued, reason string) error {
	rec := encodeDeadLetter(&DeadLetter{Seq: q.Seq, Event: q.Event, Reason: reason, Time: s.now()})
	return s.do(context.Background(), 0, func(t *txn) error {
		if err := t.remove(q.Seq); err != nil {
			return err
		}
		key := seqKey(q.Seq)
		if t.dead.Get(key) == nil {
			t.deadDelta++
		}
		return t.dead.Put(key, rec)
	})
}

// DeadLetters lists the dead letters, oldest Seq first.
func (s *Store) DeadLetters() ([]DeadLetter, error) {
	var out []DeadLetter
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketDead).ForEach(func(k, v []byte) error {
			d, err := decodeDeadLetter(keySeq(k), v)
			if err != nil {
				return &CorruptError{Seq: keySeq(k), Err: err}
			}
			out = append(out, d)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("outbox %s: dead letters: %w", s.path, err)
	}
	return out, nil
}

// RetryDeadLetter moves a dead letter back to the end of the queue with a
// new Seq. The event then follows anything queued for its IP since: the
// operator asked for the old event to be sent again, and it will be.
func (s *Store) RetryDeadLetter(seq uint64) error {
	return s.do(context.Background(), 0, func(t *txn) error {
		key := seqKey(seq)
		v := t.dead.Get(key)
		if v == nil {
			return fmt.Errorf("outbox: dead letter %d: %w", seq, ErrNotFound)
		}
		d, err := decodeDeadLetter(seq, v)
		if err != nil {
			return &CorruptError{Seq: seq, Err: err}
		}
		if err := t.dead.Delete(key); err != nil {
			return err
		}
		t.deadDelta--
		return t.push(encodeEvent(&d.Event))
	})
}

// DropDeadLetter deletes a dead letter for good.
func (s *Store) DropDeadLetter(seq uint64) error {
	return s.do(context.Background(), 0, func(t *txn) error {
		key := seqKey(seq)
		if t.dead.Get(key) == nil {
			return fmt.Errorf("outbox: dead letter %d: %w", seq, ErrNotFound)
		}
		t.deadDelta--
		return t.dead.Delete(key)
	})
}

// Update gives fn the bucket called name in the store's key/value area
// (created on first use), inside a write transaction, and appends the
// events fn returns to the queue in the same transaction: both commit, on
// disk, or neither does. This is how a caller keeps its own state (the
// reconciler's lease table) consistent with what it queued.
//
// fn runs on the writer goroutine, grouped with other requests, and may
// run more than once (when a request grouped with it fails, the group is
// redone without that one): it must have no effects outside b and the
// events it returns, must not keep b or its slices after returning, and
// must not call the Store. An error from fn rolls back its changes and is
// returned.
func (s *Store) Update(ctx context.Context, name string, fn func(b *bbolt.Bucket) ([]event.Event, error)) error {
	if name == "" {
		return errors.New("outbox: update: empty bucket name")
	}
	return s.do(ctx, 0, func(t *txn) error {
		b, err := t.tx.Bucket(bucketKV).CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		evs, err := fn(b)
		if err != nil {
			return err
		}
		for i := range evs {
			if !evs[i].IP.IsValid() {
				return fmt.Errorf("outbox: event %d has no IP address: %w", i, event.ErrInvalid)
			}
		}
		for _, rec := range encodeEvents(evs) {
			if err := t.push(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// Forget deletes the bucket called name from the key/value area, with
// everything in it, and reports whether there was one (a part of the
// agent no longer configured, whose state would be stale when it is
// configured again).
func (s *Store) Forget(ctx context.Context, name string) (bool, error) {
	if name == "" {
		return false, errors.New("outbox: forget: empty bucket name")
	}
	var had bool
	if err := s.View(name, func(b *bbolt.Bucket) error { had = b != nil; return nil }); err != nil || !had {
		return false, err // none: no write transaction
	}
	err := s.do(ctx, 0, func(t *txn) error {
		kv := t.tx.Bucket(bucketKV)
		had = kv.Bucket([]byte(name)) != nil
		if !had {
			return nil
		}
		return kv.DeleteBucket([]byte(name))
	})
	return had && err == nil, err
}

// KVNames lists the buckets of the key/value area whose names begin with
// prefix, in byte order.
func (s *Store) KVNames(prefix string) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketKV).Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
			if v == nil { // a bucket, not a key
				out = append(out, string(k))
			}
		}
		return nil
	})
	return out, err
}

// KVBucket is the bucket called name in the key/value area, created on
// first use, inside tx: the transaction of an Update (b.Tx()), for a
// caller that keeps a second record in the same commit (the reconciler
// queues a release job for an orphaned address with the expiry that
// reveals it).
func KVBucket(tx *bbolt.Tx, name string) (*bbolt.Bucket, error) {
	if name == "" {
		return nil, errors.New("outbox: empty bucket name")
	}
	return tx.Bucket(bucketKV).CreateBucketIfNotExists([]byte(name))
}

// View gives fn the bucket called name in the key/value area, in a
// read-only transaction; b is nil when nothing was ever stored under name.
// fn must not keep b or its slices after returning.
func (s *Store) View(name string, fn func(b *bbolt.Bucket) error) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		return fn(tx.Bucket(bucketKV).Bucket([]byte(name)))
	})
}

// do hands apply to the writer and waits for its transaction's fate.
func (s *Store) do(ctx context.Context, events int, apply func(*txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &request{apply: apply, events: events, done: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	return <-r.done
}

// commitError wraps a failed commit so that callers see the file and, on
// a full disk, can test errors.Is(err, syscall.ENOSPC) even where bbolt
// formatted the cause into a string (it does when growing the file).
func (s *Store) commitError(err error) error {
	if !errors.Is(err, syscall.ENOSPC) && strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
		return fmt.Errorf("outbox %s: commit: disk full: %w (%w)", s.path, syscall.ENOSPC, err)
	}
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("outbox %s: commit: disk full: %w", s.path, err)
	}
	return fmt.Errorf("outbox %s: commit: %w", s.path, err)
}
