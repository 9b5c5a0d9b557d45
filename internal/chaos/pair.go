package chaos

// The failover pair run (Options.Pair, make chaos PAIR=1): two racks, each
// a dhcpd peer as MAAS configures a pair (a failover peer per VLAN,
// primary with split 255, pools naming the peer; the lab's short failover
// timers so that partner-down comes in seconds), with leasekeeper-hook and
// its own agent, one region stub. Faults kill a whole rack (dhcpd and
// agent) and bring it back, shrink or move the range on both peers as
// MAAS does (the peer that is up restarts at once, a dead one gets the
// configuration when it returns), restart one peer, kill or stop one
// agent, and the region's faults. The oracle judges the region against
// the pair's truth: both leases files merged (oracle.MergePair).
//
// With PairPartners a third rack, c, is the primary of a second HA VLAN
// (198.51.100.0/24, failover peer failover-vlan-5002) whose secondary is
// the pair's primary, a: MAAS sets a primary and a secondary rack per
// VLAN (src/maasserver/dhcp.py, make_failover_peer_config), so a's agent
// orders VLAN 5001's news with b's agent ([pair] peer) and VLAN 5002's
// with c's (pair.partners). perfdhcp relays VLAN 5002's clients from a
// namespace of its own (giaddr 198.51.100.3) to c, or to a while c's
// rack is down; c's rack goes down and comes back too, and the truth is
// the three files merged.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/chaos/oracle"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// Fault kinds of the pair run.
const (
	FPrimaryDown   = "primary-rack-down"   // dhcpd and agent of the primary killed, back after 5-30 s
	FSecondaryDown = "secondary-rack-down" // the same for the secondary
	FPairRange     = "pair-range"          // a new range on both peers, as MAAS applies it
	FPeerRestart   = "peer-restart"        // one peer's dhcpd restarted
	FPartnerDown   = "partner-rack-down"   // PairPartners: rack c's dhcpd and agent killed, back after 5-30 s
)

// PairFaults is every fault kind a pair run injects by default.
var PairFaults = []string{FPrimaryDown, FSecondaryDown, FPairRange, FPeerRestart, FAgentKill, FAgentTerm,
	FRegionDown, FRegionSlow, FRegion500, FRegion422, FRegionSkew}

// The peers' addresses on the lab's bridge (the third rack's with
// PairPartners); perfdhcp relays from 203.0.113.3. Each rack is named by
// its role on VLAN 5001, c ("partner") by its tie to a.
var (
	pairAddr = [3]string{"203.0.113.1", "203.0.113.2", "203.0.113.4"}
	pairRole = [3]string{"primary", "secondary", "partner"}
	// pairVLANPort is the second VLAN's failover port (PairVLANs; the
	// clients' VLAN has dhcpd's default, 647).
	pairVLANPort = 5647
)

const pairPerfAddr = "203.0.113.3/24"

// VLAN 5002 (PairPartners): its subnet, which no rack has an interface
// on (relayed), its pool, and the relay's address, perfdhcp's giaddr.
const (
	partnerNet      = "198.51.100.0/24"
	partnerPerfAddr = "198.51.100.3"
	partnerPeer     = "failover-vlan-5002"
)

var partnerRange = [2]int{10, 109} // 198.51.100.X-Y

// rack is one rack of the pair: a run of its own for its dhcpd, agent,
// socket, spool, state and capture, sharing the lab, the stub and the
// log with the pair's run.
type rack struct {
	*run
	i    int  // 0 primary, 1 secondary, 2 partner (PairPartners)
	down bool // dhcpd and agent killed (pmu)
	// starts are the ranges its dhcpd started on, and when (before the
	// start): the capture's generations are matched to them.
	starts []rangeStart
}

type rangeStart struct {
	at time.Time
	rg [2]int
}

type pair struct {
	*run
	racks []*rack    // two, or three with PairPartners
	pmu   sync.Mutex // dhcpd starts and stops, rack states, the range
	rg    [2]int     // the range MAAS configures now
	// downMu: one rack down at a time (both down is no pair).
	downMu sync.Mutex
	nss    []string // the namespace each dhcpd runs in
}

// channel gives the two agents the pair channel (agent/pair): a UDP port
// each on loopback and one key, copied into each rack's own file (each
// agent runs as its own user); hold_max is the default. With
// PairPartners, a and c get a channel of their own (two more ports, the
// same key): a names it in pair.partners with VLAN 5002's failover peer,
// c as its [pair] peer.
func (p *pair) channel() error {
	pc, err := lab.NewPairChannel(p.opts.Dir)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(pc.KeyFile)
	if err != nil {
		return err
	}
	var ac lab.PairChannel
	if len(p.racks) > 2 {
		dir := filepath.Join(p.opts.Dir, "partner-channel")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		// (Its key unused: one key for all three.) Each channel's ports
		// are free when picked, not held: the second's may repeat the
		// first's, which a's agent listens on too.
		for try := 0; ; try++ {
			if ac, err = lab.NewPairChannel(dir); err != nil {
				return err
			}
			if !slices.ContainsFunc(ac.Listen[:], func(l string) bool { return slices.Contains(pc.Listen[:], l) }) {
				break
			}
			if try == 10 {
				return fmt.Errorf("pair channel: no two free loopback ports apart from %v", pc.Listen)
			}
		}
	}
	for i, k := range p.racks {
		path := filepath.Join(k.opts.Dir, "pair.key")
		if err := os.WriteFile(path, key, 0o600); err != nil {
			return err
		}
		if err := k.chown(path); err != nil {
			return err
		}
		switch i {
		case 2:
			k.extraConfig = fmt.Sprintf("[pair]\nlisten = %q\npeer = %q\nkey_file = %q\n", ac.Listen[1], ac.Listen[0], path)
		default:
			k.extraConfig = fmt.Sprintf("[pair]\nlisten = %q\npeer = %q\nkey_file = %q\n", pc.Listen[i], pc.Listen[1-i], path)
			if i == 0 && len(p.racks) > 2 {
				k.extraConfig += fmt.Sprintf("partners = [\"%s %s %s\"]\n", partnerPeer, ac.Listen[0], ac.Listen[1])
			}
		}
	}
	return nil
}

// rackCN is rack i's agent certificate's CN: each rack its own, as MAAS
// gives each rack its own agent certificate, so that the region's records
// name the rack that sent each request (Item.From).
// (Not regionstub.ClientCN, the stub's own client certificate's.)
func rackCN(i int) string { return fmt.Sprintf("0a9e0000-1eae-4eee-8000-%012d", 11+i) }

// rackOf names the rack whose agent certificate has CN cn, "" for none.
func rackOf(cn string) string {
	for i := range pairRole {
		if rackCN(i) == cn {
			return pairRole[i]
		}
	}
	return ""
}

// newRack makes rack i's run in Dir/rackN.
func (p *pair) newRack(i int) (*rack, error) {
	o := p.opts
	o.Dir = filepath.Join(p.opts.Dir, fmt.Sprintf("rack%d", i+1))
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	// The rack's own run draws no random numbers (the pair's does).
	sub := &run{opts: o, tb: p.tb, faults: map[string]int{}, t0: p.t0, log: p.log, lab: p.lab, stub: p.stub, front: p.front}
	var err error
	if sub.files, err = p.stub.WriteRackFiles(filepath.Join(o.Dir, "pki"), rackCN(i)); err != nil {
		return nil, err
	}
	sub.sock = filepath.Join(o.Dir, "hook.sock")
	sub.sockAway = filepath.Join(o.Dir, "hook.sock.away")
	sub.spool = filepath.Join(o.Dir, "spool")
	sub.state = filepath.Join(o.Dir, "state")
	if err := sub.agentUser(); err != nil {
		return nil, err
	}
	if err := sub.mountState(); err != nil {
		return nil, err
	}
	if sub.holder, err = lab.UnixgramQlen(sub.sock, 512); err != nil {
		return nil, fmt.Errorf("socket holder: %w", err)
	}
	p.tb.Cleanup(func() { sub.holder.Close() })
	if sub.metrics, err = freePort(); err != nil {
		return nil, err
	}
	return &rack{run: sub, i: i}, nil
}

// conf is the rack's dhcpd.conf for range rg: the packaged hook blocks
// and a failover peer as MAAS writes it (src/maasserver/templates/dhcp/
// dhcpd.conf.template, rendered by the rack from src/provisioningserver/
// templates/dhcp/ before 3.7: primary with mclt and split 255,
// max-response-delay, max-unacked-updates 10, load balance max seconds
// 3, the pool naming the peer), with the lab's timers: mclt 10 s,
// max-response-delay 5 s and auto-partner-down 1 s, so that a dead rack's
// partner serves within seconds (MAAS sets no auto-partner-down: there an
// operator declares it). PairMAASTimers keeps MAAS's own (failoverTimers).
func (k *rack) conf(rg [2]int) string {
	var b strings.Builder
	l := k.opts.Lease
	fmt.Fprintf(&b, "ping-check false;\nauthoritative;\nddns-update-style none;\ndefault-lease-time %d;\nmax-lease-time %d;\nmin-lease-time %d;\n", l, l, l)
	b.WriteString(snippet(k.tb, k.opts.Snippet, k.opts.HookBin, k.sock, k.spool))
	uids := ""
	if k.opts.PairMAASTimers {
		uids = "  ignore-client-uids true;\n"
	}
	if k.i == 2 {
		// Rack c: VLAN 5002's primary, a its secondary; the bridge's
		// subnet declared (dhcpd needs its interface's) with no pool,
		// not authoritative: VLAN 5001's clients' requests are not its
		// to answer or refuse.
		k.partnerVLAN(&b, "primary", 2, 0, uids)
		b.WriteString(k.lab.SubnetConf("  not authoritative;"))
		return b.String()
	}
	if k.opts.PairVLANs {
		// Another HA VLAN, declared first, the other rack its primary:
		// its own failover connection (its own port), no interface here
		// (no clients), its states in the same file.
		j := 1 - k.i
		fmt.Fprintf(&b, "failover peer \"failover-vlan-5000\" {\n  %s;\n  address %s;\n  port %d;\n  peer address %s;\n  peer port %d;\n%s",
			pairRole[j], pairAddr[k.i], pairVLANPort, pairAddr[1-k.i], pairVLANPort, k.failoverTimers(j == 0))
		b.WriteString("}\n")
		b.WriteString("subnet 198.51.100.0 netmask 255.255.255.0 {\n  pool {\n    failover peer \"failover-vlan-5000\";\n    range 198.51.100.10 198.51.100.50;\n  }\n}\n")
	}
	fmt.Fprintf(&b, "failover peer \"failover-vlan-5001\" {\n  %s;\n  address %s;\n  peer address %s;\n%s",
		pairRole[k.i], pairAddr[k.i], pairAddr[1-k.i], k.failoverTimers(k.i == 0))
	b.WriteString("}\n")
	b.WriteString(k.lab.SubnetConf(fmt.Sprintf("%s  pool {\n    failover peer \"failover-vlan-5001\";\n    range 203.0.113.%d 203.0.113.%d;\n  }", uids, rg[0], rg[1])))
	if k.i == 0 && k.opts.PairPartners {
		k.partnerVLAN(&b, "secondary", 0, 2, uids) // a is VLAN 5002's secondary
	}
	return b.String()
}

// partnerVLAN writes VLAN 5002's failover peer (PairPartners) as rack
// self's, with role, and its relayed subnet's pool: the peers on their
// own port, as two peers of one dhcpd must be.
func (k *rack) partnerVLAN(b *strings.Builder, role string, self, peer int, uids string) {
	fmt.Fprintf(b, "failover peer %q {\n  %s;\n  address %s;\n  port %d;\n  peer address %s;\n  peer port %d;\n%s}\n",
		partnerPeer, role, pairAddr[self], pairVLANPort, pairAddr[peer], pairVLANPort, k.failoverTimers(role == "primary"))
	fmt.Fprintf(b, "subnet 198.51.100.0 netmask 255.255.255.0 {\n%s  pool {\n    failover peer %q;\n    range 198.51.100.%d 198.51.100.%d;\n  }\n}\n",
		uids, partnerPeer, partnerRange[0], partnerRange[1])
}

// failoverTimers are a failover peer statement's lines after its
// addresses: MAAS's (PairMAASTimers) or the lab's shorter ones (conf);
// mclt and split only in the primary's.
func (k *rack) failoverTimers(primary bool) string {
	mrd, mclt, apd := 5, 10, "  auto-partner-down 1;\n"
	if k.opts.PairMAASTimers {
		mrd, mclt, apd = 60, 3600, ""
	}
	s := fmt.Sprintf("  max-response-delay %d;\n  max-unacked-updates 10;\n  load balance max seconds 3;\n%s", mrd, apd)
	if primary {
		s += fmt.Sprintf("  mclt %d;\n  split 255;\n", mclt)
	}
	return s
}

// startDhcpd starts (or restarts) the rack's dhcpd on range rg. p.pmu
// is held.
func (k *rack) startDhcpd(rg [2]int, ns string) error {
	k.starts = append(k.starts, rangeStart{at: time.Now(), rg: rg})
	if k.d == nil {
		k.d = k.lab.StartDhcpd(k.tb, lab.DhcpdConfig{Conf: k.conf(rg), NS: ns})
		k.leasesDir = filepath.Dir(k.d.LeasesPath())
		return os.Chmod(k.leasesDir, 0o755) // a test's temporary dir is 0700
	}
	k.died()
	err := k.d.Restart(k.conf(rg))
	if err != nil && k.d.Pid() == 0 {
		// Restart first reports a dhcpd that had died (killed), then
		// starts.
		err = k.d.Restart(k.conf(rg))
	}
	return err
}

// rangeOf is the range generation gen of the rack's file started on: the
// last start before it was first read.
func (k *rack) rangeOf(gen oracle.Generation) [2]int {
	rg := k.starts[0].rg
	at := time.Time{}
	if len(gen.Blocks) > 0 {
		at = gen.Blocks[0].Seen
	}
	for _, s := range k.starts {
		if !at.IsZero() && s.at.After(at) {
			break
		}
		rg = s.rg
	}
	return rg
}

func (r *run) runPair(ctx context.Context) (oracle.Report, error) {
	o := r.opts
	var err error
	if r.log, err = os.Create(filepath.Join(o.Dir, "chaos.log")); err != nil {
		return oracle.Report{}, err
	}
	r.tb.Cleanup(func() { r.log.Close() })
	lab.Require(r.tb, "dhcpd", "dhclient", "perfdhcp")
	if err := os.Chmod(o.Dir, 0o711); err != nil {
		return oracle.Report{}, err
	}
	if err := r.startRegion(); err != nil {
		return oracle.Report{}, err
	}
	r.lab = lab.New(r.tb)
	p := &pair{run: r, rg: ranges[0]}
	n := 2
	if o.PairPartners {
		n = 3
	}
	for i := range n {
		k, err := p.newRack(i)
		if err != nil {
			return oracle.Report{}, err
		}
		p.racks = append(p.racks, k)
	}
	if !o.PairAlone {
		if err := p.channel(); err != nil {
			return oracle.Report{}, err
		}
	}
	sec := r.lab.AddServer("sec", netip.MustParseAddr(pairAddr[1]))
	p.nss = []string{"", sec.NS}
	var perf2 *lab.Client
	if o.PairPartners {
		if perf2, err = p.partnerNet(); err != nil {
			return oracle.Report{}, err
		}
	}
	nss := p.nss
	p.pmu.Lock()
	for i, k := range p.racks {
		if err := k.startDhcpd(p.rg, nss[i]); err != nil {
			p.pmu.Unlock()
			return oracle.Report{}, fmt.Errorf("%s dhcpd: %w", pairRole[i], err)
		}
		r.say("%s dhcpd pid %d, range %v, leases %s", pairRole[i], k.d.Pid(), p.rg, k.d.LeasesPath())
	}
	p.pmu.Unlock()
	if err := p.waitNormal(60 * time.Second); err != nil {
		return oracle.Report{}, err
	}
	var capDone []chan struct{}
	cctx, stopCapture := context.WithCancel(context.Background())
	for _, k := range p.racks {
		k.capt = newCapture(k.d.LeasesPath())
		done := make(chan struct{})
		capDone = append(capDone, done)
		go func() { defer r.guard(); k.capt.follow(cctx); close(done) }()
	}
	defer func() {
		stopCapture()
		for _, d := range capDone {
			<-d
		}
	}()
	sctx, stopSampling := context.WithCancel(context.Background())
	var sampled sync.WaitGroup
	for _, k := range p.racks {
		k.startAgent()
		r.tb.Cleanup(func() { k.stopAgent(syscall.SIGTERM) })
		sampled.Add(1)
		go func() { defer sampled.Done(); defer r.guard(); k.sampleLoop(sctx) }()
	}
	defer func() { stopSampling(); sampled.Wait() }()

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
	if _, err := r.lab.Exec(ctx, perf.NS, "ip", "addr", "add", pairPerfAddr, "dev", perf.Iface); err != nil {
		return oracle.Report{}, err
	}
	wg.Add(2)
	go func() { defer wg.Done(); defer r.guard(); r.perfLoop(wctx, perf) }()
	if perf2 != nil {
		wg.Add(1)
		go func() { defer wg.Done(); defer r.guard(); p.partnerPerf(wctx, perf2) }()
	}
	go func() { defer wg.Done(); defer r.guard(); p.faultLoop(wctx) }()
	wg.Wait()
	if ctx.Err() != nil {
		return oracle.Report{}, ctx.Err()
	}

	// Settle: region faults undone, both racks up, both dhcpd restarted
	// together on the full range (as MAAS applies a change), the pair
	// normal again; then wait until the leases ended and the region heard
	// nothing new for a while.
	r.say("faults stop; clients vanish; settling")
	r.stub.ClearFaults()
	p.pmu.Lock()
	for _, k := range p.racks {
		if k.down {
			r.startAgentOf(k)
			k.down = false
		}
	}
	p.rg = ranges[0]
	errs := p.restartUp(true)
	p.pmu.Unlock()
	if errs != nil {
		return oracle.Report{}, errs
	}
	r.fault("settle: both dhcpd restart on the full range")
	if err := p.waitNormal(60 * time.Second); err != nil {
		r.say("%v", err)
	}
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
		if time.Now().After(lastEnd) && time.Since(quiet) > 15*time.Second && p.queuesEmpty() {
			break
		}
	}
	end := time.Now()
	for _, k := range p.racks {
		k.capt.poll()
		k.stopAgent(syscall.SIGTERM)
		k.capt.poll()
	}
	p.measures()
	return p.judge(end), nil
}

// partnerNet sets up VLAN 5002 (PairPartners): rack c's namespace on the
// bridge, a route to the relayed subnet in a's and c's (dhcpd answers a
// relay at its giaddr), and the relay's namespace: perfdhcp's address
// 198.51.100.3 and a route to the racks.
func (p *pair) partnerNet() (*lab.Client, error) {
	third := p.lab.AddServer("third", netip.MustParseAddr(pairAddr[2]))
	p.nss = append(p.nss, third.NS)
	if err := p.lab.IP(p.lab.NS, []string{"route", "add", partnerNet, "dev", p.lab.Bridge}); err != nil {
		return nil, err
	}
	if err := p.lab.IP(third.NS, []string{"route", "add", partnerNet, "dev", third.Iface}); err != nil {
		return nil, err
	}
	relay := p.lab.AddClient("relay")
	if err := p.lab.IP(relay.NS, []string{"addr", "add", partnerPerfAddr + "/24", "dev", relay.Iface},
		[]string{"route", "add", p.lab.Addr.Masked().String(), "dev", relay.Iface}); err != nil {
		return nil, err
	}
	return relay, nil
}

// partnerPerf relays VLAN 5002's clients (a base MAC of their own: no MAC
// of VLAN 5001's perfdhcp) to rack c, VLAN 5002's primary, and to a, its
// secondary, while c's rack is down (a serves them once partner-down).
func (p *pair) partnerPerf(ctx context.Context, relay *lab.Client) {
	p.perfRounds(ctx, relay, p.draws(streamPerfPartner), "perfdhcp-5002.log", []string{"-b", "mac=02:00:51:00:00:00"}, func() (string, string) {
		p.pmu.Lock()
		defer p.pmu.Unlock()
		if p.racks[2].down {
			return partnerPerfAddr, pairAddr[0]
		}
		return partnerPerfAddr, pairAddr[2]
	})
}

// queuesEmpty reports whether both agents' outboxes are empty: in a pair
// an agent can hold its news for up to pair.hold_max while the peer's
// older news is undelivered, longer than the region's quiet time.
func (p *pair) queuesEmpty() bool {
	for _, k := range p.racks {
		m := scrape(k.metrics)
		if m == nil || m["leasekeeper_outbox_depth"] != 0 {
			return false
		}
	}
	return true
}

// restartUp restarts the dhcpd of each rack that is up on p.rg,
// together, as MAAS applies a configuration; rack c (PairPartners), whose
// configuration p.rg is not part of, only with partner. p.pmu is held.
func (p *pair) restartUp(partner bool) error {
	var wg sync.WaitGroup
	errs := make([]error, len(p.racks))
	for i, k := range p.racks {
		if k.down || k.i == 2 && !partner {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = k.startDhcpd(p.rg, p.nss[i]) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%s dhcpd: %w", pairRole[i], err)
		}
	}
	return nil
}

// startAgentOf starts rack k's agent (its own lock, as the agent faults
// take it).
func (r *run) startAgentOf(k *rack) {
	k.afmu.Lock()
	defer k.afmu.Unlock()
	k.startAgent()
}

// waitNormal waits until every file records my state normal with each
// failover peer its rack has.
func (p *pair) waitNormal(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok := true
		var states []string
		for _, k := range p.racks {
			for _, peer := range k.peers() {
				s := lastMyState(k.d.LeasesPath(), peer)
				ok = ok && s == "normal"
				states = append(states, fmt.Sprintf("%s %s %q", pairRole[k.i], peer, s))
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pair is not normal after %s (%s)", within, strings.Join(states, ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// peers are the failover peers of the clients' VLANs rack k has.
func (k *rack) peers() []string {
	switch {
	case k.i == 2:
		return []string{partnerPeer}
	case k.i == 0 && k.opts.PairPartners:
		return []string{"failover-vlan-5001", partnerPeer}
	}
	return []string{"failover-vlan-5001"}
}

// lastMyState is the last "my state" a leases file records for the
// failover peer named ("" if none).
func lastMyState(path, peer string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndex(s, "failover peer \""+peer+"\" state"); i >= 0 {
		s = s[i:]
	} else {
		return ""
	}
	i := strings.Index(s, "\n  my state ")
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+len("\n  my state "):])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (p *pair) faultLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	faults := p.opts.Faults
	sleep(ctx, 5*time.Second)
	fd := p.draws(streamFaults)
	for ctx.Err() == nil {
		kind := faults[fd.intn(len(faults))]
		d := fd.fault()
		wg.Add(1)
		go func() { defer wg.Done(); defer p.guard(); p.inject(ctx, kind, d) }()
		sleep(ctx, fd.between(2*time.Second, 8*time.Second))
	}
}

func (p *pair) inject(ctx context.Context, kind string, d draws) {
	nss := p.nss
	switch kind {
	case FPrimaryDown, FSecondaryDown, FPartnerDown:
		if kind == FPartnerDown && len(p.racks) < 3 || !p.downMu.TryLock() {
			return
		}
		defer p.downMu.Unlock()
		k := p.racks[0]
		switch kind {
		case FSecondaryDown:
			k = p.racks[1]
		case FPartnerDown:
			k = p.racks[2]
		}
		p.fault(kind)
		k.afmu.Lock()
		sig := syscall.SIGKILL
		if d.intn(2) == 0 {
			sig = syscall.SIGTERM
		}
		k.stopAgent(sig)
		p.pmu.Lock()
		k.died()
		if d.intn(2) == 0 {
			if pid := k.d.Pid(); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			p.say("  %s rack down: agent %v, dhcpd SIGKILL", pairRole[k.i], sig)
		} else {
			_ = k.d.Stop()
			p.say("  %s rack down: agent %v, dhcpd SIGTERM", pairRole[k.i], sig)
		}
		k.down = true
		p.pmu.Unlock()
		k.afmu.Unlock()
		sleep(ctx, d.between(5*time.Second, 30*time.Second))
		// Back as a rack comes back: the agent first (systemd starts it
		// before dhcpd), then dhcpd on the range MAAS configures now.
		k.afmu.Lock()
		k.startAgent()
		k.afmu.Unlock()
		p.pmu.Lock()
		defer p.pmu.Unlock()
		k.down = false
		p.say("  %s rack back on range %v", pairRole[k.i], p.rg)
		if err := k.startDhcpd(p.rg, nss[k.i]); err != nil {
			p.tb.Fatalf("%s dhcpd: %v", pairRole[k.i], err)
		}
	case FPairRange:
		p.pmu.Lock()
		defer p.pmu.Unlock()
		p.fault(kind)
		p.rg = ranges[d.intn(len(ranges))]
		down := ""
		for _, k := range p.racks {
			if k.down && k.i < 2 {
				down = " (" + pairRole[k.i] + " down: it starts on it when it returns)"
			}
		}
		p.say("  range now 203.0.113.%d-%d on both peers%s", p.rg[0], p.rg[1], down)
		if err := p.restartUp(false); err != nil {
			p.tb.Fatalf("%v", err)
		}
	case FPeerRestart:
		p.pmu.Lock()
		defer p.pmu.Unlock()
		k := p.racks[d.intn(len(p.racks))]
		if k.down {
			return
		}
		p.fault(kind)
		p.say("  %s dhcpd restart", pairRole[k.i])
		if err := k.startDhcpd(p.rg, nss[k.i]); err != nil {
			p.tb.Fatalf("%s dhcpd: %v", pairRole[k.i], err)
		}
	case FAgentKill, FAgentTerm:
		k := p.racks[d.intn(len(p.racks))]
		k.afmu.Lock()
		defer k.afmu.Unlock()
		p.pmu.Lock()
		down := k.down
		p.pmu.Unlock()
		if down {
			return
		}
		sig := syscall.SIGKILL
		if kind == FAgentTerm {
			sig = syscall.SIGTERM
		}
		p.fault(kind)
		p.say("  %s agent", pairRole[k.i])
		k.stopAgent(sig)
		sleep(ctx, d.between(0, 5*time.Second))
		k.startAgent()
	default: // the region's faults
		p.run.inject(ctx, kind, d)
	}
}

// measures folds both racks' agents' measures into the run's.
func (p *pair) measures() {
	m := &p.meas
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts = map[int]map[string]float64{}
	for i, k := range p.racks {
		k.meas.mu.Lock()
		m.procs += k.meas.procs
		m.rss = max(m.rss, k.meas.rss)
		m.state = max(m.state, k.meas.state)
		m.spool = max(m.spool, k.meas.spool)
		m.ok += k.meas.ok
		for n, s := range k.meas.counts {
			m.counts[i*100000+n] = s
		}
		k.meas.mu.Unlock()
	}
}

// judge: the region against the pair's truth, both files merged.
func (p *pair) judge(end time.Time) oracle.Report {
	pf := &PairFiles{}
	for _, k := range p.racks {
		gens := k.capt.generations(end, k.opts.Dir)
		rgs := make([][2]int, len(gens))
		for g, gen := range gens {
			rgs[g] = k.rangeOf(gen)
			if k.i == 2 {
				rgs[g] = [2]int{0, 255} // c serves no address of VLAN 5001: none leaves its range
			}
		}
		pf.Files, pf.Ranges = append(pf.Files, gens), append(pf.Ranges, rgs)
	}
	files := pf.Files
	for f, gens := range files {
		for g, gen := range gens {
			at := "-"
			if len(gen.Blocks) > 0 && !gen.Blocks[0].Seen.IsZero() {
				at = fmt.Sprintf("%.1fs", gen.Blocks[0].Seen.Sub(p.t0).Seconds())
			}
			p.say("  %s %s: started on %v, first read at %s, table %d, appended %d",
				pairRole[f], gen.Name, pf.Ranges[f][g], at, gen.Table, len(gen.Blocks)-gen.Table)
		}
	}
	merged := pf.Merge()
	var items []oracle.Item
	for bi, b := range p.stub.Batches() {
		for _, it := range b.Items {
			items = append(items, oracle.Item{At: b.At, Action: it.Action, IP: it.IP, MAC: it.MAC, Batch: bi + 1, Timestamp: it.Timestamp, LeaseTime: it.LeaseTime, From: rackOf(b.ClientCN)})
		}
	}
	p.writeBatches()
	var refused []oracle.Item
	var deaths []time.Time
	for _, k := range p.racks {
		refused = append(refused, k.deadLetters()...)
		k.deathMu.Lock()
		deaths = append(deaths, k.deaths...)
		k.deathMu.Unlock()
	}
	var counts []string
	for f, gens := range files {
		counts = append(counts, fmt.Sprintf("%s %d", pairRole[f], len(gens)))
	}
	p.say("judging: %d region items; leases file generations: %s; the pair's merged truth %d",
		len(items), strings.Join(counts, ", "), len(merged))
	ev := Evidence{Input: oracle.Input{Generations: merged, Items: items, End: end, Refused: refused, Deaths: deaths}, Requests: requests(p.stub), Pair: pf}
	p.evidence = &ev
	return Verdict(ev)
}
