package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
)

// deadLetterAccess is where the dead letters are reached: the running
// agent's control socket, or the outbox file itself.
type deadLetterAccess struct {
	env                      *Env
	socket, config, stateDir string
}

func newDeadLetterCmd(env *Env) *cobra.Command {
	acc := &deadLetterAccess{env: env}
	cmd := &cobra.Command{
		Use:   "deadletter list|retry|drop",
		Short: "List, retry or drop the events the region refused",
		Long: `When the region refuses one event of a batch (422: its schema) or cannot
place it (a 500 that splitting the batch pins on that event alone: an
address in no MAAS subnet), the agent delivers the rest and keeps the
refused event as a dead letter, with the region's answer, in its outbox
(state.dir/outbox.db). Other answers (a wrong port, path or certificate:
400, 401, 403, 404; a region that is away or fails everything) are
retried and never dead-lettered. These commands show the dead letters and
let an operator send one again (retry: it is queued at the end, after
anything newer for its IP) or forget it (drop).

Where the dead letters are read: the outbox is a bbolt file that one
process at a time may open, so while the agent runs these commands go
through its control socket (control.socket from --config, or --socket:
GET /deadletters, POST /deadletters/SEQ/retry, DELETE /deadletters/SEQ).
Dead letters hold MACs and hostnames and decide what reaches the region,
so only root, the agent's user and control.group's members may use it
(the kernel checks, at connect). When no agent listens, they open the
outbox file directly (state.dir from --config). --state-dir skips the
agent and opens the outbox in DIR (the agent must be stopped: the file is
locked while it runs).

Exit status: 0 on success, 1 on failure (agent unreachable and outbox
locked, no such dead letter, …), 2 for bad arguments.`,
		Example: `  leasekeeper deadletter list
  leasekeeper deadletter list --json
  leasekeeper deadletter retry 1042
  leasekeeper deadletter drop 1042 1043
  leasekeeper deadletter list --state-dir /var/lib/leasekeeper   # agent stopped`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("missing subcommand: list, retry or drop")}
			}
			return usageError{fmt.Errorf("unknown subcommand %q: list, retry or drop", args[0])}
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&acc.socket, "socket", "", "the agent's control socket (default: control.socket from --config)")
	pf.StringVarP(&acc.config, "config", "c", config.DefaultPath, "the agent's configuration file (control.socket, state.dir)")
	pf.StringVar(&acc.stateDir, "state-dir", "", "open the outbox in this directory directly, without asking the agent")

	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the dead letters, oldest first",
		Long: `List the dead letters, oldest first: seq (what retry and drop take), when
the event was dead-lettered, the event and the region's answer.

--json prints an array of objects with the keys seq, time, reason, source
(hook, spool or file) and event (the item as the region API takes it:
action, ip_family, hostname, mac, ip, timestamp, lease_time).

Exit status: 0 when listed (also when there are none), 1 when neither the
agent nor the outbox file could be read, 2 for bad arguments.`,
		Example: `  leasekeeper deadletter list
  leasekeeper deadletter list --json | jq '.[] | select(.event.ip == "203.0.113.7")'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ds, err := acc.list(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(ds)
			}
			return writeDeadLetters(env.Stdout, ds)
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON (the stable, scriptable format)")

	change := func(name, verb, short, long string) *cobra.Command {
		return &cobra.Command{
			Use:     name + " SEQ...",
			Short:   short,
			Long:    long + "\n\nExit status: 0 when every SEQ was " + verb + ", 1 when one was not (e.g. no such\ndead letter; the others are still " + verb + "), 2 for bad arguments.",
			Example: "  leasekeeper deadletter " + name + " 1042\n  leasekeeper deadletter " + name + " 1042 1043",
			Args: func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return usageError{errors.New("missing SEQ (see leasekeeper deadletter list)")}
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				var seqs []uint64
				for _, a := range args {
					seq, err := strconv.ParseUint(a, 10, 64)
					if err != nil {
						return usageError{fmt.Errorf("%q is not a dead letter's seq (see leasekeeper deadletter list)", a)}
					}
					seqs = append(seqs, seq)
				}
				var errs []error
				for _, seq := range seqs {
					if err := acc.change(cmd.Context(), name, seq); err != nil {
						errs = append(errs, err)
						continue
					}
					fmt.Fprintf(env.Stdout, "%s %d\n", verb, seq)
				}
				return errors.Join(errs...)
			},
		}
	}
	cmd.AddCommand(list,
		change("retry", "retried", "Queue dead letters for delivery again, after anything newer for their IPs",
			`Move each dead letter SEQ (from leasekeeper deadletter list) back to the end
of the delivery queue, with a new seq. It is then sent after anything queued
for its IP since, exactly as it was refused: retry after fixing what the
region objected to (its answer is in the list), not to resend a bad event.`),
		change("drop", "dropped", "Delete dead letters for good",
			`Delete each dead letter SEQ (from leasekeeper deadletter list) for good. The
region never gets the event; the leases-file reconciler still brings the
region to what dhcpd's leases file says.`))
	return cmd
}

// list returns the dead letters from the agent or the outbox file.
func (acc *deadLetterAccess) list(ctx context.Context) ([]agent.DeadLetterReport, error) {
	var ds []agent.DeadLetterReport
	err := acc.do(ctx,
		func(c *http.Client) error {
			body, err := agentGet(ctx, c, controlBase+"/deadletters")
			if err != nil {
				return err
			}
			if err := json.Unmarshal(body, &ds); err != nil {
				return fmt.Errorf("%s: GET /deadletters: unexpected answer: %w", acc.socket, err)
			}
			return nil
		},
		func(s *outbox.Store) error {
			got, err := s.DeadLetters()
			ds = agent.DeadLetterReports(got)
			return err
		},
		func(path string) error {
			// An agent that never ran there queued nothing; a mistyped
			// directory looks the same, so say where no outbox was.
			fmt.Fprintf(acc.env.Stderr, "leasekeeper: note: no outbox at %s: no agent has queued anything with this state directory\n", path)
			ds = []agent.DeadLetterReport{}
			return nil
		})
	return ds, err
}

// change retries or drops one dead letter.
func (acc *deadLetterAccess) change(ctx context.Context, op string, seq uint64) error {
	notFound := fmt.Errorf("no dead letter %d", seq)
	return acc.do(ctx,
		func(c *http.Client) error {
			method, url := http.MethodPost, fmt.Sprintf("%s/deadletters/%d/retry", controlBase, seq)
			if op == "drop" {
				method, url = http.MethodDelete, fmt.Sprintf("%s/deadletters/%d", controlBase, seq)
			}
			_, err := agentDo(ctx, c, method, url, http.StatusNoContent)
			var he *httpError
			if errors.As(err, &he) && he.Code == http.StatusNotFound {
				return notFound
			}
			return err
		},
		func(s *outbox.Store) error {
			var err error
			if op == "drop" {
				err = s.DropDeadLetter(seq)
			} else {
				err = s.RetryDeadLetter(seq)
			}
			if errors.Is(err, outbox.ErrNotFound) {
				return notFound
			}
			return err
		},
		func(string) error { return notFound })
}

// do runs viaAgent against the running agent, or, when it does not
// answer (or --state-dir was given), viaFile on the outbox file; noFile
// runs when there is no outbox file at all (a --state-dir that does not
// exist is an error).
func (acc *deadLetterAccess) do(ctx context.Context, viaAgent func(*http.Client) error,
	viaFile func(*outbox.Store) error, noFile func(path string) error) error {
	dir := acc.stateDir
	var agentErr error
	if dir == "" {
		cfg, err := decodeAgentConfig(acc.env, acc.config)
		if err != nil {
			return err
		}
		dir = cfg.State.Dir
		if acc.socket == "" {
			acc.socket = cfg.Control.Socket
		}
		if acc.socket != "" {
			err = viaAgent(controlClient(acc.socket))
			var nr *notRunningError
			if !errors.As(err, &nr) || errors.Is(err, syscall.EACCES) {
				return err // the agent answered, refused this user, or failed in another way
			}
		} else {
			err = errors.New("control.socket is empty: no agent to ask")
		}
		agentErr = err
	}
	if acc.stateDir != "" {
		if _, err := os.Stat(acc.stateDir); err != nil {
			return fmt.Errorf("--state-dir: %w", err)
		}
	}
	path := config.State{Dir: dir}.OutboxPath()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return noFile(path)
	}
	s, err := outbox.Open(path, outbox.Options{Logger: zerolog.Nop(), Now: acc.env.Now})
	if err != nil {
		if errors.Is(err, outbox.ErrLocked) && agentErr != nil {
			return fmt.Errorf("%w; and the outbox is locked, so an agent is running: is control.socket the same in %s?", agentErr, acc.config)
		}
		if errors.Is(err, outbox.ErrLocked) {
			return fmt.Errorf("%w: stop the agent, or drop --state-dir to go through it", err)
		}
		return err
	}
	defer s.Close()
	return viaFile(s)
}

func writeDeadLetters(w io.Writer, ds []agent.DeadLetterReport) error {
	if len(ds) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tDEAD-LETTERED\tACTION\tIP\tMAC\tHOSTNAME\tREASON")
	for _, d := range ds {
		e := d.Event
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Seq, d.Time.UTC().Format(time.RFC3339),
			e.Action, e.IP, e.MAC, oneLine(e.Hostname, 32), oneLine(d.Reason, 80))
	}
	return tw.Flush()
}

// oneLine fits a free text in a table cell.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}
