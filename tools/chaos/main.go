// Command chaos runs leasekeeper under randomly mixed, overlapping faults
// against real dhcpd, dhclient and perfdhcp in network namespaces and the
// MAAS-shaped region stub, then checks the run with the oracle
// (internal/chaos/oracle): nothing lost, nothing false, per-IP order.
// It exits 1 on any violation, keeping the run's directory.
//
//	chaos -agent bin/leasekeeper -hook bin/leasekeeper-hook [-duration 10m] [-seed N] [-pair]
//
// Run it through `make chaos` (DURATION, SEED, FAULTS; PAIR=1 for -pair).
// Needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/chaos"
	"github.com/leasekeeper/leasekeeper/internal/chaos/oracle"
)

func main() {
	o := chaos.Options{}
	flag.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long clients and faults run (the run then settles)")
	flag.Uint64Var(&o.Seed, "seed", 0, "random seed (0: from the clock, printed)")
	flag.StringVar(&o.AgentBin, "agent", "bin/leasekeeper", "the leasekeeper binary")
	flag.StringVar(&o.HookBin, "hook", "bin/leasekeeper-hook", "the leasekeeper-hook binary")
	flag.StringVar(&o.Snippet, "snippet", "packaging/dhcpd/leasekeeper.conf", "the packaged dhcpd hook blocks")
	flag.IntVar(&o.Lease, "lease", 20, "dhcpd lease time, seconds")
	faults := flag.String("faults", "", "comma-separated fault kinds (default all: "+strings.Join(chaos.AllFaults, ",")+")")
	keep := flag.Bool("keep", false, "keep the run's directory even when it passes")
	flag.StringVar(&o.LogLevel, "log-level", "", "the agents' log.level (trace, debug, info, warn, error; default info): debug to trace a lost life")
	judge := flag.String("judge", "", "judge a kept run's directory again with this oracle (its "+chaos.EvidenceFile+"), run nothing")
	explain := flag.String("ip", "", "with -judge: also print this address's truth and the region's items for it")
	flag.BoolVar(&o.PairAlone, "pair-alone", false, "with -pair: no channel between the two agents ([pair] unset), to compare")
	flag.BoolVar(&o.PairVLANs, "pair-vlans", false, "with -pair: a second HA VLAN between the racks, declared first, roles the other way round (its own failover peer and states, no clients)")
	flag.BoolVar(&o.PairPartners, "pair-partners", false, "with -pair: a third rack, the primary of a second HA VLAN (relayed clients, 198.51.100.0/24) whose secondary is the pair's primary, whose agent then orders each VLAN's news with a different partner (pair.partners); adds "+chaos.FPartnerDown)
	flag.BoolVar(&o.PairMAASTimers, "maas-timers", false, "with -pair: the failover peers' timers as MAAS writes them (max-response-delay 60, mclt 3600, no auto-partner-down: a survivor stays communications-interrupted), not the lab's shorter ones")
	flag.BoolVar(&o.Pair, "pair", false, "a failover pair: two racks (dhcpd peers as MAAS configures them, an agent each), one region; faults kill and return a rack, change the range on both ("+strings.Join(chaos.PairFaults, ",")+")")
	flag.Parse()
	if *judge != "" {
		os.Exit(rejudge(*judge, *explain))
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "chaos: needs root (network namespaces, dhcpd, a tmpfs mount); run it as root, e.g. sudo make chaos")
		os.Exit(2)
	}
	if *faults != "" {
		o.Faults = strings.Split(*faults, ",")
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	os.Exit(run(o, *keep))
}

func run(o chaos.Options, keep bool) int {
	for _, p := range []*string{&o.AgentBin, &o.HookBin, &o.Snippet} {
		if a, err := filepath.Abs(*p); err == nil {
			*p = a
		}
	}
	dir, err := os.MkdirTemp("", "leasekeeper-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	o.Dir = dir
	fmt.Printf("chaos: seed %d, duration %s, files in %s\n", o.Seed, o.Duration, dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		fmt.Fprintf(os.Stderr, "chaos: the run's files are in %s (seed %d)\n", dir, o.Seed)
		return 1
	}
	if err := chaos.WriteEvidence(dir, res); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: keeping the evidence:", err)
	}
	chaos.Summary(os.Stdout, res, o.Seed, time.Since(start))
	if len(res.Report.Violations) > 0 {
		fmt.Printf("FAIL: %d violations; the run's files are in %s (rerun: make chaos SEED=%d)\n", len(res.Report.Violations), dir, o.Seed)
		return 1
	}
	if keep {
		fmt.Printf("PASS; the run's files are in %s\n", dir)
	} else {
		os.RemoveAll(dir)
		fmt.Println("PASS")
	}
	return 0
}

// rejudge judges a kept run again and prints its summary.
func rejudge(dir, ip string) int {
	res, err := chaos.Rejudge(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	fmt.Printf("chaos: judged again: %s\n", dir)
	chaos.Summary(os.Stdout, res, 0, 0)
	if ip != "" {
		fmt.Print(oracle.Explain(res.Evidence.Input, ip))
	}
	if len(res.Report.Violations) > 0 {
		fmt.Printf("FAIL: %d violations\n", len(res.Report.Violations))
		return 1
	}
	fmt.Println("PASS")
	return 0
}
