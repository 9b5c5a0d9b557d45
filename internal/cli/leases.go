package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/parser"
)

func newLeasesCmd(env *Env) *cobra.Command {
	var (
		asJSON bool
		state  string
	)
	cmd := &cobra.Command{
		Use:   "leases [--json] [--state STATE] FILE",
		Short: "Print the effective lease table of a dhcpd.leases file",
		Long: `Print the lease table dhcpd itself would load from FILE: the last block for
each address wins (IPv6: each address or delegated prefix, an IA's block
replacing its previous one), and a block without a binding state is active
if it ends in the future, as in dhcpd.

A block dhcpd refuses when it loads the file is left out as dhcpd leaves it
out, keeping the address's earlier block, with a warning on stderr naming
its line: a lease holding a statement dhcpd rejects (an unknown word,
"bootp;" on its own, preferred-life or max-life, "set x = word;"), an IPv6
IA one of whose addresses lacks ends or binding state or is in a state
DHCPv6 does not have (backup, reset). So is the statement after it when
dhcpd's recovery from the refused block swallows it. A "timestamp"
statement in a lease stops dhcpd 4.4 from starting at all: the warning says
so. Statements leasekeeper cannot read are skipped with a warning too; an
unfinished last block (dhcpd still writing it) is ignored.

--json prints an array of objects with the keys ip, family, state,
next_state, mac, hostname, starts, ends (RFC 3339 UTC, null for never or
absent), cltt, uid, and for IPv6 ia_type, iaid, duid and prefix_len.
IPv6 addresses that are not bound (expired, released) are listed as the
file says, although dhcpd forgets them.

Exit status: 0 when FILE was read (what it skips is warned about), 1 when
it cannot be read, 2 on a usage error.`,
		Example: `  leasekeeper leases /var/lib/dhcp/dhcpd.leases
  leasekeeper leases --json --state active /var/lib/dhcp/dhcpd.leases`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var want parser.State
			if state != "" {
				s, ok := parser.ParseState(state)
				if !ok {
					return usageError{fmt.Errorf("--state %q: not a binding state (free, active, expired, released, abandoned, reset, backup)", state)}
				}
				want = s
			}
			ls, err := loadLeases(env, args[0])
			if err != nil {
				return err
			}
			if err := shownLeases(args[0], ls); err != nil {
				return err
			}
			now := parser.TimeOf(env.Now())
			var rows []*parser.Lease
			for _, l := range ls.Leases() {
				if want == parser.StateNone || l.Binding(now) == want {
					rows = append(rows, l)
				}
			}
			if asJSON {
				return writeLeasesJSON(env.Stdout, rows, now)
			}
			return writeLeasesTable(env.Stdout, rows, now)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (the stable, scriptable format)")
	cmd.Flags().StringVar(&state, "state", "", "only leases in this binding state")
	return cmd
}

// LeaseJSON is one lease in `leasekeeper leases --json`.
type LeaseJSON struct {
	IP        string      `json:"ip"`
	Family    string      `json:"family"`
	State     string      `json:"state"`
	NextState string      `json:"next_state"`
	MAC       string      `json:"mac"`
	Hostname  string      `json:"hostname"`
	Starts    parser.Time `json:"starts"`
	Ends      parser.Time `json:"ends"`
	Cltt      parser.Time `json:"cltt"`
	UID       string      `json:"uid"`
	IAType    string      `json:"ia_type,omitempty"`
	IAID      *uint32     `json:"iaid,omitempty"`
	DUID      string      `json:"duid,omitempty"`
	PrefixLen int         `json:"prefix_len,omitempty"`
}

func leaseJSON(l *parser.Lease, now parser.Time) LeaseJSON {
	j := LeaseJSON{
		IP:        l.IP.String(),
		Family:    l.Family.String(),
		State:     l.Binding(now).String(),
		NextState: l.NextBinding(now).String(),
		MAC:       parser.HexString(l.HardwareAddr),
		Hostname:  l.ClientHostname,
		Starts:    l.Starts,
		Ends:      l.Ends,
		Cltt:      l.Cltt,
		UID:       parser.HexString(l.UID),
		PrefixLen: int(l.PrefixLen),
	}
	if l.Family == parser.IPv6 {
		if l.IA != nil {
			j.IAType, j.DUID = l.IA.Type, parser.HexString(l.IA.DUID)
			iaid := l.IA.IAID
			j.IAID = &iaid
		}
	}
	return j
}

func writeLeasesJSON(w io.Writer, rows []*parser.Lease, now parser.Time) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var elem bytes.Buffer
	enc := json.NewEncoder(&elem)
	enc.SetEscapeHTML(false)
	bw.WriteString("[")
	for i, l := range rows {
		if i > 0 {
			bw.WriteString(",")
		}
		elem.Reset()
		if err := enc.Encode(leaseJSON(l, now)); err != nil {
			return err
		}
		bw.WriteString("\n  ")
		bw.Write(bytes.TrimSuffix(elem.Bytes(), []byte("\n")))
	}
	bw.WriteString("\n]\n")
	return bw.Flush()
}

func writeLeasesTable(w io.Writer, rows []*parser.Lease, now parser.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "IP\tSTATE\tMAC\tHOSTNAME\tENDS")
	for _, l := range rows {
		ip := l.IP.String()
		if l.PrefixLen > 0 {
			ip = l.Key().String()
		}
		mac := parser.HexString(l.HardwareAddr)
		if l.Family == parser.IPv6 {
			mac = "-"
		}
		ends := l.Ends.String()
		if ends == "" {
			ends = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ip, l.Binding(now), orDash(mac), orDash(printable(l.ClientHostname)), ends)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable quotes a string that would garble a terminal table.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar }) < 0 && !strings.ContainsAny(s, " \t") {
		return s
	}
	q := strconv.QuoteToASCII(s)
	if len(q) > 64 {
		q = q[:61] + "..."
	}
	return q
}
