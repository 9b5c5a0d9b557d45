package reconcile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/leasekeeper/leasekeeper/internal/leasesfile"
	"github.com/leasekeeper/leasekeeper/internal/safefile"
	"github.com/leasekeeper/leasekeeper/parser"
)

// fileID is a file's identity (leasesfile.ID): dhcpd's rewrite renames
// a new file onto the path, so the path keeps its name and changes its
// inode.
type fileID = leasesfile.ID

var idOf = leasesfile.IDOf

// Why a whole file was read.
const (
	whyStart     = "start"     // first read, nothing stored
	whyResume    = "resume"    // stored position no longer matches the file
	whyAppeared  = "appeared"  // the file did not exist before
	whyReplaced  = "replaced"  // renamed onto the path: dhcpd's rewrite
	whyTruncated = "truncated" // shorter than what was read, same inode
	whyRetry     = "retry"     // the last whole read had errors
)

type changeKind uint8

const (
	changeAppend   changeKind = iota + 1 // blocks appended to the file being followed
	changeSnapshot                       // a whole file
	changeFailover                       // failover state records appended (failover.go)
)

// change is one thing the follower read, in file order.
type change struct {
	kind   changeKind
	leases []*parser.Lease // changeAppend
	// duid: a server-duid statement was read (dhcpd writes one right
	// after the rename at start, none at the hourly rewrite).
	duid bool
	errs []error // syntax errors, skipped statements
	// refused: appended blocks dhcpd would refuse when it loads the file
	// (parser.Refused), described; skipped as dhcpd skips them.
	refused []string
	// unknown: appended statements dhcpd does not read in a leases file
	// (parser.Unknown), described; skipped as dhcpd skips them.
	unknown []string

	table *parser.Table // changeSnapshot
	// failover: changeFailover's records, in file order. A change of
	// its own, so that blocks before and after it are decided under the
	// pair state dhcpd had when it wrote them.
	failover []*parser.FailoverState
	// complete: the whole file decoded with no syntax error and ends at
	// a statement boundary. A snapshot that is not complete is an alert:
	// decide nothing on it.
	complete bool
	torn     bool   // not complete because the end is torn (still being written?)
	why      string // why the whole file was read
	oldFile  bool   // changeAppend: drained from the replaced file
}

// follower reads dhcpd.leases the way dhcpd writes it: appends are read
// from where the last read stopped, through an incremental decoder that
// keeps a torn last statement; a file renamed onto the path or truncated
// is read whole, after the old one is drained to its end (dhcpd appends
// the expirations it finds at start to the old file just before its
// rewrite). It does no waiting of its own: sync reads whatever is new.
// Not safe for concurrent use.
type follower struct {
	path string

	f    *os.File
	id   fileID
	base int64 // file offset the decoder started at
	dec  *parser.Decoder
	read int64 // file offset read up to

	// snap collects a whole read until the file ends at a statement
	// boundary; nil when following appends.
	snap     *parser.Table
	snapErrs []error
	snapWhy  string
	// snapDUID: a server-duid statement of dhcpd's start was read with
	// the whole read (duid). dhcpd -6 writes one at the head of every
	// rewrite, hourly too (server/mdb.c write_leases calls
	// server/mdb6.c write_leases6, which writes the server-duid before
	// the IAs), and at a start another after the rename (server/dhcpd.c);
	// dhcpd -4 writes one only at a start, after the rename. So one read
	// before any lease or IA is the start's only in a file without IAs
	// (snapLead, snapIA); one after a block, or a second one, is always
	// the start's. (Taken for starts, every hourly rewrite of a
	// dhcpd6.leases followed was logged and counted as a dhcpd restart.)
	// A DHCPv6 file with no IA at all still reads as a start.
	snapDUID   bool
	snapLead   bool // a server-duid before any lease or IA
	snapBlocks bool // a lease or an IA read
	snapIA     bool // an IA read: a DHCPv6 file
	// tornAt is the size at which a whole read was found torn at a poll;
	// a second poll at the same size reports it.
	tornAt   int64
	reported bool
	// retry: the last whole read had syntax errors; read again at the
	// next poll.
	retry bool
	// pos is the position after the last read while following: checked
	// before each read, so a file rewritten in place (truncated and
	// written again past the old size, by something other than dhcpd)
	// is noticed even when its size never dropped.
	pos     Position
	hasPos  bool
	missing bool // the path did not exist at an open since the last that succeeded (its file is news when it appears)
	// notFound: the last attempt to open the path found no file (not:
	// it failed otherwise, or succeeded).
	notFound bool
	// unlinked counts the checks in a row that found the path naming no
	// file while one is held (leasesfile.Unlinked); 0 otherwise.
	unlinked int
	// resumed: resume found the file at the stored position, which is
	// only ever stored on a file that read whole.
	resumed bool

	// buffered output of the current sync
	out     []change
	pending *change // the append change being filled
}

func newFollower(path string) *follower { return &follower{path: path} }

// absent reports whether the path named no file at the last attempt to
// open it, and none is held.
func (w *follower) absent() bool { return w.f == nil && w.notFound }

// gone reports whether the path has named no file for two checks in a
// row while one is held (read on): removed or moved away, not dhcpd's
// rewrite, whose unlink and rename are a moment apart.
func (w *follower) gone() bool { return w.f != nil && w.unlinked >= 2 }

// close releases the file.
func (w *follower) close() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}

// offset is the end of the last statement decoded: where a restarted
// reader would continue.
func (w *follower) offset() int64 {
	if w.dec == nil {
		return w.base
	}
	return w.base + w.dec.Offset()
}

// following reports whether the follower is past any whole read, so that
// what it decoded is all applied and position() describes the state.
func (w *follower) following() bool { return w.f != nil && w.snap == nil }

// position is where reading stopped, for a restart; valid while
// following a file whose whole read was complete. (After a whole read
// that had errors the state was not reconciled with this file: a
// restarted agent must read it whole again, so the position stays on
// the previous file.)
func (w *follower) position() (Position, bool) {
	return w.pos, w.hasPos && w.following() && !w.retry
}

// resume opens the file at a stored position: if the file is the one
// read (same inode, same bytes before the offset), only what follows is
// read; if dhcpd replaced it meanwhile and the old one is still there as
// dhcpd.leases~, the old one's tail is drained first (the expirations
// dhcpd appended at its start), then the new file is read whole.
func (w *follower) resume(pos *Position) ([]change, error) {
	w.out = nil
	if pos == nil {
		return w.sync(false)
	}
	f, err := safefile.Open(w.path, safefile.FollowLinks)
	if errors.Is(err, fs.ErrNotExist) {
		return w.sync(false)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if pos.matches(f, idOf(fi), fi.Size()) {
		w.f, w.id, w.base, w.read = f, idOf(fi), pos.Offset, pos.Offset
		w.dec = parser.NewDecoder()
		w.pos, w.hasPos, w.resumed = *pos, true, true
		if _, err := f.Seek(pos.Offset, io.SeekStart); err != nil {
			w.close()
			return nil, err
		}
		return w.sync(false)
	}
	f.Close()
	if old, err := safefile.Open(w.path+"~", safefile.FollowLinks); err == nil {
		if ofi, err := old.Stat(); err == nil && pos.matches(old, idOf(ofi), ofi.Size()) {
			w.f, w.id, w.base, w.read = old, idOf(ofi), pos.Offset, pos.Offset
			w.dec = parser.NewDecoder()
			if _, err := old.Seek(pos.Offset, io.SeekStart); err == nil {
				w.drain(true)
			}
		}
		if w.f != old {
			old.Close()
		}
		w.close()
	}
	if err := w.openWhole(whyResume); err != nil {
		w.notFound = errors.Is(err, fs.ErrNotExist)
		if w.notFound {
			w.missing = true
			return w.take(), nil
		}
		return w.take(), err
	}
	w.notFound = false
	err = w.readNew()
	return w.take(), err
}

// sync reads what changed since the last call. poll is set on the
// periodic safety poll: it is when a whole read found torn or bad is
// reported or retried.
func (w *follower) sync(poll bool) ([]change, error) {
	w.out = w.out[:0]
	if w.f == nil {
		why := whyStart
		if w.missing {
			why = whyAppeared
		}
		if err := w.openWhole(why); err != nil {
			w.notFound = errors.Is(err, fs.ErrNotExist)
			if w.notFound {
				w.missing = true
				return nil, nil // dhcpd never ran yet: wait for it
			}
			return nil, err
		}
		w.missing, w.notFound = false, false
		err := w.pollChecks(poll, w.readNew())
		return w.take(), err
	}
	change, size, err := leasesfile.Check(w.path, w.f, w.id, w.read)
	if change == leasesfile.Unlinked {
		w.unlinked++
	} else {
		w.unlinked = 0
	}
	switch {
	case err != nil:
		return nil, err
	case change == leasesfile.Replaced:
		// Replaced: what dhcpd appended to the old file before the
		// rename comes first. (A whole read of the old file still in
		// progress is simply superseded.)
		if w.snap == nil {
			w.drain(true)
		}
		w.close()
		if err := w.openWhole(whyReplaced); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return w.take(), nil
			}
			return w.take(), err
		}
	case change == leasesfile.Truncated || (w.following() && w.hasPos && !w.pos.matches(w.f, w.id, size)):
		// Same file (or the path is gone for a moment: the one held),
		// shorter than read, or rewritten in place before the position.
		if err := w.restart(whyTruncated); err != nil {
			return nil, err
		}
	case poll && w.retry && w.snap == nil:
		if err := w.restart(whyRetry); err != nil {
			return nil, err
		}
	}
	err = w.pollChecks(poll, w.readNew())
	return w.take(), err
}

// pollChecks reports a whole read that stayed torn from one poll to the
// next: the file is not being completed.
func (w *follower) pollChecks(poll bool, err error) error {
	if err != nil || !poll || w.snap == nil || w.reported {
		return err
	}
	if w.tornAt == w.read {
		w.reported = true
		w.out = append(w.out, change{kind: changeSnapshot, table: w.snap, complete: false, torn: true,
			why: w.snapWhy, errs: w.snapErrs})
		return nil
	}
	w.tornAt = w.read
	return nil
}

// openWhole opens the path and starts a whole read of it.
func (w *follower) openWhole(why string) error {
	f, id, err := leasesfile.Open(w.path, openLeases)
	if err != nil {
		return err
	}
	w.f, w.id = f, id
	w.startWhole(why)
	return nil
}

func openLeases(path string) (*os.File, error) { return safefile.Open(path, safefile.FollowLinks) }

// restart reads the file held again from its start.
func (w *follower) restart(why string) error {
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	w.startWhole(why)
	return nil
}

func (w *follower) startWhole(why string) {
	w.base, w.read = 0, 0
	w.dec = parser.NewDecoder()
	w.snap, w.snapErrs, w.snapWhy = parser.NewTable(), nil, why
	w.snapDUID, w.snapLead, w.snapBlocks, w.snapIA = false, false, false, false
	w.tornAt, w.reported, w.retry = -1, false, false
	w.hasPos = false
}

// drain reads the file held to its end. A statement still torn at the
// end of a replaced file will never be finished: it is dropped.
func (w *follower) drain(old bool) {
	if w.f == nil {
		return
	}
	n, err := w.dec.DecodeFrom(w.f, func(s parser.Statement, err error) { w.handle(s, err, old) })
	w.read += n
	if err != nil {
		w.appendErr(fmt.Errorf("%s: read: %w", w.path, err), old)
	}
	if old && w.torn() {
		w.appendErr(fmt.Errorf("%s (replaced): ends inside a statement at line %d: dropped", w.path, w.dec.Line()), old)
	}
	w.flush()
}

// readNew reads what was appended to the file held, and hands a whole
// read out once it ends at a statement boundary.
func (w *follower) readNew() error {
	n, err := w.dec.DecodeFrom(w.f, func(s parser.Statement, err error) { w.handle(s, err, false) })
	w.read += n
	w.flush()
	if err != nil {
		return fmt.Errorf("%s: read: %w", w.path, err)
	}
	if w.snap != nil && !w.torn() {
		complete := len(w.snapErrs) == 0
		w.out = append(w.out, change{kind: changeSnapshot, table: w.snap, complete: complete,
			why: w.snapWhy, errs: w.snapErrs, duid: w.snapDUID || w.snapLead && !w.snapIA})
		w.snap, w.snapErrs = nil, nil
		w.retry = !complete
	}
	// A position inside dhcpd's recovery from a refused block is no
	// statement boundary: a decoder restarted there would misread what
	// follows. Wait for the next one.
	if w.following() && !w.dec.Recovering() && (!w.hasPos || w.pos.Offset != w.offset()) {
		pos, err := positionOf(w.f, w.id, w.offset())
		if err != nil {
			return fmt.Errorf("%s: %w", w.path, err)
		}
		w.pos, w.hasPos = pos, true
	}
	return nil
}

// torn reports whether the decoder holds the start of a statement (not
// just blank space or a comment) at the end of what was read.
func (w *follower) torn() bool {
	_, torn := leasesfile.TornAt(w.f, w.read, w.dec.Pending(), w.dec.Line())
	return torn
}

// handle takes one decoded statement.
func (w *follower) handle(s parser.Statement, err error, old bool) {
	if w.snap != nil && !old {
		if err != nil {
			w.snapErrs = append(w.snapErrs, err)
			return
		}
		switch s.(type) {
		case *parser.ServerDUID:
			if w.snapBlocks || w.snapLead {
				w.snapDUID = true
			} else {
				w.snapLead = true
			}
		case *parser.Lease:
			w.snapBlocks = true
		case *parser.IA:
			w.snapBlocks, w.snapIA = true, true
		}
		w.snap.Apply(s)
		return
	}
	if err != nil {
		w.appendErr(err, old)
		return
	}
	if u, ok := s.(*parser.Unknown); ok {
		// Skipped, as dhcpd skips it, and told: something other than
		// dhcpd wrote to its file.
		c := w.appending(old)
		c.unknown = append(c.unknown, fmt.Sprintf("line %d: %s", u.Line, u.What))
		return
	}
	if fs, ok := s.(*parser.FailoverState); ok {
		w.flush()
		w.out = append(w.out, change{kind: changeFailover, failover: []*parser.FailoverState{fs}, oldFile: old})
		return
	}
	c := w.appending(old)
	switch s := s.(type) {
	case *parser.Lease:
		c.leases = append(c.leases, s)
	case *parser.IA:
		c.leases = append(c.leases, s.Leases...)
	case *parser.ServerDUID:
		c.duid = true
	case *parser.Refused:
		// dhcpd would refuse this block on its next start (and keep the
		// address's earlier one): nothing to decide on, but worth a line.
		c.refused = append(c.refused, s.String())
	}
}

func (w *follower) appending(old bool) *change {
	if w.pending == nil || w.pending.oldFile != old {
		w.flush()
		w.pending = &change{kind: changeAppend, oldFile: old}
	}
	return w.pending
}

func (w *follower) appendErr(err error, old bool) {
	c := w.appending(old)
	c.errs = append(c.errs, err)
}

func (w *follower) flush() {
	if w.pending != nil {
		w.out = append(w.out, *w.pending)
		w.pending = nil
	}
}

func (w *follower) take() []change {
	w.flush()
	out := w.out
	w.out = nil
	return out
}
