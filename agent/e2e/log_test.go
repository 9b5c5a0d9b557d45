package e2e

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLogDurations: the binary logs a duration as a Go duration, as the
// configuration writes one ("startup":"12.3ms"), not as a bare number of
// milliseconds under a key the file sets in seconds (expiry_grace=30000
// for "30s"; a cold review). cmd/leasekeeper sets it for the process.
func TestLogDurations(t *testing.T) {
	e := newEnv(t)
	a := e.startAgent(agentOptions{})
	defer a.stop()
	checked := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(a.log()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		for _, k := range []string{"startup", "poll_interval", "expiry_grace"} {
			v, ok := l[k]
			if !ok {
				continue
			}
			s, isString := v.(string)
			if _, err := time.ParseDuration(s); !isString || err != nil {
				t.Errorf("%s = %v (%T) in %s; want a Go duration", k, v, v, sc.Text())
			}
			checked[k] = true
		}
	}
	for _, k := range []string{"startup", "poll_interval"} {
		if !checked[k] {
			t.Errorf("no %q in the agent's log:\n%s", k, a.logTail(20))
		}
	}
}
