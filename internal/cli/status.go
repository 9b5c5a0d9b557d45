package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/deliver"
)

// agentTimeout bounds each request to the running agent.
const agentTimeout = 5 * time.Second

func newStatusCmd(env *Env) *cobra.Command {
	var (
		url, configPath string
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "status [--url URL] [--config FILE] [--json]",
		Short: "Show the running agent's queue depth, last delivery, dead letters and lag",
		Long: `Ask the running agent (GET /status, on its control socket or its HTTP
listener: see below) how delivery to the region is going:

  region         ok, or the problem and what to change: an outage (no
                 answer; waiting), a configuration error (wrong port or
                 path, no client certificate, a certificate the region
                 does not trust; retried, never dead-lettered), a region
                 failing every event (HTTP 500), or waiting for the
                 credential files (a MAAS rack not registered yet: WAITING,
                 nothing sent, nothing lost)
  maas rack      the MAAS rack installed here whose region, certificates or
                 dhcpd files the agent took, for what its configuration
                 leaves unset (leasekeeper agent --help)
  restart needed keys a reload or a followed file changed that take effect
                 at a restart only
  queue depth    events accepted and not yet delivered
  last delivery  when the region last accepted a batch, and how long ago
  dead letters   events the region refused (see leasekeeper deadletter)
  lag            how long the oldest queued event has waited
  leases file    the dhcpd.leases followed, and whether it is missing
  mode           replacement, complement or hookless, and why (leasekeeper
                 check-maas explains it); events kept back because the
                 region cannot take them (no six-octet MAC)
  leases file6   the same for dhcpd.leases6 and its reconciler, when set
  mode6

The agent is asked at --url, else on its control socket (control.socket
in --config) when this user may use it, else at metrics.listen in
--config (127.0.0.1:9742 when the default file does not exist; an
address listening on every interface is reached on loopback).

--json prints the agent's answer as it is: an object with the keys
version, ready, started, time, queue_depth, last_delivery (RFC 3339 or
null), deadletters, lag_seconds (null when unknown), tasks
([{name, state}]), uptime_seconds, mode ({mode, detected, forced,
unsure, kept, why, kept_back}, null before the reconciler ran),
leases_file ({path, missing_since, unreadable_since, read_error}:
missing_since null while the file exists, unreadable_since null and
read_error absent while it reads), leases_file6 and mode6 (the same for
dhcpd.leases6; absent when it is not set, mode6 also before its
reconciler ran), region
({state, error, hint, since, failed_attempts, controller: the region
controller in use where region.other_urls names others, waiting: {since,
events} while a request has waited for its answer a few seconds}; state is
unknown, ok, outage, config, failing or waiting: for credential files not
there yet, a MAAS rack not registered), held ({events, since}: events waiting in
memory for a full disk), unhealthy (why /healthz answers 503, or ""),
orphans ([{ip, state, reason, ends, attempts, next}]: addresses a reload
dropped that the region still holds; leasekeeper orphans shows them) and
pair (dhcpd's failover pair, others: the other failover peers its pools
use; null outside one), maas_rack ({kind, rackd_conf, keys, summary}:
absent where no MAAS rack gave values) and restart_pending (the keys a
reload changed that take effect at a restart only; absent when none).

Exit status: 0 when the agent answered and nothing needs attention; 3
when it answered and something does, named on stderr (also with --json):
the region in an outage, refusing the configuration, failing every
event or waiting for its credential files, dead letters, events held for want of disk, a leases file
(dhcpd.leases, dhcpd.leases6) missing or unreadable, /healthz unhealthy, a
restart needed (restart_pending), or the agent still starting;
1 when it could not be reached or answered with an error; 2 for bad
flags. A monitoring check can run "leasekeeper status >/dev/null".`,
		Example: `  leasekeeper status
  leasekeeper status --json | jq .queue_depth
  leasekeeper status --url 127.0.0.1:9742`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, base, noRegion, err := statusEndpoint(env, url, configPath)
			if err != nil {
				return err
			}
			body, err := agentGet(cmd.Context(), c, base+"/status")
			var nr *notRunningError
			if errors.As(err, &nr) && noRegion {
				return fmt.Errorf("%w; and %s sets no region (region.url), nor does a MAAS rack here give one: the agent does not run until one is (leasekeeper agent --help, exit status 79)", err, configPath)
			}
			if err != nil {
				return err
			}
			var rep agent.StatusReport
			if err := json.Unmarshal(body, &rep); err != nil {
				if asJSON {
					_, err := env.Stdout.Write(body)
					return err
				}
				return fmt.Errorf("%s/status: unexpected answer: %w", base, err)
			}
			if asJSON {
				_, err = env.Stdout.Write(body)
			} else {
				err = writeStatus(env.Stdout, &rep)
			}
			if err != nil {
				return err
			}
			if why := attention(&rep); len(why) > 0 {
				return attentionError{why}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "url", "", "the agent's HTTP listener, e.g. http://127.0.0.1:9742 (default: control.socket from --config when this user may use it, else metrics.listen)")
	f.StringVarP(&configPath, "config", "c", config.DefaultPath, "the agent's configuration file, read for control.socket and metrics.listen")
	f.BoolVar(&asJSON, "json", false, "print the agent's JSON answer (the stable, scriptable format)")
	return cmd
}

// controlBase is the URL of the control socket's HTTP service; the host
// is a placeholder, the connection goes to the socket.
const controlBase = "http://leasekeeper-control"

// controlClient talks HTTP to the agent over its control socket.
func controlClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", path)
			if errors.Is(err, syscall.EACCES) {
				return nil, fmt.Errorf("%w: only root, the agent's user and control.group's members may use the control socket", err)
			}
			return c, err
		},
		DisableKeepAlives: true,
	}}
}

// statusEndpoint is where status asks: --url if given; else the control
// socket when this user may use it; else the TCP listener, which serves
// /status to anyone. noRegion is a configuration read that names no
// region and has no MAAS rack to take one from: an agent that does not
// run.
func statusEndpoint(env *Env, flagURL, configPath string) (c *http.Client, base string, noRegion bool, err error) {
	if flagURL != "" {
		base, err := agentURL(env, flagURL, configPath)
		return http.DefaultClient, base, false, err
	}
	// Read once: its warnings are told once.
	cfg, err := decodeAgentConfig(env, configPath)
	if err != nil {
		return nil, "", false, err
	}
	noRegion = !cfg.HasRegion()
	if p := cfg.Control.Socket; p != "" && syscall.Access(p, 2 /* W_OK: connect needs it */) == nil {
		return controlClient(p), controlBase, noRegion, nil
	}
	base, err = listenURL(cfg, configPath)
	return http.DefaultClient, base, noRegion, err
}

// agentGet fetches one URL from the running agent.
func agentGet(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	return agentDo(ctx, c, http.MethodGet, url, http.StatusOK)
}

// agentDo makes one request to the agent and returns the body of an
// answer with status want. A transport failure is a *notRunningError.
func agentDo(ctx context.Context, c *http.Client, method, url string, want int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(agent.ClientHeader, "leasekeeper-cli")
	resp, err := c.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &notRunningError{URL: url, Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode != want {
		return nil, &httpError{Method: method, URL: url, Code: resp.StatusCode, Body: string(bytes.TrimSpace(body))}
	}
	return body, nil
}

// httpError is an answer of the agent other than the one expected.
type httpError struct {
	Method, URL string
	Code        int
	Body        string
}

func (e *httpError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("%s %s: %s", e.Method, e.URL, http.StatusText(e.Code))
	}
	return fmt.Sprintf("%s %s: %s", e.Method, e.URL, e.Body)
}

// notRunningError is a request to the agent that got no answer: it is
// not running, or not listening where we looked.
type notRunningError struct {
	URL string
	Err error
}

func (e *notRunningError) Error() string {
	host := e.URL
	if u, err := neturl.Parse(e.URL); err == nil {
		host = u.Host
	}
	if strings.HasPrefix(e.URL, controlBase+"/") || e.URL == controlBase {
		// The error names the socket (dial unix PATH).
		return fmt.Sprintf("cannot reach the agent on its control socket: is it running, with this control.socket? %v", e.Err)
	}
	return fmt.Sprintf("cannot reach the agent at %s: is it running, and listening there (metrics.listen in the config, or --url)? %v", host, e.Err)
}

func (e *notRunningError) Unwrap() error { return e.Err }

// attention lists what in the agent's answer needs the operator, as
// status's exit status 3 tells a script (before, it exited 0 whatever the
// answer said: a cold review). Orphans, a pair's states and kept-back
// events are the rack's ordinary life, not in it.
func attention(r *agent.StatusReport) []string {
	var why []string
	if !r.Ready {
		why = append(why, "the agent is starting")
	}
	if rg := r.Region; rg != nil && rg.Trouble() {
		why = append(why, "region "+rg.Words().Summary)
	}
	if r.DeadLetters != nil && *r.DeadLetters > 0 {
		why = append(why, fmt.Sprintf("%d dead letters", *r.DeadLetters))
	}
	if h := r.Held; h != nil && h.Events > 0 {
		why = append(why, fmt.Sprintf("%d events held (the outbox cannot store them)", h.Events))
	}
	for i, l := range []*agent.LeasesFileReport{r.LeasesFile, r.LeasesFile6} {
		what := [...]string{"the leases file", "the DHCPv6 leases file"}[i]
		switch {
		case l == nil:
		case l.MissingSince != nil:
			why = append(why, what+" does not exist")
		case l.UnreadableSince != nil:
			why = append(why, what+" cannot be read")
		}
	}
	if r.Unhealthy != "" && r.Ready {
		why = append(why, "unhealthy: "+r.Unhealthy)
	}
	if len(r.RestartPending) > 0 {
		why = append(why, "a restart is needed for "+strings.Join(r.RestartPending, ", "))
	}
	return why
}

// attentionError is status's answer that needs attention: exit status
// ExitAttention, the reasons on stderr.
type attentionError struct{ why []string }

func (e attentionError) Error() string {
	return "status: needs attention: " + strings.Join(e.why, "; ")
}

// ExitAttention is status's exit status when the agent answered and
// something needs the operator (attention).
const ExitAttention = 3

func writeStatus(w io.Writer, r *agent.StatusReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	state := "starting"
	if r.Ready {
		state = "ready"
	}
	fmt.Fprintf(tw, "agent\t%s (version %s, up %s)\n", state, r.Version, roundAge(time.Duration(r.UptimeSeconds*float64(time.Second))))
	writeRegion(tw, r)
	if m := r.MAASRack; m != nil {
		fmt.Fprintf(tw, "maas rack\t%s\n", m.Summary)
	}
	if len(r.RestartPending) > 0 {
		fmt.Fprintf(tw, "restart needed\t%s changed since the start and take effect at a restart (systemctl restart leasekeeper)\n", strings.Join(r.RestartPending, ", "))
	}
	if r.QueueDepth != nil {
		fmt.Fprintf(tw, "queue depth\t%d\n", *r.QueueDepth)
	} else {
		fmt.Fprintf(tw, "queue depth\tunknown\n")
	}
	switch {
	case r.LastDelivery != nil:
		fmt.Fprintf(tw, "last delivery\t%s (%s ago)\n", r.LastDelivery.UTC().Format(time.RFC3339), roundAge(r.Time.Sub(*r.LastDelivery)))
	case r.QueueDepth != nil:
		fmt.Fprintf(tw, "last delivery\tnever\n")
	default:
		fmt.Fprintf(tw, "last delivery\tunknown\n")
	}
	switch {
	case r.DeadLetters == nil:
		fmt.Fprintf(tw, "dead letters\tunknown\n")
	case *r.DeadLetters > 0:
		fmt.Fprintf(tw, "dead letters\t%d (leasekeeper deadletter list)\n", *r.DeadLetters)
	default:
		fmt.Fprintf(tw, "dead letters\t0\n")
	}
	if r.LagSeconds != nil {
		fmt.Fprintf(tw, "lag\t%s\n", roundAge(time.Duration(*r.LagSeconds*float64(time.Second))))
	} else {
		fmt.Fprintf(tw, "lag\tunknown\n")
	}
	if h := r.Held; h != nil && h.Events > 0 {
		since := ""
		if h.Since != nil {
			since = fmt.Sprintf(" for %s", roundAge(r.Time.Sub(*h.Since)))
		}
		fmt.Fprintf(tw, "held\t%d events%s: the outbox cannot store them (disk full? see the log); hooks spool meanwhile\n", h.Events, since)
	}
	if r.Unhealthy != "" && r.Ready {
		fmt.Fprintf(tw, "health\tunhealthy: %s\n", r.Unhealthy)
	}
	writeFollowed(tw, r.Time, "", "dhcpd.leases", "dhcpd.conf", r.LeasesFile, r.Mode)
	writeFollowed(tw, r.Time, "6", "dhcpd.leases6", "dhcpd6.conf", r.LeasesFile6, r.Mode6)
	writePair(tw, r)
	if len(r.Tasks) > 0 {
		parts := make([]string, len(r.Tasks))
		for i, t := range r.Tasks {
			parts[i] = t.Name + " " + t.State
		}
		fmt.Fprintf(tw, "parts\t%s\n", strings.Join(parts, ", "))
	}
	return tw.Flush()
}

// writeFollowed shows a leases file the agent follows and the mode its
// reconciler is in; suffix ("" or "6") tells dhcpd.leases6's apart.
func writeFollowed(w io.Writer, now time.Time, suffix, leasesKey, confKey string, l *agent.LeasesFileReport, m *agent.ModeReport) {
	if l != nil {
		switch {
		case l.MissingSince != nil:
			fmt.Fprintf(w, "leases file%s\t%s does not exist (for %s): dhcpd has not written it, or %s in the configuration names a file dhcpd does not write\n",
				suffix, l.Path, roundAge(now.Sub(*l.MissingSince)), leasesKey)
		case l.UnreadableSince != nil:
			fmt.Fprintf(w, "leases file%s\t%s cannot be read (for %s): %s; synthesised events are held until it reads (the agent's user must be able to read it)\n",
				suffix, l.Path, roundAge(now.Sub(*l.UnreadableSince)), l.ReadError)
		default:
			fmt.Fprintf(w, "leases file%s\t%s\n", suffix, l.Path)
		}
	}
	if m != nil {
		line := m.Mode
		switch {
		case m.Forced:
			line += fmt.Sprintf(" (forced by reconcile.mode; detected %s)", m.Detected)
		case m.Kept:
			line += fmt.Sprintf(" (unsure now: %s unreadable; kept, the mode last detected for sure)", confKey)
		case m.Unsure:
			line += " (unsure: the safe side)"
		}
		fmt.Fprintf(w, "mode%s\t%s\n", suffix, line)
		fmt.Fprintf(w, "\t%s\n", m.Why)
		if m.KeptBack > 0 {
			fmt.Fprintf(w, "kept back%s\t%d events with no MAC the region can take (DHCPv6 DUIDs without one; see the log)\n", suffix, m.KeptBack)
		}
	}
}

// writePair shows dhcpd's failover pair and the channel to the other
// agent, when there is a pair.
func writePair(w io.Writer, r *agent.StatusReport) {
	p := r.Pair
	if p == nil {
		return
	}
	state := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	if p.Peer == "" {
		fmt.Fprintf(w, "failover\tnone in dhcpd.conf\n")
	} else {
		fmt.Fprintf(w, "failover\t%s of %q: %s, partner %s\n", p.Role, p.Peer, state(p.MyState), state(p.PartnerState))
	}
	fmt.Fprintf(w, "\tspeaks %s\n", p.Speaks)
	for _, o := range p.Others {
		fmt.Fprintf(w, "\t%s of %q: %s, partner %s\n", o.Role, o.Peer, state(o.MyState), state(o.PartnerState))
		fmt.Fprintf(w, "\tspeaks %s\n", o.Speaks)
	}
	c := p.Channel
	if c == nil {
		fmt.Fprintf(w, "pair channel\tnone ([pair] unset): each agent delivers alone, and news of one address can reach the region out of order\n")
		return
	}
	// With pair.partners a channel per partner rack: each once, with
	// the failover peers it orders.
	if len(p.Others) > 0 && p.Others[0].Channel != nil {
		var order []string
		peers := map[string][]string{}
		chans := map[string]*agent.PairChannelReport{}
		for _, q := range append([]agent.PairReport{*p}, p.Others...) {
			if q.Channel == nil {
				continue
			}
			if _, seen := chans[q.Channel.Peer]; !seen {
				order = append(order, q.Channel.Peer)
				chans[q.Channel.Peer] = q.Channel
			}
			peers[q.Channel.Peer] = append(peers[q.Channel.Peer], q.Peer)
		}
		for _, a := range order {
			writeChannel(w, r, chans[a], fmt.Sprintf(" (for %s)", strings.Join(peers[a], ", ")))
		}
		return
	}
	writeChannel(w, r, c, "")
}

// writeChannel shows one pair channel; for names the failover peers it
// orders, where there are several channels.
func writeChannel(w io.Writer, r *agent.StatusReport, c *agent.PairChannelReport, forPeers string) {
	heard := "never heard since start"
	if c.Heard != nil {
		heard = fmt.Sprintf("last heard %s ago", roundAge(r.Time.Sub(*c.Heard)))
	}
	fmt.Fprintf(w, "pair channel\tpeer agent %s%s, %s\n", c.Peer, forPeers, heard)
	if c.Alone {
		fmt.Fprintf(w, "\tALONE: the peer agent was silent for hold_max; delivering without waiting for it (asking every few seconds whether it is back)\n")
	}
	if c.Waiting != nil {
		fmt.Fprintf(w, "\twaiting for %s: every due event is held back for the peer's older news (at most hold_max each)\n", roundAge(r.Time.Sub(*c.Waiting)))
	}
}

// writeRegion shows how delivery to the region goes, and while there is a
// problem what it is and what to change.
func writeRegion(w io.Writer, r *agent.StatusReport) {
	g := r.Region
	if g == nil {
		return
	}
	wd := g.Words()
	what := wd.Label
	switch {
	case g.Since != nil && g.State == deliver.StateWaiting:
		what += fmt.Sprintf(" for %s", roundAge(r.Time.Sub(*g.Since)))
	case g.Since != nil:
		what += fmt.Sprintf(" for %s (%d attempts)", roundAge(r.Time.Sub(*g.Since)), g.FailedAttempts)
	}
	if wd.Detail != "" {
		what += ": " + wd.Detail
	}
	fmt.Fprintf(w, "region\t%s\n", what)
	if g.Controller != "" {
		fmt.Fprintf(w, "\tcontroller in use: %s\n", g.Controller)
	}
	if g.Hint != "" {
		fmt.Fprintf(w, "\t%s\n", g.Hint)
	}
	switch {
	case g.Error != "" && g.State == deliver.StateWaiting:
		fmt.Fprintf(w, "\t%s\n", g.Error)
	case g.Error != "" && g.State != deliver.StateOK:
		fmt.Fprintf(w, "\tlast error: %s\n", g.Error)
	}
	if q := g.Waiting; q != nil {
		fmt.Fprintf(w, "\tno answer yet to a request of %d events sent %s ago: the region is slow or stuck applying it; waiting, not sending it again before the answer timeout (5m)\n",
			q.Events, roundAge(r.Time.Sub(q.Since)))
	}
}

// roundAge shows a duration at a precision fit for a human.
func roundAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
