package lograte

import (
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(10*time.Second, func() time.Time { return now })
	type step struct {
		advance    time.Duration
		key        string
		ok         bool
		suppressed int
	}
	for i, s := range []step{
		{0, "a", true, 0},
		{time.Second, "a", false, 0},
		{time.Second, "a", false, 0},
		{0, "b", true, 0}, // keys are independent
		{8 * time.Second, "a", true, 2},
		{time.Second, "a", false, 0},
		{10 * time.Second, "a", true, 1},
		{10 * time.Second, "a", true, 0},
	} {
		now = now.Add(s.advance)
		ok, n := l.Allow(s.key)
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d (%s): (%v, %d), want (%v, %d)", i, s.key, ok, n, s.ok, s.suppressed)
		}
	}
}

// TestEpisode: a lasting failure is logged when it begins, then at most
// once per interval with the count left out, and its end once.
func TestEpisode(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start
	e := NewEpisode(30*time.Second, func() time.Time { return now })
	if ended, _, _ := e.End(); ended {
		t.Error("End with no episode reports one")
	}
	type step struct {
		advance    time.Duration
		log        bool
		suppressed int
	}
	for i, s := range []step{
		{0, true, 0}, // begins
		{5 * time.Second, false, 0},
		{5 * time.Second, false, 0},
		{20 * time.Second, true, 2}, // 30s after the first line
		{5 * time.Second, false, 0},
		{25 * time.Second, true, 1},
	} {
		now = now.Add(s.advance)
		log, n, since := e.Fail()
		if log != s.log || n != s.suppressed || !since.Equal(start) {
			t.Errorf("step %d: (%v, %d, %v), want (%v, %d, %v)", i, log, n, since, s.log, s.suppressed, start)
		}
	}
	if ended, since, n := e.End(); !ended || !since.Equal(start) || n != 6 {
		t.Errorf("End = (%v, %v, %d), want (true, %v, 6)", ended, since, n, start)
	}
	if ended, _, _ := e.End(); ended {
		t.Error("a second End reports the episode again")
	}
	// The next failure begins a new episode, logged at once.
	now = now.Add(time.Second)
	if log, n, since := e.Fail(); !log || n != 0 || !since.Equal(now) {
		t.Errorf("new episode: (%v, %d, %v)", log, n, since)
	}
}
