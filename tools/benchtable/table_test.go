package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	in := `== noise
BenchmarkHooklessLease-2   	       1	        41.79 cpu-µs/event	         1.000 events/block
BenchmarkIngest/max_dgram_qlen=512/region=down-2  1  52000 events/s  0.9 agent-cores  3.1 ms/commit
BenchmarkIngest/max_dgram_qlen=512/region=down/offered=50000-2  1  49990 events/s  0.6 agent-cores
BenchmarkDrain/batch_max=100-2 1 9000 events/s 0.41 s-to-first-delivery
figure hookless_ratio 0.97
  figure hook_listen_vs_emptygo 0.93
figure hookless_ratio 0.99
PASS
`
	got, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		want []float64
	}{
		{"BenchmarkHooklessLease cpu-µs/event", []float64{41.79}},
		{"BenchmarkHooklessLease events/block", []float64{1}},
		{"BenchmarkIngest/max_dgram_qlen=512/region=down events/s", []float64{52000}},
		{"BenchmarkIngest/max_dgram_qlen=512/region=down agent-cores", []float64{0.9}},
		{"BenchmarkIngest/max_dgram_qlen=512/region=down/offered=50000 agent-cores", []float64{0.6}},
		{"BenchmarkDrain/batch_max=100 s-to-first-delivery", []float64{0.41}},
		{"hookless_ratio", []float64{0.97, 0.99}},
		{"hook_listen_vs_emptygo", []float64{0.93}},
	} {
		if g := got[c.key]; len(g) != len(c.want) || (len(g) > 0 && g[0] != c.want[0]) || (len(g) > 1 && g[1] != c.want[1]) {
			t.Errorf("%s: %v, want %v", c.key, g, c.want)
		}
	}
	if _, err := parse(strings.NewReader("figure x notanumber\n")); err == nil {
		t.Error("a figure line with no number parsed")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestRunTargets(t *testing.T) {
	in := "figure hookless_ratio 0.90\nfigure hookless_ratio 0.97\nfigure hookless_ratio 0.96\n" +
		"BenchmarkLatency-2 1 3.5 p50-ms 60 p99-ms\n"
	path := filepath.Join(t.TempDir(), "bin", "bench.json")
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, path, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tb table
	if err := json.Unmarshal(b, &tb); err != nil {
		t.Fatal(err)
	}
	met := map[string]string{}
	for _, f := range tb.Figures {
		switch {
		case f.Met == nil:
			met[f.Key] = "-"
		case *f.Met:
			met[f.Key] = "yes"
		default:
			met[f.Key] = "no"
		}
	}
	for key, want := range map[string]string{
		"hookless_ratio":          "yes", // median 0.96 ≥ 0.95
		"BenchmarkLatency p50-ms": "yes", // 3.5 ≤ 5
		"BenchmarkLatency p99-ms": "no",  // 60 > 50
		"hook_spool_vs_emptygo":   "-",   // no sample
		"emptygo_vs_true":         "-",   // no target
	} {
		if met[key] != want {
			t.Errorf("%s: met %s, want %s", key, met[key], want)
		}
	}
	if len(tb.Figures) != len(rows()) {
		t.Errorf("%d figures in the JSON, want every row (%d)", len(tb.Figures), len(rows()))
	}
	if !strings.Contains(out.String(), "0.960") || !strings.Contains(out.String(), "0.900 0.970 0.960") {
		t.Errorf("table lacks the median or the runs:\n%s", out.String())
	}
}
