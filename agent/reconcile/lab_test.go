package reconcile_test

// End-to-end tests of the reconciler with the real thing: Debian's dhcpd
// and dhclient in network namespaces (internal/lktest/lab), leasekeeper-hook
// built from ./hook and run by dhcpd through the packaging snippet, the
// region stub over mTLS, and the agent's real parts assembled in-process
// (agent.Assemble: outbox, hook socket, reconciler, delivery). They need
// root and the Debian packages; they skip otherwise.

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/internal/lktest/testlog"
	"github.com/leasekeeper/leasekeeper/parser"
)

// Hook variants in dhcpd.conf.
const (
	hooksNone    = "none"    // no on commit/expiry/release at all
	hooksOK      = "ok"      // the packaging snippet running leasekeeper-hook
	hooksNoExec  = "noexec"  // the snippet, but the program is not executable
	hooksFailing = "failing" // the snippet, but the program exits 1
	hooksMAAS    = "maas"    // MAAS's blocks running a stand-in for MAAS's helper, sending to maasSock
	// MAAS's blocks, their helper diverted to leasekeeper-hook (a link
	// named maas-dhcp-helper, as README.Debian's recipe makes it): the
	// hook drops MAAS's --socket and sends to the agent's socket
	// ($LEASEKEEPER_SOCKET in dhcpd's environment, as in the package).
	hooksDiverted = "diverted"
)

// world is one lab: dhcpd, clients, the region stub and an agent.
type world struct {
	t     *testing.T
	lab   *lab.Lab
	d     *lab.Dhcpd
	stub  *regionstub.Server
	files regionstub.Files
	dir   string
	hook  string // the program the snippet names
	hooks string
	lease int // max-lease-time
	agent *agentRun
	grace time.Duration
	// what the last stopped agent left: its log and metrics
	lastLogs  *testlog.Buffer
	lastSynth map[string]float64 // leasekeeper_synthesised_total by reason

	// maasSock is where the MAAS helper stand-in sends (hooksMAAS):
	// MAAS's dhcpd.sock, not the agent's.
	maasSock string
	// maasURL and maasKeyFile are the agent's [maas] (orphans_lab_test.go);
	// agentOpts go to agent.Assemble.
	maasURL, maasKeyFile string
	agentOpts            []agent.AssembleOption
	// pair is the agent's [pair]: the channel to the other rack's agent
	// (startPair).
	pair config.Pair
	// mode, if set, is the agent's reconcile.mode (detection takes a
	// wrapper script around the hook for another program).
	mode string
	// confExtra is written into dhcpd.conf before the bridge's subnet
	// (TestLabHAVLANAndLoneVLAN: another VLAN's failover peer).
	confExtra string
	// poll, if set, is the agent's reconcile.poll_interval (1 s if not).
	poll time.Duration
	// maasTimers: pairConf writes MAAS's failover timers, not the labs'
	// short ones (startPairMAAS).
	maasTimers bool
	// d6, if set, is a dhcpd -6 whose leases file and configuration are
	// the agent's dhcpd.leases6 and dhcpd.config6.
	d6 *lab.Dhcpd
}

func newWorld(t *testing.T, hooks string, lease int, opts ...lab.Option) *world {
	t.Helper()
	lab.Require(t, "dhcpd", "dhclient")
	w := &world{t: t, lab: lab.New(t, opts...), dir: t.TempDir(), hooks: hooks, lease: lease, grace: 3 * time.Second}
	stub, err := regionstub.Start(regionstub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	w.stub = stub
	if w.files, err = stub.WriteFiles(filepath.Join(w.dir, "pki")); err != nil {
		t.Fatal(err)
	}
	switch hooks {
	case hooksOK:
		w.hook = lab.BuildHook(t)
	case hooksNoExec:
		w.hook = filepath.Join(w.dir, "leasekeeper-hook")
		if err := os.WriteFile(w.hook, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	case hooksFailing:
		w.hook = filepath.Join(w.dir, "leasekeeper-hook")
		if err := os.WriteFile(w.hook, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	case hooksMAAS:
		w.hook = lab.MAASHelper(t, w.dir)
		w.maasSock = filepath.Join(w.dir, "maas-dhcpd.sock")
	case hooksDiverted:
		w.hook = filepath.Join(w.dir, "maas-dhcp-helper")
		if err := os.Symlink(lab.BuildHook(t), w.hook); err != nil {
			t.Fatal(err)
		}
		w.maasSock = filepath.Join(w.dir, "maas-dhcpd.sock")
	}
	return w
}

// conf is dhcpd.conf serving 203.0.113.lo-hi.
func (w *world) conf(lo, hi int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ping-check false;\nauthoritative;\nddns-update-style none;\ndefault-lease-time %d;\nmax-lease-time %d;\nmin-lease-time %d;\n",
		w.lease, w.lease, w.lease)
	switch w.hooks {
	case hooksNone:
	case hooksMAAS, hooksDiverted:
		b.WriteString(lab.MAASSnippet(w.t, w.hook, w.maasSock))
	default:
		b.WriteString(lab.HookSnippet(w.t, w.hook, filepath.Join(w.dir, "hook.sock"), filepath.Join(w.dir, "spool")))
	}
	b.WriteString(w.confExtra)
	b.WriteString(w.lab.SubnetConf(fmt.Sprintf("  range 203.0.113.%d 203.0.113.%d;", lo, hi)))
	return b.String()
}

func (w *world) startDhcpd(lo, hi int) {
	cfg := lab.DhcpdConfig{Conf: w.conf(lo, hi)}
	if w.hooks == hooksDiverted {
		cfg.Prelude = fmt.Sprintf("export LEASEKEEPER_SOCKET=%q LEASEKEEPER_SPOOL=%q",
			filepath.Join(w.dir, "hook.sock"), filepath.Join(w.dir, "spool"))
	}
	w.d = w.lab.StartDhcpd(w.t, cfg)
}

func (w *world) restartDhcpd(lo, hi int) {
	w.t.Helper()
	if err := w.d.Restart(w.conf(lo, hi)); err != nil {
		w.t.Fatalf("dhcpd restart: %v", err)
	}
}

// agentRun is the agent's real parts, assembled in-process.
type agentRun struct {
	a      *agent.Agent
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	close  func() error
	logs   *testlog.Buffer
}

func (w *world) startAgent() {
	w.t.Helper()
	cfg := config.Default()
	cfg.DHCPD.Leases = w.d.LeasesPath()
	cfg.DHCPD.Config = w.d.ConfPath()
	cfg.DHCPD.PIDFile = filepath.Join(w.d.Dir, "dhcpd.pid")
	if w.d6 != nil {
		cfg.DHCPD.Leases6, cfg.DHCPD.Config6 = w.d6.LeasesPath(), w.d6.ConfPath()
	}
	cfg.Hook.Socket = filepath.Join(w.dir, "hook.sock")
	cfg.Hook.Spool = filepath.Join(w.dir, "spool")
	cfg.Region.URL = w.stub.URL()
	cfg.Region.CAFile, cfg.Region.CertFile, cfg.Region.KeyFile = w.files.CA, w.files.ClientCert, w.files.ClientKey
	cfg.State.Dir = filepath.Join(w.dir, "state")
	cfg.Reconcile.ExpiryGrace = w.grace
	cfg.Reconcile.PollInterval = time.Second
	if w.poll != 0 {
		cfg.Reconcile.PollInterval = w.poll
	}
	if w.hooks == hooksFailing {
		// A shell script is not leasekeeper-hook: detection would take
		// it for another program reporting to the region (complement).
		// This test is about our hook failing.
		cfg.Reconcile.Mode = "replacement"
	}
	if w.mode != "" {
		cfg.Reconcile.Mode = w.mode
	}
	cfg.Metrics.Listen = ""
	cfg.Control.Socket = ""
	cfg.MAAS.APIURL, cfg.MAAS.APIKeyFile = w.maasURL, w.maasKeyFile
	if w.pair.On() {
		cfg.Pair = w.pair
	}
	if err := cfg.Validate(); err != nil {
		w.t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	log := zerolog.New(logs).With().Timestamp().Logger()
	reg := prometheus.NewRegistry()
	a, err := agent.New(cfg, log, reg, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	a.Version = "test"
	closeParts, err := a.Assemble(w.agentOpts...)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{a: a, reg: reg, cancel: cancel, done: make(chan error, 1), close: closeParts, logs: logs}
	go func() { r.done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-r.done:
		w.t.Fatalf("agent: %v\n%s", err, logs)
	case <-time.After(20 * time.Second):
		w.t.Fatalf("agent not ready\n%s", logs)
	}
	w.agent = r
	w.t.Cleanup(func() {
		w.stopAgent()
		if w.t.Failed() {
			w.t.Logf("agent log:\n%s", logs)
			if w.d != nil {
				w.t.Logf("dhcpd log:\n%s", w.d.Logs())
			}
			if w.d6 != nil {
				w.t.Logf("dhcpd -6 log:\n%s", w.d6.Logs())
			}
		}
	})
}

func (w *world) stopAgent() {
	r := w.agent
	if r == nil {
		return
	}
	w.agent = nil
	r.cancel()
	if err := <-r.done; err != nil {
		w.t.Errorf("agent: %v", err)
	}
	w.lastSynth = synthesised(w.t, r.reg) // before close unregisters it
	if err := r.close(); err != nil {
		w.t.Errorf("agent close: %v", err)
	}
	w.lastLogs = r.logs
}

// synthesised returns leasekeeper_synthesised_total by reason (those
// above 0).
func synthesised(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := counters(t, reg, "leasekeeper_synthesised_total")
	maps.DeleteFunc(out, func(_ string, v float64) bool { return v == 0 })
	return out
}

// counters returns the counter vector name of reg by its (single)
// label's value.
func counters(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	return countersBy(t, reg, name, "")
}

// countersBy returns the counter vector name of reg summed by the value
// of its label by ("": its single label's, one series each).
func countersBy(t *testing.T, reg *prometheus.Registry, name, by string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if by == "" && len(m.GetLabel()) == 1 || l.GetName() == by {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// arrival is an item the stub accepted and when.
type arrival struct {
	event.RegionItem
	at time.Time
}

func (a arrival) String() string {
	return fmt.Sprintf("%s %s %s@%d (arrived %s)", a.Action, a.IP, a.MAC, a.Timestamp, a.at.Format("15:04:05.000"))
}

func (w *world) arrivals(ip netip.Addr) []arrival {
	var out []arrival
	for _, b := range w.stub.Batches() {
		for _, it := range b.Items {
			if ip.IsValid() && it.IP != ip.String() {
				continue
			}
			out = append(out, arrival{it, b.At})
		}
	}
	return out
}

// waitArrival waits for an item for ip with the action (and MAC, if not
// empty) and returns it.
func (w *world) waitArrival(ip netip.Addr, action, mac string, within time.Duration) arrival {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, a := range w.arrivals(ip) {
			if a.Action == action && (mac == "" || a.MAC == mac) {
				return a
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no %s for %s (%s) after %s; the stub has:\n%s", action, ip, mac, within, describeArrivals(w.arrivals(netip.Addr{})))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func describeArrivals(as []arrival) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintln(&b, " ", a)
	}
	return b.String()
}

// leaseEnds reads the lease's end from dhcpd.leases.
func (w *world) leaseEnds(ip netip.Addr) int64 {
	w.t.Helper()
	f, err := os.Open(w.d.LeasesPath())
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	ls, err := parser.ParseLeases(f)
	if err != nil {
		w.t.Fatal(err)
	}
	l, ok := ls.Lookup(netip.PrefixFrom(ip, 32))
	if !ok {
		w.t.Fatalf("%s not in %s", ip, w.d.LeasesPath())
	}
	return int64(l.Ends)
}

func (w *world) dhclient(c *lab.Client) netip.Addr {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ip, err := c.Dhclient(ctx)
	if err != nil {
		w.t.Fatalf("dhclient: %v\ndhcpd:\n%s", err, w.d.Logs())
	}
	return ip
}

// shrinkAway returns a range inside 100-150 that leaves out drop and
// keeps keep.
func shrinkAway(drop, keep netip.Addr) (lo, hi int) {
	d, k := int(drop.As4()[3]), int(keep.As4()[3])
	if d > k {
		return 100, d - 1
	}
	return d + 1, 150
}

func mac(c *lab.Client) string { return c.MAC.String() }

// checkOnlyExpiry checks that the stub got exactly one expiry or release
// in all, for ip and mac, not before ends.
func (w *world) checkOnlyExpiry(ip netip.Addr, macAddr string, ends int64) {
	w.t.Helper()
	var frees []arrival
	for _, a := range w.arrivals(netip.Addr{}) {
		if a.Action != event.Commit {
			frees = append(frees, a)
		}
	}
	if len(frees) != 1 || frees[0].IP != ip.String() || frees[0].MAC != macAddr || frees[0].Action != event.Expiry {
		w.t.Fatalf("want exactly one expiry, for %s %s; the stub has:\n%s", ip, macAddr, describeArrivals(w.arrivals(netip.Addr{})))
	}
	if at := frees[0].at.Unix(); at < ends {
		w.t.Fatalf("expiry arrived at %d, before the lease's end %d", at, ends)
	}
	w.t.Logf("expiry for %s arrived %s after the lease's end", ip, frees[0].at.Sub(time.Unix(ends, 0)).Round(time.Millisecond))
}

// TestLabRangeShrink is (a): a client holds an address, the range shrinks
// to leave it out and dhcpd restarts, which drops the lease from the file
// with no hook. The region gets exactly one expiry for it, with its MAC,
// not before the lease's end, and nothing for the address that stayed.
func TestLabRangeShrink(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := newWorld(t, hooksOK, 12)
	w.shrinkOneAway()
}

// shrinkOneAway is TestLabRangeShrink's course for w: dhcpd and the
// agent started, two clients, the first gone, the range shrunk to drop
// its lease; exactly one expiry of it reaches the region, synthesised as
// vanished.
func (w *world) shrinkOneAway() {
	t := w.t
	t.Helper()
	w.startDhcpd(100, 150)
	w.startAgent()
	c1, c2 := w.lab.AddClient("c1"), w.lab.AddClient("c2")
	ip1, ip2 := w.dhclient(c1), w.dhclient(c2)
	w.waitArrival(ip1, event.Commit, mac(c1), 5*time.Second)
	w.waitArrival(ip2, event.Commit, mac(c2), 5*time.Second)
	if err := c1.Kill(); err != nil { // no renewal: the lease runs out
		t.Fatal(err)
	}
	ends := w.leaseEnds(ip1)
	w.restartDhcpd(shrinkAway(ip1, ip2))
	if strings.Contains(readFile(t, w.d.LeasesPath()), "lease "+ip1.String()+" ") {
		t.Fatalf("dhcpd kept %s after the shrink; the test premise is gone", ip1)
	}
	w.waitArrival(ip1, event.Expiry, mac(c1), time.Until(time.Unix(ends, 0))+10*time.Second)
	time.Sleep(2 * time.Second) // anything else would come now
	w.checkOnlyExpiry(ip1, mac(c1), ends)
	w.stopAgent()
	if got := w.lastSynth; len(got) != 1 || got["vanished"] != 1 {
		t.Errorf("synthesised %v, want vanished=1 only", got)
	}
}

// TestLabHAVLANAndLoneVLAN is TestLabRangeShrink on a rack that also
// serves DHCP HA on another VLAN, as MAAS configures one dhcpd for all
// of a rack's VLANs (src/maasserver/dhcp.py: a failover peer for each HA
// VLAN, make_failover_peer_config; none for a VLAN the rack serves
// alone), here as the secondary. The bridge's VLAN has no peer: its
// dropped lease is dhcpd's alone, and its expiry reaches the region.
// (Following the one peer for every address, as the agent did before,
// the expiry was held in standby for a primary that does not serve
// this VLAN, then dropped: the region never heard the lease end.)
func TestLabHAVLANAndLoneVLAN(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := newWorld(t, hooksOK, 12)
	// The other VLAN: its subnet has no interface here, and its partner
	// (an address on the lab's bridge that no one holds) never answers.
	w.confExtra = "failover peer \"failover-vlan-5002\" {\n  secondary;\n  address 203.0.113.1;\n  port 5647;\n  peer address 203.0.113.250;\n  peer port 5647;\n" +
		"  max-response-delay 60;\n  max-unacked-updates 10;\n  load balance max seconds 3;\n}\n" +
		"subnet 198.51.100.0 netmask 255.255.255.0 {\n  pool {\n    failover peer \"failover-vlan-5002\";\n    range 198.51.100.10 198.51.100.50;\n  }\n}\n"
	w.shrinkOneAway()
	if !strings.Contains(w.lastLogs.String(), `"subnets_alone":1`) {
		t.Errorf("the agent did not say that a subnet is dhcpd's alone:\n%s", w.lastLogs)
	}
	if !strings.Contains(readFile(t, w.d.LeasesPath()), `failover peer "failover-vlan-5002" state`) {
		t.Errorf("dhcpd wrote no state for the other VLAN's peer; the test premise is gone:\n%s", w.d.Logs())
	}
}

// TestLabRestartsSynthesiseNothing is (b): dhcpd restarted many times
// with the same configuration while clients hold leases: nothing is
// synthesised and the region hears no expiry or release.
func TestLabRestartsSynthesiseNothing(t *testing.T) {
	restarts := 10
	if testing.Short() {
		restarts = 3
	}
	t.Parallel()
	w := newWorld(t, hooksOK, 20)
	w.startDhcpd(100, 150)
	w.startAgent()
	c1, c2 := w.lab.AddClient("c1"), w.lab.AddClient("c2")
	w.dhclient(c1)
	w.dhclient(c2)
	for range restarts {
		w.restartDhcpd(100, 150)
	}
	// A release the hook reports, for good measure: the file's blocks
	// for it must add nothing either.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(w.grace + 2*time.Second) // a grace and a poll for anything to show
	w.stopAgent()
	if got := w.lastSynth; len(got) != 0 {
		t.Errorf("synthesised %v after %d restarts, want nothing", got, restarts)
	}
	for _, a := range w.arrivals(netip.Addr{}) {
		if a.Action != event.Commit && !(a.Action == event.Release && a.MAC == mac(c1)) {
			t.Errorf("the region got %s", a)
		}
	}
	// Restarts closer together than the reconciler's reads are one
	// rewrite to it (a busy machine): at least one, at most every one.
	if n := strings.Count(w.lastLogs.String(), "dhcpd restarted"); n < 1 || n > restarts {
		t.Errorf("%d restarts logged, want 1 to %d", n, restarts)
	} else {
		t.Logf("%d of %d restarts seen as such", n, restarts)
	}
}

// TestLabHookless is (c): no hooks in dhcpd.conf. A commit, a release and
// an expiry reach the region from the file alone, as dhcpd writes them:
// the poll is an hour here, so only the inotify watch can find the commit
// and the release within waitArrival's 5 s; the expiry comes from the
// agent's own timer, not before the lease's end. (How long each took is
// logged, never asserted: a loaded machine takes what it takes.)
func TestLabHookless(t *testing.T) {
	t.Parallel()
	w := newWorld(t, hooksNone, 6)
	w.poll = time.Hour
	w.startDhcpd(100, 150)
	w.startAgent()
	if !strings.Contains(w.agent.logs.String(), `"mode":"hookless"`) {
		t.Fatalf("agent not in hookless mode:\n%s", w.agent.logs)
	}
	c1, c2 := w.lab.AddClient("c1"), w.lab.AddClient("c2")

	ip1 := w.dhclient(c1)
	bound := time.Now()
	a := w.waitArrival(ip1, event.Commit, mac(c1), 5*time.Second)
	t.Logf("commit: region %s after dhclient was bound", a.at.Sub(bound).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	a = w.waitArrival(ip1, event.Release, mac(c1), 5*time.Second)
	t.Logf("release: region %s after dhclient -r returned", a.at.Sub(released).Round(time.Millisecond))

	ip2 := w.dhclient(c2)
	w.waitArrival(ip2, event.Commit, mac(c2), 5*time.Second)
	if err := c2.Kill(); err != nil {
		t.Fatal(err)
	}
	ends := w.leaseEnds(ip2)
	a = w.waitArrival(ip2, event.Expiry, mac(c2), time.Until(time.Unix(ends, 0))+5*time.Second)
	t.Logf("expiry: region %s after the lease's end", a.at.Sub(time.Unix(ends, 0)).Round(time.Millisecond))
	if a.at.Unix() < ends {
		t.Errorf("expiry arrived at %d, before the lease's end %d", a.at.Unix(), ends)
	}
}

// TestLabAgentDownThroughShrink is (d): the agent is stopped, the range
// shrinks and dhcpd restarts while it is down, the agent starts: the
// expiry still arrives, at the lease's end.
func TestLabAgentDownThroughShrink(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := newWorld(t, hooksOK, 12)
	w.startDhcpd(100, 150)
	w.startAgent()
	c1, c2 := w.lab.AddClient("c1"), w.lab.AddClient("c2")
	ip1, ip2 := w.dhclient(c1), w.dhclient(c2)
	w.waitArrival(ip1, event.Commit, mac(c1), 5*time.Second)
	if err := c1.Kill(); err != nil {
		t.Fatal(err)
	}
	ends := w.leaseEnds(ip1)
	w.stopAgent()
	w.restartDhcpd(shrinkAway(ip1, ip2))
	w.startAgent()
	w.waitArrival(ip1, event.Expiry, mac(c1), time.Until(time.Unix(ends, 0))+10*time.Second)
	time.Sleep(time.Second)
	w.checkOnlyExpiry(ip1, mac(c1), ends)
}

// TestLabHookFails is (e): the hook dhcpd.conf names cannot run (not
// executable: the agent sees it and goes hookless) or runs and fails
// (the agent waits the grace): events still arrive, from the file.
func TestLabHookFails(t *testing.T) {
	for _, tc := range []struct {
		hooks  string
		within time.Duration
	}{
		{hooksNoExec, 2 * time.Second},
		{hooksFailing, 3*time.Second + 3*time.Second},
	} {
		t.Run(tc.hooks, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tc.hooks, 20)
			w.startDhcpd(100, 150)
			w.startAgent()
			c1 := w.lab.AddClient("c1")
			ip := w.dhclient(c1)
			start := time.Now()
			w.waitArrival(ip, event.Commit, mac(c1), tc.within)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w.waitArrival(ip, event.Release, mac(c1), tc.within)
			t.Logf("commit and release delivered %s after the lease", time.Since(start).Round(time.Millisecond))
			if !strings.Contains(w.d.Logs(), "execute") {
				t.Logf("dhcpd's log does not mention the failed hook:\n%s", w.d.Logs())
			}
		})
	}
}

// TestLabReleasedToAnother is (f): a lease runs out and its address goes
// to another client; the region sees commit(B) and never a late expiry
// for A after it.
func TestLabReleasedToAnother(t *testing.T) {
	for _, hooks := range []string{hooksNone, hooksOK} {
		t.Run(hooks, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, hooks, 6)
			w.grace = 2 * time.Second
			w.startDhcpd(100, 100) // one address
			w.startAgent()
			a, b := w.lab.AddClient("a"), w.lab.AddClient("b")
			ip := w.dhclient(a)
			if err := a.Kill(); err != nil {
				t.Fatal(err)
			}
			ends := w.leaseEnds(ip)
			w.waitArrival(ip, event.Expiry, mac(a), time.Until(time.Unix(ends, 0))+5*time.Second)
			if got := w.dhclient(b); got != ip {
				t.Fatalf("b got %s, want %s", got, ip)
			}
			w.waitArrival(ip, event.Commit, mac(b), 5*time.Second)
			time.Sleep(w.grace + 2*time.Second)
			var seq []string
			committedB := false
			for _, x := range w.arrivals(ip) {
				seq = append(seq, x.String())
				if x.Action == event.Commit && x.MAC == mac(b) {
					committedB = true
				}
				if committedB && x.Action != event.Commit && x.MAC == mac(a) {
					t.Errorf("late %s after commit(B)", x)
				}
			}
			t.Logf("region saw for %s:\n  %s", ip, strings.Join(seq, "\n  "))
			if hooks == hooksOK {
				w.stopAgent()
				if len(w.lastSynth) != 0 {
					t.Errorf("hooks reported everything, yet the agent synthesised %v", w.lastSynth)
				}
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLabDroppedThenGivenAway: a client's lease is dropped by a range
// shrink and dhcpd restart; the range comes back and dhcpd gives the
// address to another client before the dropped lease's end. MAAS's
// commit would link the address to the new MAC without unlinking the
// old one (internal/maasmodel: services/leases.py, staticipaddress.py
// create_or_update, interfaces.py link_ip), so the old lease's expiry
// must reach the region first: then the region holds the address for
// the new client alone. The agent used to drop that expiry.
func TestLabDroppedThenGivenAway(t *testing.T) {
	for _, hooks := range []string{hooksNone, hooksOK} {
		t.Run(hooks, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, hooks, 120) // the dropped lease outlives the test
			w.grace = 2 * time.Second
			w.startDhcpd(100, 100) // one address
			w.startAgent()
			a, b := w.lab.AddClient("a"), w.lab.AddClient("b")
			ip := w.dhclient(a)
			w.waitArrival(ip, event.Commit, mac(a), 5*time.Second)
			if err := a.Kill(); err != nil {
				t.Fatal(err)
			}
			ends := w.leaseEnds(ip)
			w.restartDhcpd(101, 101)
			if strings.Contains(readFile(t, w.d.LeasesPath()), "lease "+ip.String()+" ") {
				t.Fatalf("dhcpd kept %s after the shrink; the test premise is gone", ip)
			}
			w.restartDhcpd(100, 100)
			if got := w.dhclient(b); got != ip {
				t.Fatalf("b got %s, want %s", got, ip)
			}
			w.waitArrival(ip, event.Commit, mac(b), 5*time.Second)
			time.Sleep(w.grace + 2*time.Second) // anything else would come now
			var seq []string
			expiredA, committedB := false, false
			for _, x := range w.arrivals(ip) {
				seq = append(seq, x.String())
				switch {
				case x.Action == event.Expiry && x.MAC == mac(a):
					if committedB {
						t.Errorf("A's expiry after B's commit: %s", x)
					}
					expiredA = true
				case x.Action == event.Commit && x.MAC == mac(b):
					committedB = true
				}
			}
			t.Logf("region saw for %s (A's lease ends in %s):\n  %s", ip, time.Until(time.Unix(ends, 0)).Round(time.Second), strings.Join(seq, "\n  "))
			if !expiredA {
				t.Errorf("no expiry of A's dropped lease reached the region")
			}
			if l, ok := w.stub.Lease(ip); !ok || l.MAC != mac(b) {
				t.Errorf("the region holds %s as %+v (found %v), want for %s alone", ip, l, ok, mac(b))
			}
		})
	}
}

// TestLabReusedRenewal: a client asks again early in its lease, as a
// machine's PXE ROM and then its booted system do, minutes apart in
// MAAS's 600 s lease. dhcpd answers from the lease it has, keeping its
// end, and writes nothing (server/dhcp.c, reuse_lease: a lease younger
// than dhcp-cache-threshold, 25 % of its length by default); but it runs
// on commit before it decides that, and the hook's lease-time is the
// full lease time, so the region hears a second commit whose end is
// later than the lease's. The lease ends at the file's end: the region
// gets exactly one expiry, for that end, and none for the hook's
// commit's own end after it. dhcpd is stopped before the end, so no on
// expiry tells it: the agent's rule 3, from the file, must (a rule that
// trusted the hook's later end would date it late, or, as the file
// shows the lease the commit renewed, send none: TestUnwrittenEndCases).
func TestLabReusedRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	const lease = 20 // reused while younger than 5 s
	w := newWorld(t, hooksOK, lease)
	w.startDhcpd(100, 150)
	w.startAgent()
	c := w.lab.AddClient("c1")
	ip := w.dhclient(c)
	ends := w.leaseEnds(ip)
	w.waitArrival(ip, event.Commit, mac(c), 10*time.Second)
	// Two seconds on: the hook's commit then ends two seconds after the
	// lease, so an expiry dated at its end is told apart.
	time.Sleep(time.Until(time.Unix(ends-lease+2, 0)))
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	// INIT-REBOOT: dhclient asks for the address its lease file holds.
	if got := w.dhclient(c); got != ip {
		t.Fatalf("premise: the client got %s again, not %s", got, ip)
	}
	again := time.Now().Unix()
	if e := w.leaseEnds(ip); e != ends || again-(ends-lease) > lease/4 {
		t.Fatalf("premise: dhcpd did not reuse the lease (the file's end %d, was %d; asked again %d s into it)", e, ends, again-(ends-lease))
	}
	deadline := time.Now().Add(10 * time.Second)
	var commits []arrival
	for len(commits) < 2 {
		commits = commits[:0]
		for _, a := range w.arrivals(ip) {
			if a.Action == event.Commit {
				commits = append(commits, a)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hook's commit of the reused lease did not reach the region:\n%s", describeArrivals(w.arrivals(netip.Addr{})))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c2 := commits[1]; c2.LeaseTime != lease {
		t.Fatalf("premise: the hook told lease time %d for the reused lease (the file's end %d, commit at %d), not the full %d", c2.LeaseTime, ends, c2.Timestamp, lease)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	w.dropAddr(c)
	// dhcpd stops before the end: no on expiry; the agent alone ends
	// the lease, from the file.
	if err := w.d.Stop(); err != nil {
		t.Fatal(err)
	}
	exp := w.waitArrival(ip, event.Expiry, mac(c), time.Until(time.Unix(ends, 0))+10*time.Second)
	if exp.Timestamp > ends+1 {
		t.Errorf("the expiry is dated %d, after the file's end %d (the hook's commit's end?)", exp.Timestamp, ends)
	}
	// Past the hook's commit's own end and the grace: nothing more.
	time.Sleep(time.Until(time.Unix(again+lease, 0)) + w.grace + 2*time.Second)
	w.checkOnlyExpiry(ip, mac(c), ends)
}
