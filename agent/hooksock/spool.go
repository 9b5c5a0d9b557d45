package hooksock

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/leasekeeper/leasekeeper/agent/event"
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
		if _, err := os.Lstat(draining); err == nil {
			if err := l.drainFile(ctx, draining, out); err != nil {
				return err
			}
			continue
		}
		if _, err := os.Lstat(cur); errors.Is(err, fs.ErrNotExist) {
			return nil
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
			return fmt.Errorf("spool: %w", err)
		}
	}
	return nil
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
	if l.limiter.allow(reason) {
		l.log.Warn().Str("reason", reason).Err(err).Int("bytes", n).
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

// drainFile stores every event of a taken spool file, then removes it.
func (l *Listener) drainFile(ctx context.Context, path string, out chan<- item) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	// Hooks that locked the file before it was taken finish their one
	// write first.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("spool: lock %s: %w", path, err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxSpoolLine)
	n, bad := 0, 0
	for sc.Scan() {
		ev, ok := parseSpoolLine(sc.Bytes())
		if !ok {
			bad++
			l.reject("spool-malformed", fmt.Errorf("%s: line %d is not an event", path, n+bad), len(sc.Bytes()))
			continue
		}
		select {
		case out <- item{ev: ev, ok: true}:
		case <-ctx.Done():
			return nil // the file stays; the next start drains it
		}
		n++
	}
	if err := sc.Err(); err != nil {
		// An overlong line: keep the file for an operator, go on without it.
		l.log.Error().Err(err).Str("file", path).Msg("spool file unreadable past this point; moved aside")
		os.Rename(path, path+".bad")
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
		return fmt.Errorf("spool: %w", err)
	}
	l.log.Info().Int("events", n).Int("unreadable", bad).Msg("drained the hook spool")
	return nil
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
