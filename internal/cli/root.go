// Package cli builds the leasekeeper command tree. Each command parses its
// flags, does its work through the project's packages and returns an
// error; only main turns errors into exit codes.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/hooksock"
	"github.com/leasekeeper/leasekeeper/internal/sockgroup"
)

// Env is what commands reach outside themselves for: output streams, the
// clock and the filesystem opener. Tests inject their own.
type Env struct {
	Version string
	Stdout  io.Writer
	Stderr  io.Writer
	Now     func() time.Time
	Open    func(path string) (io.ReadCloser, error)
	// Root is where a MAAS rack is looked for (config.FindMAASRack):
	// "" is "/", the host; tests give a directory of their own.
	Root string
	// FollowEvery is how often the agent looks at the files its
	// configuration was built from besides its own (config.Watcher):
	// 5 s when 0.
	FollowEvery time.Duration
}

// rack is the MAAS rack installed under e.Root, nil when there is none:
// the groups of keys a configuration leaves unset take its values.
func (e *Env) rack() *config.MAASRack { return config.FindMAASRack(e.Root) }

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
	if e.Root == "" {
		e.Root = "/"
	}
	if e.FollowEvery == 0 {
		e.FollowEvery = 5 * time.Second
	}
}

// ErrProblems is returned by commands that found what they were asked to
// look for (check): exit status 1, the report already printed.
var ErrProblems = errors.New("problems found")

// usageError marks bad invocations: exit status 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// configError is the agent's configuration missing, unreadable or
// invalid: exit status ExitConfig, which the packaged unit does not
// restart on (RestartPreventExitStatus=), as another try reads the same
// file. ExitCode gives it to hook.socket not being the socket systemd
// passed too, and to control.group or hook.socket_group naming a group
// the agent may not give its socket to: the running agent finds those.
// What start reads besides the configuration (certificates, secret
// files) is not one: those may appear later, and the unit's restarts
// then heal the agent.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

// ExitConfig is the agent's exit status for a configuration error
// (sysexits.h's EX_CONFIG).
const ExitConfig = 78

// unconfiguredError is an agent with no region at all (region.url never
// set, no MAAS rack to take it from) and nothing else wrong: installed,
// not configured yet. Exit status ExitUnconfigured, which the packaged
// unit counts as a clean exit (SuccessExitStatus=), so that such an agent
// is left inactive at every boot rather than failed.
type unconfiguredError struct{ error }

func (e unconfiguredError) Unwrap() error { return e.error }

func (e unconfiguredError) Error() string {
	return e.error.Error() + ": the agent does not run until the region is set ([region] url), or a MAAS rack installed here gives it; then systemctl restart leasekeeper.socket leasekeeper"
}

// ExitUnconfigured is the agent's exit status for unconfiguredError.
const ExitUnconfigured = 79

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
	if errors.As(err, &ue) || cobraUsage(err) {
		return 2
	}
	var ae attentionError
	if errors.As(err, &ae) {
		return ExitAttention
	}
	var uc unconfiguredError
	if errors.As(err, &uc) {
		return ExitUnconfigured
	}
	var ce configError
	var sm *hooksock.SocketMismatchError
	var nm *sockgroup.NotMemberError
	var ug *sockgroup.UnknownGroupError
	if errors.As(err, &ce) || errors.As(err, &sm) || errors.As(err, &nm) || errors.As(err, &ug) {
		return ExitConfig
	}
	return 1
}

// cobraUsage reports whether err is one of the bad invocations cobra
// finds itself, before a command runs, and returns without a type of its
// own: an unknown command, a required flag left out. (Flag errors go
// through SetFlagErrorFunc, argument counts through exactArgs and
// noArgs.)
func cobraUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command ") || strings.HasPrefix(msg, "required flag(s) ")
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
	// cobra's own help command prints "Unknown help topic" and exits 0.
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help shows the help of any command: leasekeeper help COMMAND [SUBCOMMAND].",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if cmd == nil || err != nil || len(rest) > 0 && cmd.HasSubCommands() {
				return usageError{fmt.Errorf("no help for %q: no such command (see leasekeeper --help)", strings.Join(args, " "))}
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	})
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
		if n == 0 {
			return noArgs(cmd, args)
		}
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
