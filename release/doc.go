// Package release gives a node's DHCPv4 leases back: it finds the
// current leases whatever client holds them, and unicasts a DHCPRELEASE
// for each from the leased address (RFC 2131 4.4.6). It is the node side
// of `leasekeeper release`; the clean-shutdown unit runs it while the
// network is still up.
//
// Pure parts, table- and fuzz-tested: the parsers (io.Reader in, leases
// out), Detect, Current, Plan (which leases to release, given the files,
// the interfaces and the clock) and Packet. I/O is confined to Run
// (globbing, reading files, listing interfaces) and send.
//
// # Lease files
//
//   - ISC dhclient (ParseDhclient; /var/lib/dhcp/dhclient*.leases, and
//     NetworkManager's dhclient backend): a sequence of
//     `lease { interface "IF"; fixed-address A; option
//     dhcp-server-identifier S; [option dhcp-client-identifier X;]
//     expire W YYYY/MM/DD HH:MM:SS; … }` blocks, appended at every bind
//     and renewal; the last block per interface is the current lease.
//     Times are UTC, or `epoch N`, or `never`. lease6 blocks are skipped.
//     dhclient does not record the client identifier it sent (dhcpd does
//     not echo option 61 unless told to), so it is taken from the
//     `send dhcp-client-identifier` of dhclient.conf (ParseDhclientConf),
//     global or in an `interface "IF" { … }` block.
//   - systemd-networkd (ParseNetworkd; /run/systemd/netif/leases/IFINDEX):
//     KEY=VALUE lines, of which ADDRESS, SERVER_ADDRESS, CLIENTID (hex)
//     and LIFETIME (seconds) are read (keys as systemd 252 writes them).
//     The file's name is the interface index (a file named in
//     Options.LeaseFiles with a single Options.Interfaces entry is that
//     interface's instead: a copied file's index may be another
//     namespace's); the file records no expiry, and its modification
//     time is no start (networkd leaves the file as it is at a renewal
//     that changes none of its content), so the end is unknown: the
//     address still on the interface tells the lease runs (networkd
//     removes it at the end).
//   - NetworkManager's internal client
//     (/var/lib/NetworkManager/internal-UUID-IFACE.lease): the networkd
//     format; the nettools client (NetworkManager 1.36+) writes ADDRESS
//     only, so its leases are reported and skipped for want of a server.
//   - dhcpcd (ParseDhcpcd; /var/lib/dhcpcd/IFACE.lease, dhcpcd-IFACE.lease
//     for dhcpcd 6, either with -SSID after IFACE on wireless): the
//     server's DHCPACK, byte for byte, rewritten at every renewal. Its
//     end is unknown, as networkd's: the file's time plus the lease time
//     would end a running lease after the clock was set forward, and the
//     address still on the interface tells it runs (ParseDhcpcd). Of
//     one interface's files (one a wireless network) the newest wins.
//     The client identifier dhcpcd sent is recorded only if the server
//     echoed it (ISC dhcpd releases by ciaddr and chaddr without it).
//   - A JSON file (networkd's DHCP server keeps its leases so; no DHCP
//     client here writes one) is recognised and reported as not
//     supported.
//
// # What is released
//
// A lease is released when its interface exists with an Ethernet MAC,
// it has not ended, its address is still configured on the interface
// and its file names the server. An address the interface no longer has
// is skipped: the release must come from that address, and the lease
// may be stale (the MAC may hold another lease by now). So every release
// gives back an address still in use; Run warns about each unless
// Options.AtShutdown (the machine is going down, the address with it).
//
// With Options.Interfaces, leases on other interfaces are left out,
// except a named file's, which are reported skipped with the reason; a
// named file with no lease for an interface asked for fails the run. An
// interface asked for that does not exist fails it at once
// (ErrNoSuchInterface).
//
// # The packet and the send
//
// op BOOTREQUEST, ciaddr the address, chaddr the address the client
// leased with where the file records it (dhcpcd's DHCPACK) and the
// interface's MAC otherwise (a bridge's may have changed since: dhclient
// and networkd record none), option 53 RELEASE, 54 the server, 61 the
// client identifier if any, a fresh xid. ISC dhcpd 4.4 finds the lease
// by option 61 and ciaddr, falls back to ciaddr alone, and releases it
// only if chaddr matches the lease's hardware address and the lease has
// not ended; it never checks option 54. It also ignores a release while
// the lease's failover pair is starting up or its partner is not
// responding (server/dhcp.c, dhcprelease: "ignored"), and a packet from
// a network segment it does not serve. None of this answers the node:
// "released" below means the packet left and the next hop answered.
//
// The packet goes from A:68 (SO_REUSEADDR: dhclient or networkd may
// hold port 68) to S:67 on a connected UDP socket, along the route the
// kernel gives for (from A, to S) — asked with RTM_GETROUTE, so policy
// routing ("from A" rules) applies, and confined to the interface's VRF
// when it is enslaved to one. When that route leaves through the
// lease's interface the socket is bound to it (SO_BINDTODEVICE); when
// it leaves through another interface (a multi-homed node whose server
// is reachable only through another link) the socket is not bound, the
// packet still comes from A, and the report says "via IF2, the route to
// the server" — the path dhclient -r's own unicast release takes. (A
// socket bound to the lease's interface would instead treat the server
// as on-link there and ARP for it in vain.) No route: ENETUNREACH,
// reported at once; prohibit and blackhole routes likewise.
//
// DHCPRELEASE has no reply. A send counts as released when the next
// hop's neighbour entry (RTM_GETNEIGH; the gateway, or the server when
// on-link) is resolved after the send, and fails when resolution fails
// or is still incomplete when Options.Timeout is up ("did not answer
// ARP"), or when the kernel reports an error (EHOSTUNREACH,
// ECONNREFUSED). An entry the kernel had before the send (REACHABLE,
// STALE, DELAY, PROBE, PERMANENT) shows only that the hop answered once:
// the kernel sends to a STALE address for seconds before it asks again,
// so a server that went down since would count as released. The hop is
// then asked with an ARP request from the lease's address on the route's
// interface (internal/arp, CAP_NET_RAW), for up to 3 s (the kernel's own
// three requests a second apart); its answer is the release's
// confirmation, its silence a failure. Where it cannot be asked (no
// CAP_NET_RAW, an interface that is not Ethernet) the release is
// reported sent, not confirmed. When nothing can show that the packet
// left — the route's interface resolves no neighbours (IFF_NOARP:
// point-to-point links, tunnels), or no neighbour entry appears — it is
// reported "sent, not confirmed" after a short linger for ICMP errors.
// That case does not fail the run (exit 0): the kernel accepted the
// packet on a link where nothing more can be known, retrying cannot
// learn more, and failing a shutdown unit for it would only add noise;
// the report does not claim the release.
//
// # Odd files
//
// Lease files and dhclient.conf are opened only if they are regular
// files: symbolic links are resolved, the target is checked with lstat,
// then opened with O_NONBLOCK and O_NOFOLLOW and checked again with
// fstat. A FIFO (which would block the open until a writer came, hanging
// shutdown), a device or a directory is refused with what it is.
package release
