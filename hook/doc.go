// Command leasekeeper-hook is what ISC dhcpd executes from "on commit",
// "on expiry" and "on release": it hands one lease event to the
// leasekeeper agent and exits. It replaces "maas-dhcp-helper notify"
// (same arguments, same JSON), and it never blocks dhcpd, which waits for
// it (fork, exec, waitpid) while serving nobody. It also replaces
// "maas-dhcp-helper clean", which MAAS runs before dhcpd starts (see
// "clean" below), so it can be installed under that helper's name.
//
//	leasekeeper-hook notify --action commit|expiry|release --mac MAC
//	                        --ip-family ipv4|ipv6 --ip IP [--lease-time SECS]
//	                        [--hostname NAME] [--socket PATH] [--spool DIR]
//	leasekeeper-hook clean LEASES_FILE
//
// The dhcpd.conf snippets that call it are packaging/dhcpd/leasekeeper.conf
// (dhcpd -4, MAAS's block with another program path) and
// leasekeeper6.conf (dhcpd -6).
//
// # Arguments
//
// Flags take their value from the next argument, whatever it looks like
// (a client may call itself "--socket"), or after '=' (--ip=203.0.113.5).
// A repeated flag's last value wins, as with maas-dhcp-helper's argparse.
// --socket defaults to $LEASEKEEPER_SOCKET, else /run/leasekeeper/hook.sock;
// --spool to $LEASEKEEPER_SPOOL, else /var/spool/leasekeeper (dhcpd's
// execute() passes its environment on). Both must be absolute.
//
// Validation, and the normal form sent:
//
//   - --action: commit, expiry or release. --ip-family: ipv4 or ipv6.
//   - --ip: an address of that family, sent in canonical form (RFC 5952
//     for IPv6: dhcpd6's binary-to-ascii writes "2001:db8:0:0:0:0:0:5",
//     the hook sends "2001:db8::5"). No zone, no IPv4-mapped IPv6.
//   - --mac: 1 to 130 bytes of one or two hex digits separated by ':' or
//     '-' (binary-to-ascii writes "2:0:0:a:b:c"), sent lower-case,
//     zero-padded, ':'-separated ("02:00:00:0a:0b:0c"). 130 bytes is the
//     longest DHCPv6 DUID, which the v6 snippet passes. The empty string
//     is accepted and sent as "": a DHCPv4 client without a hardware
//     address (InfiniBand) still gets leases; MAAS's region takes "" as
//     "no MAC" from 3.8 on and refuses it before (the agent holds such
//     events back from a region older than 3.8).
//   - --lease-time: whole seconds, 0 to 4294967295 (what dhcpd's 32-bit
//     encode-int can produce); default 0.
//   - --hostname: any bytes. "(none)" (what MAAS's snippet passes when the
//     client sent no name), the empty string and blank names (Python's
//     str.isspace) are no name and are sent as "": MAAS's region treats
//     all of them so. Other names are sent as valid JSON whatever they
//     hold: '"' and '\' escaped, control characters as \u00XX, every byte
//     that is not valid UTF-8 replaced by U+FFFD. The encoded name is cut
//     at 255 bytes, at a character boundary, never inside an escape (see
//     "Size" below for why); a host name of printable ASCII (at most 255
//     bytes in one DHCP option, 253 in DNS) is never cut, one with
//     escapes or replaced bytes may be. A longer, hostile name is cut
//     rather than refused: refusing would lose the event, and the name is
//     the one thing in it the client chose.
//
// Anything invalid: one line on stderr naming the flag and quoting the
// value (escaped, so it cannot add lines to dhcpd's log), exit status 2,
// nothing sent or spooled. A flag notify does not know is not invalid: a
// newer MAAS may pass one (under the diversion its dhcpd.conf template
// updates and this hook does not), so it is skipped with its value (the
// next argument whatever it holds, unless the value came after '='), the
// event is sent, and one line on stderr names the flag. --help prints the usage and exits 0.
//
// # The datagram
//
// One JSON object, the keys in maas-dhcp-helper's order:
//
//	{"action":"commit","mac":"02:00:00:0a:0b:0c","ip_family":"ipv4",
//	 "ip":"203.0.113.5","timestamp":1764417600,"lease_time":600,
//	 "hostname":"node1","timestamp_ns":1764417600123456789,"pid":4242}
//
// timestamp is epoch seconds; lease_time and hostname are sent on commit
// only, as maas-dhcp-helper sends them (hostname "" and lease_time 0 when
// dhcpd gave none). timestamp_ns (epoch nanoseconds, the same instant)
// and pid are leasekeeper's own; receivers that do not know them ignore
// them. There is no trailing newline, as with maas-dhcp-helper.
//
// # Delivery and the spool
//
// The hook sends the datagram on a non-blocking unix datagram socket. If
// the agent does not take it (no socket, nobody bound, queue full, any
// error), the hook appends the same JSON and a newline to
// <spool>/events.jsonl (created 0640) with one O_APPEND write under a shared flock
// taken without waiting, and exits 0. While events.jsonl exists every
// event goes there (the spool stays ahead of later events); only when the
// spool cannot be written while it holds events is the socket tried after
// all. A missing spool directory is created 0750. The agent takes the file
// by renaming it to events.jsonl.draining and locking it exclusively
// (agent/hooksock/spool.go); a hook that opened it before the rename finds
// the lock taken or the inode gone from the path and reopens the path, at
// most 4 times. Nothing waits on another process and nothing is retried
// with a sleep. Why, and MAAS's receivers the datagram is shaped for
// (under 512 bytes for IPv4 whatever the host name): docs/design.md,
// "The hook".
//
// # Start-up
//
// dhcpd waits for every hook, so start-up is most of the hook's cost. A Go
// program runs several threads before main, and on a virtual machine what
// they cost (thread hand-offs, TLB shoot-downs for pages written after
// they started, exit) puts an empty Go program well behind /bin/true; the
// hook keeps what it adds on top small. It imports the standard library
// only, and of it only errors, strconv and unicode/utf8 (TestStdlibOnly
// keeps it so): no os (it takes its arguments and environment from the
// runtime, start.go, and exits through the runtime), hence no time,
// internal/godebug or internal/poll; no syscall, whose initialisers run
// in every process that imports it (sys.go: the hook makes its system
// calls through the runtime's own entry point, numbered per architecture
// in abi*.go, which needs Linux 4.11 for statx); no net/netip (ip.go
// parses addresses, held to net/netip by FuzzParseIP); no unicode, fmt,
// flag or encoding/json. updatemaxprocs=0 spares the runtime's goroutine
// that follows CPU-limit changes, one more wake-up in a process that
// lives for a millisecond; decoratemappings=0 spares the prctl naming
// each of the runtime's memory mappings (and refused with EINVAL by
// kernels built without CONFIG_ANON_VMA_NAME). The runtime still reads
// the cgroup's CPU quota at start (four files), whatever the GODEBUG
// settings: containermaxprocs=0 would not save those reads.
//
// notify also stays within the 2 KiB stack the main goroutine starts with
// (sys.go; TestStartStack holds it there): growing it once cost an empty
// Go program about 4 % of its run on a virtual machine (a copy, an unwind
// through tables nothing else reads, fresh pages). So notify allocates
// nothing past its first two calls (the allocator's slow path, taken by
// a size class's first object, is deep), keeps its buffers static and
// makes its system calls raw. What is left above an empty Go program
// (perf record over interleaved runs, issue 16) is the delivery's system
// calls, of which the datagram's (socket, sendto with the listener's
// wake-up, close) cost more than the spool's eight. Package syscall's
// initialisers (sync's and iter's first allocations, the RLIMIT_NOFILE
// raise) cost about 2 % more, and the hook no longer imports it: a Go
// program that does nothing but send the hook's datagram through package
// syscall now runs longer than the hook. scripts/bench-hook-start times
// the hook's own run, and that program's, against an empty Go program's,
// interleaved;
// scripts/bench-hook what the hook costs dhcpd against /bin/true and an
// empty Go program; BenchmarkProcess what a start costs.
//
// # clean
//
// MAAS's maas-dhcpd.service and maas-dhcpd6.service (debian/ in MAAS 3.5
// to 3.8) run "/usr/sbin/maas-dhcp-helper clean $LEASES_FILE" under sh -e
// just before exec dhcpd, so clean must exit 0 whenever dhcpd can start.
// MAAS's helper removes every match of `host [^{]+{[^}]+}\n` from the file
// read as UTF-8 text (package-files/usr/sbin/maas-dhcp-helper, the same in
// 3.5 to 3.8): the hosts OMAPI wrote and their rubouts, so that dhcpd
// starts with the hosts of dhcpd.conf only.
//
// clean removes the top-level statements whose first word is host (in
// any case, as dhcpd reads keywords) and that have a block, each with the
// line end (LF or CR LF) after its '}', and keeps every other byte. It
// reads statements as dhcpd's lexer does (quoted strings with \ escapes,
// # comments, nested blocks). On files as dhcpd writes them it removes
// exactly what MAAS's helper removes (TestCleanMatchesMAAS, and the lab
// test on dhcpd's own file), except that the expression cuts into a
// lease whose strings hold "host " and misses a host with a '}' in a
// string; clean does neither, and reads
// any bytes (MAAS's fails on a file that is not UTF-8). At a raw newline
// inside a string, a '}' closing nothing or a statement torn at the end,
// it stops and keeps the rest as it is: a host left in the file is
// harmless to dhcpd, anything else removed would be a lost lease. It does
// not know which blocks dhcpd refuses; after one, dhcpd skips the next
// statement, and a host removed from there moves the skip onto the
// statement after it (TestCleanAfterRefusedBlock; MAAS's expression does
// the same). dhcpd's rewrite at each start keeps none of the blocks it
// refused.
//
// Only a file that has a host statement is rewritten: a new file beside
// it (NAME.leasekeeper-clean-PID, O_CREAT|O_EXCL|O_NOFOLLOW) with the
// original's owner, group and mode, fsynced, then renamed onto it after
// checking that the original is still the same file, unchanged (dhcpd is
// meant to be stopped), and the directory fsynced. The original is opened
// O_NOFOLLOW|O_NONBLOCK: a symbolic link is neither followed nor replaced,
// and a FIFO does not block. Every case exits 0:
//
//   - cleaned, no host statement (not written), missing file or
//     directory: silent. (MAAS's units create the file first; its helper
//     exits 1 on a missing one.)
//   - a link, not a regular file, unreadable, over 1 GiB; a copy that
//     cannot be created, written, synced, given the owner or mode, or
//     renamed; a file that changed meanwhile: one line on stderr, the
//     copy removed, the original as it was.
//   - the scan stopped early: cleaned up to there, one line saying where.
//   - the directory fsync failed after the rename: cleaned, one line (a
//     crash may bring back the old file, which dhcpd reads too).
//   - killed midway: the original is intact; a stray copy may be left.
//   - an internal error (a panic) is caught: the file was only ever
//     replaced whole.
//
// Run by the name maas-dhcp-helper (a diversion), clean works the same.
//
// # Exit status
//
// notify: 0 sent or spooled; 1 lost (neither way took it); 2 invalid
// arguments. clean: 0 whenever dhcpd can start on the file; 2 invalid
// arguments.
//
//go:debug updatemaxprocs=0
//go:debug decoratemappings=0
package main
