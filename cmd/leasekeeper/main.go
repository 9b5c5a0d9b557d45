// Command leasekeeper is the leasekeeper agent and its operator and node
// tools. See `leasekeeper --help`.
package main

import (
	"os"

	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// A duration in the log reads as the configuration writes it
	// ("30s", "1m0s"), not as a bare number of milliseconds under a
	// key the file sets in seconds (expiry_grace=30000, a cold review).
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	os.Exit(cli.Main(cli.Env{Version: version, Stdout: os.Stdout, Stderr: os.Stderr}))
}
