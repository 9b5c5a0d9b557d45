package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// stopGrace is how long a command other than the agent has, after the
// first SIGTERM or SIGINT cancelled its context, to return before Main
// ends the process: a command blocked where it does not watch its
// context (reading a FIFO, a terminal, /dev/stdin) still stops on ^C.
const stopGrace = 2 * time.Second

// Main runs the command line (os.Args) with env and returns the exit
// status. It is the one place the stop signals are taken: SIGTERM or
// SIGINT cancels the command's context, with the signal as the cause
// (stopSignal), and a second one takes the signal's default action: the
// process ends at once. A command that has not returned stopGrace after
// the first ends too (exit status 128 + the signal's number), unless it
// stops on its own (ownsStop: `leasekeeper agent` flushes what it holds
// first, up to its stop timeout). SIGHUP is the agent's own (a reload).
func Main(env Env) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ctl := &stopControl{}
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), stopKey{}, ctl))
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs) // the next one kills
			cancel(stopSignal{s})
			if ctl.owned.Load() {
				return
			}
			select {
			case <-time.After(stopGrace):
				stderr := env.Stderr
				if stderr == nil {
					stderr = os.Stderr
				}
				fmt.Fprintf(stderr, "leasekeeper: stopped by %v\n", s)
				n := 1
				if sig, ok := s.(syscall.Signal); ok {
					n = 128 + int(sig)
				}
				os.Exit(n)
			case <-done:
			}
		case <-done:
		}
	}()
	err := New(env).ExecuteContext(ctx)
	close(done)
	signal.Stop(sigs)
	cancel(nil)
	return ExitCode(err, env.Stderr)
}

// stopSignal is the cause of a context Main cancelled on a signal.
type stopSignal struct{ os.Signal }

func (s stopSignal) Error() string { return "stopped by " + s.String() }

// stopControl is what a command tells Main about how it stops.
type stopControl struct {
	owned atomic.Bool // the command returns on its own after a stop signal
}

type stopKey struct{}

// ownsStop tells Main (through ctx, a command's context) that the command
// stops on its own once ctx is cancelled, however long that takes: Main
// does not end the process stopGrace after the first signal.
func ownsStop(ctx context.Context) {
	if c, ok := ctx.Value(stopKey{}).(*stopControl); ok {
		c.owned.Store(true)
	}
}
