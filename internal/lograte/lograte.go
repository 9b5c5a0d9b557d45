// Package lograte keeps repeated log lines readable and cheap: one line
// per kind of event per interval, with the count of those left out since
// the last one, so that a flood (junk datagrams, wrong tokens, refused
// files) costs neither the disk nor the operator's attention, and no
// occurrence goes unaccounted.
package lograte

import (
	"sync"
	"time"
)

// Limiter lets one line per key through per interval. Keys must come from
// a fixed set (reasons, not addresses or user input): each key is kept.
// It is safe for concurrent use.
type Limiter struct {
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	last       time.Time
	suppressed int
}

// New returns a limiter on the clock now (nil: time.Now).
func New(every time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, every: every, keys: map[string]*state{}}
}

// Allow reports whether a line for key may be logged now and, when it
// may, how many were left out since the previous one.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	t := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[key]
	if s == nil {
		l.keys[key] = &state{last: t}
		return true, 0
	}
	if t.Sub(s.last) < l.every {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.last, s.suppressed = t, 0
	return true, n
}

// Episode keeps a condition that lasts — a full disk failing every
// retry — to a few lines: one when it begins, at most one per interval
// while it lasts (with how many were left out), and one when it ends.
// Unlike Limiter it has a single key and an end. It is safe for
// concurrent use.
type Episode struct {
	now   func() time.Time
	every time.Duration

	mu         sync.Mutex
	since      time.Time // zero: no episode
	last       time.Time
	failures   int // in the episode
	suppressed int // since the last line
}

// NewEpisode returns an episode tracker on the clock now (nil: time.Now).
func NewEpisode(every time.Duration, now func() time.Time) *Episode {
	if now == nil {
		now = time.Now
	}
	return &Episode{now: now, every: every}
}

// Fail records one failure. It reports whether to log it — the first of
// an episode, or the first an interval after the last line — how many
// failures were left out since the last line, and when the episode
// began.
func (e *Episode) Fail() (log bool, suppressed int, since time.Time) {
	t := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failures++
	if e.since.IsZero() {
		e.since, e.last = t, t
		return true, 0, t
	}
	if t.Sub(e.last) < e.every {
		e.suppressed++
		return false, 0, e.since
	}
	n := e.suppressed
	e.last, e.suppressed = t, 0
	return true, n, e.since
}

// End records a success. It reports whether it ends an episode (log it
// then), when that began and how many failures it had; the next failure
// begins a new one.
func (e *Episode) End() (ended bool, since time.Time, failures int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.since.IsZero() {
		return false, time.Time{}, 0
	}
	since, failures = e.since, e.failures
	e.since, e.last, e.failures, e.suppressed = time.Time{}, time.Time{}, 0, 0
	return true, since, failures
}
