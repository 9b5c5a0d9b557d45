// Command benchcmp times commands side by side: each run is one round in
// which every command runs once, in turn, so background load hits all of
// them alike. Each round runs them in an order of its own (shuffled,
// the same sequence every time: seed 1), so that no command always runs
// right after the same one and inherits what that one leaves behind
// (caches, a listener it woke). It prints the median wall time and peak RSS of each, and
// the ratio of each command's median to the first (the reference).
//
//	benchcmp -runs 7 -- dhcpd-pools dhcpd-pools -c C -l L -f j \; \
//	                    leasekeeper bin/leasekeeper pools --json ...
//
// Each command is NAME ARGV…; commands are separated by a lone ";"
// argument. Their stdout goes to /dev/null.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

type command struct {
	name  string
	argv  []string
	times []time.Duration
	rss   []int64 // KiB
}

func main() {
	runs := flag.Int("runs", 7, "rounds")
	flag.Parse()
	cmds, err := parse(flag.Args())
	if err != nil || len(cmds) == 0 {
		fmt.Fprintln(os.Stderr, "benchcmp:", err, "\nusage: benchcmp [-runs N] -- NAME CMD ARGS… \\; NAME CMD ARGS…")
		os.Exit(2)
	}
	rng := rand.New(rand.NewPCG(1, 0))
	for range *runs {
		order := slices.Clone(cmds)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, c := range order {
			d, rss, err := runOnce(c.argv)
			if err != nil {
				fmt.Fprintf(os.Stderr, "benchcmp: %s: %v\n", c.name, err)
				os.Exit(1)
			}
			c.times = append(c.times, d)
			c.rss = append(c.rss, rss)
		}
	}
	ref := median(cmds[0].times)
	fmt.Printf("%-28s %10s %10s %10s %8s\n", "command", "median", "min", "peak RSS", "ratio")
	for _, c := range cmds {
		m := median(c.times)
		fmt.Printf("%-28s %9.4fs %9.4fs %8.1fMB %8.3f\n", c.name, m.Seconds(), slices.Min(c.times).Seconds(),
			float64(slices.Max(c.rss))/1024, float64(m)/float64(ref))
	}
}

func parse(args []string) ([]*command, error) {
	var cmds []*command
	for len(args) > 0 {
		i := slices.Index(args, ";")
		if i < 0 {
			i = len(args)
		}
		if i < 2 {
			return nil, fmt.Errorf("expected NAME CMD…, got %q", strings.Join(args[:i], " "))
		}
		cmds = append(cmds, &command{name: args[0], argv: args[1:i]})
		args = args[min(i+1, len(args)):]
	}
	return cmds, nil
}

func runOnce(argv []string) (time.Duration, int64, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var rss int64
	if ru != nil {
		rss = ru.Maxrss
	}
	return d, rss, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
