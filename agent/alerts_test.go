package agent

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.yaml.in/yaml/v3"
)

// alertRule is a rule of the shipped rules file (Prometheus's rule file
// format: groups of rules).
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// readAlertRules reads the shipped rules file.
func readAlertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no rules", alertRules)
	}
	return rules
}

// promtool finds Prometheus's promtool: $PROMTOOL (make test sets it to
// what make test-deps fetched), else on PATH.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("$PROMTOOL: %v (make test-deps fetches it: scripts/fetch-promtool)", err)
		}
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	t.Skip("no promtool ($PROMTOOL or on PATH): make test-deps fetches Debian's (scripts/fetch-promtool)")
	return ""
}

// rackCommands are what an alert's description may send the operator to
// run on the rack; each names one.
var rackCommands = []string{"leasekeeper status", "leasekeeper deadletter", "leasekeeper orphans", "leasekeeper check-maas",
	"leasekeeper leases", "journalctl -u leasekeeper", "systemctl status leasekeeper"}

// scrape is the target labels every test series carries, as a scrape of
// the job the rules name gives them.
const scrape = `job="leasekeeper",instance="rack-1:9742"`

// alertCase is one alert's behaviour, checked by promtool against
// series sampled every minute from 0: no alert at quiet (nor at
// quietAfter, when set: resolved, or never firing), the alert at fires
// with the series' labels and extra, its annotations expanded with value.
type alertCase struct {
	name       string // the test's name, the alert's unless several cases test it
	alert      string
	series     [][2]string // series (its labels without scrape's), values
	quiet      string
	fires      string
	quietAfter string
	labels     map[string]string // the firing alert's labels besides scrape's, the rule's and alertname
	value      string            // $value as the annotations show it
}

var alertCases = []alertCase{
	{alert: "LeasekeeperDown", series: [][2]string{{`up{}`, "1 0x20"}}, quiet: "5m", fires: "6m"},
	// Started at 0, 60, 120 and 180 s: three restarts in the window.
	{alert: "LeasekeeperRestarting", series: [][2]string{{`process_start_time_seconds{}`, "0 60 120 180 180x40"}},
		quiet: "2m", fires: "3m", quietAfter: "34m", value: "3"},
	// Never ready for the whole window, across restarts.
	{alert: "LeasekeeperNotReady", series: [][2]string{{`leasekeeper_ready{}`, "1 0x30"}}, quiet: "14m", fires: "16m"},
	{alert: "LeasekeeperRegionConfigError", series: [][2]string{{`leasekeeper_region_state{state="config"}`, "0 1x20"}, {`leasekeeper_region_state{state="ok"}`, "1 0x20"}},
		quiet: "5m", fires: "6m", labels: map[string]string{"state": "config"}},
	{alert: "LeasekeeperRegionFailing", series: [][2]string{{`leasekeeper_region_state{state="failing"}`, "0 1x20"}},
		quiet: "15m", fires: "16m", labels: map[string]string{"state": "failing"}},
	{alert: "LeasekeeperRegionOutage", series: [][2]string{{`leasekeeper_region_state{state="outage"}`, "0 1x20"}},
		quiet: "15m", fires: "16m", labels: map[string]string{"state": "outage"}},
	{alert: "LeasekeeperAwaitingRegistration", series: [][2]string{{`leasekeeper_region_state{state="waiting"}`, "0 1x70"}},
		quiet: "60m", fires: "61m", labels: map[string]string{"state": "waiting"}},
	// Started at 0 s, nothing delivered (the timestamp 0), 42 events
	// queued from 1m: stalled from 15m1s (the first evaluation, 16m),
	// firing 5m later.
	{name: "LeasekeeperDeliveryStalled", alert: "LeasekeeperDeliveryStalled",
		series: stalled("0x40", "0x40"), quiet: "20m", fires: "21m", value: "42"},
	// Deliveries every minute: a queue that moves is no stall.
	{name: "LeasekeeperDeliveryStalled/moving", alert: "LeasekeeperDeliveryStalled",
		series: stalled("0+60x40", "0x40"), quiet: "21m", quietAfter: "35m"},
	// A restart at 10m (started at 600 s), nothing delivered since: the
	// 15 minutes count from it.
	{name: "LeasekeeperDeliveryStalled/restarted", alert: "LeasekeeperDeliveryStalled",
		series: stalled("0x40", "0x9 600x30"), quiet: "21m", fires: "31m", value: "42"},
	// A rack waiting for its registration has LeasekeeperAwaitingRegistration.
	{name: "LeasekeeperDeliveryStalled/waiting", alert: "LeasekeeperDeliveryStalled",
		series: stalled("0x40", "0x40", [2]string{`leasekeeper_region_state{state="waiting"}`, "1x40"}),
		quiet:  "21m", quietAfter: "35m"},
	// Sent again after the answer timeout, the wait starts from 0; the
	// alert stays on.
	{alert: "LeasekeeperRegionRequestStuck", series: [][2]string{{`leasekeeper_region_request_wait_seconds{}`, "0 30 90 150 210 270 300 0 30 90 150 210"}},
		quiet: "2m", fires: "3m", value: "150"},
	{name: "LeasekeeperRegionRequestStuck/again", alert: "LeasekeeperRegionRequestStuck",
		series: [][2]string{{`leasekeeper_region_request_wait_seconds{}`, "0 30 90 150 210 270 300 0 30 90 150 210"}},
		quiet:  "2m", fires: "9m", value: "300"},
	{alert: "LeasekeeperDeadLetters", series: [][2]string{{`leasekeeper_deadletters{}`, "0 3x10"}}, quiet: "0m", fires: "1m", value: "3"},
	// Failing from 2m to 8m: firing after 5 minutes of it, resolved
	// once the errors leave the window.
	{alert: "LeasekeeperOutboxCommitErrors", series: [][2]string{{`leasekeeper_outbox_commit_errors_total{}`, "0 0 1 2 3 4 5 6 6x20"}},
		quiet: "6m", fires: "7m", quietAfter: "14m"},
	// One failed commit, retried request by request: no page.
	{name: "LeasekeeperOutboxCommitErrors/once", alert: "LeasekeeperOutboxCommitErrors",
		series: [][2]string{{`leasekeeper_outbox_commit_errors_total{}`, "0 0 1x20"}}, quiet: "6m", quietAfter: "7m"},
	{alert: "LeasekeeperOutboxOverBound", series: [][2]string{{`leasekeeper_outbox_over_bound{}`, "0 1x20"}}, quiet: "15m", fires: "16m"},
	{alert: "LeasekeeperEventsCoalesced", series: [][2]string{{`leasekeeper_outbox_coalesced_total{}`, "0 0 500x80"}},
		quiet: "1m", fires: "2m", quietAfter: "63m"},
	{alert: "LeasekeeperLeasesFileUnreadable", series: [][2]string{{`leasekeeper_reconcile_leases_file_unreadable{family="6"}`, "0 1x20"},
		{`leasekeeper_reconcile_hookless{family="6"}`, "0x20"}, {`leasekeeper_reconcile_hookless{family="4"}`, "1x20"}},
		quiet: "5m", fires: "6m", labels: map[string]string{"family": "6"}},
	{name: "LeasekeeperLeasesFileUnreadable/hookless", alert: "LeasekeeperLeasesFileUnreadable",
		series: [][2]string{{`leasekeeper_reconcile_leases_file_unreadable{}`, "0 1x20"}, {`leasekeeper_reconcile_hookless{}`, "1x20"}},
		quiet:  "6m", quietAfter: "10m"},
	{alert: "LeasekeeperHooklessBlind", series: [][2]string{{`leasekeeper_reconcile_leases_file_unreadable{}`, "0 1x20"}, {`leasekeeper_reconcile_hookless{}`, "1x20"}},
		quiet: "5m", fires: "6m"},
	{alert: "LeasekeeperLeasesFileMissing", series: [][2]string{{`leasekeeper_reconcile_leases_file_missing{}`, "0 1x40"}}, quiet: "30m", fires: "31m"},
	{name: "LeasekeeperLeasesFileInconsistent", alert: "LeasekeeperLeasesFileInconsistent",
		series: [][2]string{{`leasekeeper_reconcile_file_consistent{}`, "1 0x20"}, {`leasekeeper_reconcile_leases_file_missing{}`, "0x20"},
			{`leasekeeper_reconcile_leases_file_unreadable{}`, "0x20"}},
		quiet: "15m", fires: "16m"},
	// A missing file is its own alert, not this one too.
	{name: "LeasekeeperLeasesFileInconsistent/missing", alert: "LeasekeeperLeasesFileInconsistent",
		series: [][2]string{{`leasekeeper_reconcile_file_consistent{}`, "1 0x20"}, {`leasekeeper_reconcile_leases_file_missing{}`, "0 1x20"},
			{`leasekeeper_reconcile_leases_file_unreadable{}`, "0x20"}},
		quiet: "16m", quietAfter: "20m"},
	{alert: "LeasekeeperModeUnsure", series: [][2]string{{`leasekeeper_reconcile_mode_unsure{}`, "0 1x20"}}, quiet: "15m", fires: "16m"},
	{alert: "LeasekeeperHookSpoolUnreadable", series: [][2]string{{`leasekeeper_hook_spool_unreadable{}`, "0 1x20"}}, quiet: "5m", fires: "6m"},
	// Only a failure to store counts; syntax errors have their own signs.
	{alert: "LeasekeeperStateWriteErrors", series: [][2]string{{`leasekeeper_reconcile_file_problems_total{kind="persist"}`, "0 0 2+2x20"},
		{`leasekeeper_reconcile_file_problems_total{kind="syntax"}`, "0 5+5x20"}},
		quiet: "6m", fires: "7m", labels: map[string]string{"kind": "persist"}},
	// One failed write, retried: no page.
	{name: "LeasekeeperStateWriteErrors/once", alert: "LeasekeeperStateWriteErrors",
		series: [][2]string{{`leasekeeper_reconcile_file_problems_total{kind="persist"}`, "0 0 1x20"}}, quiet: "6m", quietAfter: "7m"},
	{alert: "LeasekeeperHookDatagramsRejected", series: [][2]string{{`leasekeeper_rejected_datagrams_total{reason="uid"}`, "0 0 1x20"}},
		quiet: "1m", fires: "2m", labels: map[string]string{"reason": "uid"}},
	// busy may last for ever by nature: no alert.
	{alert: "LeasekeeperOrphansNeedOperator", series: [][2]string{{`leasekeeper_orphans_jobs{state="refused"}`, "0 2x20"}, {`leasekeeper_orphans_jobs{state="busy"}`, "0 5x20"}},
		quiet: "15m", fires: "16m", labels: map[string]string{"state": "refused"}, value: "2"},
	{alert: "LeasekeeperOrphansUnconfigured", series: [][2]string{{`leasekeeper_orphans_jobs{state="unconfigured"}`, "0 4x1450"}},
		quiet: "1440m", fires: "1441m", labels: map[string]string{"state": "unconfigured"}, value: "4"},
	{alert: "LeasekeeperPairPeerSilent", series: [][2]string{{`leasekeeper_pair_peer_answering{peer="rack-b:5290"}`, "1 0x20"}}, quiet: "10m", fires: "11m",
		labels: map[string]string{"peer": "rack-b:5290"}},
	{alert: "LeasekeeperPairClockOffset", series: [][2]string{{`leasekeeper_pair_clock_offset_seconds{peer="rack-b:5290"}`, "0 -2.5x20"}, {`leasekeeper_pair_peer_answering{peer="rack-b:5290"}`, "1x20"}},
		quiet: "10m", fires: "11m", value: "2.5", labels: map[string]string{"peer": "rack-b:5290"}},
	// A silent peer's offset is the last answer's: no alert on it, also
	// while another partner's agent (pair.partners) answers.
	{name: "LeasekeeperPairClockOffset/silent", alert: "LeasekeeperPairClockOffset",
		series: [][2]string{{`leasekeeper_pair_clock_offset_seconds{peer="rack-b:5290"}`, "0 -2.5x20"}, {`leasekeeper_pair_peer_answering{peer="rack-b:5290"}`, "0x20"},
			{`leasekeeper_pair_clock_offset_seconds{peer="rack-c:5290"}`, "0x20"}, {`leasekeeper_pair_peer_answering{peer="rack-c:5290"}`, "1x20"}},
		quiet: "11m", quietAfter: "20m"},
}

// stalled is LeasekeeperDeliveryStalled's series: 42 events queued from
// 1m, the last delivery's timestamps and the process's start times as
// given, and more.
func stalled(delivered, started string, more ...[2]string) [][2]string {
	return append([][2]string{{`leasekeeper_outbox_depth{}`, "0 42x40"},
		{`leasekeeper_last_delivery_timestamp_seconds{}`, delivered}, {`process_start_time_seconds{}`, started}}, more...)
}

// templateRE is the annotation templates the rules may use: a label's
// value, or the alert's value as Prometheus prints it.
var templateRE = regexp.MustCompile(`\{\{ \$(labels\.([a-z_]+)|value) \}\}`)

// expand expands an annotation as Prometheus would for an alert with
// labels and value; any other template is the test's failure, so that
// every annotation is checked whole.
func expand(t *testing.T, s string, labels map[string]string, value string) string {
	t.Helper()
	out := templateRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := templateRE.FindStringSubmatch(m)
		if sub[1] == "value" {
			if value == "" {
				t.Errorf("%q uses $value: give the case its value", s)
			}
			return value
		}
		v, ok := labels[sub[2]]
		if !ok {
			t.Errorf("%q uses label %s, which the alert does not have", s, sub[2])
		}
		return v
	})
	if strings.Contains(out, "{{") {
		t.Errorf("%q: a template this test does not expand (only {{ $labels.NAME }} and {{ $value }})", s)
	}
	return out
}

// TestAlertRules: promtool accepts the shipped alerting rules (check
// rules), and each alert fires as its case says, with its labels and its
// annotations expanded (test rules), not before, and for the cases that
// say so not after; every alert has a case.
func TestAlertRules(t *testing.T) {
	rules := readAlertRules(t)
	tool := promtool(t)
	dir := t.TempDir()
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, filepath.Base(alertRules))
	if err := os.WriteFile(rulesFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	byAlert := map[string]alertRule{}
	for _, r := range rules {
		byAlert[r.Alert] = r
	}
	type expAlert struct {
		Labels      map[string]string `yaml:"exp_labels"`
		Annotations map[string]string `yaml:"exp_annotations"`
	}
	type evalCheck struct {
		EvalTime  string     `yaml:"eval_time"`
		AlertName string     `yaml:"alertname"`
		ExpAlerts []expAlert `yaml:"exp_alerts"`
	}
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type unitTest struct {
		Name     string      `yaml:"name"`
		Series   []series    `yaml:"input_series"`
		Checks   []evalCheck `yaml:"alert_rule_test"`
		Interval string      `yaml:"interval"`
	}
	var tests []unitTest
	tested := map[string]bool{}
	for _, c := range alertCases {
		r, ok := byAlert[c.alert]
		if !ok {
			t.Errorf("case %s: no alert %s in %s", c.name, c.alert, alertRules)
			continue
		}
		tested[c.alert] = true
		u := unitTest{Name: cmp.Or(c.name, c.alert), Interval: "1m"}
		for _, s := range c.series {
			sel := strings.Replace(s[0], "{}", "{"+scrape+"}", 1)
			if !strings.Contains(sel, scrape) {
				sel = strings.Replace(s[0], "{", "{"+scrape+",", 1)
			}
			u.Series = append(u.Series, series{sel, s[1]})
		}
		u.Checks = append(u.Checks, evalCheck{EvalTime: c.quiet, AlertName: c.alert, ExpAlerts: []expAlert{}})
		if c.quietAfter != "" {
			u.Checks = append(u.Checks, evalCheck{EvalTime: c.quietAfter, AlertName: c.alert, ExpAlerts: []expAlert{}})
		}
		if c.fires != "" {
			labels := map[string]string{"job": "leasekeeper", "instance": "rack-1:9742"}
			for k, v := range c.labels {
				labels[k] = v
			}
			for k, v := range r.Labels {
				labels[k] = v
			}
			ann := map[string]string{}
			for k, v := range r.Annotations {
				ann[k] = expand(t, v, labels, c.value)
			}
			u.Checks = append(u.Checks, evalCheck{EvalTime: c.fires, AlertName: c.alert, ExpAlerts: []expAlert{{Labels: labels, Annotations: ann}}})
		}
		tests = append(tests, u)
	}
	for _, r := range rules {
		if !tested[r.Alert] {
			t.Errorf("alert %s has no case in alertCases", r.Alert)
		}
		if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s lacks a severity, a summary or a description", r.Alert)
		}
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("alert %s: severity %q", r.Alert, r.Labels["severity"])
		}
		if !slices.ContainsFunc(rackCommands, func(c string) bool { return strings.Contains(r.Annotations["description"], c) }) {
			t.Errorf("alert %s: its description names nothing to run on the rack (%v)", r.Alert, rackCommands)
		}
	}
	doc, err := yaml.Marshal(map[string]any{
		"rule_files":          []string{filepath.Base(rulesFile)},
		"evaluation_interval": "1m",
		"tests":               tests,
	})
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(dir, "leasekeeper-alerts.test.yml")
	if err := os.WriteFile(testFile, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool, "test", "rules", filepath.Base(testFile))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

// TestAlertSeriesInUnitSandbox: every process_* series the shipped alerts
// read is served under the packaged unit's /proc, as its ProtectProc= and
// ProcSubset= mount it (systemd's hidepid= and subset= proc options): the
// test binary gathers the agent's process collector in a mount and PID
// namespace of its own with /proc mounted so. ProcSubset=pid hid
// /proc/stat, whose boot time process_start_time_seconds needs (the
// collector skips a series it cannot read, unreported), so that
// LeasekeeperRestarting could never fire (a cold review).
func TestAlertSeriesInUnitSandbox(t *testing.T) {
	if os.Getenv("LK_PROCESS_SERIES") == "1" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			fmt.Println("series", mf.GetName())
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount /proc in a namespace of its own")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	unit, err := os.ReadFile("../packaging/systemd/leasekeeper.service")
	if err != nil {
		t.Fatal(err)
	}
	opts := []string{"nosuid", "nodev", "noexec"}
	for _, l := range strings.Split(string(unit), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), "=")
		switch k {
		case "ProtectProc":
			opts = append(opts, "hidepid="+v)
		case "ProcSubset":
			opts = append(opts, "subset="+v)
		}
	}
	cmd := exec.Command(unshare, "--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c",
		`mount -t proc -o "$1" proc /proc && exec "$2" -test.run '^TestAlertSeriesInUnitSandbox$' -test.count 1`,
		"sh", strings.Join(opts, ","), os.Args[0])
	cmd.Env = append(os.Environ(), "LK_PROCESS_SERIES=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gathering in the unit's /proc (%s): %v\n%s", strings.Join(opts, ","), err, out)
	}
	served := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(l, "series "); ok {
			served[name] = true
		}
	}
	read := map[string]bool{}
	for _, r := range readAlertRules(t) {
		for _, s := range regexp.MustCompile(`\bprocess_[a-z_]+`).FindAllString(r.Expr, -1) {
			read[s] = true
			if !served[s] {
				t.Errorf("alert %s reads %s, which the agent does not serve under the unit's /proc (%s); served: %v", r.Alert, s, strings.Join(opts, ","), slices.Sorted(maps.Keys(served)))
			}
		}
	}
	if len(read) == 0 {
		t.Fatal("no alert reads a process_* series: this test checks nothing")
	}
}
