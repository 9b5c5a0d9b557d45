package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/release/rack"
)

// releaseForFlags are the rack-side flags of `leasekeeper release`:
// --for IP --mac MAC [--server ADDR] [--leases PATH] [--no-wait], plus
// --interface, --dry-run and --timeout, which the node side defines too
// and which are read from the command whoever registered them.
type releaseForFlags struct {
	forIP   string
	mac     string
	server  string
	leases  string
	config  string
	noWait  bool
	noProbe bool
	// Used only when the command does not define them itself.
	iface   string
	dryRun  bool
	timeout time.Duration
}

// addReleaseForFlags registers the rack-side flags on cmd. Call it after
// the node side's flags: --interface, --dry-run and --timeout are added
// only if cmd does not have them already.
func addReleaseForFlags(cmd *cobra.Command) *releaseForFlags {
	f := &releaseForFlags{}
	fl := cmd.Flags()
	fl.StringVar(&f.forIP, "for", "", "on the rack: make the local dhcpd release this IPv4 address for a client that is gone (with --mac)")
	fl.StringVar(&f.mac, "mac", "", "with --for: the client's MAC; refused unless it holds the lease")
	fl.StringVar(&f.server, "server", "", "with --for: dhcpd's address on the interface (default: the interface's address in the lease's subnet)")
	fl.StringVar(&f.leases, "leases", "", "with --for: dhcpd's leases file (default: [dhcpd] leases in --config, "+rack.DefaultLeasesPath+" without one)")
	fl.StringVar(&f.config, "config", config.DefaultPath, "with --for: the agent's configuration, read for [dhcpd] leases when --leases is not given")
	fl.BoolVar(&f.noWait, "no-wait", false, "with --for: return once sent, without waiting for dhcpd to record the release")
	fl.BoolVar(&f.noProbe, "no-probe", false, "with --for: send without the ARP probe that refuses an address a host still answers for")
	if fl.Lookup("interface") == nil {
		fl.StringVar(&f.iface, "interface", "", "with --for: the interface dhcpd serves the lease's clients on (default: the one whose subnet holds the address)")
	}
	if fl.Lookup("dry-run") == nil {
		fl.BoolVar(&f.dryRun, "dry-run", false, "check the lease, choose the interface and probe the address, send no release")
	}
	if fl.Lookup("timeout") == nil {
		fl.DurationVar(&f.timeout, "timeout", rack.DefaultTimeout, "bound on the whole run")
	}
	return f
}

// requested reports whether the command line asks for a rack-side
// release (--for or --mac given).
func (f *releaseForFlags) requested(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("for") || cmd.Flags().Changed("mac")
}

// options turns the flags into rack.Options; bad values are usage
// errors.
func (f *releaseForFlags) options(cmd *cobra.Command, env *Env) (rack.Options, error) {
	var opts rack.Options
	fl := cmd.Flags()
	if f.forIP == "" || f.mac == "" {
		return opts, usageError{errors.New("--for IP and --mac MAC go together")}
	}
	opts, err := rack.Request{IP: f.forIP, MAC: f.mac, Server: f.server}.Options()
	var bad *rack.RequestError
	if errors.As(err, &bad) {
		switch bad.Field {
		case "ip":
			return opts, usageError{fmt.Errorf("--for %q: want an IPv4 address", bad.Value)}
		case "mac":
			return opts, usageError{fmt.Errorf("--mac: %q is not a 6-octet Ethernet address", bad.Value)}
		default:
			return opts, usageError{fmt.Errorf("--server %q: want an IPv4 address", bad.Value)}
		}
	}
	opts.LeasesPath, opts.NoVerify, opts.NoProbe = f.leases, f.noWait, f.noProbe
	if fl.Changed("lease-file") {
		return opts, usageError{errors.New("--lease-file names a client's lease file; with --for, dhcpd's leases file is --leases")}
	}
	ifaces, err := flagStrings(fl, "interface")
	if err != nil {
		return opts, err
	}
	switch len(ifaces) {
	case 0:
	case 1:
		opts.Interface = ifaces[0]
	default:
		return opts, usageError{fmt.Errorf("--for takes at most one --interface (the one dhcpd serves), got %d", len(ifaces))}
	}
	if v := fl.Lookup("dry-run"); v != nil {
		if opts.DryRun, err = strconv.ParseBool(v.Value.String()); err != nil {
			return opts, usageError{fmt.Errorf("--dry-run: %w", err)}
		}
	}
	if v := fl.Lookup("timeout"); v != nil {
		if opts.Timeout, err = time.ParseDuration(v.Value.String()); err != nil || opts.Timeout <= 0 {
			return opts, usageError{fmt.Errorf("--timeout %q: want a positive duration", v.Value.String())}
		}
	}
	if !fl.Changed("leases") {
		// The file the agent follows: the rack's, wherever its dhcpd
		// keeps it (a MAAS deb's /var/lib/maas/dhcp/dhcpd.leases), not
		// Debian's default.
		cfg, err := decodeAgentConfigAs(env, f.config, true)
		if err != nil {
			return opts, fmt.Errorf("%w (read for [dhcpd] leases; or name dhcpd's leases file with --leases)", err)
		}
		opts.LeasesPath = cmp.Or(cfg.DHCPD.Leases, rack.DefaultLeasesPath)
	}
	return opts, nil
}

// flagStrings reads a string or repeatable string flag, whichever kind
// the command defined; nil when it has no such flag or it was not given.
func flagStrings(fl *pflag.FlagSet, name string) ([]string, error) {
	v := fl.Lookup(name)
	if v == nil || !v.Changed {
		return nil, nil
	}
	if s, ok := v.Value.(pflag.SliceValue); ok {
		return s.GetSlice(), nil
	}
	return []string{v.Value.String()}, nil
}

// runReleaseFor makes the local dhcpd release opts.IP for a client that
// is gone and tells the operator what happened, one line per step.
func runReleaseFor(cmd *cobra.Command, env *Env, opts rack.Options) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	if opts.Now == nil {
		opts.Now = env.Now
	}
	res, err := rack.Release(ctx, opts)
	printReleaseFor(env, opts, res, err)
	return err
}

// printReleaseFor writes what Release did: the lease it checked, what it
// sent where, and what dhcpd recorded. Errors are left to the caller.
func printReleaseFor(env *Env, opts rack.Options, res rack.Result, err error) {
	out := env.Stdout
	if res.Interface == "" {
		return // refused or failed before choosing where to send: the error says it all
	}
	host := ""
	if res.Hostname != "" {
		host = fmt.Sprintf(" (%s)", res.Hostname)
	}
	until := "never ends"
	if res.Ends.IsSet() && !res.Ends.IsNever() {
		until = "active until " + res.Ends.Time().UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(out, "%s: lease of %s%s, %s\n", res.IP, res.MAC, host, until)
	if res.Probe != "" {
		fmt.Fprintf(out, "probe: %s\n", res.Probe)
	}
	switch {
	case opts.DryRun:
		fmt.Fprintf(out, "dry run: would send a DHCPRELEASE on %s to dhcpd at %s\n", res.Interface, res.Server)
		return
	case !res.Sent:
		return
	}
	fmt.Fprintf(out, "sent a DHCPRELEASE on %s to dhcpd at %s\n", res.Interface, res.Server)
	switch {
	case res.Verified && res.State == parser.StateActive:
		fmt.Fprintf(out, "released: %s is already leased to another client (after %s)\n", res.IP, res.Took.Round(time.Millisecond))
	case res.Verified && res.State == parser.StateReleased:
		fmt.Fprintf(out, "released: dhcpd wrote %s released in %s and ran its on release statements; with a failover peer it goes free once the peer acknowledges\n", res.IP, res.Took.Round(time.Millisecond))
	case res.Verified && res.State == parser.StateExpired:
		fmt.Fprintf(out, "dhcpd wrote %s expired in %s: the lease ended before the release reached dhcpd (its on expiry statements ran, not on release)\n", res.IP, res.Took.Round(time.Millisecond))
	case res.Verified:
		fmt.Fprintf(out, "released: dhcpd wrote %s %s in %s; its on release statements have run\n", res.IP, res.State, res.Took.Round(time.Millisecond))
	case opts.NoVerify && err == nil:
		fmt.Fprintf(out, "not waiting for dhcpd to record it (--no-wait)\n")
	}
}
