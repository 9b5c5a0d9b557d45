// Package chaos runs leasekeeper under randomly mixed, overlapping faults
// against the real thing (dhcpd, dhclient and perfdhcp in network
// namespaces, the packaged hook blocks, the agent under a socket holder,
// the MAAS-shaped region stub) and judges the run with internal/chaos/oracle.
package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/chaos/oracle"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// Options configure a run.
type Options struct {
	Duration time.Duration // faults and clients run this long, then the run settles
	Seed     uint64
	AgentBin string // leasekeeper
	HookBin  string // leasekeeper-hook
	Snippet  string // packaging/dhcpd/leasekeeper.conf
	Dir      string // the run's files; kept on failure
	Lease    int    // lease time, seconds
	Clients  int    // dhclients
	Faults   []string
	// Pair runs a failover pair: two racks, each a dhcpd peer with its
	// own agent, one region (pair.go).
	Pair bool
	// PairAlone: the pair's agents without the channel between them
	// ([pair] unset: each rack delivers on its own), to compare.
	PairAlone bool
	// PairVLANs: a second HA VLAN between the same two racks, declared
	// first, with the roles the other way round (MAAS chooses the
	// primary rack per VLAN; src/maasserver/dhcp.py,
	// make_failover_peer_config): its own failover connection and
	// states in both files, no clients. Each rack's agent must follow
	// the clients' VLAN's peer for their addresses, not the first.
	PairVLANs bool
	// PairMAASTimers: the failover peers' timers exactly as MAAS writes
	// them (src/maasserver/templates/dhcp/dhcpd.conf.template:
	// max-response-delay 60, mclt 3600, no auto-partner-down) and its
	// subnet's ignore-client-uids, where the lab's default shortens them
	// so that a dead rack's partner takes over within seconds. Without
	// auto-partner-down a survivor stays communications-interrupted
	// until its partner returns, as on a MAAS rack nobody declared
	// partner-down.
	PairMAASTimers bool
	// PairPartners: a third rack, c, the primary of a second HA VLAN
	// (198.51.100.0/24, relayed) whose secondary is the pair's primary:
	// a's agent has a channel to b's and one to c's (pair.partners).
	// perfdhcp relays that VLAN's clients to c, or to a while c's rack
	// is down (pair.go).
	PairPartners bool
	// LogLevel is the agents' log.level ("": the agent's default, info);
	// debug keeps what a lost life needs to be traced.
	LogLevel string
}

// Fault kinds.
const (
	FDhcpdRestart = "dhcpd-restart"
	FDhcpdRange   = "dhcpd-range"
	FDhcpdKill    = "dhcpd-kill9"
	// FDhcpdRewrite is dhcpd's hourly rewrite, done by a running dhcpd:
	// dhcpd restarted with its rewrite clock set so that the rewrite
	// comes due seconds later (lab.Dhcpd.RestartRewritingAfter); counted
	// once the new file is seen with dhcpd still running.
	FDhcpdRewrite = "dhcpd-rewrite"
	FAgentKill    = "agent-kill9"
	FAgentTerm    = "agent-term"
	FRegionDown   = "region-down"
	FRegionSlow   = "region-slow"
	FRegion500    = "region-500"
	FHooksFail    = "hooks-fail"
	FStateFull    = "state-full"
	FRegion422    = "region-422-poison"
	FRegionSkew   = "region-clock-skew"
	FLeasesDir    = "leases-dir-unreadable"
)

// AllFaults is every fault kind a run injects by default.
var AllFaults = []string{FDhcpdRestart, FDhcpdRange, FDhcpdKill, FDhcpdRewrite, FAgentKill, FAgentTerm,
	FRegionDown, FRegionSlow, FRegion500, FRegion422, FRegionSkew, FHooksFail, FStateFull, FLeasesDir}

// ranges are the dynamic ranges dhcpd serves in turn (203.0.113.X-Y):
// the full one, shrunk, moved.
var ranges = [][2]int{{100, 199}, {100, 149}, {130, 229}, {150, 199}}

type run struct {
	opts Options
	tb   *lab.ProgramTB
	t0   time.Time

	lab *lab.Lab
	d   *lab.Dhcpd
	// deaths: when dhcpd was killed or stopped (oracle Input.Deaths).
	deathMu sync.Mutex
	deaths  []time.Time
	dmu     sync.Mutex // dhcpd restarts
	afmu    sync.Mutex // agent faults, one at a time (each stops, then starts one agent)
	stub    *regionstub.Server
	front   *regionstub.Front // MAAS's nginx on 5242: the agents' way to the stub
	files   regionstub.Files

	sock, sockAway, spool, state string
	holder                       *os.File // the activated socket, held as systemd holds it
	// The agent runs as this user and group, not root, as the package
	// runs it (User=leasekeeper): a uid no account uses, so that file
	// permissions (the leases-dir-unreadable fault) apply to it.
	uid, gid  uint32
	leasesDir string

	amu    sync.Mutex // agent restarts
	agent  *exec.Cmd
	agentN int
	exited chan struct{}

	fmu    sync.Mutex
	faults map[string]int
	log    *os.File

	capt *capture

	metrics string // the agent's metrics listener, host:port
	meas    measure
	// extraConfig is appended to the agent's configuration (a pair's
	// rack: its [pair] section).
	extraConfig string

	evidence *Evidence // what the oracle judged
}

// Result is a run's outcome.
type Result struct {
	Report oracle.Report
	Faults map[string]int // injected, by kind
	Agent  Measures
	// Evidence is what the oracle judged (nil if the run never got as
	// far as judging): kept with the run's files, so that the run can be
	// judged again after a change to the oracle (Rejudge).
	Evidence *Evidence `json:",omitempty"`
}

// Evidence is what a run's oracle judges: every leases-file generation
// with when each block was read, the region's items and requests, and
// dhcpd's deaths.
type Evidence struct {
	Input    oracle.Input
	Requests []oracle.Request
	// Pair is a pair run's two files before they were merged into
	// Input.Generations (nil for one rack). Judged again, they are
	// merged again, so that a change to oracle.MergePair applies too.
	Pair *PairFiles `json:",omitempty"`
}

// PairFiles are a failover pair's leases files as MergePair takes them.
type PairFiles struct {
	Files [][]oracle.Generation
	// Ranges[f][g] is the range (last octets of 203.0.113.x) the dhcpd
	// that wrote Files[f][g] started on.
	Ranges [][][2]int
}

// InRange is MergePair's inRange: whether ip lies in the range of the
// dhcpd that wrote Files[f][g]. Ranges are VLAN 5001's; VLAN 5002's
// (198.51.100.0/24, PairPartners) never changes.
func (p *PairFiles) InRange(f, g int, ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() || !strings.HasPrefix(ip, "203.0.113.") {
		return true
	}
	rg, last := p.Ranges[f][g], int(a.As4()[3])
	return strings.HasPrefix(ip, "203.0.113.") && last >= rg[0] && last <= rg[1]
}

// Merge is the pair's truth as one stream of generations.
func (p *PairFiles) Merge() []oracle.Generation { return oracle.MergePair(p.Files, p.InRange) }

// EvidenceFile is the run's outcome with its evidence, in the run's
// directory.
const EvidenceFile = "judge.json"

// Verdict is the oracle's report on ev: the rules over the items, then
// the re-posts over the requests (the agent's region.timeout is 3 s).
func Verdict(ev Evidence) oracle.Report {
	rep := oracle.Check(ev.Input)
	rep.Posts = oracle.CheckPosts(ev.Requests, 3*time.Second)
	for _, o := range rep.Posts.Overlapping {
		rep.Violations = append(rep.Violations, oracle.Violation{Rule: "repost", Evidence: o})
		rep.ByRule["repost"]++
	}
	return rep
}

// judgeAgain is the run's report again: the oracle's verdict on the
// evidence, and the agent's bounds.
func judgeAgain(res Result) oracle.Report {
	rep := Verdict(*res.Evidence)
	for _, v := range res.Agent.Violations() {
		rep.Violations = append(rep.Violations, v)
		rep.ByRule[v.Rule]++
	}
	return rep
}

// Rejudge reads a run's EvidenceFile from dir and judges it again with
// this oracle. Faults and agent measures are the run's as recorded.
func Rejudge(dir string) (Result, error) {
	b, err := os.ReadFile(filepath.Join(dir, EvidenceFile))
	if err != nil {
		return Result{}, err
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return Result{}, fmt.Errorf("%s: %w", EvidenceFile, err)
	}
	if res.Evidence == nil {
		return Result{}, fmt.Errorf("%s: the run was never judged (no evidence)", EvidenceFile)
	}
	if p := res.Evidence.Pair; p != nil {
		// Merged again with this oracle: the report and Explain both
		// see the new merge.
		res.Evidence.Input.Generations = p.Merge()
	}
	res.Report = judgeAgain(res)
	return res, nil
}

// WriteEvidence keeps res, evidence included, as dir's EvidenceFile.
func WriteEvidence(dir string, res Result) error {
	if res.Evidence == nil {
		return nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, EvidenceFile), b, 0o644)
}

// Run runs the chaos and returns the oracle's report.
func Run(ctx context.Context, o Options) (res Result, err error) {
	if o.Lease == 0 {
		o.Lease = 20
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if len(o.Faults) == 0 {
		o.Faults = AllFaults
		if o.Pair {
			o.Faults = PairFaults
			if o.PairPartners {
				o.Faults = append(slices.Clone(PairFaults), FPartnerDown)
			}
		}
	}
	if o.PairPartners && (!o.Pair || o.PairVLANs) {
		return res, errors.New("three racks (pair partners) need a pair run, without its second VLAN between two racks (both use 198.51.100.0/24)")
	}
	tb := &lab.ProgramTB{Prog: "chaos", TempRoot: o.Dir}
	r := &run{opts: o, tb: tb, faults: map[string]int{}, t0: time.Now()}
	defer tb.RunCleanups()
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(lab.Fatal); !ok {
				panic(p)
			}
			if err == nil {
				err = errors.New("the run failed to set up or drive the lab (see above)")
			}
		}
	}()
	defer func() { res.Faults, res.Agent, res.Evidence = r.Faults(), r.meas.result(), r.evidence }()
	if o.Pair {
		res.Report, err = r.runPair(ctx)
	} else {
		res.Report, err = r.run(ctx)
	}
	if err == nil {
		for _, v := range r.meas.result().Violations() {
			res.Report.Violations = append(res.Report.Violations, v)
			res.Report.ByRule[v.Rule]++
		}
	}
	return res, err
}

// draws is one goroutine's own stream of random numbers, from the seed
// and a stream number: the fault loop, each client's loop and perfdhcp's
// each draw from their own, and each fault injected from a stream the
// fault loop drew for it. One stream shared by goroutines would hand out
// its numbers in the order the goroutines happened to ask, so a seed
// would not give the same faults twice; this way a seed gives the same
// schedule of faults, their kinds, times and choices (whether one applies
// still depends on the run: a rack already down stays down).
type draws struct{ rng *rand.Rand }

// Stream numbers: each client's loop is streamClients plus its index.
const (
	streamFaults uint64 = iota + 1
	streamPerf
	streamClients
	// streamPerfPartner is VLAN 5002's perfdhcp (PairPartners), past
	// any client's.
	streamPerfPartner uint64 = 1 << 20
)

func (r *run) draws(stream uint64) draws {
	return draws{rand.New(rand.NewPCG(r.opts.Seed, r.opts.Seed^0x5eed^stream<<32))}
}

func (d draws) intn(n int) int { return d.rng.IntN(n) }

// between is a random duration in [lo, hi).
func (d draws) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(d.intn(int((hi-lo)/time.Millisecond)))*time.Millisecond
}

// fault is a stream for one fault, drawn from this (the fault loop's).
func (d draws) fault() draws { return draws{rand.New(rand.NewPCG(d.rng.Uint64(), d.rng.Uint64()))} }

func (r *run) say(format string, args ...any) {
	line := fmt.Sprintf("%7.1fs ", time.Since(r.t0).Seconds()) + fmt.Sprintf(format, args...)
	fmt.Println(line)
	if r.log != nil {
		fmt.Fprintln(r.log, line)
	}
}

func (r *run) run(ctx context.Context) (oracle.Report, error) {
	o := r.opts
	var err error
	if r.log, err = os.Create(filepath.Join(o.Dir, "chaos.log")); err != nil {
		return oracle.Report{}, err
	}
	r.tb.Cleanup(func() { r.log.Close() })
	lab.Require(r.tb, "dhcpd", "dhclient", "perfdhcp")

	if err := r.startRegion(); err != nil {
		return oracle.Report{}, err
	}
	if r.files, err = r.stub.WriteFiles(filepath.Join(o.Dir, "pki")); err != nil {
		return oracle.Report{}, err
	}

	r.sock = filepath.Join(o.Dir, "hook.sock")
	r.sockAway = filepath.Join(o.Dir, "hook.sock.away")
	r.spool = filepath.Join(o.Dir, "spool")
	r.state = filepath.Join(o.Dir, "state")
	if err := r.agentUser(); err != nil {
		return oracle.Report{}, err
	}
	if err := r.mountState(); err != nil {
		return oracle.Report{}, err
	}
	if r.holder, err = lab.UnixgramQlen(r.sock, 512); err != nil {
		return oracle.Report{}, fmt.Errorf("socket holder: %w", err)
	}
	r.tb.Cleanup(func() { r.holder.Close() })

	r.lab = lab.New(r.tb)
	r.d = r.lab.StartDhcpd(r.tb, lab.DhcpdConfig{Conf: r.conf(ranges[0])})
	r.leasesDir = filepath.Dir(r.d.LeasesPath())
	if err := os.Chmod(r.leasesDir, 0o755); err != nil { // a test's temporary dir is 0700
		return oracle.Report{}, err
	}
	r.say("dhcpd pid %d, range %v, leases %s", r.d.Pid(), ranges[0], r.d.LeasesPath())
	r.capt = newCapture(r.d.LeasesPath())
	cctx, stopCapture := context.WithCancel(context.Background())
	capDone := make(chan struct{})
	go func() { defer r.guard(); r.capt.follow(cctx); close(capDone) }()
	defer func() { stopCapture(); <-capDone }()

	if r.metrics, err = freePort(); err != nil {
		return oracle.Report{}, err
	}
	r.startAgent()
	r.tb.Cleanup(func() { r.stopAgent(syscall.SIGTERM) })
	sctx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() { defer r.guard(); r.sampleLoop(sctx); close(sampled) }()
	defer func() { stopSampling(); <-sampled }()

	// The client population and the faults, for Duration.
	wctx, stopWork := context.WithTimeout(ctx, o.Duration)
	defer stopWork()
	var wg sync.WaitGroup
	for i := range o.Clients {
		c := r.lab.AddClient(fmt.Sprintf("c%d", i+1), lab.WithHostname(fmt.Sprintf("chaos-%d", i+1)))
		wg.Add(1)
		d := r.draws(streamClients + uint64(i))
		go func() { defer wg.Done(); defer r.guard(); r.dhclientLoop(wctx, c, d) }()
	}
	perf := r.lab.AddClient("perf")
	if _, err := r.lab.Exec(ctx, perf.NS, "ip", "addr", "add", "203.0.113.2/24", "dev", perf.Iface); err != nil {
		return oracle.Report{}, err
	}
	wg.Add(2)
	go func() { defer wg.Done(); defer r.guard(); r.perfLoop(wctx, perf) }()
	go func() { defer wg.Done(); defer r.guard(); r.faultLoop(wctx) }()
	wg.Wait()
	if ctx.Err() != nil {
		return oracle.Report{}, ctx.Err()
	}

	// Settle: every fault undone, clients gone (their leases expire),
	// dhcpd back on its full range, then wait until the leases ended
	// and the region heard nothing new for a while.
	r.say("faults stop; clients vanish; settling")
	r.undoAll()
	r.dmu.Lock()
	if err := r.stopDhcpd(); err != nil {
		r.dmu.Unlock()
		return oracle.Report{}, fmt.Errorf("dhcpd stop: %w", err)
	}
	if err := r.d.Restart(r.conf(ranges[0])); err != nil {
		r.dmu.Unlock()
		return oracle.Report{}, fmt.Errorf("dhcpd restart: %w", err)
	}
	r.dmu.Unlock()
	r.fault("settle: dhcpd restart on the full range")
	deadline := time.Now().Add(time.Duration(o.Lease)*time.Second + 90*time.Second)
	lastEnd := time.Now().Add(time.Duration(o.Lease)*time.Second + 5*time.Second)
	n, quiet := r.stub.Len(), time.Now()
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return oracle.Report{}, ctx.Err()
		}
		time.Sleep(500 * time.Millisecond)
		if m := r.stub.Len(); m != n {
			n, quiet = m, time.Now()
		}
		if time.Now().After(lastEnd) && time.Since(quiet) > 15*time.Second {
			break
		}
	}
	end := time.Now()
	r.capt.poll()
	r.stopAgent(syscall.SIGTERM)
	r.capt.poll()
	r.say("judging: %d region items, %d leases file generations", r.stub.Len(), len(r.capt.gens))
	return r.judge(end), nil
}

// startRegion starts the region stub and, in front of it, a stand-in for
// the nginx stream proxy MAAS runs on port 5242, which the agents talk
// to.
func (r *run) startRegion() error {
	var err error
	if r.stub, err = regionstub.Start(regionstub.Options{}); err != nil {
		return err
	}
	r.tb.Cleanup(func() { r.stub.Close() })
	if r.front, err = regionstub.StartFront(r.stub.Addr().String()); err != nil {
		return err
	}
	r.tb.Cleanup(func() { r.front.Close() })
	return nil
}

// stopDhcpd stops dhcpd (SIGTERM, waiting for its exit) and records its
// death; a Restart then just starts it.
func (r *run) stopDhcpd() error {
	err := r.d.Stop()
	r.died()
	return err
}

// died records that dhcpd has just died, killed or stopped (oracle
// Input.Deaths). It is recorded once dhcpd is gone, not before the
// signal: a stopping dhcpd still runs the hook of the request at hand
// (seen: a commit's hook ~0.1 s after the SIGTERM was decided, never
// written), and the oracle takes hooks at most deathSlack before a death.
func (r *run) died() {
	r.deathMu.Lock()
	defer r.deathMu.Unlock()
	r.deaths = append(r.deaths, time.Now())
}

// writeBatches keeps what the region applied, one batch a line in the
// order applied (arrival time, Idempotency-Key, items with their event
// timestamps), in region-batches.jsonl for a post-mortem: the oracle's
// evidence names items by arrival only.
func (r *run) writeBatches() {
	f, err := os.Create(filepath.Join(r.opts.Dir, "region-batches.jsonl"))
	if err != nil {
		r.say("region-batches.jsonl: %v", err)
		return
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, b := range r.stub.Batches() {
		_ = enc.Encode(b)
	}
	if err := w.Flush(); err != nil {
		r.say("region-batches.jsonl: %v", err)
	}
}

func (r *run) judge(end time.Time) oracle.Report {
	gens := r.capt.generations(end, r.opts.Dir)
	var items []oracle.Item
	for bi, b := range r.stub.Batches() {
		for _, it := range b.Items {
			items = append(items, oracle.Item{At: b.At, Action: it.Action, IP: it.IP, MAC: it.MAC, Batch: bi + 1, Timestamp: it.Timestamp, LeaseTime: it.LeaseTime})
		}
	}
	r.writeBatches()
	r.deathMu.Lock()
	deaths := slices.Clone(r.deaths)
	r.deathMu.Unlock()
	ev := Evidence{Input: oracle.Input{Generations: gens, Items: items, End: end, Refused: r.deadLetters(), Deaths: deaths}, Requests: requests(r.stub)}
	r.evidence = &ev
	return Verdict(ev)
}

// requests is the stub's request log as the oracle reads it.
func requests(stub *regionstub.Server) []oracle.Request {
	var reqs []oracle.Request
	for _, q := range stub.Requests() {
		reqs = append(reqs, oracle.Request{Key: q.IdempotencyKey, At: q.At, Done: q.Done, Accepted: q.Accepted, Items: q.Items, Status: q.Status})
	}
	return reqs
}

// deadLetters are the events the (stopped) agent dead-lettered.
func (r *run) deadLetters() []oracle.Item {
	out, err := exec.Command(r.opts.AgentBin, "deadletter", "list", "--json", "--state-dir", r.state).Output()
	if err != nil {
		r.say("deadletter list: %v", err)
		return nil
	}
	var dls []struct {
		Reason string           `json:"reason"`
		Event  event.RegionItem `json:"event"`
	}
	if err := json.Unmarshal(out, &dls); err != nil {
		r.say("deadletter list: %v: %s", err, out)
		return nil
	}
	var items []oracle.Item
	for _, d := range dls {
		r.say("dead letter: %s %s %s (%s)", d.Event.Action, d.Event.IP, d.Event.MAC, d.Reason)
		items = append(items, oracle.Item{Action: d.Event.Action, IP: d.Event.IP, MAC: d.Event.MAC})
	}
	return items
}

func (r *run) fault(kind string) {
	r.fmu.Lock()
	r.faults[kind]++
	r.fmu.Unlock()
	r.say("FAULT %s", kind)
}

func (r *run) conf(rg [2]int) string {
	var b strings.Builder
	l := r.opts.Lease
	fmt.Fprintf(&b, "ping-check false;\nauthoritative;\nddns-update-style none;\ndefault-lease-time %d;\nmax-lease-time %d;\nmin-lease-time %d;\n", l, l, l)
	b.WriteString(snippet(r.tb, r.opts.Snippet, r.opts.HookBin, r.sock, r.spool))
	b.WriteString(r.lab.SubnetConf(fmt.Sprintf("  range 203.0.113.%d 203.0.113.%d;", rg[0], rg[1])))
	return b.String()
}

const hookCall = `"/usr/sbin/leasekeeper-hook", "notify",`

// snippet is the packaged hook blocks running hook with this run's socket
// and spool (lab.HookSnippet does the same from a test's module root).
func snippet(tb *lab.ProgramTB, path, hook, sock, spool string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	if n := strings.Count(string(raw), hookCall); n != 3 {
		tb.Fatalf("%s: %d execute calls of the form %s, want 3", path, n, hookCall)
	}
	return strings.ReplaceAll(string(raw), hookCall,
		fmt.Sprintf("%q, \"notify\", \"--socket\", %q, \"--spool\", %q,", hook, sock, spool)) + "\n"
}

// mountState puts the agent's state directory on a small tmpfs, so that
// the state-full fault can fill it.
func (r *run) mountState() error {
	if err := os.MkdirAll(r.state, 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("size=16m,mode=0700,uid=%d,gid=%d", r.uid, r.gid)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "chaos-state", r.state).CombinedOutput(); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %v: %s", r.state, err, out)
	}
	r.tb.Cleanup(func() {
		if out, err := exec.Command("umount", r.state).CombinedOutput(); err != nil {
			exec.Command("umount", "-l", r.state).Run() //nolint:errcheck
			r.tb.Errorf("umount %s: %v: %s", r.state, err, out)
		}
	})
	return nil
}

// agentUser picks the agent's uid and gid and gives it what the package
// gives the leasekeeper user: its config, keys and control socket
// directory; the spool as tmpfiles.d makes it (root, the agent's group,
// 2770, setgid); the run's directory to pass through. dhcpd and so the
// hooks run as root, which hook.allowed_uids names.
func (r *run) agentUser() error {
	id, err := unusedID()
	if err != nil {
		return err
	}
	r.uid, r.gid = id, id
	r.say("the agent runs as uid %d gid %d (no account uses them)", r.uid, r.gid)
	if err := os.Chmod(r.opts.Dir, 0o711); err != nil {
		return err
	}
	if err := os.MkdirAll(r.spool, 0o770); err != nil {
		return err
	}
	if err := os.Chown(r.spool, 0, int(r.gid)); err != nil {
		return err
	}
	if err := os.Chmod(r.spool, 0o770|os.ModeSetgid); err != nil {
		return err
	}
	run := filepath.Join(r.opts.Dir, "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		return err
	}
	return r.chown(run, filepath.Join(r.opts.Dir, "pki"), r.files.CA, r.files.ClientCert, r.files.ClientKey)
}

func (r *run) chown(paths ...string) error {
	for _, p := range paths {
		if err := os.Chown(p, int(r.uid), int(r.gid)); err != nil {
			return err
		}
	}
	return nil
}

// unusedID is a number from 61000 up that no user and no group has.
func unusedID() (uint32, error) {
	for id := 61000; id < 62000; id++ {
		_, uerr := user.LookupId(strconv.Itoa(id))
		_, gerr := user.LookupGroupId(strconv.Itoa(id))
		var nu user.UnknownUserIdError
		var ng user.UnknownGroupIdError
		if errors.As(uerr, &nu) && errors.As(gerr, &ng) {
			return uint32(id), nil
		}
	}
	return 0, errors.New("no unused uid and gid in 61000-61999 for the agent")
}

// The agent.

func (r *run) startAgent() {
	r.amu.Lock()
	defer r.amu.Unlock()
	r.agentN++
	cfg := fmt.Sprintf(`[dhcpd]
leases = %q
config = %q
pid_file = ""
[hook]
socket = %q
spool = %q
allowed_uids = [0]
[region]
url = %q
ca_file = %q
cert_file = %q
key_file = %q
server_name = "maas"
batch_max = 50
timeout = "3s"
unanswered_hold = "12s"
[state]
dir = %q
[reconcile]
expiry_grace = "3s"
poll_interval = "1s"
[metrics]
listen = %q
[control]
socket = %q
[log]
format = "json"
%s`, r.d.LeasesPath(), r.d.ConfPath(), r.sock, r.spool, r.front.URL(r.stub.URL()), r.files.CA, r.files.ClientCert, r.files.ClientKey,
		r.state, r.metrics, filepath.Join(r.opts.Dir, "run", "control.sock"), logLevel(r.opts.LogLevel)) + r.extraConfig
	path := filepath.Join(r.opts.Dir, "leasekeeper.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		r.tb.Fatalf("%v", err)
	}
	if err := r.chown(path); err != nil {
		r.tb.Fatalf("%v", err)
	}
	logPath := filepath.Join(r.opts.Dir, fmt.Sprintf("agent-%d.log", r.agentN))
	logf, err := os.Create(logPath)
	if err != nil {
		r.tb.Fatalf("%v", err)
	}
	defer logf.Close()
	// As systemd's socket activation: fd 3, LISTEN_PID the service's own
	// pid (the shell's, which exec keeps).
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, r.opts.AgentBin, "agent", "--config", path)
	cmd.ExtraFiles = []*os.File{r.holder}
	cmd.Env = append(cleanEnv(), "LISTEN_FDS=1", "LISTEN_FDNAMES=hook")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		r.tb.Fatalf("start agent: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() //nolint:errcheck // the exit is judged by the oracle
	r.agent, r.exited = cmd, exited
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			r.tb.Fatalf("agent %d exited while starting; its log %s:\n%s", r.agentN, logPath, tailFile(logPath, 20))
		default:
		}
		if b, _ := os.ReadFile(logPath); strings.Contains(string(b), `"message":"ready"`) {
			r.say("agent %d ready (pid %d)", r.agentN, cmd.Process.Pid)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.say("agent %d not ready after 60 s (state dir full?), going on; log %s", r.agentN, logPath)
}

// stopAgent signals the agent (by its own process) and waits for it.
func (r *run) stopAgent(sig syscall.Signal) {
	r.amu.Lock()
	defer r.amu.Unlock()
	if r.agent == nil {
		return
	}
	r.sample(r.agentN, r.agent.Process.Pid) // its last counts and peak
	_ = r.agent.Process.Signal(sig)
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		r.say("agent %d ignored %v for 30 s: killed", r.agentN, sig)
		_ = r.agent.Process.Kill()
		<-r.exited
	}
	if sig == syscall.SIGTERM && r.agent.ProcessState != nil && !r.agent.ProcessState.Success() {
		r.say("agent %d: exit after SIGTERM: %v", r.agentN, r.agent.ProcessState)
	}
	r.agent = nil
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Clients.

// dhclientLoop: lease (dhclient keeps renewing), hold, then release or
// vanish, pause, again.
func (r *run) dhclientLoop(ctx context.Context, c *lab.Client, d draws) {
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ip, err := c.Dhclient(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.say("client %s: no lease: %v", c.Name, firstLine(err.Error()))
				sleep(ctx, 2*time.Second)
			}
			continue
		}
		_ = ip
		sleep(ctx, d.between(3*time.Second, time.Duration(r.opts.Lease)*2*time.Second))
		if d.intn(2) == 0 {
			rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if err := c.Release(rctx); err != nil {
				r.say("client %s: release: %v", c.Name, firstLine(err.Error()))
				_ = c.Kill()
			}
			cancel()
		} else {
			_ = c.Kill()
		}
		sleep(ctx, d.between(time.Second, time.Duration(r.opts.Lease)*time.Second))
	}
	_ = c.Kill()
}

// perfLoop runs perfdhcp (as a relay from 203.0.113.2) in bursts: new
// leases, renewals and releases from a pool of 60 MACs.
func (r *run) perfLoop(ctx context.Context, c *lab.Client) {
	r.perfRounds(ctx, c, r.draws(streamPerf), "perfdhcp.log", nil, func() (string, string) { return c.Iface, "203.0.113.1" })
}

// perfRounds runs perfdhcp rounds from c's namespace until ctx ends, each
// relayed from the local address or interface to the server to returns
// as the round starts, its output appended to log in the run's
// directory, with extra arguments before the server's.
func (r *run) perfRounds(ctx context.Context, c *lab.Client, d draws, log string, extra []string, to func() (local, server string)) {
	bin, err := lab.LookBin("perfdhcp")
	if err != nil {
		r.say("perfdhcp: %v", err)
		return
	}
	for i := 0; ctx.Err() == nil; i++ {
		secs := 5 + d.intn(10)
		out := filepath.Join(r.opts.Dir, log)
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return
		}
		local, server := to()
		args := append([]string{bin, "-4", "-r", "3", "-f", "1", "-F", "1", "-R", "60",
			"-s", fmt.Sprint(r.opts.Seed + uint64(i)), "-p", fmt.Sprint(secs), "-l", local}, extra...)
		cmd := r.lab.CommandContext(ctx, c.NS, append(args, server)...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		_ = cmd.Run()
		f.Close()
		sleep(ctx, d.between(time.Second, 10*time.Second))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// Faults.

func (r *run) faultLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sleep(ctx, 5*time.Second)
	fd := r.draws(streamFaults)
	for ctx.Err() == nil {
		kind := r.opts.Faults[fd.intn(len(r.opts.Faults))]
		d := fd.fault()
		wg.Add(1)
		go func() { defer wg.Done(); defer r.guard(); r.inject(ctx, kind, d) }()
		sleep(ctx, fd.between(2*time.Second, 8*time.Second))
	}
}

// busy serialises faults of one kind (a second region-slow while one
// runs would end the first one's window early).
var busyMu, skewMu, dirMu sync.Mutex

func (r *run) inject(ctx context.Context, kind string, d draws) {
	switch kind {
	case FDhcpdRestart, FDhcpdRange, FDhcpdKill, FDhcpdRewrite:
		r.dmu.Lock()
		defer r.dmu.Unlock()
		if kind != FDhcpdRewrite {
			r.fault(kind)
		}
		var err error
		switch kind {
		case FDhcpdRewrite:
			after := d.between(2*time.Second, 15*time.Second)
			r.say("  dhcpd restarts, its hourly rewrite due in %.1f s", after.Seconds())
			if err = r.stopDhcpd(); err == nil {
				if err = r.d.RestartRewritingAfter(after); err == nil {
					r.awaitRewrite(ctx, after)
				}
			}
		case FDhcpdRestart:
			if err = r.stopDhcpd(); err == nil {
				err = r.d.Restart("")
			}
		case FDhcpdRange:
			rg := ranges[d.intn(len(ranges))]
			r.say("  dhcpd range now 203.0.113.%d-%d", rg[0], rg[1])
			if err = r.stopDhcpd(); err == nil {
				err = r.d.Restart(r.conf(rg))
			}
		case FDhcpdKill:
			if pid := r.d.Pid(); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				r.died()
			}
			time.Sleep(d.between(0, 3*time.Second))
			// Restart first reports the death it finds, then starts.
			if err = r.d.Restart(""); err != nil && r.d.Pid() == 0 {
				err = r.d.Restart("")
			}
		}
		if err != nil {
			r.tb.Fatalf("dhcpd: %v", err)
		}
	case FAgentKill, FAgentTerm:
		// Two overlapping agent faults would start two agents, the second
		// refused by the first's outbox lock (seen in a 30 min run).
		r.afmu.Lock()
		defer r.afmu.Unlock()
		sig := syscall.SIGKILL
		if kind == FAgentTerm {
			sig = syscall.SIGTERM
		}
		r.fault(kind)
		r.stopAgent(sig)
		sleep(ctx, d.between(0, 5*time.Second))
		r.startAgent()
	case FRegionDown:
		r.fault(kind)
		dur := d.between(3*time.Second, 20*time.Second)
		v := d.intn(4)
		switch v {
		case 0:
			r.stub.CloseFor(dur)
		case 1:
			r.stub.Unavailable(dur, "1")
		case 2:
			// The API server stopped behind nginx: connections closed
			// before the request.
			r.front.DownFor(dur)
		default:
			// A date on the region's clock, which region-clock-skew moves.
			r.stub.FailFor(dur, regionstub.Fault{Status: 503, RetryAt: 2 * time.Second})
		}
		r.say("region down for %s: %s", dur.Round(time.Millisecond), [...]string{"connections reset", "503, Retry-After 1", "API server stopped behind nginx", "503, Retry-After a date"}[v])
	case FRegion500:
		r.fault(kind)
		r.stub.FailFor(d.between(3*time.Second, 15*time.Second), regionstub.Fault{Status: 500})
	case FRegionSlow:
		if !busyMu.TryLock() {
			return
		}
		defer busyMu.Unlock()
		r.fault(kind)
		// Slower than the agent's region.timeout (3 s).
		r.stub.SetDelay(d.between(4*time.Second, 10*time.Second))
		sleep(ctx, d.between(10*time.Second, 20*time.Second))
		r.stub.SetDelay(0)
	case FRegionSkew:
		if !skewMu.TryLock() {
			return
		}
		defer skewMu.Unlock()
		r.fault(kind)
		skew := d.between(time.Minute, 30*time.Minute)
		if d.intn(2) == 0 {
			skew = -skew
		}
		r.say("  region clock %+.1f min", skew.Minutes())
		r.stub.SetSkew(skew)
		sleep(ctx, d.between(10*time.Second, 30*time.Second))
		r.stub.SetSkew(0)
	case FRegion422:
		// One item refused by the schema: the IP of the latest item taken.
		items := r.stub.Items()
		if len(items) == 0 {
			return
		}
		ip := items[len(items)-1].IP
		r.fault(kind)
		r.say("  poisoned %s", ip)
		r.stub.Poison(ip, 422)
		sleep(ctx, d.between(2*time.Second, 8*time.Second))
		r.stub.Unpoison(ip)
	case FHooksFail:
		if err := os.Rename(r.sock, r.sockAway); err != nil {
			return // already away
		}
		r.fault(kind)
		sleep(ctx, d.between(3*time.Second, 15*time.Second))
		_ = os.Rename(r.sockAway, r.sock)
	case FLeasesDir:
		// dhcpd (root) goes on writing; the agent (not root) can
		// neither open the file nor list the directory.
		if !dirMu.TryLock() {
			return
		}
		defer dirMu.Unlock()
		r.fault(kind)
		if err := os.Chmod(r.leasesDir, 0o700); err != nil {
			r.tb.Fatalf("%v", err)
		}
		sleep(ctx, d.between(2*time.Second, 10*time.Second))
		if err := os.Chmod(r.leasesDir, 0o755); err != nil {
			r.tb.Fatalf("%v", err)
		}
	case FStateFull:
		filler := filepath.Join(r.state, "chaos-filler")
		f, err := os.OpenFile(filler, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return // already full
		}
		r.fault(kind)
		buf := make([]byte, 1<<20)
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
		f.Close()
		sleep(ctx, d.between(3*time.Second, 15*time.Second))
		_ = os.Remove(filler)
	}
}

// awaitRewrite waits for the running dhcpd's rewrite that a
// RestartRewritingAfter(after) has just set up (the first commit after
// `after` does it) and counts the fault once it is seen.
func (r *run) awaitRewrite(ctx context.Context, after time.Duration) {
	start, pid, ino := time.Now(), r.d.Pid(), r.d.Inode()
	for time.Since(start) < after+30*time.Second && ctx.Err() == nil {
		if r.d.Inode() != ino {
			if r.d.Pid() != pid {
				break
			}
			r.fault(FDhcpdRewrite)
			r.say("  dhcpd rewrote its leases file while running, %.1f s after its start", time.Since(start).Seconds())
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
	if ctx.Err() == nil {
		r.say("  dhcpd-rewrite: no running rewrite seen within %v of the start (not counted)", after+30*time.Second)
	}
}

// undoAll ends every fault still running.
func (r *run) undoAll() {
	r.stub.ClearFaults()
	_ = os.Rename(r.sockAway, r.sock)
	_ = os.Remove(filepath.Join(r.state, "chaos-filler"))
	_ = os.Chmod(r.leasesDir, 0o755)
	r.amu.Lock()
	running := r.agent != nil
	r.amu.Unlock()
	if !running {
		r.startAgent()
	}
}

// guard ends the whole program after a fatal error in a goroutine of the
// run (a panic there would skip Run's recovery and its cleanups, leaving
// namespaces and processes behind): it runs every cleanup, then exits 2.
// The run's directory is kept for a post-mortem.
func (r *run) guard() {
	p := recover()
	if p == nil {
		return
	}
	if _, ok := p.(lab.Fatal); !ok {
		panic(p)
	}
	fmt.Fprintf(os.Stderr, "chaos: the run failed while driving the lab (see above); cleaning up; files in %s (rerun: make chaos SEED=%d)\n", r.opts.Dir, r.opts.Seed)
	r.tb.RunCleanups()
	os.Exit(2)
}

// Faults returns the faults injected, by kind.
func (r *run) Faults() map[string]int {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	out := map[string]int{}
	for k, v := range r.faults {
		out[k] = v
	}
	return out
}

// The leases files: every generation (inode) dhcpd wrote, its longest
// content kept.

type capture struct {
	path string
	mu   sync.Mutex
	gens []*gen // in the order first seen
	by   map[uint64]*gen
}

type gen struct {
	ino   uint64
	data  []byte
	marks []mark // where each read's new bytes start, and when
}

type mark struct {
	off int
	at  time.Time
}

func newCapture(path string) *capture { return &capture{path: path, by: map[uint64]*gen{}} }

func (c *capture) follow(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		c.poll()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads dhcpd.leases~ (the previous generation, complete once
// dhcpd renamed the new one in) and dhcpd.leases.
func (c *capture) poll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range []string{c.path + "~", c.path} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		if err != nil || fi.Size() == 0 {
			f.Close()
			continue
		}
		ino := fi.Sys().(*syscall.Stat_t).Ino
		g := c.by[ino]
		if g != nil && fi.Size() == int64(len(g.data)) {
			f.Close()
			continue
		}
		b, err := readAll(f)
		f.Close()
		if err != nil {
			continue
		}
		// A generation only grows; content that does not extend what was
		// read is a new file that reuses a freed inode number.
		if g == nil || !bytes.HasPrefix(b, g.data[:min(len(g.data), len(b))]) {
			g = &gen{ino: ino}
			c.by[ino] = g
			c.gens = append(c.gens, g)
		}
		if len(b) > len(g.data) {
			g.marks = append(g.marks, mark{off: len(g.data), at: time.Now()})
			g.data = b
		}
	}
}

func readAll(f *os.File) ([]byte, error) {
	var b []byte
	r := bufio.NewReader(f)
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			if err.Error() == "EOF" {
				return b, nil
			}
			return b, err
		}
	}
}

// generations parses what was captured and keeps a copy of each file
// in dir/leases/.
func (c *capture) generations(now time.Time, dir string) []oracle.Generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = os.MkdirAll(filepath.Join(dir, "leases"), 0o755)
	var out []oracle.Generation
	for i, g := range c.gens {
		name := fmt.Sprintf("gen%03d", i)
		_ = os.WriteFile(filepath.Join(dir, "leases", name+".leases"), g.data, 0o644)
		chunks := make([]oracle.Chunk, len(g.marks))
		for j, m := range g.marks {
			end := len(g.data)
			if j+1 < len(g.marks) {
				end = g.marks[j+1].off
			}
			chunks[j] = oracle.Chunk{At: m.at, Data: g.data[m.off:end]}
		}
		out = append(out, oracle.ParseChunks(name, chunks, now))
	}
	return out
}

// ruleOrder is the order the summary lists the oracle's rules in.
var ruleOrder = []string{"false", "order", "early", "lost", "final", "repost", "bound"}

// Summary prints the run's table.
func Summary(w io.Writer, res Result, seed uint64, took time.Duration) {
	faults, rep, m := res.Faults, res.Report, res.Agent
	fmt.Fprintf(w, "\n== chaos summary (seed %d, %s)\n", seed, took.Round(time.Second))
	fmt.Fprintf(w, "faults injected:\n")
	kinds := make([]string, 0, len(faults))
	for k := range faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %-40s %d\n", k, faults[k])
	}
	fmt.Fprintf(w, "truth (leases files): %d IPs, commits %d, lease ends %d, vanished on reload %d\n",
		rep.IPs, rep.Events["commit"], rep.Events["end"], rep.Events["vanished"])
	fmt.Fprintf(w, "events by source (the agent's counters, last read just before each stop): hook %d, spool %d, synthesised %d",
		m.Received["hook"], m.Received["spool"], m.SynthesisedTotal())
	if len(m.Synthesised) > 0 {
		fmt.Fprintf(w, " (%s)", joinCounts(m.Synthesised))
	}
	fmt.Fprintln(w)
	if len(m.PairGaveUp) > 0 {
		fmt.Fprintf(w, "pair channel: waits ended by hold_max (%s)\n", joinCounts(m.PairGaveUp))
	}
	if m.Superseded > 0 {
		fmt.Fprintf(w, "pair channel: queued events dropped as older than the peer's delivered news: %d\n", m.Superseded)
	}
	fmt.Fprintf(w, "region: %d items (commit %d, expiry %d, release %d), duplicates %d, vanished expiries delivered %d of %d\n",
		rep.Items, rep.ItemsBy["commit"], rep.ItemsBy["expiry"], rep.ItemsBy["release"], rep.Duplicates, rep.VanishedHit, rep.Vanished)
	fmt.Fprintf(w, "delivery lag (the file showed it → the region got it; %d changes): p50 %s, p99 %s, max %s (%s)\n",
		rep.Lag.N, rep.Lag.P50.Round(time.Millisecond), rep.Lag.P99.Round(time.Millisecond), rep.Lag.Max.Round(time.Millisecond), rep.Lag.Worst)
	fmt.Fprintf(w, "agent: peak RSS %s (bound %s) over %d processes; state dir peak %s (bound %s, the state-full filler not counted); spool peak %s\n",
		mib(m.PeakRSS), mib(RSSBound), m.Processes, mib(m.PeakState), mib(StateBound), mib(m.PeakSpool))
	fmt.Fprintf(w, "dead-lettered (422 poison) states not delivered: %d\n", rep.Refused)
	fmt.Fprintf(w, "events dhcpd's hook told just before dhcpd died, never written to its file: %d; expiries ending such a commit's lease: %d\n", rep.Unwritten, rep.UnwrittenEnds)
	if rep.Rejoined > 0 {
		fmt.Fprintf(w, "expiries of a lease a partner's stale update cut, at its own end, in the second the client's next lease began: %d (one peer's file shows that end; neither owed nor false)\n", rep.Rejoined)
	}
	fmt.Fprintf(w, "slow region: %d accepted requests outlived the agent's 3 s timeout; re-posts overlapping a copy still applied: %d\n",
		rep.Posts.Slow, len(rep.Posts.Overlapping))
	fmt.Fprintf(w, "violations: %d", len(rep.Violations))
	for _, rule := range ruleOrder {
		fmt.Fprintf(w, "  %s %d", rule, rep.ByRule[rule])
	}
	fmt.Fprintln(w)
	// At most 10 of each rule, so that one rule's flood does not hide
	// another's first cases.
	shown := map[string]int{}
	for _, v := range rep.Sorted() {
		if shown[v.Rule]++; shown[v.Rule] <= 10 {
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
	for _, rule := range ruleOrder {
		if n := shown[rule] - 10; n > 0 {
			fmt.Fprintf(w, "  … %d more %s\n", n, rule)
		}
	}
}

// logLevel is the [log] table's level line for level, none for "".
func logLevel(level string) string {
	if level == "" {
		return ""
	}
	return fmt.Sprintf("level = %q\n", level)
}
