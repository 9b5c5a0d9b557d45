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
