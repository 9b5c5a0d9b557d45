package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/internal/pools"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// fileFlags are the --leases and --config flags pools and check share.
type fileFlags struct {
	leases, config string
	asJSON         bool
}

func (f *fileFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.leases, "leases", "", "dhcpd.leases file (required)")
	cmd.Flags().StringVar(&f.config, "config", "", "dhcpd.conf file; includes resolve against its directory (required)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON (the stable, scriptable format)")
	_ = cmd.MarkFlagRequired("leases")
	_ = cmd.MarkFlagRequired("config")
}

// load parses both files, the configuration first: without ranges the
// leases mean nothing here.
func (f *fileFlags) load(env *Env) (*dhcpdconf.Config, *parser.Leases, error) {
	cfg, err := loadConfig(env, f.config)
	if err != nil {
		return nil, nil, err
	}
	if len(cfg.Ranges) == 0 {
		// Statements leasekeeper does not model are skipped without a
		// word (dhcpd.conf has hundreds), so a mistyped range or the
		// wrong file would otherwise show only as empty pools and every
		// lease an orphan.
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: %s: no range or range6 statement found: no dynamic pool, so every lease is outside the pools (if there should be one: a typo, or not dhcpd's configuration?)\n", f.config)
	}
	ls, err := loadLeases(env, f.leases)
	if err != nil {
		return nil, nil, err
	}
	return cfg, ls, nil
}

func newPoolsCmd(env *Env) *cobra.Command {
	var ff fileFlags
	cmd := &cobra.Command{
		Use:   "pools --leases FILE --config FILE [--json]",
		Short: "Show how full each dynamic range is",
		Long: `For every range, range6 and prefix6 in the configuration: its size and how
many of its addresses hold an active, backup (failover) or touched (free,
expired, released, abandoned) lease, like dhcpd-pools, whose counts it
matches on files dhcpd wrote. States are those dhcpd would load: the last
block per address, a missing binding state inferred from its end time.

For a failover pair, one line per failover peer the pools use: this
server's role, its state and its partner's as the leases file last
recorded them (partner-down: this server answers for the whole pool;
recover: it answers nobody until it caught up), the MCLT and the backup
leases (free addresses the secondary may hand out on its own).

--json prints {"ranges": [...], "shared_networks": [...], "summary": {...},
"failover": [...]}; each range has family, first, last, subnet,
shared_network, failover, size, active, backup, touched and free (size -
active); each failover entry has peer, role, my_state, my_state_at,
partner_state, partner_state_at (RFC 3339 UTC or null), mclt and backup. Sizes are exact, 2^64 for
a /64: size and free are JSON integers written in full, which for IPv6 may
exceed what an int64 or a double holds (decode them as big integers).

Exit status: 0 when both files were read, 1 when one cannot be read or
parsed, 2 on a usage error.`,
		Example: `  leasekeeper pools --leases /var/lib/dhcp/dhcpd.leases --config /etc/dhcp/dhcpd.conf`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, ls, err := ff.load(env)
			if err != nil {
				return err
			}
			if err := shownLeases(ff.leases, ls); err != nil {
				return err
			}
			rep := pools.Summarize(cfg, ls.Table, parser.TimeOf(env.Now()))
			if ff.asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return writePoolsTable(env.Stdout, rep)
		},
	}
	ff.register(cmd)
	return cmd
}

func writePoolsTable(w io.Writer, rep pools.Report) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SHARED NETWORK\tFIRST\tLAST\tSIZE\tACTIVE\tBACKUP\tTOUCHED\tFREE\tUSED%\t")
	for _, u := range rep.Ranges {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t\n",
			orDash(u.SharedNetwork), u.First, u.Last, u.Size, u.Active, u.Backup, u.Touched, u.Free, percent(u.Active, u.Size))
	}
	for _, t := range append(rep.SharedNetworks, total(rep.Summary)) {
		fmt.Fprintf(tw, "%s\t\t\t%s\t%d\t%d\t%d\t%s\t%s\t\n",
			t.Name, t.Size, t.Active, t.Backup, t.Touched, t.Free, percent(t.Active, t.Size))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range rep.Failover {
		if _, err := fmt.Fprintln(w, pairLine(p)); err != nil {
			return err
		}
	}
	return nil
}

// pairLine describes a failover peer and its states in one line.
func pairLine(p pools.Pair) string {
	role := p.Role
	if role == "" {
		role = "no role"
	}
	s := fmt.Sprintf("failover peer %q (%s): ", p.Peer, role)
	if p.MyState == "" {
		s += "no state recorded in the leases file"
	} else {
		s += "my state " + p.MyState + since(p.MyStateAt) + ", partner state " + orDash(p.PartnerState) + since(p.PartnerStateAt)
		if p.MCLT > 0 {
			s += fmt.Sprintf(", mclt %d", p.MCLT)
		}
	}
	return s + fmt.Sprintf(", backup %d", p.Backup)
}

func since(t *time.Time) string {
	if t == nil {
		return ""
	}
	return " since " + t.Format(time.RFC3339)
}

func total(t pools.Totals) pools.Totals {
	t.Name = "(all)"
	return t
}

func percent(n int64, of pools.Count) string {
	r, ok := of.Ratio(n)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.1f", 100*r)
}
