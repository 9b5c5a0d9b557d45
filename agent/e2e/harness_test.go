package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// bins are the programs under test, built once by TestMain.
var bins struct {
	agent, hook string
	skip        string // why the tests cannot run, if they cannot
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "leasekeeper-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := exec.LookPath(lktest.GoTool()); err != nil {
		bins.skip = "no go toolchain to build leasekeeper and leasekeeper-hook: " + err.Error()
		return m.Run()
	}
	bins.agent = filepath.Join(dir, "leasekeeper")
	bins.hook = filepath.Join(dir, "leasekeeper-hook")
	// The hook stays a plain build: dhcpd runs it, and its start-up time
	// is part of what is measured. The agent gets the race detector
	// whenever the tests have it.
	if err := lktest.Build(bins.agent, "cmd/leasekeeper", raceEnabled); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := lktest.Build(bins.hook, "hook", false); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

func needBinaries(tb testing.TB) {
	tb.Helper()
	if bins.skip != "" {
		tb.Skip(bins.skip)
	}
}

func needRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("needs root: %s", why)
	}
}

// env is one test's world: a directory, a region stub, and the paths the
// agents and hooks share.
type env struct {
	tb      testing.TB
	dir     string
	socket  string
	spool   string
	state   string
	region  *region
	hookLog *os.File // the hooks' stderr, as dhcpd's log
	agents  int
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	needBinaries(tb)
	dir := tb.TempDir()
	if keep := os.Getenv("E2E_KEEP"); keep != "" {
		// Keep the directory (logs, outbox, spool) for a post-mortem.
		var err error
		if dir, err = os.MkdirTemp(keep, strings.ReplaceAll(tb.Name(), "/", "_")+"-"); err != nil {
			tb.Fatal(err)
		}
		tb.Logf("E2E_KEEP: working in %s", dir)
	}
	e := &env{
		tb:     tb,
		dir:    dir,
		socket: filepath.Join(dir, "hook.sock"),
		spool:  filepath.Join(dir, "spool"),
		state:  filepath.Join(dir, "state"),
	}
	var err error
	if e.hookLog, err = os.OpenFile(filepath.Join(dir, "hooks.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.hookLog.Close() })
	e.region = startRegion(tb, filepath.Join(dir, "pki"))
	return e
}

// control is the agents' control socket (one agent runs at a time).
func (e *env) control() string { return filepath.Join(e.dir, "control.sock") }

// region is the region stub, which may be stopped and started again on
// the same address; its records span every incarnation.
type region struct {
	tb    testing.TB
	files regionstub.Files
	pki   *regionstub.PKI
	addr  string
	url   string

	mu   sync.Mutex
	past []*regionstub.Server
	cur  *regionstub.Server
}

func startRegion(tb testing.TB, pkiDir string) *region {
	tb.Helper()
	s, err := regionstub.Start(regionstub.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	files, err := s.WriteFiles(pkiDir)
	if err != nil {
		tb.Fatal(err)
	}
	r := &region{tb: tb, files: files, pki: s.PKI(), addr: s.Addr().String(), url: s.URL(), cur: s}
	tb.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cur != nil {
			r.cur.Close()
		}
	})
	return r
}

// stub is the running stub, for faults.
func (r *region) stub() *regionstub.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		r.tb.Fatal("region stub is stopped")
	}
	return r.cur
}

// behindProxy puts a stand-in for MAAS's nginx stream proxy in front of
// the stub (regionstub.Front) and returns its URL, for an agent's
// region.url: while the stub is stopped, connections are accepted and
// closed, as on a MAAS region whose internal API server is down.
func (r *region) behindProxy() string {
	r.tb.Helper()
	f, err := regionstub.StartFront(r.addr)
	if err != nil {
		r.tb.Fatal(err)
	}
	r.tb.Cleanup(func() { f.Close() })
	return f.URL(r.url)
}

// stop closes the stub: connections are refused until start.
func (r *region) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		r.cur.Close()
		r.past = append(r.past, r.cur)
		r.cur = nil
	}
}

// start serves again on the same address with the same certificates;
// setup, if any, runs on the new stub before it serves (a fault set
// after would miss a request that came first).
func (r *region) start(setup ...func(*regionstub.Server)) {
	r.tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		return
	}
	var err error
	for i := 0; i < 50; i++ { // the port may take a moment to be free
		var s *regionstub.Server
		if s, err = regionstub.New(regionstub.Options{Addr: r.addr, PKI: r.pki}); err != nil {
			break
		}
		for _, f := range setup {
			f(s)
		}
		if err = s.Start(); err == nil {
			r.cur = s
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.tb.Fatalf("restarting the region stub on %s: %v", r.addr, err)
}

func (r *region) servers() []*regionstub.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := append([]*regionstub.Server(nil), r.past...)
	if r.cur != nil {
		s = append(s, r.cur)
	}
	return s
}

// items is every item the region accepted, in order.
func (r *region) items() []event.RegionItem {
	var out []event.RegionItem
	for _, s := range r.servers() {
		out = append(out, s.Items()...)
	}
	return out
}

func (r *region) batches() []regionstub.Batch {
	var out []regionstub.Batch
	for _, s := range r.servers() {
		out = append(out, s.Batches()...)
	}
	return out
}

func (r *region) requests() []regionstub.Request {
	var out []regionstub.Request
	for _, s := range r.servers() {
		out = append(out, s.Requests()...)
	}
	return out
}

func (r *region) count() int {
	n := 0
	for _, s := range r.servers() {
		n += s.Len()
	}
	return n
}

// waitFor polls ok until it holds or timeout passes.
func waitFor(timeout time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agentOptions vary the agent's configuration.
type agentOptions struct {
	allowedUIDs string       // TOML array; default the test's own uid
	stateDir    string       // default env.state
	batchMax    int          // default 100
	activated   *os.File     // a socket passed as systemd socket activation does
	noWait      bool         // do not wait for ready
	region      regionConfig // default: the stub, over mTLS with the rack's files
	dhcpdConf   string       // dhcpd.config; default "" (none read)
	extra       string       // TOML appended to the configuration (more sections)
}

// regionConfig is the agent's [region] as the test sets it; empty fields
// take the stub's values (url, the PKI's files, server_name "maas").
type regionConfig struct {
	url       string
	noCert    bool   // cert_file = "", key_file = ""
	tokenFile string // token_file
}

// agentProc is one `leasekeeper agent` process.
type agentProc struct {
	tb      testing.TB
	env     *env
	opts    agentOptions
	cfgPath string
	name    string
	cmd     *exec.Cmd
	logPath string
	base    string // http://127.0.0.1:PORT
	exited  chan struct{}
	waitErr error
}

// startAgent writes a configuration and starts the agent on it; it
// returns once the agent reports ready (unless opts.noWait).
func (e *env) startAgent(opts agentOptions) *agentProc {
	tb := e.tb
	tb.Helper()
	e.agents++
	name := fmt.Sprintf("agent-%d", e.agents)
	cfgPath := filepath.Join(e.dir, name+".toml")
	e.writeAgentConfig(cfgPath, opts)
	a := &agentProc{tb: tb, name: name, cfgPath: cfgPath, opts: opts, env: e, logPath: filepath.Join(e.dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(a.logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	args := []string{"agent", "--config", cfgPath}
	if opts.activated != nil {
		// systemd sets LISTEN_PID to the service's pid, which is known
		// only once it runs: the shell sets it to its own, then becomes
		// the agent with exec, keeping that pid (and fd 3).
		a.cmd = exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, bins.agent}, args...)...)
		a.cmd.ExtraFiles = []*os.File{opts.activated}
	} else {
		a.cmd = exec.Command(bins.agent, args...)
	}
	a.cmd.Env = agentEnviron(opts.activated != nil)
	// If the test binary dies (a timeout, ^C), so does the agent.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		a.waitErr = a.cmd.Wait()
		close(a.exited)
	}()
	tb.Cleanup(a.cleanup)
	if !opts.noWait {
		a.waitReady(60 * time.Second)
	}
	return a
}

// writeAgentConfig writes the agent's configuration for opts to path.
func (e *env) writeAgentConfig(path string, opts agentOptions) {
	tb := e.tb
	tb.Helper()
	if opts.allowedUIDs == "" {
		opts.allowedUIDs = fmt.Sprintf("[%d]", os.Getuid())
	}
	if opts.stateDir == "" {
		opts.stateDir = e.state
	}
	if opts.batchMax == 0 {
		opts.batchMax = 100
	}
	r := opts.region
	if r.url == "" {
		r.url = e.region.url
	}
	cert, key := e.region.files.ClientCert, e.region.files.ClientKey
	if r.noCert {
		cert, key = "", ""
	}
	cfg := fmt.Sprintf(`[dhcpd]
leases = %q
config = %q
pid_file = ""

[hook]
socket = %q
spool = %q
allowed_uids = %s

[region]
url = %q
ca_file = %q
cert_file = %q
key_file = %q
server_name = "maas"
token_file = %q
batch_max = %d
timeout = "3s"
# A killed agent's unanswered request holds the next start this long; the
# stub applies at once unless a test slows it.
unanswered_hold = "1s"

[state]
dir = %q

[metrics]
listen = "127.0.0.1:0"

[control]
socket = %q

[log]
level = "info"
format = "json"
`, filepath.Join(e.dir, "dhcpd.leases"), opts.dhcpdConf, e.socket, e.spool, opts.allowedUIDs,
		r.url, e.region.files.CA, cert, key, r.tokenFile, opts.batchMax, opts.stateDir, e.control()) + opts.extra
	// Written whole, then renamed: a reload never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// reconfigure rewrites the agent's configuration with opts and makes it
// reload (SIGHUP), as `systemctl reload leasekeeper` does.
func (a *agentProc) reconfigure(opts agentOptions) {
	a.tb.Helper()
	a.opts = opts
	a.env.writeAgentConfig(a.cfgPath, opts)
	if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		a.tb.Fatal(err)
	}
}

// agentEnviron is the test's environment without what would confuse the
// agent (systemd's variables), plus the race detector's settings.
func agentEnviron(activated bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "JOURNAL_STREAM", "GORACE":
			continue
		}
		env = append(env, kv)
	}
	if activated {
		env = append(env, "LISTEN_FDS=1", "LISTEN_FDNAMES=hook")
	}
	return append(env, "GORACE=halt_on_error=1 exitcode=66")
}

// waitReady waits for the HTTP listener's address in the log and then
// for /status to say ready.
func (a *agentProc) waitReady(timeout time.Duration) {
	a.tb.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-a.exited:
			a.tb.Fatalf("%s exited while starting (%v):\n%s", a.name, a.waitErr, a.logTail(40))
		default:
		}
		if a.base == "" {
			a.base = a.listenAddr()
		}
		if a.base != "" {
			if rep, err := a.status(); err == nil && rep.Ready {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.tb.Fatalf("%s not ready after %s:\n%s", a.name, timeout, a.logTail(40))
}

// listenAddr finds the HTTP listener's address in the log.
func (a *agentProc) listenAddr() string {
	b, _ := os.ReadFile(a.logPath)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Component string `json:"component"`
			Listen    string `json:"listen"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Component == "http" && l.Listen != "" {
			return "http://" + l.Listen
		}
	}
	return ""
}

func (a *agentProc) log() string {
	b, _ := os.ReadFile(a.logPath)
	return string(b)
}

func (a *agentProc) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(a.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (a *agentProc) running() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (a *agentProc) kill() {
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// stop sends SIGTERM and expects a clean exit.
func (a *agentProc) stop() {
	a.tb.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		a.kill()
		a.tb.Errorf("%s did not stop within 30s of SIGTERM:\n%s", a.name, a.logTail(20))
		return
	}
	if a.waitErr != nil {
		a.tb.Errorf("%s: exit after SIGTERM: %v\n%s", a.name, a.waitErr, a.logTail(20))
	}
}

func (a *agentProc) cleanup() {
	if a.running() {
		a.kill()
	}
	log := a.log()
	if strings.Contains(log, "WARNING: DATA RACE") {
		a.tb.Errorf("%s: the race detector reported a data race:\n%s", a.name, log)
	} else if a.tb.Failed() {
		var bad []string
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"warn"`) {
				bad = append(bad, l)
			}
		}
		if len(bad) > 20 {
			bad = append(bad[:10], append([]string{"…"}, bad[len(bad)-10:]...)...)
		}
		a.tb.Logf("%s log: warnings and errors:\n%s\nlast lines:\n%s", a.name, strings.Join(bad, "\n"), a.logTail(30))
	}
	var ee *exec.ExitError
	if errors.As(a.waitErr, &ee) && ee.ExitCode() == 66 {
		a.tb.Errorf("%s exited 66 (race detector)", a.name)
	}
}

func (a *agentProc) get(path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return b, err
}

// statusReport is the part of GET /status (and `leasekeeper status
// --json`) the tests read; the keys are a contract.
type statusReport struct {
	Ready        bool       `json:"ready"`
	QueueDepth   *int       `json:"queue_depth"`
	LastDelivery *time.Time `json:"last_delivery"`
	DeadLetters  *int       `json:"deadletters"`
	LagSeconds   *float64   `json:"lag_seconds"`
	Region       *struct {
		State string `json:"state"`
		Error string `json:"error"`
		Hint  string `json:"hint"`
	} `json:"region"`
	Held *struct {
		Events int `json:"events"`
	} `json:"held"`
	Pair *statusPair `json:"pair"`
}

// statusPair is a failover peer of /status's pair, and its channel.
type statusPair struct {
	Peer    string `json:"peer"`
	Role    string `json:"role"`
	Channel *struct {
		Peer  string     `json:"peer"`
		Alone bool       `json:"alone"`
		Heard *time.Time `json:"heard"`
	} `json:"channel"`
	Others []statusPair `json:"others"`
}

// deadLetter is one element of `leasekeeper deadletter list --json`.
type deadLetter struct {
	Seq    uint64           `json:"seq"`
	Reason string           `json:"reason"`
	Source string           `json:"source"`
	Event  event.RegionItem `json:"event"`
}

func (a *agentProc) status() (statusReport, error) {
	var rep statusReport
	b, err := a.get("/status")
	if err != nil {
		return rep, err
	}
	err = json.Unmarshal(b, &rep)
	return rep, err
}

// depth is the agent's queue depth, -1 when it cannot tell.
func (a *agentProc) depth() int {
	rep, err := a.status()
	if err != nil || rep.QueueDepth == nil {
		return -1
	}
	return *rep.QueueDepth
}

// metric is the value of one series on /metrics, written as the text
// format writes it (`name{label="value"}`); 0 when absent.
func (a *agentProc) metric(series string) float64 {
	a.tb.Helper()
	b, err := a.get("/metrics")
	if err != nil {
		a.tb.Fatalf("%s: %v", a.name, err)
	}
	return metricValue(string(b), series)
}

func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return 0
}

// cli runs `leasekeeper ARGS…` and returns its stdout.
func cli(tb testing.TB, args ...string) string {
	tb.Helper()
	cmd := exec.Command(bins.agent, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// status exits 3 when what it shows needs attention (the region
		// down, say), which these tests bring about on purpose.
		var ee *exec.ExitError
		if !(errors.As(err, &ee) && ee.ExitCode() == 3 && args[0] == "status") {
			tb.Fatalf("leasekeeper %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
	}
	return stdout.String()
}

// hookEvent is one hook invocation. The events of a test follow real
// lease lives per address: a commit for a new client, renewals (commits
// again, same MAC), then an expiry or a release for that MAC, and so on.
// The reconciler drops an expiry or release for a MAC the address is no
// longer committed to, as it must, so a random mix would not do. Each
// event can be named from what the region records: a commit by its host
// name (node-ID), an expiry or release by its MAC, since a lease ends once.
type hookEvent struct {
	id     int
	action string
	ip     string
	client int    // the MAC's number
	host   string // for commits
	// lease is a commit's lease time in seconds (0: 600).
	lease int
}

// mac is the MAC as dhcpd's binary-to-ascii passes it: unpadded.
func (h hookEvent) mac() string {
	c := h.client
	return fmt.Sprintf("2:0:%x:%x:%x:%x", c>>24&0xff, c>>16&0xff, c>>8&0xff, c&0xff)
}

// key names the event as the region's record of it does (itemKey).
func (h hookEvent) key() string {
	if h.action == event.Commit {
		return "commit " + h.host
	}
	c := h.client
	return fmt.Sprintf("%s 02:00:%02x:%02x:%02x:%02x", h.action, c>>24&0xff, c>>16&0xff, c>>8&0xff, c&0xff)
}

// itemKey names the event a region item records.
func itemKey(it event.RegionItem) string {
	if it.Action == event.Commit {
		return "commit " + it.Hostname
	}
	return it.Action + " " + it.MAC
}

// ipOf is the i-th test address, in the benchmarking range 198.18.0.0/15.
func ipOf(i int) string { return fmt.Sprintf("198.18.%d.%d", i/250, i%250+1) }

// gen makes hook events with unique ids.
type gen struct {
	rng    *rand.Rand
	next   int
	client map[int]int // address → client holding its lease, 0 for none
}

func newGen(seed uint64) *gen {
	return &gen{rng: rand.New(rand.NewPCG(seed, seed+1)), next: 1, client: map[int]int{}}
}

// events makes n events over the addresses ipOf(first)…ipOf(first+nIPs-1),
// the addresses' lease lives interleaved at random.
func (g *gen) events(n, first, nIPs int) []hookEvent {
	out := make([]hookEvent, n)
	for i := range out {
		out[i] = g.event(first + g.rng.IntN(nIPs))
	}
	return out
}

// event makes the next event of address ip's lease life.
func (g *gen) event(ip int) hookEvent {
	h := hookEvent{id: g.next, ip: ipOf(ip), client: g.client[ip]}
	g.next++
	switch r := g.rng.IntN(10); {
	case h.client == 0: // a new client takes the free address
		h.action, h.client = event.Commit, h.id
		g.client[ip] = h.client
	case r < 5: // renewal
		h.action = event.Commit
	default:
		h.action = event.Expiry
		if r >= 8 {
			h.action = event.Release
		}
		g.client[ip] = 0
	}
	if h.action == event.Commit {
		h.host = fmt.Sprintf("node-%d", h.id)
	}
	return h
}

// hookArgs are the arguments dhcpd's snippet passes (packaging/dhcpd).
func (e *env) hookArgs(h hookEvent) []string {
	args := []string{"notify", "--action", h.action, "--mac", h.mac(), "--ip-family", "ipv4", "--ip", h.ip}
	if h.action == event.Commit {
		lease := 600
		if h.lease > 0 {
			lease = h.lease
		}
		args = append(args, "--lease-time", strconv.Itoa(lease), "--hostname", h.host)
	}
	return append(args, "--socket", e.socket, "--spool", e.spool)
}

// hook execs leasekeeper-hook for h and waits for it, as dhcpd does.
func (e *env) hook(h hookEvent) error {
	return e.hookWith(bins.hook, nil, e.hookArgs(h)...)
}

func (e *env) hookWith(bin string, attr *syscall.SysProcAttr, args ...string) error {
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{} // the flags say it all; nothing (LEASEKEEPER_SOCKET…) leaks in from the test
	cmd.Stderr = e.hookLog
	cmd.SysProcAttr = attr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("leasekeeper-hook %s: %w (stderr in %s)", strings.Join(args, " "), err, e.hookLog.Name())
	}
	return nil
}

// runHooks execs the hooks for evs with up to workers at a time, each
// address always on the same worker, so that the events of one address
// run one after the other in the order of evs, as dhcpd runs them. done
// counts finished execs. It returns the first failure.
func (e *env) runHooks(evs []hookEvent, workers int, done *atomic.Int64) error {
	queues := make([][]hookEvent, workers)
	for _, h := range evs {
		w := int(hashString(h.ip) % uint64(workers))
		queues[w] = append(queues[w], h)
	}
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		stop  atomic.Bool
	)
	for _, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, h := range q {
				if stop.Load() {
					return
				}
				if err := e.hook(h); err != nil {
					once.Do(func() { first = err })
					stop.Store(true)
					return
				}
				if done != nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// delivery is what checkDelivered found.
type delivery struct {
	items  int // accepted items
	unique int // distinct events among them
	dups   int // items - unique
	// replays counts the jumps back (an address's sequence going back to
	// an event already delivered), maxReplays the most for one address.
	replays, maxReplays int
}

// checkDelivered compares what the region accepted (got, in order) with
// the events the hooks were given (want, in exec order per address):
// every event arrived, none was invented or altered, and per address the
// accepted sequence is the exec order in which a stretch may be repeated
// (a replay after a batch whose fate the agent did not know) but nothing
// jumps ahead, and the last item is the last event.
func checkDelivered(tb testing.TB, want []hookEvent, got []event.RegionItem) delivery {
	tb.Helper()
	byKey := make(map[string]hookEvent, len(want))
	pos := make(map[string]int, len(want)) // key → index in its address's sequence
	perIP := map[string]int{}
	for _, h := range want {
		byKey[h.key()] = h
		pos[h.key()] = perIP[h.ip]
		perIP[h.ip]++
	}
	var errs []string
	fail := func(format string, args ...any) {
		if len(errs) < 15 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	seen := map[string]bool{}
	last := map[string]int{} // address → position of its last item
	back := map[string]int{} // address → jumps back
	for i, it := range got {
		h, known := byKey[itemKey(it)]
		if !known {
			fail("item %d: %+v is no event the hooks were given", i, it)
			continue
		}
		wantItem := event.RegionItem{Action: h.action, Family: event.IPv4, MAC: it.MAC, IP: h.ip, Timestamp: it.Timestamp}
		if h.action == event.Commit {
			wantItem.Hostname, wantItem.LeaseTime = h.host, 600
		}
		if c, _ := clientOf(it.MAC); it != wantItem || c != h.client {
			fail("item %d: got %+v, want %+v with the MAC of client %d", i, it, wantItem, h.client)
		}
		seen[h.key()] = true
		prev, ok := last[h.ip]
		if !ok {
			prev = -1
		}
		switch p := pos[h.key()]; {
		case p > prev+1:
			fail("%s: event %d (#%d for the address) arrived right after #%d: #%d was skipped or comes late", h.ip, h.id, p, prev, prev+1)
		case p <= prev:
			back[h.ip]++
		}
		last[h.ip] = pos[h.key()]
	}
	for ip, n := range perIP {
		switch p, ok := last[ip]; {
		case !ok:
			fail("%s: nothing delivered of %d events", ip, n)
		case p != n-1:
			fail("%s: the last item delivered is #%d of %d: the region is left with a stale state", ip, p, n)
		}
	}
	missing := 0
	for _, h := range want {
		if !seen[h.key()] {
			missing++
		}
	}
	if missing > 0 {
		fail("%d of %d events never reached the region", missing, len(want))
	}
	if len(errs) > 0 {
		tb.Errorf("delivery check failed:\n  %s", strings.Join(errs, "\n  "))
	}
	d := delivery{items: len(got), unique: len(seen), dups: len(got) - len(seen)}
	for _, n := range back {
		d.replays += n
		d.maxReplays = max(d.maxReplays, n)
	}
	return d
}

// clientOf reads the client number back from a normalised test MAC.
func clientOf(mac string) (int, bool) {
	parts := strings.Split(mac, ":")
	if len(parts) != 6 || parts[0] != "02" || parts[1] != "00" {
		return 0, false
	}
	c := 0
	for _, p := range parts[2:] {
		b, err := strconv.ParseUint(p, 16, 8)
		if err != nil {
			return 0, false
		}
		c = c<<8 | int(b)
	}
	return c, true
}

// checkResends checks, batch by batch, that every duplicate the region
// received is a whole batch sent again right after a request whose batch
// the stub accepted but whose answer it withheld (the only case where the
// agent cannot know the fate of a batch when the agent itself is never
// killed). It returns the number of such resends.
func checkResends(tb testing.TB, batches []regionstub.Batch, reqs []regionstub.Request) int {
	tb.Helper()
	lost := map[string]bool{}
	for _, r := range reqs {
		if r.Accepted && (r.Status < 200 || r.Status > 299) {
			lost[r.IdempotencyKey] = true
		}
	}
	seen := map[string]bool{}
	resends := 0
	prevKey := ""
	for i, b := range batches {
		old := 0
		for _, it := range b.Items {
			k := itemKey(it)
			if seen[k] {
				old++
			}
			seen[k] = true
		}
		switch {
		case old == 0:
		case old == len(b.Items) && b.IdempotencyKey == prevKey && lost[b.IdempotencyKey]:
			resends++
		default:
			tb.Errorf("batch %d (%d items, key %s) repeats %d items, and is not a resend of the previous batch after a lost answer", i, len(b.Items), b.IdempotencyKey, old)
		}
		prevKey = b.IdempotencyKey
	}
	return resends
}
