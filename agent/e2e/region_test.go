package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// TestRegionMisconfigured (issue 11, must show): the agent sent to MAAS's
// public API port, or to a plain HTTP port, or holding a bearer token
// instead of the rack's client certificate, against the MAAS-shaped stub
// over mutual TLS. `leasekeeper status` (and --json) and the log say what
// is wrong and what to change, nothing is dead-lettered, and once the
// configuration is fixed (rewritten, SIGHUP) everything queued meanwhile
// arrives, in order, without a restart.
func TestRegionMisconfigured(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bad   func(e *env) regionConfig
		hint  string // in status and the log
		cause string // in the region stub's record of the request, "" if none reaches it
	}{
		{"public API port", func(e *env) regionConfig {
			p, err := regionstub.StartPublicAPI(e.region.pki, true)
			if err != nil {
				e.tb.Fatal(err)
			}
			e.tb.Cleanup(func() { p.Close() })
			return regionConfig{url: p.URL()}
		}, "MAAS's internal leases API is https://REGION:5242/MAAS/a/v3internal/leases", ""},
		{"plain HTTP port", func(e *env) regionConfig {
			p, err := regionstub.StartPublicAPI(e.region.pki, false)
			if err != nil {
				e.tb.Fatal(err)
			}
			e.tb.Cleanup(func() { p.Close() })
			return regionConfig{url: p.URL()}
		}, "the region's port does not speak TLS", ""},
		{"bearer token instead of a client certificate", func(e *env) regionConfig {
			tok := filepath.Join(e.dir, "region.token")
			if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
				e.tb.Fatal(err)
			}
			return regionConfig{noCert: true, tokenFile: tok}
		}, "the region wants a client certificate: set region.cert_file and region.key_file", "no client certificate CN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.startAgent(agentOptions{region: tc.bad(e)})
			g := newGen(7)
			evs := g.events(60, 0, 20)
			if err := e.runHooks(evs, 4, nil); err != nil {
				t.Fatal(err)
			}
			var rep statusReport
			if !waitFor(30*time.Second, func() bool {
				var err error
				rep, err = a.status()
				return err == nil && rep.Region != nil && rep.Region.State == "config" && rep.QueueDepth != nil && *rep.QueueDepth == len(evs)
			}) {
				t.Fatalf("status %+v (region %+v), want a configuration error and %d queued", rep, rep.Region, len(evs))
			}
			if !strings.Contains(rep.Region.Hint, tc.hint) || *rep.DeadLetters != 0 {
				t.Errorf("status region %+v, dead letters %d; want the hint %q and none", rep.Region, *rep.DeadLetters, tc.hint)
			}
			text := cli(t, "status", "--url", a.base)
			if !strings.Contains(text, "CONFIGURATION ERROR") || !strings.Contains(text, tc.hint) {
				t.Errorf("leasekeeper status does not show the problem:\n%s", text)
			}
			var js statusReport
			if err := json.Unmarshal([]byte(cli(t, "status", "--json", "--url", a.base)), &js); err != nil || js.Region == nil || js.Region.Hint != rep.Region.Hint {
				t.Errorf("leasekeeper status --json: %+v (%v)", js.Region, err)
			}
			hint, _ := json.Marshal(tc.hint)
			if log := a.log(); !strings.Contains(log, strings.Trim(string(hint), `"`)) || !strings.Contains(log, `"level":"error"`) {
				t.Errorf("the log does not say %q at error level:\n%s", tc.hint, a.logTail(20))
			}
			if e.region.count() != 0 {
				t.Errorf("the region took %d items from a misconfigured agent", e.region.count())
			}
			if tc.cause != "" {
				seen := false
				for _, r := range e.region.requests() {
					seen = seen || r.Status == 403 && r.Error == tc.cause
				}
				if !seen {
					t.Errorf("the region recorded no 403 (%s)", tc.cause)
				}
			}
			t.Logf("leasekeeper status:\n%s", text)

			// Fixed, and reloaded: everything arrives, nothing was lost.
			a.reconfigure(agentOptions{})
			e.waitDelivered(a, evs, 30*time.Second)
			if d := checkDelivered(t, evs, e.region.items()); d.dups != 0 {
				t.Errorf("%d duplicates", d.dups)
			}
			if !waitFor(10*time.Second, func() bool {
				rep, err := a.status()
				return err == nil && rep.Region != nil && rep.Region.State == "ok" && *rep.DeadLetters == 0
			}) {
				t.Errorf("status after the fix: %+v", rep)
			}
			a.stop()
		})
	}
}

// TestRegionNoCertificateRefusedAtStart: without a client certificate or
// a token the agent does not start, and says why (MAAS takes nothing
// else); --print-config says the same, and so does a certificate file the
// agent cannot read.
func TestRegionNoCertificateRefusedAtStart(t *testing.T) {
	e := newEnv(t)
	cfg := filepath.Join(e.dir, "nocert.toml")
	e.writeAgentConfig(cfg, agentOptions{region: regionConfig{noCert: true}})
	for _, args := range [][]string{{"agent", "--config", cfg}, {"agent", "--config", cfg, "--print-config"}} {
		out, err := runCLI(args...)
		if err == nil || !strings.Contains(out, "region: no credentials: set region.cert_file and region.key_file") {
			t.Errorf("leasekeeper %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	out, err := runCLI("agent", "--config", cfg, "--print-config", "--set", "region.cert_file=/nonexistent/agent.crt", "--set", "region.key_file=/nonexistent/agent.key")
	if err == nil || !strings.Contains(out, "region: cert_file/key_file: open /nonexistent/agent.crt: no such file or directory") {
		t.Errorf("--print-config with a missing certificate: %v\n%s", err, out)
	}
}

// runCLI runs `leasekeeper ARGS…` and returns its stdout and stderr
// together, and its error (an *exec.ExitError for a non-zero exit).
func runCLI(args ...string) (string, error) {
	out, err := exec.Command(bins.agent, args...).CombinedOutput()
	return string(out), err
}
