package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/config"
)

func newOrphansCmd(env *Env) *cobra.Command {
	var (
		socket, configPath string
		asJSON, release    bool
	)
	cmd := &cobra.Command{
		Use:   "orphans [--release] [--json] [IP...]",
		Short: "List (and free) the addresses the region keeps for leases a dhcpd reload dropped",
		Long: `When a dhcpd restart drops an active lease because its address left every
range, MAAS ignores the expiry leasekeeper sends at the lease's end (the
address is in no range of its subnet any more) and keeps the address "Observed"
for ever. The agent frees it through MAAS's API 2.0 ([maas] in its
configuration) once the region's record is still DISCOVERED for the
lease's MAC and nothing answers an ARP probe for it on the rack's link.
This command lists the addresses it still holds, with their state and why:
waiting (not tried yet), busy (something answers ARP for it), blocked (it
cannot be probed: no link of this rack reaches it, or dhcpd.leases is not
read yet), retrying (the region did not answer: see the reason), refused (MAAS
does not let the API key's user list or release addresses, or refuses the
request's timestamp: this rack's clock is behind), misdirected
(maas.api_url redirects or answers 404: it is not the region's API; or
the region's TLS certificate is not trusted: set maas.ca_file),
unconfirmed (the region answered the release with success and still
lists the record), unreleasable (MAAS's release fails for a record linked
to several interfaces), unconfigured (no [maas] key). An address a range
holds again (dhcpd.leases lists it) is dropped from the list: its leases
are the region's to keep.

--release runs the same checked release now, for the IPs given (default:
every listed address), and prints how each went: freed, gone (the region
had no record), other-mac, not-discovered or back (left alone), or the
state the address stays in.

The agent is asked on its control socket (control.socket in --config, or
--socket): root or control.group only.

--json prints the list as an array of objects with the keys ip, mac, ends,
state, reason, attempts and next (RFC 3339 or null); with --release, an
array of {ip, done, result, reason}.

Exit status: 0 on success, 1 when the agent could not be asked or an
address could not be released now, 2 for bad arguments.`,
		Example: `  leasekeeper orphans
  leasekeeper orphans --release 203.0.113.100
  leasekeeper orphans --json | jq '.[] | select(.state == "busy")'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ips []netip.Addr
			for _, a := range args {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					return usageError{fmt.Errorf("%q is not an IP address", a)}
				}
				ips = append(ips, ip)
			}
			if len(ips) > 0 && !release {
				return usageError{errors.New("IP arguments go with --release")}
			}
			if socket == "" {
				cfg, err := decodeAgentConfig(env, configPath)
				if err != nil {
					return err
				}
				if socket = cfg.Control.Socket; socket == "" {
					return fmt.Errorf("control.socket is empty in %s: the agent cannot be asked", configPath)
				}
			}
			c := controlClient(socket)
			body, err := agentGet(cmd.Context(), c, controlBase+"/orphans")
			if err != nil {
				return err
			}
			var list []agent.OrphanItem
			if err := json.Unmarshal(body, &list); err != nil {
				return fmt.Errorf("%s: GET /orphans: unexpected answer: %w", socket, err)
			}
			if !release {
				if asJSON {
					_, err := env.Stdout.Write(body)
					return err
				}
				return writeOrphans(env, list)
			}
			if len(ips) == 0 {
				for _, o := range list {
					if ip, err := netip.ParseAddr(o.IP); err == nil {
						ips = append(ips, ip)
					}
				}
			}
			var outs []agent.OrphanRelease
			var errs []error
			for _, ip := range ips {
				body, err := agentDo(cmd.Context(), c, http.MethodPost, controlBase+"/orphans/"+ip.String()+"/release", http.StatusOK)
				if err != nil {
					var he *httpError
					if errors.As(err, &he) && he.Code == http.StatusNotFound {
						err = fmt.Errorf("%s: not an orphaned address the agent knows", ip)
					}
					errs = append(errs, err)
					continue
				}
				var o agent.OrphanRelease
				if err := json.Unmarshal(body, &o); err != nil {
					errs = append(errs, fmt.Errorf("%s: unexpected answer: %w", ip, err))
					continue
				}
				outs = append(outs, o)
				if !o.Done {
					errs = append(errs, fmt.Errorf("%s: not released now: %s %s", ip, o.Result, o.Reason))
				}
			}
			if asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				if outs == nil {
					outs = []agent.OrphanRelease{}
				}
				if err := enc.Encode(outs); err != nil {
					return err
				}
			} else {
				for _, o := range outs {
					fmt.Fprintf(env.Stdout, "%s\t%s\t%s\n", o.IP, o.Result, o.Reason)
				}
			}
			return errors.Join(errs...)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&release, "release", false, "run the checked release now, for the IPs given or every listed address")
	f.BoolVar(&asJSON, "json", false, "print JSON (the stable, scriptable format)")
	f.StringVar(&socket, "socket", "", "the agent's control socket (default: control.socket from --config)")
	f.StringVarP(&configPath, "config", "c", config.DefaultPath, "the agent's configuration file (control.socket)")
	return cmd
}

func writeOrphans(env *Env, list []agent.OrphanItem) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(env.Stdout, "no orphaned addresses")
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IP\tMAC\tLEASE ENDED\tSTATE\tATTEMPTS\tNEXT\tREASON")
	for _, o := range list {
		next := "-"
		if o.Next != nil {
			next = o.Next.UTC().Format(time.RFC3339)
		}
		reason := o.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", o.IP, o.MAC, o.Ends.UTC().Format(time.RFC3339), o.State, o.Attempts, next, reason)
	}
	return tw.Flush()
}
