package hooksock

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/leasesfile"
	"github.com/leasekeeper/leasekeeper/internal/safefile"
)

// The spool protocol, shared with leasekeeper-hook (hook/deliver.go):
// a hook that cannot send appends its datagram as one line to spoolFile
// with a single O_APPEND write under a shared flock, and keeps appending
// there while the file exists, so spooled events stay ahead of later ones.
// The agent takes the file by renaming it to drainFile, waits for writers
// with an exclusive flock, stores every line in order, and only then
// removes it. A crash before the removal drains the file again at the
// next start: no loss, at most duplicates.
const (
	spoolFile = "events.jsonl"
	drainFile = "events.jsonl.draining"
)

// drainSpool moves everything spooled into the sink, oldest first.
func (l *Listener) drainSpool(ctx context.Context, sk *sock, out chan<- item) error {
	if l.cfg.Spool == "" {
		return nil
	}
	cur := filepath.Join(l.cfg.Spool, spoolFile)
	draining := filepath.Join(l.cfg.Spool, drainFile)
	for ctx.Err() == nil {
		// A drain that did not finish left the oldest events.
		_, err := os.Lstat(draining)
		switch {
		case err == nil:
			if err := l.drainFile(ctx, draining, out); err != nil {
				return l.spoolTrouble(err)
			}
			continue
		case !errors.Is(err, fs.ErrNotExist):
			return l.spoolTrouble(&spoolError{err})
		}
		l.progress = spoolProgress{} // no taken file: nothing to resume
		_, err = os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			l.spoolFine()
			return nil
		case err != nil:
			return l.spoolTrouble(&spoolError{err})
		}
		// Datagrams already queued were sent before the first spooled
		// one (the hooks are sequential, and stick to the spool once it
		// exists): they go first, and are stored and off the socket
		// before the file is taken. Were they still on it when a crash
		// came after the spool's lines were stored, the next start would
		// drain the lines again and only then replay them, older events
		// after newer ones.
		if err := l.readQueued(ctx, sk, out); err != nil {
			return err
		}
		if err := stored(ctx, out); err != nil || ctx.Err() != nil {
			return err
		}
		if err := os.Rename(cur, draining); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return l.spoolTrouble(&spoolError{err})
		}
	}
	return nil
}

// spoolError is a spool the agent cannot drain now: a file or directory
// its user may not read or rename, an I/O error. Its events stay where
// they are and the drain is tried again a second later; the agent goes
// on with everything else.
type spoolError struct{ err error }

func (e *spoolError) Error() string { return "spool: " + e.err.Error() }
func (e *spoolError) Unwrap() error { return e.err }

// spoolTrouble takes err from a drain: a spoolError is told (once when it
// begins, every storeFailLogEvery while it lasts) and shown in
// leasekeeper_hook_spool_unreadable, and nil returned; any other error
// (the outbox, the socket) is returned.
func (l *Listener) spoolTrouble(err error) error {
	var se *spoolError
	if !errors.As(err, &se) {
		return err
	}
	l.m.spoolUnreadable.Set(1)
	l.spoolBad = true
	if log, left, since := l.spoolFailing.Fail(); log {
		hint := "an I/O error: check the file system"
		switch {
		case errors.Is(se.err, syscall.ENOTDIR), errors.Is(se.err, syscall.ELOOP), errors.Is(se.err, syscall.ENAMETOOLONG):
			hint = fmt.Sprintf("hook.spool (%s) is not a directory the agent can reach: set it to one (the hooks' --spool, or LEASEKEEPER_SPOOL, must name the same)", l.cfg.Spool)
		case errors.Is(se.err, fs.ErrPermission):
			hint = fmt.Sprintf("the agent's user may not read or rename there: the directory must be writable by its group and the files readable by it (the package makes %s mode 2770, group leasekeeper: chgrp -R leasekeeper %s; chmod 2770 %s)", l.cfg.Spool, l.cfg.Spool, l.cfg.Spool)
		}
		l.log.Error().Err(se.err).Str("spool", l.cfg.Spool).Time("failing_since", since).Int("not_logged_since_last", left).
			Msgf("cannot drain the hook spool: %s; its events wait there (the hooks keep appending to it) and the reconciler still follows dhcpd.leases (in a failover pair, the peer's questions go unanswered until the spool drains); retrying every second, logged again every %s while it lasts", hint, storeFailLogEvery)
	}
	return nil
}

// spoolFine records a drain that went through.
func (l *Listener) spoolFine() {
	l.m.spoolUnreadable.Set(0)
	l.spoolBad = false
	if ended, since, n := l.spoolFailing.End(); ended {
		l.log.Info().Int("failures", n).Dur("failed_for", l.now().Sub(since)).Msg("the hook spool drains again")
	}
}

// spoolProgress is how many lines of one taken spool file were handed
// on: a drain resumes after them. The file is named by its inode, size
// and modification time, and forgotten once no file is taken.
type spoolProgress struct {
	id    leasesfile.ID
	size  int64
	mtime int64
	lines int
}

// progressOf is the progress record of an open taken file, lines 0.
func progressOf(f *os.File) spoolProgress {
	fi, err := f.Stat()
	if err != nil {
		return spoolProgress{}
	}
	return spoolProgress{id: leasesfile.IDOf(fi), size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}

// same reports whether p and q name the same file as it was.
func (p spoolProgress) same(q spoolProgress) bool {
	return p.id != (leasesfile.ID{}) && p.id == q.id && p.size == q.size && p.mtime == q.mtime
}

// readQueued hands on the datagrams waiting in the socket, without
// waiting for more.
func (l *Listener) readQueued(ctx context.Context, sk *sock, out chan<- item) error {
	buf := make([]byte, MaxDatagram+1)
	oob := make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
	for {
		n, oobn, flags, err := sk.next(ctx, buf, oob, 0)
		if err == errNoData {
			return nil
		}
		if err != nil {
			return err
		}
		l.handle(ctx, buf[:n], oob[:oobn], flags, out)
	}
}

// handle checks one datagram and hands it on; a refused one is counted,
// and handed on only to be consumed in its turn.
func (l *Listener) handle(ctx context.Context, b, oob []byte, flags int, out chan<- item) {
	ev, reason, err := l.decode(b, oob, flags)
	it := item{ev: ev, ok: reason == "", dgrams: 1}
	if reason != "" {
		l.reject(reason, err, len(b))
	}
	select {
	case out <- it:
	case <-ctx.Done():
	}
}

func (l *Listener) reject(reason string, err error, n int) {
	l.m.rejected.WithLabelValues(reason).Inc()
	if ok, left := l.limiter.Allow(reason); ok {
		l.log.Warn().Str("reason", reason).Err(err).Int("bytes", n).Int("not_logged_since_last", left).
			Msg("hook datagram rejected (further ones of this kind are counted in leasekeeper_rejected_datagrams_total and logged every 10s)")
	}
}

// stored waits until everything handed on so far is stored and its
// datagrams consumed. It returns nil at once when ctx ends (check ctx).
func stored(ctx context.Context, out chan<- item) error {
	done := make(chan error, 1)
	select {
	case out <- item{done: done}:
	case <-ctx.Done():
		return nil
	}
	return <-done
}

// maxSpoolLine bounds a spool line (a datagram is at most MaxDatagram).
const maxSpoolLine = 2 * MaxDatagram

// refusedError is a spool file the agent will not read: not a regular
// file (a symbolic link, a FIFO, a device), or written by a user the hook
// socket would not accept either. It is moved aside, never read.
type refusedError struct{ why string }

func (e *refusedError) Error() string { return e.why }

// openSpool opens a taken spool file for reading without following a
// symbolic link and without blocking (a FIFO would block the open), then
// checks what it opened: a regular file, owned by a uid the hook socket
// accepts (any, when that list is empty, as for the socket), not writable
// by others.
func (l *Listener) openSpool(path string) (*os.File, error) {
	f, err := safefile.Open(path, safefile.NoFollow)
	if errors.Is(err, safefile.ErrSymlink) || errors.Is(err, safefile.ErrNotRegular) {
		return nil, &refusedError{err.Error()}
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	var why string
	switch {
	case st == nil:
		why = "no owner information"
	case len(l.cfg.AllowedUIDs) > 0 && !slices.Contains(l.cfg.AllowedUIDs, st.Uid):
		why = fmt.Sprintf("owned by uid %d, which may not send hook events (hook.allowed_uids)", st.Uid)
	case fi.Mode().Perm()&0o002 != 0:
		why = fmt.Sprintf("writable by anyone (mode %04o)", fi.Mode().Perm())
	}
	if why != "" {
		f.Close()
		return nil, &refusedError{why}
	}
	return f, nil
}

// setAside moves a refused spool file out of the drain's way under a name
// no other file has (path.refused-N), or removes it when that fails: it
// must not block the spool for good. Removing a link or a FIFO touches
// nothing it points to.
func (l *Listener) setAside(path string, why error) error {
	var err error
	for i := 1; i < 1000; i++ {
		aside := fmt.Sprintf("%s.refused-%d", path, i)
		err = unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, aside, unix.RENAME_NOREPLACE)
		if err == nil {
			l.reject(rejectSpoolRefused, fmt.Errorf("%s: %v; moved to %s, not read", path, why, aside), 0)
			return nil
		}
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return &spoolError{fmt.Errorf("%s: %v, and it can be neither moved aside (%v) nor removed: %w", path, why, err, rerr)}
	}
	l.reject(rejectSpoolRefused, fmt.Errorf("%s: %v; removed, not read (moving it aside failed: %v)", path, why, err), 0)
	return nil
}

// drainFile stores every event of a taken spool file, then removes it.
func (l *Listener) drainFile(ctx context.Context, path string, out chan<- item) error {
	f, err := l.openSpool(path)
	if err != nil {
		var re *refusedError
		if errors.As(err, &re) {
			return l.setAside(path, re)
		}
		return &spoolError{err}
	}
	defer f.Close()
	// Hooks that locked the file before it was taken finish their one
	// write first.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return &spoolError{fmt.Errorf("lock %s: %w", path, err)}
	}
	// A drain of this file that stopped (a read error, a removal that
	// failed) handed its first lines on already: they are not stored
	// again.
	cur, skip := progressOf(f), 0
	if cur.same(l.progress) {
		skip = l.progress.lines
	}
	l.progress = cur
	l.progress.lines = skip // a read error among the skipped lines keeps them skipped
	var rd io.Reader = f
	if l.spoolRead != nil {
		rd = l.spoolRead(f)
	}
	r := bufio.NewReaderSize(rd, maxSpoolLine)
	n, bad := 0, 0
	for lineNo := 1; ; lineNo++ {
		b, long, err := readLine(r)
		if lineNo <= skip && (err == nil || errors.Is(err, io.EOF)) {
			if errors.Is(err, io.EOF) {
				break
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			// The file stays: the next attempt resumes after the lines
			// handed on (l.progress).
			return &spoolError{fmt.Errorf("read %s: %w", path, err)}
		}
		if long > 0 {
			bad++
			l.reject(rejectSpoolOverlong, fmt.Errorf("%s: line %d is longer than %d bytes; skipped", path, lineNo, maxSpoolLine), long)
		} else if len(b) > 0 {
			ev, ok := parseSpoolLine(b)
			var terr error
			if ok {
				terr = checkTime(ev, l.now())
			}
			switch {
			case !ok:
				bad++
				l.reject(rejectSpoolMalformed, fmt.Errorf("%s: line %d is not an event", path, lineNo), len(b))
			case terr != nil:
				bad++
				l.reject(rejectSpoolTimestamp, fmt.Errorf("%s: line %d: %w", path, lineNo, terr), len(b))
			default:
				select {
				case out <- item{ev: ev, ok: true}:
				case <-ctx.Done():
					return nil // the file stays; the next start drains it
				}
				n++
			}
		}
		l.progress.lines = lineNo
		if errors.Is(err, io.EOF) {
			break
		}
	}
	done := make(chan error, 1)
	select {
	case out <- item{done: done}:
	case <-ctx.Done():
		return nil
	}
	if err := <-done; err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &spoolError{fmt.Errorf("%s, drained (%d events), cannot be removed: %w", path, n, err)}
	}
	l.progress = spoolProgress{}
	l.log.Info().Int("events", n).Int("unreadable", bad).Msg("drained the hook spool")
	return nil
}

// readLine returns the next line without its newline. A line longer than
// the reader's buffer is read through and dropped: its length comes back
// in long, and the lines after it are read as usual. At the end of the
// file it returns what is left (a last line without a newline) and io.EOF.
func readLine(r *bufio.Reader) (line []byte, long int, err error) {
	for {
		b, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long += len(b)
			continue
		case long > 0:
			return nil, long + len(b), err
		}
		return bytes.TrimSuffix(b, []byte{'\n'}), 0, err
	}
}

// parseSpoolLine reads one spooled event. A hook whose write was cut
// short (a full disk) leaves a torn line that the next hook's line is
// appended to; the event after the tear is recovered from where it starts.
func parseSpoolLine(b []byte) (event.Event, bool) {
	if ev, err := event.ParseDatagram(b, event.SourceSpool); err == nil {
		return ev, true
	}
	if i := bytes.LastIndex(b, []byte(`{"action":`)); i > 0 {
		if ev, err := event.ParseDatagram(b[i:], event.SourceSpool); err == nil {
			return ev, true
		}
	}
	return event.Event{}, false
}
