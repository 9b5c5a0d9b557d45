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
//     The file's name is the interface index; the file records no expiry,
//     so the file's modification time (networkd rewrites it at every bind
//     and renewal) plus LIFETIME is taken as the end.
//   - NetworkManager's internal client
//     (/var/lib/NetworkManager/internal-UUID-IFACE.lease): the networkd
//     format; the nettools client (NetworkManager 1.36+) writes ADDRESS
//     only, so its leases are reported and skipped for want of a server.
//   - Newer systemd's JSON lease files are recognised and reported as not
//     supported.
//
// # What is released
//
// A lease is released when its interface exists with an Ethernet MAC,
// it has not ended, its address is still configured on the interface
// and its file names the server. An address the interface no longer has
// is skipped: the release must come from that address, and the lease
// may be stale (the MAC may hold another lease by now).
//
// # The packet and the send
//
// op BOOTREQUEST, ciaddr the address, chaddr the interface's MAC, option
// 53 RELEASE, 54 the server, 61 the client identifier if any, a fresh
// xid. ISC dhcpd 4.4 finds the lease by option 61 and ciaddr, falls back
// to ciaddr alone, and releases it only if chaddr matches the lease's
// hardware address and the lease has not ended; it never checks option
// 54. The packet goes from A:68 (SO_REUSEADDR: dhclient or networkd may
// hold port 68) to S:67 on a connected UDP socket bound to the interface
// (SO_BINDTODEVICE). A device-bound socket treats a destination with no
// route as on-link, so the route is checked first with an unbound
// socket (no route: ENETUNREACH, reported at once). DHCPRELEASE has no
// reply; a send counts as done when the next hop's ARP entry is complete
// (/proc/net/arp; next hop from /proc/net/route), or after a short
// linger when the next hop is unknown, unless the kernel reports an
// error first (EHOSTUNREACH, ECONNREFUSED). Everything is bounded by
// Options.Timeout: a server that never answers ARP is reported as
// unreachable when the time is up.
package release
