package deliver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultUnansweredHold is how long after the start of a request the
// previous run left unanswered a restarted agent waits before it sends
// anything (Config.UnansweredHold).
const DefaultUnansweredHold = 30 * time.Second

// Across a restart, one request at a time.
//
// MAAS applies a request's items one by one in one transaction per
// request (src/maasapiserver/v3/api/internal/handlers/leases.py, a loop
// over store_lease_info; src/maasapiserver/common/middlewares/db.py,
// TransactionMiddleware), with no timestamp comparison
// (src/maasservicelayer/services/leases.py). Nothing there stops a
// request whose client has gone, so the agent assumes it runs to the
// end, as the region stub does. An agent killed (or stopped) while a request was in
// flight cannot know when the region finishes it; had the restarted agent
// sent that batch and the next one at once, the first copy, still being
// applied, could land after the next batch: an older state after a newer
// one (make chaos: a slow region and agent restarts).
//
// So before each request the agent records its start in a small file in
// the state directory, and clears it when the request has an answer (or
// failed without reaching the region: its connection never opened). A
// start that finds the record set waits until the recorded start plus
// Config.UnansweredHold before its first request. The record is written
// without fsync: a kill -9 keeps what the page cache holds; a power loss
// can lose it (the rack's reboot outlasts the hold, but what it says of
// the events in doubt is lost with it).

// The record also keeps the request's last Seq: the events up to it may
// be applied already when the restarted agent sends them again, which
// decides how a batch of them may be split (split.go). An answer clears
// the start (nothing is in flight: no hold) but keeps the Seq the region
// may have applied (Deliverer.inDoubt): the doubt, and a batch it took
// (2xx) until its Ack is in the outbox, which a kill -9 or a stop (a full
// disk) can come before. A restart sends such events again as the head of
// its first batch, and cut in the middle (a 500 to that request) the
// first half would take the region back to older news. Once the Ack is
// stored the record goes back to the doubt alone. A record naming Seqs
// the outbox never gave (a new outbox) is ignored.

// inflight is the record's file: sixteen bytes, the start in Unix
// nanoseconds (or zero) and the request's last Seq. (Eight bytes, the
// start alone, is the record of an older version: the Seq is unknown.)
type inflight struct {
	f *os.File
}

// unanswered is what the record says of the previous run's last request.
type unanswered struct {
	set     bool      // a request was left unanswered
	started time.Time // its start; zero: unknown
	last    uint64    // its last Seq, or (set false) the last of an answered one perhaps applied; 0: unknown, or none
}

// openInflight opens (creating) the record at path and returns what it
// records. A record that does not read as one (torn, foreign) is taken
// as a request of unknown start and content: the caller holds from now.
func openInflight(path string) (*inflight, unanswered, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, unanswered{}, fmt.Errorf("in-flight record: %w", err)
	}
	var b [17]byte
	n, err := f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, unanswered{}, fmt.Errorf("in-flight record: %w", err)
	}
	in := &inflight{f: f}
	switch {
	case n == 0:
		return in, unanswered{}, nil
	case n != 8 && n != 16:
		return in, unanswered{set: true}, nil // not ours to read: hold from now
	}
	ns := int64(binary.LittleEndian.Uint64(b[:8]))
	if ns == 0 {
		if n == 16 {
			// Answered, its events perhaps applied and still queued.
			return in, unanswered{last: binary.LittleEndian.Uint64(b[8:16])}, nil
		}
		return in, unanswered{}, nil
	}
	u := unanswered{set: true, started: time.Unix(0, ns)}
	if n == 16 {
		u.last = binary.LittleEndian.Uint64(b[8:16])
	}
	return in, u, nil
}

// begin records that a request whose last Seq is last starts at t.
func (in *inflight) begin(t time.Time, last uint64) error {
	if in == nil {
		return nil
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(t.UnixNano()))
	binary.LittleEndian.PutUint64(b[8:], last)
	_, err := in.f.WriteAt(b[:], 0)
	return err
}

// answered records that no request is in flight, and that the events
// up to last may have been applied by the region (0: none).
func (in *inflight) answered(last uint64) error {
	if in == nil {
		return nil
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[8:], last)
	_, err := in.f.WriteAt(b[:], 0)
	return err
}

func (in *inflight) close() {
	if in != nil {
		in.f.Close()
	}
}

// holdUntil is when a start that found a request of the previous run
// unanswered may send: the request's start plus hold, but no later than
// now plus hold (a clock stepped back, a record of unknown start).
func holdUntil(started time.Time, known bool, now time.Time, hold time.Duration) time.Time {
	if !known {
		return time.Time{}
	}
	if started.IsZero() || started.After(now) {
		started = now
	}
	return started.Add(hold)
}

// Holding reports whether the deliverer holds its requests now: a
// request of this or the previous run went unanswered, and the region may
// still apply it (waitHold).
func (d *Deliverer) Holding() bool {
	ns := d.holdUntil.Load()
	return ns != 0 && d.now().UnixNano() < ns
}

// waitHold waits, before the first request of this run, for the region
// to be done with the one the previous run left unanswered. It reports
// false when ctx ended first.
func (d *Deliverer) waitHold(ctx context.Context) bool {
	ns := d.holdUntil.Load()
	if ns == 0 {
		return true
	}
	until := time.Unix(0, ns)
	wait := until.Sub(d.now())
	if wait > 0 {
		d.log.Warn().Time("until", until).Dur("wait", wait).
			Msg("the previous run stopped with a request to the region unanswered, which the region may still be applying; waiting before sending anything so that it cannot land after newer news")
		if !sleep(ctx, wait) {
			return false
		}
	}
	d.holdUntil.Store(0)
	return true
}
