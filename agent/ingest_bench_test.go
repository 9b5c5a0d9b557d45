package agent

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/config"
)

var ingestFor = flag.Duration("ingest.for", 5*time.Second, "BenchmarkIngestCPU: how long to flood the hook socket")

// BenchmarkIngestCPU is the hook socket → durable outbox path in this
// process, for `go test -cpuprofile`: 32 senders (goroutines labelled
// part=sender; leave them out with -tagignore part=sender) flood the
// agent's hook socket with the hook's commit datagram for -ingest.for,
// the region unreachable, and the figures are events stored per second
// and this process's CPU per event (senders included: an upper bound).
// agent/e2e's BenchmarkIngest is the figure of record (the real binary,
// max_dgram_qlen 512). The socket queue takes net.unix.max_dgram_qlen of
// the network namespace (10 by default, which caps a group commit at 10
// events); to profile at 512 without touching the host's, run the test
// binary in a namespace of its own:
//
//	go test -c -o agent.test ./agent
//	unshare -n sh -c 'echo 512 >/proc/sys/net/unix/max_dgram_qlen &&
//	    ./agent.test -test.run "^$" -test.bench IngestCPU -test.benchtime 1x -test.cpuprofile cpu.out'
//	go tool pprof -top -tagignore part=sender agent.test cpu.out
func BenchmarkIngestCPU(b *testing.B) {
	dir := b.TempDir()
	cfg := config.Default()
	cfg.DHCPD.Leases, cfg.DHCPD.Config, cfg.DHCPD.PIDFile = filepath.Join(dir, "dhcpd.leases"), "", ""
	cfg.Hook.Socket, cfg.Hook.Spool, cfg.Hook.AllowedUIDs = filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool"), []int{os.Getuid()}
	cfg.Region.URL = "http://127.0.0.1:1/MAAS/a/v3internal/leases"
	cfg.State.Dir = filepath.Join(dir, "state")
	cfg.Metrics.Listen, cfg.Control.Socket = "", ""
	reg := prometheus.NewRegistry()
	log := zerolog.Nop()
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
	go func() { done <- a.Run(ctx) }()
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
	}
	stored := func() float64 { return gathered(b, reg, "leasekeeper_events_received_total") }
	var n atomic.Int64
	b.ResetTimer()
	for range b.N {
		fctx, stop := context.WithTimeout(ctx, *ingestFor)
		var wg sync.WaitGroup
		s0, c0, t0 := stored(), processCPU(), time.Now()
		k0, ks0 := gatheredSum(b, reg, "leasekeeper_outbox_commit_seconds")
		pprof.Do(fctx, pprof.Labels("part", "sender"), func(fctx context.Context) {
			for range 32 {
				c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: cfg.Hook.Socket, Net: "unixgram"})
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					context.AfterFunc(fctx, func() { c.SetWriteDeadline(time.Now()) })
					buf := make([]byte, 0, 512)
					for fctx.Err() == nil {
						k := int(n.Add(1))
						now := time.Now()
						buf = fmt.Appendf(buf[:0], `{"action":"commit","mac":"02:00:%02x:%02x:%02x:%02x","ip_family":"ipv4","ip":"198.%d.%d.%d","timestamp":%d,"lease_time":600,"hostname":"bench-%d","timestamp_ns":%d,"pid":%d}`,
							byte(k>>24), byte(k>>16), byte(k>>8), byte(k), 18+(k>>16)&1, byte(k>>8), byte(k), now.Unix(), k, now.UnixNano(), 4242)
						if _, err := c.Write(buf); err != nil {
							return
						}
					}
				}()
			}
		})
		wg.Wait()
		stop()
		dt := time.Since(t0)
		ev := stored() - s0
		cpu := processCPU() - c0
		b.ReportMetric(ev/dt.Seconds(), "events/s")
		b.ReportMetric(float64(cpu.Microseconds())/ev, "cpu-µs/event")
		b.ReportMetric(cpu.Seconds()/dt.Seconds(), "cores")
		k1, ks1 := gatheredSum(b, reg, "leasekeeper_outbox_commit_seconds")
		if k := k1 - k0; k > 0 {
			b.ReportMetric(ev/k, "events/commit")
			b.ReportMetric(1e3*(ks1-ks0)/k, "ms/commit")
		}
	}
	b.ReportMetric(0, "ns/op")
}
