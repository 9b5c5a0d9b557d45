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
//     address (InfiniBand) still gets leases, and MAAS's region takes ""
//     as "no MAC".
//   - --lease-time: whole seconds, 0 to 4294967295 (what dhcpd's 32-bit
//     encode-int can produce); default 0.
//   - --hostname: any bytes. "(none)" (what MAAS's snippet passes when the
//     client sent no name), the empty string and blank names (Python's
//     str.isspace) are no name and are sent as "": MAAS's region treats
//     all of them so. Other names are sent as valid JSON whatever they
//     hold: '"' and '\' escaped, control characters as \u00XX, every byte
//     that is not valid UTF-8 replaced by U+FFFD. The encoded name is cut
//     at 255 bytes, at a character boundary, never inside an escape (see
//     "Size" below for why); a real host name (at most 255 bytes in one
//     DHCP option, 253 in DNS) is never cut. A longer, hostile name is cut
//     rather than refused: refusing would lose the event, and the name is
//     the one thing in it the client chose.
//
// Anything invalid: one line on stderr naming the flag and quoting the
// value (escaped, so it cannot add lines to dhcpd's log), exit status 2,
// nothing sent or spooled. --help prints the usage and exits 0.
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
// # MAAS compatibility
//
// Checked against MAAS's source (github.com/canonical/maas):
//
//   - package-files/usr/sbin/maas-dhcp-helper: the arguments and keys
//     above; it omits hostname when empty or blank, sends "lease_time":
//     null without --lease-time, and sends the MAC as given (unpadded).
//     It connects and sends blocking, and exits 1 when rackd is down: the
//     event is lost.
//   - src/maasserver/templates/dhcp/dhcpd.conf.template: the "Notify
//     MAAS" block (clhw, clip, cllt, clht with pick-first-value(option
//     host-name, "(none)")) that packaging/dhcpd/leasekeeper.conf repeats.
//   - src/maasagent/internal/dhcpd/listener.go, the Go rack agent that
//     receives on dhcpd.sock (src/maasagent/internal/dhcp/service.go):
//     a json.Decoder over the datagram socket into {action, ip_family,
//     hostname, mac, ip, timestamp, lease_time}. Unknown keys are ignored;
//     a missing hostname or lease_time becomes "" or 0. The decoder's
//     first read from the socket is 512 bytes: a longer datagram is cut by
//     the kernel and its rest garbles the next event too (see Size).
//   - src/provisioningserver/rackdservices/lease_socket_service.py, the
//     Python receiver before MAAS 3.6 (removed in commit 3fd48df68):
//     json.loads per datagram, forwarded with the AMP UpdateLeases command
//     (src/provisioningserver/rpc/region.py) whose AmpList takes only the
//     declared keys, so timestamp_ns and pid are dropped there too.
//   - The region: src/maasapiserver/v3/api/internal/models/requests/
//     leases.py requires every key; src/maascommon/fields.py accepts MACs
//     of one- or two-digit groups and pads them (normalise_macaddress);
//     src/maasservicelayer/services/leases.py ignores host names that are
//     None, empty, blank or "(none)".
//
// So the hook's normal forms are ones every MAAS receiver accepts, and a
// datagram from maas-dhcp-helper is one the leasekeeper agent accepts.
//
// # Size
//
// An IPv4 event with a hardware address of up to 20 bytes stays under
// 512 bytes whatever the host name (TestDatagramFitsMAASBuffer: 491 for
// the worst commit), so a hostile name cannot cost MAAS's Go receiver
// the next event. DHCPv6 events (a DUID can be 130 bytes) can be longer;
// MAAS never had DHCPv6 hooks, and the leasekeeper agent reads whole
// datagrams.
//
// # Delivery and the spool
//
// The hook sends the datagram on a SOCK_DGRAM|SOCK_NONBLOCK unix socket.
// Any failure means the agent did not take it — no socket file (ENOENT),
// nobody bound to it (ECONNREFUSED), its receive queue full (EAGAIN; the
// kernel queues only net.unix.max_dgram_qlen datagrams, 10 by default),
// ENOBUFS, EACCES, not a datagram socket — and the hook appends the same
// JSON, plus a newline, to <spool>/events.jsonl, and exits 0.
//
// The spool is sticky: while events.jsonl exists, every event goes there,
// even when the agent is back, so that events waiting in the spool stay
// ahead of later ones (dhcpd runs one hook at a time, so its events are
// ordered; two dhcpd, -4 and -6, have unrelated addresses). Only if the
// spool cannot be written while it holds events does the hook send to the
// socket after all (late, with timestamp_ns to order it, beats lost).
//
// Appending: open(O_WRONLY|O_APPEND|O_CREAT, 0640), flock(LOCK_SH|LOCK_NB),
// check that the file descriptor is still the file at the path (same
// device and inode), one write(2) of the whole line, close. On a local
// filesystem one O_APPEND write lands whole after every other append,
// whatever its size (TestSpoolAppendAtomic writes 256 KiB lines from 8
// writers at once), so concurrent hooks interleave whole lines. A write
// cut short (full filesystem) is an error; nothing is retried. The hook
// does not fsync: an event a crash loses from the page cache is one the
// agent's reconciler recovers from dhcpd.leases, which dhcpd does fsync.
// A missing spool directory is created 0750 (packaging should create it
// with the owner and mode the agent needs).
//
// The agent drains the spool thus (TestSpoolConcurrentProcesses runs this
// against concurrent hooks and checks that no event is lost or reordered):
//
//  1. Read the socket until it would block: everything queued there was
//     sent before the first spooled event, and nothing is sent while
//     events.jsonl exists.
//  2. rename(events.jsonl, a name of its own), e.g. draining-<seq>.jsonl.
//     Hooks that open events.jsonl from now on create a new one.
//  3. flock(LOCK_EX) the renamed file: it waits for hooks that still hold
//     it shared (each holds it for one write). A hook that opened it but
//     had not locked it yet finds the lock taken or the inode gone from
//     the path, and reopens the path instead.
//  4. Read it line by line, hand the events on (durably), unlink it.
//     After a crash, drain leftover draining-* files first, in order.
//  5. Repeat while events.jsonl exists; then take datagrams again.
//
// A line that does not parse was torn (a full disk, a crash): skip it. If
// a torn line was glued to the next record, that record starts at the
// last `{"action":` in the line — the sequence cannot occur inside a
// record, whose string values have their quotes escaped.
//
// The hook exits 1 only when both ways failed (the socket did not take the
// event and the spool could not be written): one line on stderr says why
// for each, and the event is lost to the hook path; the reconciler still
// sees it in dhcpd.leases.
//
// # Bounded time
//
// Nothing waits on another process: the send is non-blocking, the lock is
// tried, not waited for (a file locked exclusively is one the agent has
// already renamed away), the spool file is reopened at most 4 times, and
// there are no retries with sleeps. What remains is a few local-file
// system calls. TestAgentUnreachable runs the hook against a full queue
// and TestDeliverBound times deliver itself (tens of microseconds).
//
// # Start-up
//
// dhcpd waits for every hook, so start-up is most of the hook's cost. A Go
// program runs several threads before main, and on a virtual machine what
// they cost (thread hand-offs, TLB shoot-downs for pages written after
// they started, exit) puts an empty Go program well behind /bin/true; the
// hook keeps what it adds on top small. It imports the standard library
// only, and of it only errors, strconv, syscall and unicode/utf8
// (TestStdlibOnly keeps it so): no os (it reads its arguments from
// /proc/self/cmdline and exits with syscall.Exit), hence no time,
// internal/godebug or internal/poll; no net/netip (ip.go parses addresses,
// held to net/netip by FuzzParseIP); no unicode, fmt, flag or
// encoding/json. updatemaxprocs=0 spares the runtime's goroutine that
// follows CPU-limit changes, one more wake-up in a process that lives for
// a millisecond; decoratemappings=0 spares the prctl naming each of the
// runtime's memory mappings (and refused with EINVAL by kernels built
// without CONFIG_ANON_VMA_NAME). The runtime still reads the cgroup's CPU quota at start (four
// files), whatever the GODEBUG settings: containermaxprocs=0 would not
// save those reads. Against an empty Go program built the same way
// (strace -c, perf stat -r 300; issue 16): 1.32 MB against 1.20 MB, 170
// page faults against 159, the same runtime syscalls plus the read of
// /proc/self/cmdline, socket and sendto — what is left above the floor
// is the runtime's own start. scripts/bench-hook measures what the hook
// costs dhcpd against /bin/true and an empty Go program, and
// BenchmarkProcess what a start costs.
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
// clean removes the top-level statements whose first word is host and
// that have a block, each with the line end (LF or CR LF) after its '}',
// and keeps every other byte. It reads statements as dhcpd's lexer does
// (quoted strings with \ escapes, # comments, nested blocks). On files
// as dhcpd writes them it removes exactly what MAAS's helper removes
// (TestCleanMatchesMAAS, and the lab test on dhcpd's own file), except
// that the expression cuts into a lease whose strings hold "host " and
// misses a host with a '}' in a string; clean does neither, and reads
// any bytes (MAAS's fails on a file that is not UTF-8). At a raw newline
// inside a string, a '}' closing nothing or a statement torn at the end,
// it stops and keeps the rest as it is: a host left in the file is
// harmless to dhcpd, anything else removed would be a lost lease.
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
// notify: 0 sent or spooled; 1 lost (neither way took it, or
// /proc/self/cmdline was unreadable); 2 invalid arguments. clean: 0
// whenever dhcpd can start on the file; 2 invalid arguments.
//
//go:debug updatemaxprocs=0
//go:debug decoratemappings=0
package main
