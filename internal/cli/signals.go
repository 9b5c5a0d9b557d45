package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Main runs the command line (os.Args) with env and returns the exit
// status. It is the one place the stop signals are taken: SIGTERM or
// SIGINT cancels the command's context, with the signal as the cause
// (stopSignal). `leasekeeper agent` says which signal stopped it and
// then lets a second one kill the process (signal.Reset); SIGHUP is the
// agent's own (a reload).
func Main(env Env) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		select {
		case s := <-sigs:
			cancel(stopSignal{s})
		case <-ctx.Done():
		}
	}()
	err := New(env).ExecuteContext(ctx)
	signal.Stop(sigs)
	cancel(nil)
	return ExitCode(err, env.Stderr)
}

// stopSignal is the cause of a context Main cancelled on a signal.
type stopSignal struct{ os.Signal }

func (s stopSignal) Error() string { return "stopped by " + s.String() }
