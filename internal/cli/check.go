package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/internal/pools"
	"github.com/leasekeeper/leasekeeper/parser"
)

// CheckJSON is the output of `leasekeeper check --json`.
type CheckJSON struct {
	Problems []pools.Problem `json:"problems"`
	// Unchecked lists host fixed addresses written as names, which check
	// does not resolve.
	Unchecked []string `json:"unchecked"`
	// Failover: the failover peers the ranges use and their states, as
	// in `pools --json` (not problems: they never change the exit status).
	Failover []pools.Pair `json:"failover"`
}

func newCheckCmd(env *Env) *cobra.Command {
	var ff fileFlags
	cmd := &cobra.Command{
		Use:   "check --leases FILE --config FILE [--json]",
		Short: "Find leases dhcpd will lose or that conflict; exit 1 if any",
		Long: `Report the inconsistencies between dhcpd's leases and its configuration:

  orphan          an active lease outside every configured range: dhcpd's next
                  rewrite drops it and never runs on-expiry for it
  duplicate-mac   one MAC address holding several active IPv4 leases
  fixed-address   an active dynamic lease on a host declaration's fixed address
  unreadable      a statement of the leases file that could not be read (not a
                  leases file, or damaged): what it held was not checked
  refused         a block dhcpd refuses when it loads the file, and the
                  statement its recovery skips after it: left out, as dhcpd
                  leaves them out (it keeps the address's earlier block); one
                  dhcpd cannot start on says so

In a failover pair, a peer whose state is not normal is noted (partner-down:
this server answers for the whole pool; recover: it answers nobody until it
caught up); a note is not a problem.

Exit status: 0 when nothing is found, 1 when problems are found (or on an
error), 2 on a usage error. --json prints {"problems": [...], "unchecked": [...],
"failover": [...]}; each problem has kind, ip, mac, detail and, where
relevant, ips and host; failover entries are those of pools --json.`,
		Example: `  leasekeeper check --leases /var/lib/dhcp/dhcpd.leases --config /etc/dhcp/dhcpd.conf`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, ls, err := ff.load(env)
			if err != nil {
				return err
			}
			now := parser.TimeOf(env.Now())
			problems, unresolved := pools.Check(cfg, ls.Table, now)
			// A file the decoder had to skip statements of was not
			// checked whole: "ok" would tell a monitoring script a
			// healthy rack. (A torn last statement is dhcpd writing, not
			// damage: a warning only, as before.)
			unreadable := make([]pools.Problem, 0, len(ls.Errors))
			if why := notLeases(ls); why != "" {
				unreadable = append(unreadable, pools.Problem{Kind: "unreadable", Detail: fmt.Sprintf("%s:%s", ff.leases, why)})
			}
			for _, u := range ls.Unknown() {
				unreadable = append(unreadable, pools.Problem{Kind: "unreadable", Detail: fmt.Sprintf("%s:%s", ff.leases, unknownText(u))})
			}
			for _, e := range ls.Errors {
				unreadable = append(unreadable, pools.Problem{Kind: "unreadable", Detail: fmt.Sprintf("%s:%v", ff.leases, e)})
			}
			for _, r := range ls.Refused() {
				p := pools.Problem{Kind: "refused", Detail: fmt.Sprintf("%s:%v", ff.leases, r)}
				if r.IP.IsValid() {
					p.IP = r.IP.String()
				}
				unreadable = append(unreadable, p)
			}
			problems = append(unreadable, problems...)
			pairs := pools.Summarize(cfg, ls.Table, now).Failover
			if ff.asJSON {
				out := CheckJSON{Problems: problems, Unchecked: unresolved, Failover: pairs}
				if out.Problems == nil {
					out.Problems = []pools.Problem{}
				}
				if out.Unchecked == nil {
					out.Unchecked = []string{}
				}
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(out); err != nil {
					return err
				}
			} else {
				for _, p := range problems {
					fmt.Fprintf(env.Stdout, "%s: %s\n", p.Kind, p.Detail)
				}
				for _, u := range unresolved {
					fmt.Fprintf(env.Stderr, "leasekeeper: note: fixed address %s is a name; not checked\n", u)
				}
				for _, p := range pairs {
					if p.MyState != "normal" {
						fmt.Fprintf(env.Stdout, "note: %s\n", pairLine(p))
					}
				}
				if len(problems) == 0 {
					fmt.Fprintf(env.Stdout, "ok: %d leases, %d ranges, no problems\n", ls.Len(), len(cfg.Ranges))
				}
			}
			if len(problems) > 0 {
				return ErrProblems
			}
			return nil
		},
	}
	ff.register(cmd)
	return cmd
}
