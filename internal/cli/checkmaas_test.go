package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/maascheck"
)

// TestCheckMAAS: the command prints what internal/maascheck found (its
// tests cover the checks) and exits 1 on a problem; --json is the report.
func TestCheckMAAS(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "dhcpd.conf")
	if err := os.WriteFile(conf, []byte("subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.10 203.0.113.20; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "leasekeeper.toml")
	toml := "[dhcpd]\nconfig = \"" + conf + "\"\n[region]\nurl = \"https://region.example:5443/MAAS/a/v3internal/leases\"\n"
	if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, "check-maas", "--config", cfg, "--agent-user", "")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (wrong port); stderr %s", code, stderr)
	}
	for _, want := range []string{"ok       mode: hookless", "problem  region-url: region.url uses port 5443", "         fix: use https://region.example:5242/MAAS/a/v3internal/leases"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, code = run(t, "check-maas", "--config", cfg, "--agent-user", "", "--json")
	var rep maascheck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("exit %d, --json: %v\n%s", code, err, out)
	}
	if rep.Mode.Mode != "hookless" || rep.Problems == 0 || rep.Findings[0].Severity != maascheck.OK {
		t.Errorf("report %+v", rep)
	}
	if _, _, code := run(t, "check-maas", "--config", filepath.Join(dir, "nope.toml")); code != 1 {
		t.Errorf("missing config: exit %d", code)
	}
	// A file the agent refuses (an unknown key, a value of the wrong
	// type) is checked on what it has right, its problems among the
	// findings; check-maas stopped at them with no report, and --json
	// printed nothing (a cold review).
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte(toml+"[log]\nlevl = \"debug\"\n[reconcile]\npoll_interval = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = run(t, "check-maas", "--config", bad, "--agent-user", "", "--json")
	rep = maascheck.Report{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("a file with problems: exit %d, --json: %v\n%s", code, err, out)
	}
	var told []string
	for _, f := range rep.Findings {
		if f.Check == "config" && f.Severity == maascheck.Problem {
			told = append(told, f.Message)
		}
	}
	if len(told) != 2 || !strings.Contains(told[0]+told[1], "log.levl: unknown key") || !strings.Contains(told[0]+told[1], "reconcile.poll_interval") || rep.Mode.Mode != "hookless" {
		t.Errorf("a file with problems: want its two problems as config findings, and the mode still read from dhcpd.config; got %+v", rep)
	}
}

// TestStatusMode: the reconciler's mode in leasekeeper status.
func TestStatusMode(t *testing.T) {
	body := strings.Replace(statusJSON, `"uptime_seconds": 10800`, `"uptime_seconds": 10800,
  "mode": {"mode": "complement", "detected": "complement", "forced": false, "unsure": true,
           "why": "cannot read dhcpd.conf (permission denied)", "kept_back": 3}`, 1)
	srv := statusServer(t, body, 200)
	out, stderr, code := run(t, "status", "--url", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"mode           complement (unsure: the safe side)\n               cannot read dhcpd.conf (permission denied)\n",
		"kept back      3 events with no MAC the region can take",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
