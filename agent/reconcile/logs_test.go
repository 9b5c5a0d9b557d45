package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// logLines decodes a JSON log, one object a line.
func logLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestModeLog: the start-up line saying the mode. A mode reconcile.mode
// forces is logged at info with no advice to set reconcile.mode, also
// when detection could not tell (nothing contradicts it); a forced mode
// detection, sure, disagrees with warns, naming both. Detection that
// could not tell, unforced, still warns with the fix.
func TestModeLog(t *testing.T) {
	dir := t.TempDir()
	hook := filepath.Join(dir, "leasekeeper-hook")
	if err := os.WriteFile(hook, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const subnet = "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.50; }\n"
	conf := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hooked := conf("hooked.conf", fmt.Sprintf("on commit { execute(%q, \"notify\"); }\n", hook)+subnet)
	hookless := conf("hookless.conf", subnet)
	missing := filepath.Join(dir, "missing.conf")

	tests := []struct {
		name  string
		conf  string
		mode  Mode
		level string
		fix   bool     // a "fix" field
		why   []string // in "why"
	}{
		{"auto, detected", hookless, ModeAuto, "info", false, []string{"runs no lease hook"}},
		{"auto, could not tell", "", ModeAuto, "warn", true, []string{"dhcpd.config is not set"}},
		{"forced, dhcpd.config unset", "", ModeHookless, "info", false, []string{"reconcile.mode forces hookless (detection could not tell: dhcpd.config is not set, so the hooks are unknown)"}},
		{"forced, dhcpd.conf unreadable", missing, ModeReplacement, "info", false, []string{"reconcile.mode forces replacement (detection could not tell: cannot read dhcpd.conf"}},
		{"forced, as detected", hooked, ModeReplacement, "info", false, []string{"reconcile.mode forces replacement, as detected: dhcpd.conf runs"}},
		{"forced against detection", hooked, ModeHookless, "warn", true, []string{"reconcile.mode forces hookless, but dhcpd.conf says replacement: dhcpd.conf runs"}},
		{"forced against no hook", hookless, ModeComplement, "warn", true, []string{"reconcile.mode forces complement, but dhcpd.conf says hookless"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &strings.Builder{}
			detect := DetectEnv{OurHooks: []string{hook}}
			reg := prometheus.NewRegistry()
			r, err := New(Config{Leases: filepath.Join(dir, "dhcpd.leases"), DhcpdConf: tc.conf, Mode: tc.mode, Detect: &detect},
				openStore(t, t.TempDir()), zerolog.New(logs), reg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			r.scanMode("start")
			var line map[string]any
			for _, l := range logLines(t, logs.String()) {
				if msg, _ := l["message"].(string); strings.HasPrefix(msg, "reconciler mode") {
					line = l
				}
			}
			if line == nil {
				t.Fatalf("no mode line in\n%s", logs)
			}
			why, _ := line["why"].(string)
			_, fix := line["fix"]
			if line["level"] != tc.level || fix != tc.fix {
				t.Errorf("level %v, fix %v; want %s, fix %v: %v", line["level"], line["fix"], tc.level, tc.fix, line)
			}
			for _, w := range tc.why {
				if !strings.Contains(why, w) {
					t.Errorf("why %q lacks %q", why, w)
				}
			}
			if tc.mode != ModeAuto && (line["forced"] != true || line["detected"] == nil) {
				t.Errorf("forced mode: line %v lacks forced and detected", line)
			}
			// The alert: only detection that could not tell, unforced.
			want := 0.0
			if tc.name == "auto, could not tell" {
				want = 1
			}
			if got := gaugeValue(t, reg, "leasekeeper_reconcile_mode_unsure"); got != want {
				t.Errorf("leasekeeper_reconcile_mode_unsure = %v, want %v", got, want)
			}
		})
	}
}

// TestPersistFailureLogged: commits failing for as long as the disk is
// full, retried every second, are logged when they begin, then at most
// every persistFailLogEvery, and their end once.
func TestPersistFailureLogged(t *testing.T) {
	dir := t.TempDir()
	lktest.Tmpfs(t, dir, "512k", 0o700, 0)
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 192<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	logs := &strings.Builder{}
	r, err := New(Config{Leases: filepath.Join(dir, "dhcpd.leases"), Mode: ModeHookless}, store, zerolog.New(logs), prometheus.NewRegistry(), now)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	evs := func(n, count int) []event.Event {
		out := make([]event.Event, count)
		for i := range out {
			out[i] = hook(event.Commit, netip.AddrFrom4([4]byte{198, 18, byte((n + i) >> 8), byte(n + i)}).String(), macA, 1_800_000_000)
			out[i].Hostname = fmt.Sprintf("%d-%s", n+i, strings.Repeat("x", 200))
			out[i].LeaseTime = 600
		}
		return out
	}
	ctx := context.Background()
	for n := 0; ; n += 20 {
		if err = store.Append(ctx, evs(n, 20)...); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unsent = evs(20_000, 40)
	// 65 s of retries, one a second.
	for range 65 {
		clock.Add(int64(time.Second))
		r.decide(ctx, now())
	}
	if len(r.unsent) != 40 {
		t.Fatalf("%d events unsent on a full disk, want 40", len(r.unsent))
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(time.Second))
	r.decide(ctx, now())
	if len(r.unsent) != 0 {
		t.Fatalf("%d events unsent once space returned", len(r.unsent))
	}
	var failed, ended []map[string]any
	for _, l := range logLines(t, logs.String()) {
		msg, _ := l["message"].(string)
		switch {
		case strings.HasPrefix(msg, "cannot persist the reconciler's state"):
			failed = append(failed, l)
		case strings.HasPrefix(msg, "the reconciler's state and events persisted again"):
			ended = append(ended, l)
		}
	}
	// At 1 s, 31 s and 61 s.
	if len(failed) != 3 || failed[1]["not_logged_since_last"] != 29.0 || !strings.Contains(fmt.Sprint(failed[0]["error"]), "disk full") {
		t.Errorf("%d failure lines, want 3, the second counting 29 left out: %v", len(failed), failed)
	}
	if len(ended) != 1 || ended[0]["failures"] != 65.0 || ended[0]["failed_for"] != 65000.0 {
		t.Errorf("end lines %v, want one after 65 failures and 65 s", ended)
	}
}

// gaugeValue is the single-series gauge name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestModeFixNamesKeys: a mode detection that could not tell is logged
// with the keys to set, the reconciler's own: dhcpd.leases6's names
// dhcpd.config6, and no reconcile.mode, which does not apply to it.
func TestModeFixNamesKeys(t *testing.T) {
	for _, tc := range []struct {
		keys      Keys
		want, not string
	}{
		{Keys{}, `"fix":"set dhcpd.config to a dhcpd.conf the agent can read, or reconcile.mode; leasekeeper check-maas tells which"`, ""},
		{Keys{Leases: "dhcpd.leases6", Conf: "dhcpd.config6", NoModeKey: true}, `"fix":"set dhcpd.config6 to a dhcpd.conf the agent can read; leasekeeper check-maas tells which"`, "reconcile.mode"},
	} {
		var b strings.Builder
		r := &Reconciler{cfg: Config{Keys: tc.keys}, log: zerolog.New(&b)}
		r.logMode(Detection{Mode: ModeComplement, Detected: ModeComplement, Unsure: true, Why: "cannot read dhcpd.conf"}, 0, "start")
		if got := b.String(); !strings.Contains(got, tc.want) || tc.not != "" && strings.Contains(got, tc.not) {
			t.Errorf("keys %+v: logged %s; want %s without %q", tc.keys, got, tc.want, tc.not)
		}
	}
}
