package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/release"
)

// releaseFlags are the node-side flags of `leasekeeper release`.
type releaseFlags struct {
	interfaces   []string
	leaseFiles   []string
	dhclientConf string
	dryRun       bool
	timeout      time.Duration

	// Set from the command line, not flags of their own:
	confGiven  bool // --dhclient-conf given, even as the default path
	atShutdown bool // --only-at-shutdown given, and systemd is shutting down
}

func newReleaseCmd(env *Env) *cobra.Command {
	var (
		f  releaseFlags
		rf *releaseForFlags
	)
	cmd := &cobra.Command{
		Use:   "release [--interface IF]... [--lease-file PATH]... [--dry-run] [--timeout D] | release --for IP --mac MAC [--interface IF] [--server ADDR]",
		Short: "Send DHCPRELEASE for this node's leases, or (on the rack) for a client that is gone",
		Long: `Give this node's DHCPv4 leases back to the servers that granted them, so the
addresses are free at once instead of when the leases end. Run it while
the network is still up, e.g. at shutdown (install-shutdown-unit).

Leases are found whatever client holds them:
  ISC dhclient             /var/lib/dhcp/dhclient*.leases, /var/lib/dhclient/dhclient*.leases
                           (the last lease per interface is the current one)
  systemd-networkd         /run/systemd/netif/leases/IFINDEX
  NetworkManager           /var/lib/NetworkManager/internal-UUID-IFACE.lease,
                           /var/lib/NetworkManager/dhclient-UUID-IFACE.lease
  dhcpcd                   /var/lib/dhcpcd/IFACE.lease, /var/lib/dhcpcd5/dhcpcd-IFACE.lease
                           (the server's DHCPACK)
--lease-file reads the named files instead (repeatable); their format
is detected from their content. A networkd-format file named this way
belongs to the --interface given when only one is (whatever the file's
name says), else to the interface its name gives (networkd's interface
index, NetworkManager's and dhcpcd's interface name). A named file's leases on
interfaces not asked for are reported skipped with the reason.

Each release is a unicast DHCPRELEASE from the lease's address, port 68,
to the lease's server, port 67, along the kernel's route from that
address to the server: normally out of the lease's interface; when the
route leaves through another interface (a multi-homed node), through
that one, and the report says "via IF2, the route to the server".
ciaddr the address, chaddr the interface's MAC, option 54 the server identifier,
option 61 the client identifier the lease (or, for dhclient, the
dhclient.conf) names. A lease is skipped, with the reason, when it has
expired, when its address is no longer configured on its interface
(a stale file), or when its file names no server (NetworkManager's
internal client records only the address).

The whole run takes at most --timeout. DHCPRELEASE has no reply: a
release counts as released when it left the node (the next hop - the
server on the same subnet, else the router - answered ARP, asked again
when the kernel's entry for it is from before the release) and no error
came back; a next hop that does not answer ARP in time is a failure.
Where nothing can show the packet left (the route's interface has no
ARP, e.g. a tunnel), the line says "sent, not confirmed". Lease files
and dhclient.conf must be regular files (symbolic links are followed): a
FIFO or device is refused (never opened in a way that could block).

Only addresses still configured are released (the release must come
from the address), so while the node runs a release gives away an
address it still uses: dhcpd may hand it to another client at once.
Each such release is warned about on stderr, except at shutdown
(--only-at-shutdown, as the shutdown unit runs it).

--only-at-shutdown releases only while systemd shuts the machine down
(its state is "stopping", or a start job is queued for poweroff.target,
halt.target or the like); otherwise it says so and exits 0. At a reboot
(reboot.target, kexec.target, soft-reboot.target) the machine comes back
and asks for its addresses again, so nothing is released there either
unless --at-reboot is given. A container restarted from outside (lxc
restart, the host's own reboot) is stopped and started again: inside,
that is a poweroff, and its leases are released; it asks for an address
again as it starts.

One line per lease is printed. Exit status: 0 when every current lease
was released, sent but not confirmed, or skipped, or there were none; 1
when a release could not be sent, or a --lease-file could not be read or
holds no lease for the --interface given (or for any interface it can
tell); the others are still released. 2 for a bad invocation, such as an
--interface this node does not have. A --dhclient-conf named but missing
is warned about. Sending needs root (it binds UDP port 68); --dry-run
does not. --server, --leases, --config, --no-wait and --no-probe belong
to the rack side and are refused without --for and --mac.

On the rack: --for IP --mac MAC makes the local dhcpd release the lease
of a client that is gone without releasing it (a force-deleted container,
a dead node), so dhcpd runs its own "on release" and the hook tells the
region. The lease must be active in dhcpd's leases file (--leases) and
belong to MAC, else nothing is sent (exit 1). So is nothing when a host
still answers an ARP probe for IP on that interface (three RFC 5227
probes within a second): the client is not gone, or another host took
the address, and dhcpd would hand out an address in use (--no-probe
sends anyway; an address in a relayed subnet cannot be probed from the
rack and goes unprobed, as the output says; with --dry-run the probe
still runs, and is said to be skipped where it may not: without root).
The probe's second comes on top of --timeout. The DHCPRELEASE is written
as a frame on the interface dhcpd serves that subnet on (--interface,
default the one whose subnet holds IP), where dhcpd's packet socket sees
it; then the leases file is watched until dhcpd records the release
(--no-wait skips that). Needs root (CAP_NET_RAW).`,
		Example: `  # at shutdown: release every DHCPv4 lease of the node
  leasekeeper release

  # only eth0, and show the packet instead of sending it
  leasekeeper release --interface eth0 --dry-run

  # a lease file in an unusual place (format detected)
  leasekeeper release --lease-file /srv/ct1/var/lib/dhcp/dhclient.eth0.leases

  # a systemd-networkd lease copied elsewhere: say which interface it is for
  leasekeeper release --lease-file /tmp/lease --interface eth0

  # on the rack: free the lease of a container that was force-deleted
  leasekeeper release --for 203.0.113.101 --mac 02:00:00:00:00:02`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unexpected argument %q (leases are found, or named with --lease-file)", args[0])}
			}
			// Checked here, before any RunE wrapper, so that a
			// mistyped rack-side command is refused, not quietly run
			// as the node side (releasing this node's own leases).
			if !rf.requested(cmd) {
				for _, name := range rackOnlyFlags {
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s is for the rack-side release and needs --for IP --mac MAC; without them release gives back this node's own leases", name)}
					}
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rf.requested(cmd) {
				opts, err := rf.options(cmd, env)
				if err != nil {
					return err
				}
				return runReleaseFor(cmd, env, opts)
			}
			if f.timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %v: must be positive", f.timeout)}
			}
			f.confGiven = cmd.Flags().Changed("dhclient-conf")
			// withShutdownGuard runs this only when the machine is
			// shutting down, if --only-at-shutdown was given.
			f.atShutdown, _ = cmd.Flags().GetBool("only-at-shutdown")
			return runNodeRelease(cmd.Context(), env, f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.interfaces, "interface", nil, "release only the leases of this interface (repeatable)")
	fl.StringArrayVar(&f.leaseFiles, "lease-file", nil, "read this lease file instead of the clients' usual places (repeatable; format detected)")
	fl.StringVar(&f.dhclientConf, "dhclient-conf", release.DefaultDhclientConf, `dhclient.conf whose "send dhcp-client-identifier" applies to dhclient leases ("-" for none)`)
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the DHCPRELEASE packets instead of sending them")
	fl.DurationVar(&f.timeout, "timeout", release.DefaultTimeout, "bound on the whole run")
	rf = addReleaseForFlags(cmd)
	return cmd
}

// rackOnlyFlags mean something only with --for and --mac
// (addReleaseForFlags); the node side refuses them.
var rackOnlyFlags = []string{"server", "leases", "config", "no-wait", "no-probe"}

// runNodeRelease is the node side of `leasekeeper release`: the node's
// own leases. (The rack side, releasing on behalf of a gone client,
// is a different path of the same command.)
func runNodeRelease(ctx context.Context, env *Env, f releaseFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	conf := f.dhclientConf
	if !f.confGiven {
		conf = "" // lets NetworkManager's own dhclient confs apply
	}
	_, err := release.Run(ctx, release.Options{
		Interfaces:   f.interfaces,
		LeaseFiles:   f.leaseFiles,
		DhclientConf: conf,
		DryRun:       f.dryRun,
		AtShutdown:   f.atShutdown,
		Timeout:      f.timeout,
		Now:          env.Now,
		Stdout:       env.Stdout,
		Stderr:       env.Stderr,
	})
	if errors.Is(err, release.ErrNoSuchInterface) {
		return usageError{err}
	}
	return err
}
