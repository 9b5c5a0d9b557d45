package outbox

import (
	"bytes"
	"fmt"
	"runtime"
	"time"

	"go.etcd.io/bbolt"
)

// request is one caller's change, applied inside a group transaction.
type request struct {
	apply  func(*txn) error
	events int        // events it appends, to bound a group's size
	done   chan error // receives the transaction's fate; buffered
}

// txn is a group transaction in progress: the open buckets and what the
// transaction changes in the store's counters, applied only once it has
// committed.
type txn struct {
	tx          *bbolt.Tx
	queue, dead *bbolt.Bucket
	qc          *bbolt.Cursor // remove's cursor on queue; nil until its first use
	seq         uint64        // next Seq to assign
	head        uint64        // the first queued Seq once applied; 0 when empty
	depthDelta  int64
	deadDelta   int64
	pushed      int // events added to the queue
}

// push appends one encoded event with the next Seq.
func (t *txn) push(rec []byte) error {
	if err := t.queue.Put(seqKey(t.seq), rec); err != nil {
		return err
	}
	t.seq++
	t.depthDelta++
	t.pushed++
	return nil
}

// remove deletes seq from the queue if it is there.
//
// It seeks with one cursor for the whole transaction and deletes at it,
// which is what bbolt's Get and Delete each do with a cursor of their
// own: a cursor's first seeks grow its path slice, so an ack of a
// 100-event batch made some 600 allocations (most of what the agent
// allocated per hookless lease, by count) and searched the tree twice
// per event; now it searches once and allocates nothing after the
// first seek. A seek starts from the root through the transaction's
// nodes, so it sees what Put and Delete changed since the last one.
func (t *txn) remove(seq uint64) error {
	var buf [8]byte
	key := appendSeqKey(buf[:0], seq)
	if t.qc == nil {
		t.qc = t.queue.Cursor()
	}
	if k, _ := t.qc.Seek(key); !bytes.Equal(k, key) {
		return nil
	}
	if err := t.qc.Delete(); err != nil {
		return err
	}
	t.depthDelta--
	return nil
}

// writer is the group commit: it takes the first pending request, then
// everything else already pending (up to maxGroupEvents events), applies
// them all in one bbolt transaction and commits it with one fsync. While
// it waits on the disk, new requests pile up in s.reqs and form the next
// group, so the group size follows the load with no timer and no added
// latency when idle.
func (s *Store) writer() {
	defer close(s.done)
	group := make([]*request, 0, 256)
	for r := range s.reqs {
		group = append(group[:0], r)
		n := r.events
		// Let the callers the last commit just answered send their next
		// request first: on a loaded machine they are runnable but not
		// yet running, and would otherwise miss this group.
		runtime.Gosched()
	drain:
		for n < maxGroupEvents {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				group = append(group, r)
				n += r.events
			default:
				break drain
			}
		}
		s.commit(group)
		clear(group)
	}
}

// commit applies group in one transaction and tells every request its
// fate. A request whose apply fails is answered with its error and the
// group redone without it. If the commit itself fails (a full disk, an I/O
// error), each request is retried alone, so one too large for the space
// left does not sink the others (an Ack frees space; an Append of many
// events may not fit where one of a single event does).
func (s *Store) commit(group []*request) {
	coalesce := true
	for len(group) > 0 {
		start := time.Now()
		t, err := s.begin()
		if err != nil {
			s.fail(group, s.commitError(err))
			return
		}
		failed, ferr := -1, error(nil)
		for i, r := range group {
			if ferr = safeApply(r.apply, t); ferr != nil {
				failed = i
				break
			}
		}
		if failed >= 0 {
			_ = t.tx.Rollback()
			group[failed].done <- ferr
			group = append(group[:failed:failed], group[failed+1:]...)
			continue
		}
		var dropped int64
		pass := coalesce && s.passDue(t)
		if pass {
			if dropped, err = s.coalescePass(t); err != nil {
				_ = t.tx.Rollback()
				s.log.Error().Err(err).Msg("coalescing pass failed; committing without it")
				coalesce = false
				continue
			}
		}
		if k, _ := t.queue.Cursor().First(); k != nil {
			t.head = keySeq(k)
		}
		if t.seq != s.w.nextSeq {
			if err := t.tx.Bucket(bucketMeta).Put(keyNextSeq, seqKey(t.seq)); err != nil {
				_ = t.tx.Rollback()
				s.fail(group, s.commitError(err))
				return
			}
		}
		err = t.tx.Commit()
		s.met.commitSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			s.met.commitErrors.Inc()
			s.resync()
			if len(group) > 1 {
				for _, r := range group {
					s.commit([]*request{r})
				}
				return
			}
			err = s.commitError(err)
			if log, left, since := s.w.failing.Fail(); log {
				s.log.Error().Err(err).Time("failing_since", since).Int("not_logged_since_last", left).
					Msgf("outbox commit failed (logged again every %s while commits fail)", commitFailLogEvery)
			}
			s.fail(group, err)
			return
		}
		if ended, since, n := s.w.failing.End(); ended {
			s.log.Info().Int("failures", n).Dur("failed_for", s.now().Sub(since)).Msg("outbox commits succeed again")
		}
		s.committed(t, pass, dropped)
		for _, r := range group {
			r.done <- nil
		}
		return
	}
}

// resync reads the counters again after a failed commit. A commit whose
// meta page was written but whose fdatasync failed (an I/O error, or a
// full thin-provisioned or network file system at writeback) fails, yet
// bbolt reads that page from then on (the page cache holds it): the
// transaction is there all the same. Its Seqs must not be given again:
// the next commit would write other events over them, and the Ack of a
// batch that held the ghosts would delete events accepted since, never
// sent. The requests are still told they failed; retried, their events
// are queued twice, which the reconciler and the region take as the
// same news.
func (s *Store) resync() {
	err := s.db.View(func(tx *bbolt.Tx) error {
		next := s.w.nextSeq
		if v := tx.Bucket(bucketMeta).Get(keyNextSeq); v != nil && keySeq(v) > next {
			next = keySeq(v)
		}
		for _, b := range [][]byte{bucketQueue, bucketDead} {
			if k, _ := tx.Bucket(b).Cursor().Last(); k != nil && keySeq(k) >= next {
				next = keySeq(k) + 1
			}
		}
		if next != s.w.nextSeq {
			s.log.Error().Uint64("next_seq", s.w.nextSeq).Uint64("on_disk", next).
				Msg("a failed outbox commit is there all the same (its fdatasync failed after its meta page was written): its events are kept, their requests told they failed; the disk may be failing")
			s.w.accepted = append(s.w.accepted, acceptedAt{last: next - 1, at: s.now()})
			if s.oldest.Load() == 0 {
				s.oldest.Store(s.now().UnixNano())
			}
			s.w.nextSeq = next
			s.next.Store(next)
			select {
			case s.notify <- struct{}{}:
			default:
			}
		}
		s.depth.Store(int64(tx.Bucket(bucketQueue).Stats().KeyN))
		s.dead.Store(int64(tx.Bucket(bucketDead).Stats().KeyN))
		return nil
	})
	if err != nil {
		s.log.Error().Err(err).Msg("cannot read the outbox's counters again after a failed commit")
	}
}

func (s *Store) fail(group []*request, err error) {
	for _, r := range group {
		r.done <- err
	}
}

func safeApply(apply func(*txn) error, t *txn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("outbox: request panicked: %v", p)
		}
	}()
	return apply(t)
}

func (s *Store) begin() (*txn, error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		return nil, err
	}
	t := &txn{
		tx:    tx,
		queue: tx.Bucket(bucketQueue),
		dead:  tx.Bucket(bucketDead),
		seq:   s.w.nextSeq,
	}
	// Keys are appended in increasing order: full pages, fewer of them.
	t.queue.FillPercent = 1.0
	return t, nil
}

// committed updates the counters, metrics and logs after a commit.
func (s *Store) committed(t *txn, pass bool, dropped int64) {
	s.w.nextSeq = t.seq
	s.next.Store(t.seq)
	depth := s.depth.Add(t.depthDelta)
	s.dead.Add(t.deadDelta)
	s.trackOldest(t)
	if t.pushed > 0 {
		s.w.sincePass += t.pushed
		s.met.appended.Add(float64(t.pushed))
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
	max := int64(s.max)
	if pass {
		s.w.sincePass = 0
	}
	if dropped > 0 {
		s.w.episodeDropped += dropped
		s.met.coalesced.Add(float64(dropped))
		if !s.w.episode {
			s.w.episode = true
			s.log.Warn().Int64("depth", depth).Int("max_events", s.max).Int64("coalesced", dropped).
				Msg("outbox full: coalescing queued events per IP (the region gets each IP's latest state)")
		} else {
			s.log.Debug().Int64("depth", depth).Int64("coalesced", dropped).Msg("outbox coalesced")
		}
	}
	if depth > max && pass {
		// A pass just ran and the queue is still over its bound: more
		// distinct IPs (or MACs per IP) than MaxEvents.
		s.over.Store(true)
		if !s.w.overLogged {
			s.w.overLogged = true
			s.log.Error().Int64("depth", depth).Int("max_events", s.max).
				Msg("outbox over its bound even after coalescing (more distinct IPs than max_events); still accepting, nothing is dropped")
		}
	}
	if depth <= max {
		s.over.Store(false)
	}
	// The episode ends when deliveries, not a pass, bring the queue down
	// to half its bound: the region is keeping up again.
	if s.w.episode && !pass && t.depthDelta < 0 && depth <= max/2 {
		s.log.Info().Int64("depth", depth).Int64("coalesced", s.w.episodeDropped).
			Msg("outbox drained below half its bound; coalescing episode over")
		s.w.episode, s.w.episodeDropped, s.w.overLogged = false, 0, false
	}
}

// slack is how many events must be appended between two coalescing passes
// once the queue is over its bound, so that a queue of mostly distinct IPs
// is not rescanned on every commit: a pass reads the whole queue.
func (s *Store) slack() int { return max(1, s.max/8) }

func (s *Store) passDue(t *txn) bool {
	return s.depth.Load()+t.depthDelta > int64(s.max) && t.pushed > 0 &&
		s.w.sincePass+t.pushed >= s.slack()
}

// coalescePass drops, inside t, every queued event coalesceKeep does not
// keep. It decodes only each record's head.
func (s *Store) coalescePass(t *txn) (int64, error) {
	n := s.depth.Load() + t.depthDelta
	keys := make([]uint64, 0, n)
	heads := make([]head, 0, n)
	c := t.queue.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		h, err := decodeHead(v)
		if err != nil {
			// Keep what does not decode; Peek reports it.
			continue
		}
		keys = append(keys, keySeq(k))
		heads = append(heads, h)
	}
	keep := coalesceKeep(heads)
	var dropped int64
	for i, k := range keep {
		if k {
			continue
		}
		if err := t.queue.Delete(seqKey(keys[i])); err != nil {
			return 0, err
		}
		dropped++
	}
	t.depthDelta -= dropped
	return dropped, nil
}

// trackOldest keeps, without I/O, when the oldest queued event was
// accepted: one (last Seq, commit time) per commit that queued events,
// dropped once the queue's head has passed it.
func (s *Store) trackOldest(t *txn) {
	if t.pushed > 0 {
		s.w.accepted = append(s.w.accepted, acceptedAt{last: t.seq - 1, at: s.now()})
	}
	i := 0
	for i < len(s.w.accepted) && (t.head == 0 || s.w.accepted[i].last < t.head) {
		i++
	}
	s.w.accepted = s.w.accepted[i:]
	if len(s.w.accepted) == 0 {
		s.w.accepted = nil // let the array go
		s.oldest.Store(0)
	} else {
		s.oldest.Store(s.w.accepted[0].at.UnixNano())
	}
}
