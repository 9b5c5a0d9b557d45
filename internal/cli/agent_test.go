package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/internal/lktest/testlog"
)

// writeFile writes a file in a new temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAgentHelp(t *testing.T) {
	out, _, code := run(t, "agent", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"leasekeeper agent [--config FILE] [--set section.key=value]...",
		"SIGTERM, SIGINT", "SIGHUP", "READY=1", "Exit status: 0",
		"--print-config", "--print-reference", "/etc/leasekeeper/leasekeeper.toml", "Examples:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("agent --help lacks %q", want)
		}
	}
}

func TestAgentBadConfig(t *testing.T) {
	bad := writeFile(t, "lk.toml", "[region]\nurl = \"https://r/leases\"\ntoken_file = \"/t\"\ntimeout = \"5x\"\n[log]\nlevl = \"debug\"\n")
	invalid := writeFile(t, "lk.toml", "[region]\nurl = \"https://r/leases\"\ncert_file = \"\"\nkey_file = \"\"\n")
	good := writeFile(t, "lk.toml", "[region]\nurl = \"http://127.0.0.1:1/leases\"\n[metrics]\nlisten = \"\"\n")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"bad values", []string{"agent", "--config", bad}, ExitConfig, []string{
			"leasekeeper: config " + bad + ": 2 problems:",
			`line 4: region.timeout: "5x" is not a duration`,
			`log.levl: unknown key (did you mean "level"?)`}},
		{"invalid", []string{"agent", "-c", invalid}, ExitConfig, []string{"leasekeeper: config " + invalid + ": line 1: region: no credentials"}},
		{"missing file", []string{"agent", "--config", "/nonexistent/lk.toml"}, ExitConfig, []string{"leasekeeper: config: open /nonexistent/lk.toml: no such file or directory"}},
		{"bad --set", []string{"agent", "--config", good, "--set", "region.timeout"}, ExitConfig, []string{"--set region.timeout: want section.key=value"}},
		{"unknown --set", []string{"agent", "--config", good, "--set", "region.tiemout=1s"}, ExitConfig, []string{`--set region.tiemout: unknown key`}},
		{"two bad --set", []string{"agent", "--config", good, "--set", "region.tiemout=1s", "--set", "region.timeout"}, ExitConfig, []string{`--set region.tiemout: unknown key`, "--set region.timeout: want section.key=value"}},
		{"bad --set value", []string{"agent", "--config", good, "--set", "region.batch_max=0"}, ExitConfig, []string{"region.batch_max (from the command line: region.batch_max=0): 0 is not between 1 and 10000"}},
		{"bad --log-level", []string{"agent", "--config", good, "--log-level", "loud"}, ExitConfig, []string{`log.level (from the command line: log.level=loud): "loud" is not one of`}},
		// A secret file may be put right without the configuration (the
		// pair's key copied later): exit 1, which the unit restarts on.
		{"secret file missing", []string{"agent", "--config", good, "--set", "release.token_file=/nonexistent/release.token"}, 1, []string{"release.token_file (from the command line: release.token_file=/nonexistent/release.token): open /nonexistent/release.token"}},
		{"arguments", []string{"agent", "extra"}, 2, []string{`leasekeeper agent takes no arguments, and was given "extra"`}},
		// The file without --config: the error names the flag.
		{"file as argument", []string{"agent", "/etc/leasekeeper/leasekeeper.toml"}, 2, []string{"use --config /etc/leasekeeper/leasekeeper.toml (configuration file)"}},
		{"dhcpd.conf as check's argument", []string{"check", "dhcpd.conf"}, 2, []string{"leasekeeper check takes no arguments", "use --config dhcpd.conf (dhcpd.conf file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := run(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, tc.code, stderr)
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q\nlacks %q", stderr, w)
				}
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
		})
	}
}

// TestAgentPrintConfig: --print-config validates what start does —
// the file, and the region's certificate, key, CA and token files — and
// prints every value.
func TestAgentPrintConfig(t *testing.T) {
	pki, err := regionstub.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	f, err := pki.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "lk.toml", fmt.Sprintf("[region]\nurl = \"https://r/leases\"\nca_file = %q\ncert_file = %q\nkey_file = %q\n",
		f.CA, f.ClientCert, f.ClientKey))
	for _, tc := range []struct {
		name, set, want string
		code            int
	}{
		{"missing certificate", "region.cert_file=/nonexistent/agent.crt", "region: cert_file/key_file: open /nonexistent/agent.crt: no such file or directory", 1},
		{"key of another certificate", "region.key_file=" + f.ServerKey, "tls: private key does not match public key", 1},
		{"missing token", "region.token_file=/nonexistent/token", "region: token_file: open /nonexistent/token", 1},
		{"not a CA", "region.ca_file=" + f.ClientKey, "region: ca_file " + f.ClientKey + ": no PEM certificate in it", 1},
		// A group the machine lacks stops the start (exit 78, not
		// restarted); --print-config passed it (a cold review).
		{"control.group unknown", "control.group=lk-no-such-group-4711", `control.group "lk-no-such-group-4711": no such group on this machine`, ExitConfig},
		{"hook.socket_group unknown", "hook.socket_group=lk-no-such-group-4712", `hook.socket_group "lk-no-such-group-4712": no such group on this machine`, ExitConfig},
	} {
		_, stderr, code := run(t, "agent", "--config", path, "--print-config", "--set", tc.set)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, stderr, tc.code, tc.want)
		}
	}
	// The CA's problem and the client certificate's are told together.
	_, stderr, code := run(t, "agent", "--config", path, "--print-config", "--set", "region.ca_file=/nonexistent/ca.crt", "--set", "region.cert_file=/nonexistent/agent.crt")
	for _, want := range []string{"ca_file: open /nonexistent/ca.crt", "cert_file/key_file: open /nonexistent/agent.crt"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("the CA and the certificate missing: exit %d, stderr %q; want 1 and %q", code, stderr, want)
		}
	}
	// The region's files and the groups are told together; a group
	// makes it a configuration error, as at start.
	_, stderr, code = run(t, "agent", "--config", path, "--print-config", "--set", "region.ca_file="+f.ClientKey,
		"--set", "control.group=lk-no-such-group-4711", "--set", "hook.socket_group=lk-no-such-group-4712")
	for _, want := range []string{"no PEM certificate", `control.group "lk-no-such-group-4711"`, `hook.socket_group "lk-no-such-group-4712"`} {
		if code != ExitConfig || !strings.Contains(stderr, want) {
			t.Errorf("three problems: exit %d, stderr %q; want %d and %q", code, stderr, ExitConfig, want)
		}
	}
	out, stderr, code := run(t, "agent", "--config", path, "--print-config", "--set", "region.batch_max=7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	cfg, err := config.Parse(strings.NewReader(out), "printed")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if cfg.Region.BatchMax != 7 || cfg.Region.URL != "https://r/leases" || cfg.State.Dir != "/var/lib/leasekeeper" {
		t.Errorf("printed config:\n%s", out)
	}
}

// TestAgentPrintReference: --print-reference prints the reference
// configuration (packaging/leasekeeper.toml, every key at its default),
// reading no file: the configuration named need not exist.
func TestAgentPrintReference(t *testing.T) {
	ref, err := os.ReadFile("../../packaging/leasekeeper.toml")
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, "agent", "--print-reference", "--config", "/nonexistent/leasekeeper.toml")
	if code != 0 || out != string(ref) {
		t.Fatalf("exit %d, stderr %q, %d bytes out; want 0 and the %d bytes of packaging/leasekeeper.toml", code, stderr, len(out), len(ref))
	}
	if _, err := config.Decode(strings.NewReader(out), "reference"); err != nil {
		t.Errorf("the reference does not decode: %v", err)
	}
	if _, stderr, code := run(t, "agent", "--print-reference", "--print-config"); code != 2 || !strings.Contains(stderr, "one at a time") {
		t.Errorf("both: exit %d, stderr %q; want 2", code, stderr)
	}
}

// waitFor polls the log until it has want.
// syncBuffer is the shared test log with a wait.
type syncBuffer struct{ testlog.Buffer }

func (s *syncBuffer) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q:\n%s", want, s.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunAgentSignals drives the agent command's signal handling: SIGHUP
// on its channel reloads (a broken file is refused, so is one a part
// cannot take, and nothing of it applied; a good one is applied);
// SIGTERM, as Main passes it on (the context cancelled with the signal as
// its cause), stops cleanly, names the signal and lets a second one kill.
func TestRunAgentSignals(t *testing.T) {
	base := "[region]\nurl = \"http://127.0.0.1:1/leases\"\n" + agentFiles(t.TempDir())
	path := writeFile(t, "lk.toml", base)
	a := startAgent(t, t.TempDir(), path)
	logs, sigs, stop, done := &a.logs, a.sigs, a.stop, a.done
	logs.waitFor(t, `"message":"ready"`)

	if err := os.WriteFile(path, []byte(base+"bogus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sigs <- syscall.SIGHUP
	logs.waitFor(t, "reload refused; the running configuration stays in force")

	// Valid as a file, but the deliverer cannot read its CA: refused
	// whole, nothing applied (the next reload's diff shows it).
	bad := strings.Replace(base, `url = "http://127.0.0.1:1/leases"`, `url = "https://127.0.0.1:1/leases"`+"\nca_file = \"/nonexistent/ca.pem\"", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	sigs <- syscall.SIGHUP
	logs.waitFor(t, "reload refused: a part cannot take the new configuration")
	if strings.Contains(logs.String(), "configuration reloaded") {
		t.Errorf("a refused reload logged as reloaded:\n%s", logs.String())
	}

	good := strings.Replace(base, "[log]\n", "[log]\nlevel = \"debug\"\n", 1) + "[reconcile]\npoll_interval = \"1s\"\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	sigs <- syscall.SIGHUP
	logs.waitFor(t, `"changed":["reconcile.poll_interval","log.level"]`)
	logs.waitFor(t, `"keys":["reconcile.poll_interval"],`)

	stop(stopSignal{syscall.SIGTERM}) // as Main does on SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runAgent after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runAgent did not return after SIGTERM")
	}
	a.released.Wait() // release was called: a second signal would kill
	logs.waitFor(t, `"signal":"terminated"`)
}

// agentFiles is the configuration of an agent whose sockets and state are
// in dir, the log JSON, the metrics on a free port.
func agentFiles(dir string) string {
	return fmt.Sprintf("[hook]\nsocket = %q\nspool = %q\n[state]\ndir = %q\n"+
		"[metrics]\nlisten = \"127.0.0.1:0\"\n[control]\nsocket = %q\n[log]\nformat = \"json\"\n",
		filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool"), filepath.Join(dir, "state"), filepath.Join(dir, "control.sock"))
}

// agentRun is the agent command run in-process (runAgent) on a host whose
// files are under a root: its log, its SIGHUP channel, stop (as Main on a
// signal), and its result on done once stopped; released is done once it
// let a second signal kill.
type agentRun struct {
	logs     syncBuffer
	sigs     chan os.Signal
	stop     context.CancelCauseFunc
	done     chan error
	released sync.WaitGroup
}

// startAgent runs the agent on the file at path, reloading it on SIGHUP,
// with the host's files under root; it is stopped when the test ends.
func startAgent(t *testing.T, root, path string) *agentRun {
	t.Helper()
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	a := &agentRun{sigs: make(chan os.Signal, 1), done: make(chan error, 1)}
	env := &Env{Version: "test", Stderr: &a.logs, Root: root, FollowEvery: 50 * time.Millisecond}
	env.defaults()
	src := &configSource{env: env, path: path}
	cfg, err := src.load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancelCause(context.Background())
	a.stop = stop
	a.released.Add(1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		a.done <- runAgent(ctx, env, cfg, src, a.sigs, a.released.Done)
	}()
	t.Cleanup(func() { // before the test's directories go
		stop(nil)
		select {
		case <-finished:
		case <-time.After(15 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	return a
}

func TestLevelSampler(t *testing.T) {
	var s levelSampler
	s.set("warn")
	var logs syncBuffer
	log := newLogger(&logs, config.Log{Format: "json"}, &s, func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC) }).With().Str("component", "x").Logger()
	log.Info().Msg("hidden")
	log.Warn().Msg("shown")
	s.set("debug")
	log.Debug().Msg("now shown")
	log.Trace().Msg("still hidden")
	out := logs.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, `"shown"`) || !strings.Contains(out, `"now shown"`) {
		t.Errorf("log:\n%s", out)
	}
	if !strings.Contains(out, `{"level":"warn","component":"x","time":"2026-01-02T03:04:05.006Z","message":"shown"}`) {
		t.Errorf("no level/component fields:\n%s", out)
	}

	var console syncBuffer
	log = newLogger(&console, config.Log{Format: "console"}, &s, time.Now)
	log.Info().Str("k", "v").Msg("hello")
	if got := console.String(); strings.HasPrefix(got, "{") || !strings.Contains(got, "hello") || !strings.Contains(got, "k=v") {
		t.Errorf("console log: %q", got)
	}
}

func TestDialable(t *testing.T) {
	for in, want := range map[string]string{
		":9742":          "127.0.0.1:9742",
		"0.0.0.0:9742":   "127.0.0.1:9742",
		"[::]:9742":      "[::1]:9742",
		"127.0.0.1:9742": "127.0.0.1:9742",
		"[::1]:1":        "[::1]:1",
		"rack.example:1": "rack.example:1",
	} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
