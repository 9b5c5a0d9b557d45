package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/chaos/oracle"
)

// The bounds the agent must stay within over a run (the rule 6).
// The outbox holds at most what the faults kept back (a few thousand
// events at most in a run); the lease table a few hundred addresses.
const (
	RSSBound   = 96 << 20 // peak resident set (VmHWM) of any agent process
	StateBound = 8 << 20  // the state directory (outbox, lease table, dead letters)
)

// Measures is what the run measured of the agent.
type Measures struct {
	Processes   int            // agent processes started
	Received    map[string]int // leasekeeper_events_received_total by source (hook, spool)
	Synthesised map[string]int // leasekeeper_synthesised_total by reason
	PeakRSS     int64          // bytes, the highest VmHWM of any agent process
	PeakState   int64          // bytes, the state directory's largest size
	PeakSpool   int64          // bytes, the hook spool's largest size
	Scrapes     int            // successful reads of the metrics
	// PairGaveUp: leasekeeper_pair_gave_up_total by why (a pair run):
	// waits for the peer that pair.hold_max ended.
	PairGaveUp map[string]int
	// Superseded: leasekeeper_deliver_superseded_total (a pair run):
	// queued events dropped as older than what the peer delivered since.
	Superseded int
}

// SynthesisedTotal is every synthesised event.
func (m Measures) SynthesisedTotal() int {
	n := 0
	for _, v := range m.Synthesised {
		n += v
	}
	return n
}

// Violations are the bounds exceeded, as rule "bound".
func (m Measures) Violations() []oracle.Violation {
	var out []oracle.Violation
	if m.PeakRSS > RSSBound {
		out = append(out, oracle.Violation{Rule: "bound", Evidence: fmt.Sprintf("agent peak RSS %s, bound %s", mib(m.PeakRSS), mib(RSSBound))})
	}
	if m.PeakState > StateBound {
		out = append(out, oracle.Violation{Rule: "bound", Evidence: fmt.Sprintf("state directory peak %s, bound %s", mib(m.PeakState), mib(StateBound))})
	}
	return out
}

// measure gathers Measures while the run goes.
type measure struct {
	mu     sync.Mutex
	counts map[int]map[string]float64 // agent process number → series → last value read
	rss    int64
	state  int64
	spool  int64
	procs  int
	ok     int
}

var counted = map[string]string{
	"leasekeeper_events_received_total":    "source",
	"leasekeeper_synthesised_total":        "reason",
	"leasekeeper_outbox_depth":             "",
	"leasekeeper_pair_gave_up_total":       "why",
	"leasekeeper_deliver_superseded_total": "",
}

// sample reads agent n's (pid's) peak RSS and counters.
func (r *run) sample(n, pid int) {
	hwm := vmHWM(pid)
	series := scrape(r.metrics)
	m := &r.meas
	m.mu.Lock()
	defer m.mu.Unlock()
	m.procs = max(m.procs, n)
	m.rss = max(m.rss, hwm)
	if series != nil {
		m.ok++
		if m.counts == nil {
			m.counts = map[int]map[string]float64{}
		}
		m.counts[n] = series
	}
}

// sampleLoop samples the running agent and the state and spool
// directories every second.
func (r *run) sampleLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		r.amu.Lock()
		n, pid := r.agentN, 0
		if r.agent != nil {
			pid = r.agent.Process.Pid
		}
		r.amu.Unlock()
		if pid != 0 {
			r.sample(n, pid)
		}
		st, sp := dirSize(r.state, "chaos-filler"), dirSize(r.spool, "")
		r.meas.mu.Lock()
		r.meas.state, r.meas.spool = max(r.meas.state, st), max(r.meas.spool, sp)
		r.meas.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *measure) result() Measures {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := Measures{Processes: m.procs, PeakRSS: m.rss, PeakState: m.state, PeakSpool: m.spool, Scrapes: m.ok,
		Received: map[string]int{}, Synthesised: map[string]int{}, PairGaveUp: map[string]int{}}
	for _, series := range m.counts {
		for k, v := range series {
			name, labels, _ := strings.Cut(k, "{")
			label := counted[name]
			val := labelValue(strings.TrimSuffix(labels, "}"), label)
			switch name {
			case "leasekeeper_events_received_total":
				out.Received[val] += int(v)
			case "leasekeeper_synthesised_total":
				out.Synthesised[val] += int(v)
			case "leasekeeper_pair_gave_up_total":
				if v > 0 {
					out.PairGaveUp[val] += int(v)
				}
			case "leasekeeper_deliver_superseded_total":
				out.Superseded += int(v)
			}
		}
	}
	return out
}

// scrape reads the counters in counted from the agent's /metrics; nil if
// it does not answer.
func scrape(addr string) map[string]float64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ") // a series without labels
		if _, ok := counted[name]; !ok {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if sc.Err() != nil {
		return nil
	}
	return out
}

// labelValue is label's value in a Prometheus label list (a="x",b="y").
func labelValue(labels, label string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if k == label {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// vmHWM is a process's peak resident set in bytes (0 if gone).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// dirSize is the space the files under dir take, skipping the one named
// skip.
func dirSize(dir, skip string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (skip != "" && d.Name() == skip) {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// freePort is a loopback address no one listens on now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func joinCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
