package agent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// metricsDoc is the metrics reference an operator reads; alertRules are
// the alerting rules the package ships (packaging/prometheus).
const (
	metricsDoc = "../docs/metrics.md"
	alertRules = "../packaging/prometheus/leasekeeper-alerts.yml"
)

// describedMetric is what a collector's descriptor says of a metric.
type describedMetric struct {
	name, help string
	labels     []string // variable and constant, sorted
}

// descRecorder is a Registerer that keeps every descriptor registered
// through it (the agent's parts register through promreg and, per
// family, through prometheus.WrapRegistererWith, which lands here).
type descRecorder struct {
	*prometheus.Registry
	descs []*prometheus.Desc
}

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return r.Registry.Register(c)
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// descRE reads prometheus.Desc's String (client_golang's desc.go): the
// one place its name, help and labels are exposed.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "[^"]*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// metrics merges the descriptors by name (a family's reconciler registers
// the same names with another family label), sorted by name.
func (r *descRecorder) metrics(t *testing.T) []describedMetric {
	t.Helper()
	byName := map[string]*describedMetric{}
	for _, d := range r.descs {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("a descriptor this test cannot read (client_golang's Desc.String changed?): %s", d)
		}
		name, err1 := strconv.Unquote(m[1])
		help, err2 := strconv.Unquote(m[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("descriptor %s: %v %v", d, err1, err2)
		}
		var labels []string
		for _, lp := range splitLabels(m[3]) {
			labels = append(labels, strings.SplitN(lp, "=", 2)[0])
		}
		for _, vl := range splitLabels(m[4]) {
			labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(vl, "c("), ")"))
		}
		dm := byName[name]
		if dm == nil {
			dm = &describedMetric{name: name, help: help}
			byName[name] = dm
		} else if dm.help != help {
			t.Errorf("%s registered with two helps: %q and %q", name, dm.help, help)
		}
		for _, l := range labels {
			if !slices.Contains(dm.labels, l) {
				dm.labels = append(dm.labels, l)
			}
		}
	}
	var out []describedMetric
	for _, dm := range byName {
		slices.Sort(dm.labels)
		out = append(out, *dm)
	}
	slices.SortFunc(out, func(a, b describedMetric) int { return strings.Compare(a.name, b.name) })
	return out
}

// splitLabels splits a Desc's label list at commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i, c := range s {
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if s != "" {
		out = append(out, s[start:])
	}
	return out
}

// labelValues are the values each metric's labels take in a gather:
// metric → label → values.
type labelValues map[string]map[string][]string

// assembledMetrics is every metric of an agent assembled with every
// part: dhcpd.leases and dhcpd.leases6 (a family label each), the pair
// channel and the orphans' releaser, the HTTP listener's own; and the
// label values a gather of it shows (a vector's children exist once a
// value is used, and the agent starts the ones alerts read at 0).
func assembledMetrics(t *testing.T) ([]describedMetric, labelValues) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "pair.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.State.Dir = filepath.Join(dir, "state")
	cfg.Hook.Socket, cfg.Hook.Spool, cfg.Hook.AllowedUIDs = filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool"), []int{os.Getuid()}
	cfg.DHCPD.Leases, cfg.DHCPD.Config, cfg.DHCPD.PIDFile = filepath.Join(dir, "dhcpd.leases"), "", ""
	cfg.DHCPD.Leases6, cfg.DHCPD.Config6 = filepath.Join(dir, "dhcpd6.leases"), ""
	cfg.Pair.Listen, cfg.Pair.Peer, cfg.Pair.KeyFile = "127.0.0.1:0", "127.0.0.1:9", key
	rec := &descRecorder{Registry: prometheus.NewRegistry()}
	a, err := New(cfg, zerolog.Nop(), rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Version = "test"
	closeParts, err := a.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := closeParts(); err != nil {
			t.Error(err)
		}
	}()
	if err := a.registerMetrics(); err != nil { // Run's
		t.Fatal(err)
	}
	mfs, err := rec.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := labelValues{}
	for _, mf := range mfs {
		byLabel := map[string][]string{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(byLabel[lp.GetName()], lp.GetValue()) {
					byLabel[lp.GetName()] = append(byLabel[lp.GetName()], lp.GetValue())
				}
			}
		}
		values[mf.GetName()] = byLabel
	}
	return rec.metrics(t), values
}

// TestMetricsReference: docs/metrics.md lists every metric the agent
// exports, with its labels and help, as the code registers them (-update
// writes it); the shipped alerting rules use only those metrics and
// labels, so an alert cannot go silent because a name changed.
func TestMetricsReference(t *testing.T) {
	ms, values := assembledMetrics(t)
	if len(ms) < 40 || !slices.ContainsFunc(ms, func(m describedMetric) bool { return m.name == "leasekeeper_pair_peer_answering" }) {
		t.Fatalf("%d metrics, the pair channel's among them? %v", len(ms), ms)
	}
	lktest.Golden(t, metricsDoc, renderMetrics(ms))

	known := map[string][]string{}
	for _, m := range ms {
		known[m.name] = m.labels
	}
	for _, r := range readAlertRules(t) {
		for _, ref := range metricRefs(r.Expr) {
			labels, ok := known[ref.name]
			if !ok {
				t.Errorf("%s: %s is no metric the agent exports (docs/metrics.md)", alertRules, ref.name)
				continue
			}
			for _, l := range ref.labels {
				if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
					t.Errorf("%s: %s has no label %q (it has %v)", alertRules, ref.name, l, labels)
				}
			}
			for l, vs := range ref.values {
				have, ok := values[ref.name][l]
				if !ok {
					t.Errorf("%s: %s{%s=…}: a gather of the assembled agent shows no value of %s to check against", alertRules, ref.name, l, l)
					continue
				}
				for _, v := range vs {
					if !slices.Contains(have, v) {
						t.Errorf("%s: %s{%s=%q}: the agent's %s takes %v, not %q: the alert could never fire", alertRules, ref.name, l, v, l, have, v)
					}
				}
			}
		}
	}
}

// targetLabels are the ones Prometheus gives every series of a scrape.
var targetLabels = []string{"instance", "job"}

// renderMetrics is docs/metrics.md.
func renderMetrics(ms []describedMetric) []byte {
	var b bytes.Buffer
	b.WriteString(`# Metrics

Every metric ` + "`leasekeeper agent`" + ` exports on ` + "`metrics.listen`" + `'s
` + "`/metrics`" + ` (default 127.0.0.1:9742; ":9742" for a remote Prometheus),
besides Go's, the process's and the HTTP handler's own (` + "`go_*`, `process_*`, `promhttp_*`" + `). Where the
agent follows dhcpd.leases6 too, the reconciler's metrics carry a
` + "`family`" + ` label ("4", "6"); otherwise they have none. The alerting
rules the package ships use these: packaging/prometheus (installed as
/usr/share/doc/leasekeeper/examples/prometheus/leasekeeper-alerts.yml).

This file is written from the code (` + "`go test ./agent -run TestMetricsReference -update`" + `).

| metric | labels | what it says |
|---|---|---|
`)
	for _, m := range ms {
		labels := "—"
		if len(m.labels) > 0 {
			labels = "`" + strings.Join(m.labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", m.name, labels, strings.ReplaceAll(m.help, "|", `\|`))
	}
	return b.Bytes()
}

// metricRef is a metric an expression selects, the labels it names for
// it (in its matchers, or in a by/without/on/ignoring list after it),
// and the values its = and =~ matchers want (a =~ of plain alternatives,
// each).
type metricRef struct {
	name   string
	labels []string
	values map[string][]string
}

var (
	nameRE     = regexp.MustCompile(`\bleasekeeper_[a-z0-9_]+`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	plainRE    = regexp.MustCompile(`^[a-zA-Z0-9_+.-]+(\|[a-zA-Z0-9_+.-]+)*$`)
	groupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
)

// metricRefs finds the agent's metrics an expression selects. A
// histogram's series (_bucket, _sum, _count) are its metric's. Labels in
// a grouping list are checked against every metric of the expression:
// the rules aggregate one metric at a time.
func metricRefs(expr string) []metricRef {
	var grouping []string
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouping = append(grouping, l)
			}
		}
	}
	var out []metricRef
	for _, loc := range nameRE.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(name, "_seconds"+s) {
				name = strings.TrimSuffix(name, s)
			}
		}
		ref := metricRef{name: name, labels: slices.Clone(grouping)}
		if rest := expr[loc[1]:]; strings.HasPrefix(rest, "{") {
			if end := strings.Index(rest, "}"); end > 0 {
				for _, m := range matcherRE.FindAllStringSubmatch(rest[1:end], -1) {
					ref.labels = append(ref.labels, m[1])
					if slices.Contains(targetLabels, m[1]) {
						continue
					}
					switch {
					case m[2] == "=":
						ref.values = appendValues(ref.values, m[1], m[3])
					case m[2] == "=~" && plainRE.MatchString(m[3]):
						ref.values = appendValues(ref.values, m[1], strings.Split(m[3], "|")...)
					}
				}
			}
		}
		out = append(out, ref)
	}
	return out
}

func appendValues(m map[string][]string, label string, vs ...string) map[string][]string {
	if m == nil {
		m = map[string][]string{}
	}
	m[label] = append(m[label], vs...)
	return m
}
