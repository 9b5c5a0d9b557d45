// Command leasekeeper is the leasekeeper agent and its operator and node
// tools. See `leasekeeper --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasekeeper/leasekeeper/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.New(cli.Env{Version: version, Stdout: os.Stdout, Stderr: os.Stderr}).ExecuteContext(ctx)
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}
