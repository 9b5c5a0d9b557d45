// Package rack makes the rack's own dhcpd free a lease whose client
// is gone (a container or node destroyed without a DHCPRELEASE), so that
// dhcpd itself runs its `on release` statements and the normal hook path
// tells the region: `leasekeeper release --for IP --mac MAC`.
//
// # How
//
// Release reads dhcpd's leases file with the project's incremental
// decoder and refuses, sending nothing, unless the IP's current lease is
// active, not yet ended and held by the given MAC, and can be told: a
// statement after the IP's last block that the parser had to skip (a bad
// or torn block for the IP, or one whose address cannot be told) may be
// the IP's current lease, so it is refused (ErrUnreadable) rather than
// trusting the older block. Unless told not to (NoProbe), it then sends
// an RFC 5227 ARP probe for the address on the interface it chose: a host
// that answers still holds the address (the client is not gone, or
// another host took it) and dhcpd would hand out an address in use, so
// it refuses (ErrInUse); an address in no subnet of that interface (a
// relayed one) cannot be probed from the rack and goes unprobed. It then
// hands dhcpd a DHCPRELEASE for that
// lease (ciaddr = IP, chaddr = MAC, the lease's client identifier if it
// has one, server identifier = dhcpd's address) and, unless told not to,
// follows the leases file until dhcpd has appended the released block:
// only the bytes appended since the check are read (a busy rack's file is
// hundreds of MB and changes constantly), and the whole file again only
// when dhcpd's rewrite renamed a new one onto the path (another inode).
// Only the IP's last block is kept, never the whole table.
//
// dhcpd 4.4 on Linux receives through an AF_PACKET socket (LPF) bound to
// each interface it serves, with a BPF filter for IPv4/UDP to port 67; the
// kernel's UDP socket it also opens is only drained. A datagram sent from
// the rack to its own address goes through lo and is never seen. But the
// kernel hands every frame *transmitted* on an interface to that
// interface's packet sockets (PACKET_OUTGOING), and dhcpd's receive path
// does not look at the packet type. So Release writes a complete
// Ethernet/IPv4/UDP frame with an AF_PACKET socket on the interface dhcpd
// serves: Ethernet source and destination are the interface's own MAC
// (no other host accepts it; a switch drops a frame addressed back to the
// port it came from), IP source and destination are dhcpd's address (no
// forged client address on the wire). dhcpd's dhcprelease() finds the
// lease by client identifier or ciaddr, checks the hardware address,
// releases it if it has not ended, runs `on release` and appends the
// block. Checked against Debian's 4.4.3-P1 in network namespaces
// (lab_test.go).
//
// The alternative, OMAPI (setting a lease object's state to released),
// also runs `on release` (state free runs `on expiry` instead), but needs
// `omapi-port` and a key in dhcpd.conf and an HMAC-MD5 OMAPI client; the
// packet needs no dhcpd configuration at all.
//
// # Limits
//
//   - The frame leaves through the interface like any other (on a bridge
//     it may be flooded to the bridge's ports), addressed to the rack.
//   - Sending needs CAP_NET_RAW (root).
//   - With a failover peer, dhcpd runs `on release` at once (server/mdb.c,
//     release_lease) and writes the lease released until the peer
//     acknowledges; Release reports what the file shows.
//   - For a relayed subnet there is no local interface in the lease's
//     subnet: name the interface dhcpd serves and its address (--interface,
//     --server); dhcpd finds the lease by address wherever it arrives.
package rack
