package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is one figure of the table: where its samples come from and its
// target.
type row struct {
	Measure string `json:"measure"`
	// Key names the samples: "figure KEY" lines, or a benchmark's name
	// (without the -N CPU suffix) and a metric's unit, "BenchmarkX/sub unit".
	Key    string  `json:"key"`
	Unit   string  `json:"unit"`
	Scale  float64 `json:"-"`      // samples are multiplied by it (0: 1)
	AtMost bool    `json:"-"`      // the target is an upper bound
	Target float64 `json:"target"` // NaN: no target (context)
}

// rows is issue 16's table, in its order.
func rows() []row {
	none := math.NaN()
	return []row{
		{Measure: "hookless: dhcpd + agent tailing, exchanges/s vs dhcpd alone (PIN=1)", Key: "hookless_ratio", Unit: "×", Target: 0.95},
		{Measure: "  agent CPU per commit dhcpd wrote, hookless, real dhcpd", Key: "hookless_agent_us_per_commit", Unit: "µs", AtMost: true, Target: 20},
		{Measure: "  agent page faults per commit in that run (each costs the page fault row below)", Key: "hookless_agent_faults_per_commit", Unit: "faults", Target: none},
		{Measure: "  agent CPU per lease event, hookless, one write per block (BenchmarkHooklessLease)", Key: "BenchmarkHooklessLease cpu-µs/event", Unit: "µs", AtMost: true, Target: 20},
		{Measure: "  heap allocated per lease event in that run (steady where the CPU figure is noisy)", Key: "BenchmarkHooklessLease B/event", Unit: "B", Target: none},
		{Measure: "  allocations per lease event in that run", Key: "BenchmarkHooklessLease allocs/event", Unit: "allocs", Target: none},
		{Measure: "  page faults per lease event in that run", Key: "BenchmarkHooklessLease faults/event", Unit: "faults", Target: none},
		{Measure: "  the same at 500 leases/s, where a read finds a few blocks (BenchmarkHooklessLease500)", Key: "BenchmarkHooklessLease500 cpu-µs/event", Unit: "µs", Target: none},
		{Measure: "hook vs an empty Go program, agent listening", Key: "hook_listen_vs_emptygo", Unit: "×", Target: 0.95},
		{Measure: "hook vs an empty Go program, spooling", Key: "hook_spool_vs_emptygo", Unit: "×", Target: 0.90},
		{Measure: "  empty Go program vs /bin/true (the floor)", Key: "emptygo_vs_true", Unit: "×", Target: none},
		{Measure: "hook's own run vs an empty Go program's, interleaved, agent listening", Key: "hook_start_listen_vs_emptygo", Unit: "×", Target: 0.95},
		{Measure: "hook's own run vs an empty Go program's, interleaved, spooling", Key: "hook_start_spool_vs_emptygo", Unit: "×", Target: 0.90},
		{Measure: "  a Go program that only sends the hook's datagram as the hook does, interleaved (delivery's floor)", Key: "hook_start_send_vs_emptygo", Unit: "×", Target: none},
		{Measure: "  the same program sending through package syscall (its initialisers run too)", Key: "hook_start_sendsys_vs_emptygo", Unit: "×", Target: none},
		{Measure: "  the empty Go program vs other copies of itself, interleaved (the noise floor)", Key: "hook_start_empty2_vs_emptygo", Unit: "×", Target: none},
		{Measure: "ingest, hook datagrams → durable outbox (max_dgram_qlen 512)", Key: "BenchmarkIngest/max_dgram_qlen=512/region=down events/s", Unit: "events/s", Target: 50000},
		{Measure: "  agent cores at that rate (the most it takes; all the senders push)", Key: "BenchmarkIngest/max_dgram_qlen=512/region=down agent-cores", Unit: "cores", Target: none},
		{Measure: "agent cores ingesting 50 000 events/s offered (max_dgram_qlen 512)", Key: "BenchmarkIngest/max_dgram_qlen=512/region=down/offered=50000 agent-cores", Unit: "cores", AtMost: true, Target: 1},
		{Measure: "  events/s stored at that offer", Key: "BenchmarkIngest/max_dgram_qlen=512/region=down/offered=50000 events/s", Unit: "events/s", Target: none},
		{Measure: "region back after an outage (OUTAGE, 60 s) → first delivery, batch_max 100", Key: "BenchmarkDrain/batch_max=100 s-to-first-delivery", Unit: "s", AtMost: true, Target: 1},
		{Measure: "region back after an outage (OUTAGE, 60 s) → first delivery, batch_max 1000", Key: "BenchmarkDrain/batch_max=1000 s-to-first-delivery", Unit: "s", AtMost: true, Target: 1},
		{Measure: "  the same, the API server down behind MAAS's nginx (port 5242 accepts, then closes)", Key: "BenchmarkDrain/proxy,batch_max=1000 s-to-first-delivery", Unit: "s", AtMost: true, Target: 1},
		{Measure: "event latency hook → region, p50", Key: "BenchmarkLatency p50-ms", Unit: "ms", AtMost: true, Target: 5},
		{Measure: "event latency hook → region, p99", Key: "BenchmarkLatency p99-ms", Unit: "ms", AtMost: true, Target: 50},
		{Measure: "  of which the hook's own run (process start and exit), p50", Key: "BenchmarkLatency hook-exec-p50-ms", Unit: "ms", Target: none},
		{Measure: "  hook exit → region, p50 (the agent's part)", Key: "BenchmarkLatency after-hook-p50-ms", Unit: "ms", Target: none},
		{Measure: "  hook exit → region, p99", Key: "BenchmarkLatency after-hook-p99-ms", Unit: "ms", Target: none},
		{Measure: "  floor: an empty Go program's run (fork, exec, exit), interleaved with the hook's", Key: "emptygo_run_ms", Unit: "ms", Target: none},
		{Measure: "hookless: a lone lease's write to dhcpd.leases → region, p50 (1 lease/s)", Key: "BenchmarkHooklessLatency/rate=1 p50-ms", Unit: "ms", Target: none},
		{Measure: "  the same under load (100 leases/s: a busy round, 250 ms, between reads), p50", Key: "BenchmarkHooklessLatency/rate=100 p50-ms", Unit: "ms", Target: none},
		{Measure: "  the same under load, p99", Key: "BenchmarkHooklessLatency/rate=100 p99-ms", Unit: "ms", Target: none},
		{Measure: "machine: a fresh page's first touch, a minor page fault (BenchmarkPageFault)", Key: "BenchmarkPageFault µs/fault", Unit: "µs", Target: none},
	}
}

// benchLine is a Go benchmark result: name, -N suffix, iterations, then
// value unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse collects the samples of every key, in the order read.
func parse(in io.Reader) (map[string][]float64, error) {
	out := map[string][]float64{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if f := strings.Fields(line); len(f) == 3 && f[0] == "figure" {
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", line, err)
			}
			out[f[1]] = append(out[f[1]], v)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			k := m[1] + " " + f[i+1]
			out[k] = append(out[k], v)
		}
	}
	return out, sc.Err()
}

// figure is one row with its samples.
type figure struct {
	row
	Runs   []float64 `json:"runs"`
	Median *float64  `json:"median"` // nil: no sample
	Met    *bool     `json:"met"`    // nil: no sample or no target
	Goal   string    `json:"goal"`   // "≥ 0.95", "≤ 20"
}

type table struct {
	Generated string   `json:"generated"`
	Figures   []figure `json:"figures"`
}

func build(rs []row, samples map[string][]float64, now time.Time) table {
	t := table{Generated: now.UTC().Format(time.RFC3339)}
	for _, r := range rs {
		f := figure{row: r, Runs: []float64{}}
		scale := r.Scale
		if scale == 0 {
			scale = 1
		}
		for _, v := range samples[r.Key] {
			f.Runs = append(f.Runs, v*scale)
		}
		if !math.IsNaN(r.Target) {
			f.Goal = "≥ " + num(r.Target)
			if r.AtMost {
				f.Goal = "≤ " + num(r.Target)
			}
		} else {
			f.Target = 0
		}
		if len(f.Runs) > 0 {
			m := median(f.Runs)
			f.Median = &m
			if f.Goal != "" {
				met := m >= r.Target
				if r.AtMost {
					met = m <= r.Target
				}
				f.Met = &met
			}
		}
		t.Figures = append(t.Figures, f)
	}
	return t
}

// median is the middle sample (the mean of the two middle ones for an
// even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func (t table) write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%-84s %12s %-9s %-10s %-4s %s\n", "measure", "median", "unit", "target", "met", "runs")
	for _, f := range t.Figures {
		med, met := "-", ""
		if f.Median != nil {
			med = num(*f.Median)
		}
		if f.Met != nil {
			met = "no"
			if *f.Met {
				met = "yes"
			}
		}
		runs := make([]string, len(f.Runs))
		for i, v := range f.Runs {
			runs[i] = num(v)
		}
		fmt.Fprintf(bw, "%-84s %12s %-9s %-10s %-4s %s\n", f.Measure, med, f.Unit, f.Goal, met, strings.Join(runs, " "))
	}
	return bw.Flush()
}

func (t table) writeJSON(path string) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
