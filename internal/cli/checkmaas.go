package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/internal/maascheck"
)

func newCheckMAASCmd(env *Env) *cobra.Command {
	var (
		configPath, agentUser string
		asJSON                bool
		timeout               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "check-maas [--config FILE] [--json]",
		Short: "Say how leasekeeper runs on this MAAS rack and what is misconfigured; exit 1 if anything is",
		Long: `Read the agent's configuration, dhcpd.conf and the programs its hooks run, and
the region settings, and say:

  mode           replacement (dhcpd's hooks run leasekeeper-hook), complement
                 (they run MAAS's own maas-dhcp-helper, which tells MAAS: the
                 agent adds only expiries of leases a dhcpd restart dropped) or
                 hookless, and why: the dhcpd.conf lines, the program, whether
                 dpkg diverts it, whether it lies in the read-only MAAS snap
  hook           each hook program, and any that dhcpd cannot run; with
                 leasekeeper-hook, a kernel that refuses statx(2), which it
                 needs (Linux 4.11 or later)
  helper-socket  whether anything receives MAAS's helper's events (complement)
  leases-file    whether dhcpd.leases names the file the running dhcpd writes
                 (the one it has open, whatever set it), or, with no dhcpd
                 running, whether it names MAAS's when only MAAS's exists
  leases-file6   the same for dhcpd.leases6 and dhcpd -6, when it is set
  dhcpv6         with dhcpd.config6 set, dhcpd.leases6's mode, or that
                 dhcpd.leases6 is not set (no DHCPv6 lease reaches MAAS)
  agent-access   whether the agent's user can read dhcpd.conf, the leases
                 files and the certificates (MAAS writes its dhcpd.conf
                 readable by root only; then the agent cannot tell the mode)
  socket-group   control.group and hook.socket_group: the group exists and
                 the agent's user is in it (or the unit adds it), else the
                 agent does not start
  maas-rack      the MAAS rack found on this host (deb or snap) and the keys it
                 gives the values of (the file leaves them unset), or a
                 region.url that names none of rackd.conf's maas_url hosts
  region-url     port 5242 and the internal leases endpoint
  certificates   the rack's client certificate, key and MAAS's CA (none yet:
                 the rack is not registered, and region is not tried)
  region         one TLS connection to the region with the client certificate
                 and a GET on the endpoint (no event is sent)
  config         each value the agent refuses at start (as agent
                 --print-config does), but region.url's, which region-url tells

Run it as root, like the checks it makes on the agent's behalf. --json
prints {"mode": {...}, "mode6": {...}, "findings": [{severity, check, message,
fix}], "problems": N}; severity is ok, note or problem.

Exit status: 0 when nothing is wrong (notes are fine), 1 when a problem was
found (or on an error), 2 on a usage error.`,
		Example: `  sudo leasekeeper check-maas
  sudo leasekeeper check-maas --json | jq -r '.findings[] | select(.severity == "problem") | .fix'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := maascheck.Options{AgentUser: agentUser, Timeout: timeout}
			f, err := os.Open(configPath)
			switch {
			case errors.Is(err, os.ErrNotExist) && configPath == config.DefaultPath:
				// As the agent runs without one (and status reads it).
				opts.Config, opts.NoFile = config.DefaultOn(env.rack()), configPath
			case err != nil:
				return err
			default:
				// A file with problems is checked on what it has right,
				// its problems reported with the rest.
				opts.Config, opts.FileProblems, err = config.DecodePartialOn(env.rack(), f, configPath)
				f.Close()
				if err != nil {
					return err
				}
			}
			rep := maascheck.Run(cmd.Context(), opts)
			if asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				writeCheckMAAS(env, rep)
			}
			if rep.Problems > 0 {
				return ErrProblems
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&configPath, "config", "c", config.DefaultPath, "the agent's configuration file")
	fl.StringVar(&agentUser, "agent-user", "leasekeeper", `the user the agent runs as, for the access checks ("" skips them; a user this machine lacks is a problem)`)
	fl.DurationVar(&timeout, "timeout", 5*time.Second, "time limit for the connection to the region")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func writeCheckMAAS(env *Env, rep *maascheck.Report) {
	w := env.Stdout
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "%-7s  %s: %s\n", f.Severity, f.Check, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(w, "%-7s  fix: %s\n", "", f.Fix)
		}
	}
	switch rep.Problems {
	case 0:
		fmt.Fprintf(w, "no problems: %s mode\n", rep.Mode.Mode)
	case 1:
		fmt.Fprintln(w, "1 problem")
	default:
		fmt.Fprintf(w, "%d problems\n", rep.Problems)
	}
}
