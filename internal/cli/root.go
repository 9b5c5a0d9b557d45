// Package cli builds the leasekeeper command tree. Each command parses its
// flags, does its work through the project's packages and returns an
// error; only main turns errors into exit codes.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// Env is what commands reach outside themselves for: output streams, the
// clock and the filesystem opener. Tests inject their own.
type Env struct {
	Version string
	Stdout  io.Writer
	Stderr  io.Writer
	Now     func() time.Time
	Open    func(path string) (io.ReadCloser, error)
}

func (e *Env) defaults() {
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.Open == nil {
		e.Open = func(p string) (io.ReadCloser, error) { return os.Open(p) }
	}
	if e.Version == "" {
		e.Version = "dev"
	}
}

// ErrProblems is returned by commands that found what they were asked to
// look for (check): exit status 1, the report already printed.
var ErrProblems = errors.New("problems found")

// usageError marks bad invocations: exit status 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// ExitCode maps a command's error to an exit status, printing it.
func ExitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrProblems):
		return 1
	}
	fmt.Fprintln(stderr, "leasekeeper:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// New returns the root command.
func New(env Env) *cobra.Command {
	env.defaults()
	root := &cobra.Command{
		Use:   "leasekeeper",
		Short: "Keep a region controller's DHCP lease view equal to what ISC dhcpd did",
		Long: `leasekeeper watches ISC dhcpd on a rack controller and delivers every lease
commit, release and expiry to the region controller, including the ones
dhcpd never reports (leases a reload dropped, events whose hook failed).

Operator commands read dhcpd's own files and never modify them.`,
		Version:       env.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newLeasesCmd(&env),
		newPoolsCmd(&env),
		newCheckCmd(&env),
		newCheckMAASCmd(&env),
		newAgentCmd(&env),
		newStatusCmd(&env),
		newDeadLetterCmd(&env),
		newOrphansCmd(&env),
		withShutdownGuard(newReleaseCmd(&env), &env),
		newInstallShutdownUnitCmd(&env),
	)
	return root
}

// exactArgs is cobra.ExactArgs with a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
