// Package lab runs the real thing for tests: Debian's ISC dhcpd and
// dhclient in network namespaces the test creates and always removes.
//
// A lab is one server namespace holding a bridge (br0, 203.0.113.1/24 by
// default) and any number of client namespaces, each joined to the bridge
// by a veth pair whose client end is eth0 with a fixed MAC:
//
//	lab.Require(t, "dhcpd", "dhclient")     // skip unless root, netns and the binaries
//	l := lab.New(t)                          // lk-XXXXXXXX with br0
//	d := l.StartDhcpd(t, lab.DhcpdConfig{Conf: l.SubnetConf("range 203.0.113.100 203.0.113.150;")})
//	c := l.AddClient("c1")                   // lk-XXXXXXXX-c1, eth0 02:00:00:00:00:01
//	ip, err := c.Dhclient(ctx)               // DISCOVER…ACK, then ip addr add
//	err = c.Release(ctx)                     // dhclient -r: dhcpd runs its on release
//	d.Restart(newConf)                       // stop, rewrite dhcpd.conf, start, wait ready
//
// API summary:
//
//	Require(t, bins...)                  skip unless root, `ip netns` works and bins exist
//	LookBin(name)                        a binary in PATH, /usr/sbin, /sbin, /usr/local/sbin
//	New(t, opts...) *Lab                 WithAddr(prefix) picks the bridge address, WithIPv6(prefix) adds one in 2001:db8::/32
//	(*Lab).Command(ns, argv...)          an *exec.Cmd running argv inside ns (CommandContext too)
//	(*Lab).Exec(ctx, ns, argv...)        run it, combined output, error carries the output
//	(*Lab).SubnetConf(body)              "subnet … netmask … { body }" for the bridge subnet
//	(*Lab).Subnet6Conf(body)             "subnet6 PREFIX { body }" for the bridge's IPv6 subnet (WithIPv6)
//	(*Lab).AddClient(name, opts...)      WithMAC, WithHostname, WithDhclientConf
//	(*Client).Dhclient(ctx, args...)     obtain a lease, configure it on eth0, keep dhclient running
//	(*Client).Release(ctx)               dhclient -r (DHCPRELEASE), drop the address
//	(*Client).Dhclient6 / Release6       dhclient -6 and dhclient -6 -r (WithIPv6; "-D", "LL" for a DUID-LL), LeaseFile6
//	(*Client).Kill()                     the client vanishes without a release (SIGKILL)
//	(*Client).Addr / LeaseFile / Logs
//	(*Client).Destroy()                  the client's namespace is deleted (a force-deleted container)
//	(*Client).AddLink / (*Lab).IP / (*Lab).Sysctl   more links and settings for multi-homed tests (multihome.go)
//	(*Lab).StartDhcpd(t, DhcpdConfig)    dhcpd -4 -f -d in the server namespace, ready
//	                                     (NS: another of the lab's namespaces, e.g. AddServer's)
//	(*Lab).AddServer(name, addr)         a second server namespace on the bridge, for a failover pair (pair.go)
//	                                     (Prelude: run under sh -ec first, as maas-dhcpd.service)
//	(*Dhcpd).Stop / Restart / Running / Pid / LeasesPath / ConfPath / Logs
//	Allowed(addr)                        whether an address is in a lab range
//	CheckLeaseFile(t, DhcpdConfig)       dhcpd -T (lease-file test mode), no namespace
//	BuildHook(t) / HookSnippet(t, …)     leasekeeper-hook built for the test, the shipped snippet running it
//	HookSnippet6(t, …)                   the same for dhcpd -6 (leasekeeper6.conf: the DUID as --mac)
//	MAASHelper(t, dir) / MAASSnippet     a stand-in for MAAS's maas-dhcp-helper (Python, sends to --socket),
//	                                     MAAS's "Notify MAAS" blocks running it (maas.go)
//	StartUserManager(t)                  a real systemd manager (user mode, private mount namespace)
//	(*Lab).StartUserManager(t, ns)       the same inside a lab namespace's network
//
// # Rules the package enforces
//
// Addresses: only 203.0.113.0/24, 198.51.100.0/24 (labs) and
// 198.18.0.0/15 (load) are accepted, for the bridge and for any address
// a client is given. IPv6 is disabled in every lab namespace, so not
// even link-local traffic leaves an interface, except on the bridge of a
// lab made WithIPv6: there it is enabled for that one interface (no
// router advertisements, no duplicate address detection) with an address
// inside 2001:db8::/32, and StartDhcpd runs dhcpd -6 for Family 6 (the
// bridge's ports are veths into client namespaces, where IPv6 stays
// off until a client runs Dhclient6: then it is on for that client's
// eth0 alone, link-local only, same settings, and the bridge stops
// snooping multicast so DHCPv6 and neighbour discovery need no MLD
// querier). CheckLeaseFile accepts Family 6 anywhere: -T never touches
// the network.
//
// Processes: the lab kills only processes it started, by pid (ip netns
// exec execs in place, so the pid the lab holds is dhcpd's or
// dhclient's own). They are started with Pdeathsig SIGKILL, so a test
// binary that dies without running its cleanups does not leave them
// behind. Cleanups run even when the test fails: processes first, then
// client namespaces, then the server namespace (deleting a namespace
// removes its veth ends and the bridge).
//
// Namespaces: each lab is named "lk-" plus 8 random hex digits, retried
// on a clash, so parallel tests and leftovers of a crashed run (a killed
// test binary cannot clean up) never collide. The lab never deletes a
// namespace it did not create; remove leftovers by hand:
// ip netns list | grep '^lk-'.
//
// # dhcpd and dhclient quirks this package handles
//
//   - dhcpd is run with -f -d rather than -q: -q silences stderr, and
//     Logs() is what explains a failure. Readiness is "Server starting
//     service." in the log of this run and a rewritten leases file (new
//     inode, server-duid line); a dhcpd that exits first fails the start
//     with its log.
//   - dhcpd leaves its pid file behind on SIGTERM and refuses to start
//     if the pid in it is alive, so Restart removes it first.
//   - dhcpd -T exits 0 even for a corrupt leases file ("Corrupt lease
//     file - possible data loss!"): CheckLeaseFile reports the lines
//     dhcpd complained about, and callers must check them as well as
//     the exit status.
//   - dhclient daemonises after its first lease; the lab runs it with -d
//     so it stays the test's child, and waits for "bound to" in its log.
//     It is given its own dhclient.conf (fixed host-name, 1 s initial
//     interval) instead of /etc/dhcp/dhclient.conf, and -sf true so it
//     configures nothing; Dhclient then adds the address itself, so a
//     later dhclient -r can unicast the DHCPRELEASE to the server.
//   - AppArmor: Debian ships enforce profiles for /usr/sbin/dhcpd and
//     /{,usr/}sbin/dhclient that only allow their files under /etc/dhcp,
//     /var/lib/dhcp and /run, so a dhcpd.conf in t.TempDir() is denied.
//     Profiles attach by executable path, so when AppArmor is enabled
//     the lab runs a copy of the binary from its temporary directory,
//     which no profile matches. (aa-exec -p unconfined would need the
//     apparmor-utils package.) On kernels without AppArmor the system
//     binaries run directly.
package lab
