// Command hooksink stands in for the leasekeeper agent's hook socket in
// benchmarks and package tests: it runs the agent's own socket reader
// (agent/hooksock) on a socket it binds, with a sink that only counts,
// and on SIGINT or SIGTERM prints how many events it received (and how
// many datagrams the reader refused) and exits. The socket is the
// agent's (SO_PASSCRED, peeked datagrams consumed once stored), so what
// a hook's delivery costs against it is what it costs against the agent.
//
//	hooksink -socket /run/leasekeeper/hook.sock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/hooksock"
)

func main() {
	socket := flag.String("socket", "", "unix datagram socket to bind (required; removed on exit)")
	flag.Parse()
	if *socket == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: hooksink -socket PATH")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, bad, err := run(ctx, *socket)
	fmt.Printf("hooksink: received %d events (%d malformed)\n", n, bad)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hooksink:", err)
		os.Exit(1)
	}
}

// counter is a sink that counts the events it is given.
type counter struct{ n atomic.Int64 }

func (c *counter) Accept(_ context.Context, evs []event.Event) error {
	c.n.Add(int64(len(evs)))
	return nil
}

// run receives on a socket bound at path until ctx ends.
func run(ctx context.Context, path string) (n, bad int, err error) {
	reg := prometheus.NewRegistry()
	var sink counter
	l, err := hooksock.New(hooksock.Config{Path: path}, &sink, zerolog.New(os.Stderr).Level(zerolog.WarnLevel), reg, nil)
	if err != nil {
		return 0, 0, err
	}
	err = l.Run(ctx, func() {})
	mfs, gerr := reg.Gather()
	if gerr == nil {
		for _, mf := range mfs {
			if mf.GetName() == "leasekeeper_rejected_datagrams_total" {
				for _, m := range mf.GetMetric() {
					bad += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return int(sink.n.Load()), bad, err
}
