package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/systemd"
)

// shutdownGuard is release's --only-at-shutdown: the clean-shutdown unit
// runs release from ExecStop, and a unit is also stopped when nothing
// shuts down (systemctl stop or restart, isolate rescue.target). The
// machine goes on using its addresses then, so giving them back would
// let dhcpd hand them to someone else while they are still in use.
type shutdownGuard struct {
	only     bool
	atReboot bool
	socket   string
}

// shutdownCheckTimeout bounds the question to systemd.
const shutdownCheckTimeout = 3 * time.Second

func addShutdownGuardFlags(cmd *cobra.Command) *shutdownGuard {
	g := &shutdownGuard{}
	fl := cmd.Flags()
	fl.BoolVar(&g.only, "only-at-shutdown", false, "release only while systemd is shutting the machine down (the shutdown unit's ExecStop); otherwise say so and exit 0")
	fl.BoolVar(&g.atReboot, "at-reboot", false, "with --only-at-shutdown: release at a reboot too (reboot, kexec, soft-reboot); by default the machine keeps its addresses across a reboot, asking for them again as it comes back")
	fl.StringVar(&g.socket, "systemd-socket", "", "systemd's private D-Bus socket for --only-at-shutdown (default "+systemd.PrivateSocket+", else the system bus)")
	_ = fl.MarkHidden("systemd-socket")
	return g
}

// allow reports whether release may go on. When systemd cannot be asked
// the answer is no: an address kept until its lease ends costs less than
// an address handed out twice.
func (g *shutdownGuard) allow(ctx context.Context, env *Env) (bool, error) {
	if !g.only {
		if g.atReboot {
			return false, usageError{errors.New("--at-reboot goes with --only-at-shutdown (without it, release gives the leases back now)")}
		}
		return true, nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, shutdownCheckTimeout)
	defer cancel()
	mgr, err := systemd.DialManager(ctx, g.socket)
	if err != nil {
		return false, fmt.Errorf("--only-at-shutdown: cannot tell whether the machine is shutting down, so nothing is released: %w (is systemd running, and is this root? to release now, leave --only-at-shutdown out)", err)
	}
	defer mgr.Close()
	sd, err := mgr.ShuttingDown(ctx)
	if err != nil {
		return false, fmt.Errorf("--only-at-shutdown: cannot read systemd's state, so nothing is released: %w", err)
	}
	// Without the jobs: at a shutdown a reboot cannot be told from a
	// poweroff; while systemd says "starting", a shutdown asked for
	// during boot cannot be told (before systemd 246).
	switch {
	case sd.JobsErr == nil:
	case sd.Stopping():
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: cannot read systemd's jobs (%v): a reboot cannot be told from a poweroff, so one releases too\n", sd.JobsErr)
	case sd.State == "starting":
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: cannot read systemd's jobs (%v): a shutdown asked for while boot jobs run (systemd before 246 says \"starting\") cannot be told\n", sd.JobsErr)
	}
	switch {
	case !sd.Stopping():
		fmt.Fprintf(env.Stdout, "not releasing: systemd is %s, not shutting down (--only-at-shutdown); the addresses stay in use\n", sd.State)
		return false, nil
	case sd.Reboot() && !g.atReboot:
		fmt.Fprintf(env.Stdout, "not releasing: the machine reboots (%s) and asks for its addresses again as it comes back (--at-reboot releases at a reboot too)\n", sd.Target)
		return false, nil
	}
	return true, nil
}

// withShutdownGuard adds --only-at-shutdown to the release command.
func withShutdownGuard(cmd *cobra.Command, env *Env) *cobra.Command {
	g := addShutdownGuardFlags(cmd)
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		ok, err := g.allow(c.Context(), env)
		if !ok || err != nil {
			return err
		}
		return run(c, args)
	}
	return cmd
}
