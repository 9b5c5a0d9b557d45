// Package parser reads the files ISC dhcpd writes and reads: dhcpd.leases
// (IPv4 and IPv6) and dhcpd.conf. It is pure: readers in, values out; it
// performs no I/O of its own (includes are opened through a caller-supplied
// function), never logs and keeps no global state.
package parser
