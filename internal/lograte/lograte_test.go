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
