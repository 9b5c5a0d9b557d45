// Command leasekeeper is the leasekeeper agent and its operator and node
// tools. See `leasekeeper --help`.
package main

import (
	"os"

	"github.com/leasekeeper/leasekeeper/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(cli.Main(cli.Env{Version: version, Stdout: os.Stdout, Stderr: os.Stderr}))
}
