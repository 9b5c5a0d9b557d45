package agent

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/config"
)

var (
	hooklessLeases = flag.Int("hookless.leases", 20000, "BenchmarkHooklessLease: lease blocks appended per iteration")
	hooklessRate   = flag.Int("hookless.rate", 5000, "BenchmarkHooklessLease: blocks appended per second (dhcpd under perfdhcp: ~5 000–7 000)")
	hooklessIPs    = flag.Int("hookless.ips", 20000, "BenchmarkHooklessLease: addresses the blocks cycle over (renewals once each has one)")
	hooklessBatch  = flag.Int("hookless.batch", 0, "BenchmarkHooklessLease: region.batch_max (0: the default): each batch is one request and one outbox commit")
	hooklessLog    = flag.String("hookless.log", "", "BenchmarkHooklessLease: log JSON at this level (info: as the agent runs by default) to a file, one write(2) a line as to its stderr; empty: no logging")
)

// BenchmarkHooklessLease is the agent's whole per-lease path in hookless
// mode, in this process so that `go test -cpuprofile` sees all of it:
// dhcpd.conf runs no hook, a writer appends one lease block per write(2)
// to dhcpd.leases at -hookless.rate (as dhcpd does, one commit after the
// other, cycling over -hookless.ips addresses so that most blocks renew a
// lease, as perfdhcp's clients do), and the agent (agent.Assemble, as
// `leasekeeper agent` runs it: inotify wake-up, read of the appended
// bytes, parse, table update, outbox commit with fsync on the real disk,
// delivery over mutual TLS) delivers them to the region stub, which runs
// as a separate process (tools/regionstub) so that its CPU is not
// counted, and so does the writer (this test binary again, TestMain).
// The figure is cpu-µs/lease: this process's user+system CPU from the
// first block written to the last one delivered, per lease.
//
//	go test ./agent -run '^$' -bench HooklessLease -benchtime 1x -cpuprofile cpu.out
//	go tool pprof -top -tagfocus part=agent agent.test cpu.out
func BenchmarkHooklessLease(b *testing.B) {
	hooklessLease(b, *hooklessLeases, *hooklessRate, *hooklessIPs)
}

// BenchmarkHooklessLease500 is BenchmarkHooklessLease at 500 leases a
// second (5 000 blocks over as many addresses, 10 s): a rate where each
// read of the file finds only a few blocks, so what a round costs (an
// outbox commit, a request, its acknowledgement) is most of a lease's
// cost. Until a read that found any block made the round busy (issue
// 16), each lease here cost a round: 765 µs of CPU an event.
func BenchmarkHooklessLease500(b *testing.B) {
	hooklessLease(b, 5000, 500, 5000)
}

// hooklessLease runs BenchmarkHooklessLease: n blocks an iteration at
// rate per second over ips addresses.
func hooklessLease(b *testing.B, n, rate, ips int) {
	if testing.Short() {
		b.Skip("builds and runs the region stub")
	}
	dir := b.TempDir()
	stubURL, pki := startStubProcess(b, dir)
	conf := filepath.Join(dir, "dhcpd.conf")
	leases := filepath.Join(dir, "dhcpd.leases")
	if err := os.WriteFile(conf, []byte("subnet 198.18.0.0 netmask 255.254.0.0 {\n  range 198.18.0.1 198.19.255.254;\n}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(leases, []byte("# The format of this file is documented in the dhcpd.leases(5) manual page.\n# This lease file was written by isc-dhcp-4.4.3-P1\n\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.DHCPD.Leases, cfg.DHCPD.Config, cfg.DHCPD.PIDFile = leases, conf, ""
	cfg.Hook.Socket, cfg.Hook.Spool, cfg.Hook.AllowedUIDs = filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool"), []int{os.Getuid()}
	cfg.Region.URL, cfg.Region.ServerName = stubURL, "maas"
	cfg.Region.CAFile, cfg.Region.CertFile, cfg.Region.KeyFile = filepath.Join(pki, "ca.pem"), filepath.Join(pki, "agent.crt"), filepath.Join(pki, "agent.key")
	cfg.State.Dir = filepath.Join(dir, "state")
	cfg.Metrics.Listen, cfg.Control.Socket = "", ""
	if *hooklessBatch > 0 {
		cfg.Region.BatchMax = *hooklessBatch
	}
	reg := prometheus.NewRegistry()
	log := zerolog.Nop()
	if *hooklessLog != "" {
		// The agent logs each event it synthesises at info, which in
		// hookless mode is every lease; a lower bound of what that costs
		// it (a file, not journald's socket).
		lvl, err := zerolog.ParseLevel(*hooklessLog)
		if err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, "agent.log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		log = zerolog.New(f).Level(lvl).With().Timestamp().Logger()
	}
	a, err := New(cfg, log, reg, nil)
	if err != nil {
		b.Fatal(err)
	}
	a.Version = "bench"
	closeParts, err := a.Assemble()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pprof.Do(ctx, pprof.Labels("part", "agent"), func(ctx context.Context) {
		go func() { done <- a.Run(ctx) }()
	})
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
		closeParts()
	}()
	select {
	case <-a.Ready():
	case err := <-done:
		b.Fatal(err)
	case <-time.After(30 * time.Second):
		b.Fatal("agent not ready after 30 s")
	}
	delivered := func() float64 { return gathered(b, reg, "leasekeeper_delivered_total") }
	if ips < 3*rate {
		// reconcile's commitSlack: a commit within 2 s of the one told is
		// the same news.
		b.Fatalf("-hookless.ips %d < 3 × -hookless.rate %d: an address would come back within 3 s, which is no news", ips, rate)
	}
	first := 0
	var cpu, wall time.Duration
	var allocBytes, allocs uint64
	var faults int64
	commits0 := gathered(b, reg, "leasekeeper_outbox_commit_seconds")
	posts0 := gathered(b, reg, "leasekeeper_delivery_attempts_total")
	var events float64
	b.ResetTimer()
	for range b.N {
		base := delivered()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		c0, f0, t0 := processCPU(), minorFaults(), time.Now()
		writeLeases(b, leases, first, n, rate, ips)
		// Done once the agent is idle: nothing queued, and nothing more
		// delivered for a while (the reconciler reads every busyRound).
		last, idleSince := delivered(), time.Now()
		for time.Since(idleSince) < 500*time.Millisecond || gathered(b, reg, "leasekeeper_outbox_depth") > 0 {
			if time.Since(t0) > 5*time.Minute {
				b.Fatalf("%v of %d delivered after 5 minutes", delivered()-base, n)
			}
			time.Sleep(50 * time.Millisecond) // Gather costs this process CPU
			if d := delivered(); d != last {
				last, idleSince = d, time.Now()
			}
		}
		cpu += processCPU() - c0
		faults += minorFaults() - f0
		runtime.ReadMemStats(&m1)
		allocBytes += m1.TotalAlloc - m0.TotalAlloc
		allocs += m1.Mallocs - m0.Mallocs
		wall += idleSince.Sub(t0)
		events += last - base
		first += n
	}
	b.StopTimer()
	per := float64(cpu.Microseconds()) / events
	b.ReportMetric(per, "cpu-µs/event")
	b.ReportMetric(events/float64(b.N*n), "events/block")
	// What the CPU figure cannot show on a noisy machine: the heap
	// allocated per event (the GC's work), which does not vary from run
	// to run. It includes this benchmark's polling of the registry
	// (gathered), a few bytes an event.
	b.ReportMetric(float64(allocBytes)/events, "B/event")
	b.ReportMetric(float64(allocs)/events, "allocs/event")
	// Fresh pages the process touched (minor page faults, getrusage):
	// the heap and the tables growing, the outbox's mapping. Each costs
	// what BenchmarkPageFault measures, inside the CPU figure.
	b.ReportMetric(float64(faults)/events, "faults/event")
	b.ReportMetric(0, "ns/op")
	commits := gathered(b, reg, "leasekeeper_outbox_commit_seconds") - commits0
	posts := gathered(b, reg, "leasekeeper_delivery_attempts_total") - posts0
	b.Logf("%d blocks at %d/s over %d addresses: %.0f events delivered; agent CPU %s (%.1f µs per event) over %s; %.0f outbox commits, %.0f region requests, %.0f coalesced",
		b.N*n, rate, ips, events, cpu.Round(time.Millisecond), per, wall.Round(time.Millisecond), commits, posts,
		gathered(b, reg, "leasekeeper_outbox_coalesced_total"))
}

// appendEnv makes the test binary the benchmark's dhcpd stand-in
// (TestMain): "PATH FIRST N RATE IPS".
const appendEnv = "LEASEKEEPER_BENCH_APPEND"

func TestMain(m *testing.M) {
	if spec := os.Getenv(appendEnv); spec != "" {
		var path string
		var first, n, rate, ips int
		if _, err := fmt.Sscan(spec, &path, &first, &n, &rate, &ips); err != nil {
			fmt.Fprintln(os.Stderr, appendEnv+":", err)
			os.Exit(2)
		}
		if err := appendLeases(path, first, n, rate, ips); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(listenControlEnv); spec != "" {
		os.Exit(listenControlAs(spec))
	}
	os.Exit(m.Run())
}

// writeLeases runs appendLeases in a process of its own (this test
// binary, TestMain), so that its CPU is not the agent's.
func writeLeases(b *testing.B, path string, first, n, rate, ips int) {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d %d", appendEnv, path, first, n, rate, ips))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("appending leases: %v\n%s", err, out)
	}
}

// appendLeases appends n lease blocks, one write(2) each as dhcpd does,
// for addresses of 198.18.0.0/15 (the (first+i)%ips-th), at rate per
// second. An address comes back ips blocks later, ips/rate seconds.
func appendLeases(path string, first, n, rate, ips int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	buf := make([]byte, 0, 512)
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
			time.Sleep(wait)
		}
		k := (first+i)%ips + 1
		ip := netip.AddrFrom4([4]byte{198, 18 + byte(k>>16&1), byte(k >> 8), byte(k)})
		now := time.Now().UTC()
		ts := now.Format("2006/01/02 15:04:05")
		end := now.Add(time.Hour).Format("2006/01/02 15:04:05")
		buf = fmt.Appendf(buf[:0], "lease %s {\n  starts %d %s;\n  ends %d %s;\n  cltt %d %s;\n  binding state active;\n  next binding state free;\n  rewind binding state free;\n  hardware ethernet 02:00:%02x:%02x:%02x:%02x;\n  uid \"\\001\\002\\000\\000\\000\\000\\000\";\n  client-hostname \"bench-%d\";\n}\n",
			ip, now.Weekday(), ts, now.Weekday(), end, now.Weekday(), ts, byte(k>>24), byte(k>>16), byte(k>>8), byte(k), k)
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func processCPU() time.Duration { return rusage(syscall.RUSAGE_SELF) }

// minorFaults is this process's minor page faults so far.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// BenchmarkPageFault is a fact of the machine, not of leasekeeper: what
// the first touch of a fresh anonymous page costs (a minor page fault:
// the kernel's trap, a zeroed page, its mapping), in µs. A Go program
// pays it for every page its heap grows into, and a process start for
// every page it touches: about 150 for an empty Go program. Under a
// hypervisor it can cost as much as a whole lease event (12.7 µs on the
// 2-CPU virtual machine of issue 16), and the CPU figures of make bench,
// per lease and per process start, carry it (faults/event in
// BenchmarkHooklessLease).
func BenchmarkPageFault(b *testing.B) {
	const pages = 4096
	size := pages * os.Getpagesize()
	var faults int64
	var touching time.Duration
	for range b.N {
		m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			b.Fatal(err)
		}
		f0, t0 := minorFaults(), time.Now()
		for i := 0; i < size; i += os.Getpagesize() {
			m[i] = 1
		}
		touching += time.Since(t0)
		faults += minorFaults() - f0
		if err := syscall.Munmap(m); err != nil {
			b.Fatal(err)
		}
	}
	if faults < int64(b.N)*pages {
		// Transparent huge pages (enabled "always") map 2 MiB at a
		// fault: then this is not the cost of one 4 KiB page.
		b.Logf("%d faults for %d pages touched: the kernel mapped more than a page at a fault (transparent huge pages?)", faults, b.N*pages)
	}
	b.ReportMetric(float64(touching.Nanoseconds())/1e3/float64(max(faults, 1)), "µs/fault")
	b.ReportMetric(float64(faults)/float64(b.N*pages), "faults/page")
	b.ReportMetric(0, "ns/op") // an mmap and a munmap's besides: not the figure
}

// gathered is the value of the single-series metric name in reg.
func gathered(b *testing.B, reg *prometheus.Registry, name string) float64 {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
		return v
	}
	return 0
}

// gatheredSum is the sample count and sum of the single-series histogram
// name in reg.
func gatheredSum(b *testing.B, reg *prometheus.Registry, name string) (count, sum float64) {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			count += float64(m.GetHistogram().GetSampleCount())
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return count, sum
}

// startStubProcess builds and starts tools/regionstub on a free loopback
// port; it returns the leases URL and the directory of its PEM files.
func startStubProcess(b *testing.B, dir string) (string, string) {
	b.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "regionstub")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/leasekeeper/leasekeeper/tools/regionstub").CombinedOutput(); err != nil {
		b.Fatalf("go build regionstub: %v\n%s", err, out)
	}
	pki := filepath.Join(dir, "pki")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out, err := os.Create(filepath.Join(dir, "stub.out"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(bin, "-listen", addr, "-cert-dir", pki)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for range 100 {
		if s, _ := os.ReadFile(out.Name()); strings.Contains(string(s), "https://") {
			return "https://" + addr + "/MAAS/a/v3internal/leases", pki
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, _ := os.ReadFile(out.Name())
	b.Fatalf("region stub did not start:\n%s", s)
	return "", ""
}
