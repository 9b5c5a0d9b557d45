// Package reconcile makes the region's view of leases converge to
// dhcpd.leases: the agent follows the file and synthesises every event
// dhcpd wrote there that no hook reported (hook failed, agent down, no
// hooks configured), and the expiries dhcpd never reports at all (an
// active lease a rewrite dropped because its address left every range) —
// and never one it should not.
//
// # Rules (core.go, pure and table-tested)
//
// A State is fed what the file shows (Appended blocks, a whole Snapshot
// after a rewrite) and what the region was told (Hook), and Due(now)
// returns what to synthesise:
//
//  1. The file shows an IP changing state and no hook reports it within
//     the grace: synthesise it (commit for an active binding, new or
//     renewed; release for released, or for free with the end moved
//     earlier, which is how dhcpd without failover writes a release;
//     expiry for free, expired and the other unbound states; but an
//     unbound block whose hardware address differs from the last
//     commit told is not the end of that lease: failover peers'
//     free and backup blocks carry such addresses). With no
//     hooks at all (grace 0) this alone delivers every event. Not in
//     complement mode (see Modes). An end still waiting for its hook
//     when a hook reports the address's next commit goes at once, ahead
//     of it (TakeEndedBefore; for another client's commit, see rule 2 on
//     why MAAS needs the end first).
//  2. An IP whose last state was active vanishes from a rewritten file:
//     synthesise an expiry at the lease's own end (now if it has passed),
//     with its MAC, unless the same client's lease of the IP reappears
//     first. If dhcpd gives the IP to another client before then, the
//     expiry goes at once, ahead of that commit, dated at its start:
//     MAAS's commit updates the address's record in place and links it
//     to the new MAC without unlinking the old one, so the old client's
//     next news would take the address from the new one
//     (internal/maasmodel names the MAAS files). The same when no read
//     of the file showed the drop: a rewrite that shows the address
//     bound to another client than the active lease the file last
//     showed, whose commit the region was told last (the reads are a
//     busyRound apart under load, and a restart that drops the lease, a
//     second that brings the range back and the new client's lease fit
//     between two), and a hook's commit of another client for an
//     address whose last news told was a commit, with nothing pending
//     to end it (reason "given-away"; dhcpd gives an address away only
//     once the lease on it is over), a commit kept back too (a DHCPv6
//     client whose DUID carries no MAC). Not in a failover pair.
//  3. An active lease whose end passed and that dhcpd never expired (dhcpd
//     dead or stuck): synthesise the expiry after the grace (not in
//     complement mode). The same for a commit a hook told that the file
//     never showed (or shows older), read after the rewrite that would
//     have dropped it (dhcpd runs a commit's hook before it writes the
//     lease; killed in between, it never wrote it): reason "unwritten",
//     at the commit's end plus the grace. In a failover pair the
//     deliverer drops it if the peer's agent answers that it delivered
//     news of the address newer than that commit (the partner may have
//     renewed the lease).
//  4. Never: an expiry before the end of a lease still in the file; an
//     event for a restart that kept the lease; anything from a file that
//     did not parse whole; an expiry for MAC A once the region was told
//     the IP's commit to MAC B (it would clear the record B's commit
//     updated in place). The last rule also drops a hook's stale expiry
//     or release (Superseded), such as one spooled before the commit that
//     replaced it. Not done: sending such an end with B's commit again
//     after it, which would also unlink A in MAAS; dropped, A stays
//     linked to the address until A's next news of that family deletes
//     the record, and B's next renewal makes it again.
//
// In a failover pair a hook's expiry that ends, seconds into it, the
// lease this side acked last for the same client (a partner's stale
// binding update of the life before) is held to that lease's end and
// dropped if the client's next lease comes first (failover.go, HoldCut;
// docs/failover.md).
//
// The first complete snapshot is a baseline: the region is assumed to
// know what the file says, so a first start invents nothing.
//
// # Following the file (watch.go, with internal/leasesfile)
//
// inotify (fsnotify) watches the directory, never the file: dhcpd's
// rewrite (at every start and on the first commit an hour after the last)
// writes dhcpd.leases.<time>, links the current file to dhcpd.leases~
// and renames the new one onto the path. Appends are read from where the
// last read stopped through the parser's incremental Decoder, which keeps
// a torn last statement for the next read. A new device/inode at the path
// means a rewrite: the old descriptor is drained to its end first (dhcpd
// appends the expirations it finds at start to the old file just before
// renaming), then the new file is read whole and handed to
// State.Snapshot once it ends at a statement boundary. The same inode
// grown shorter than what was read, or whose bytes before the read
// position changed, is read again whole. A whole read with syntax errors,
// or whose end stays torn from one poll to the next, decides nothing:
// it is logged as an error, counted, leasekeeper_reconcile_file_consistent
// drops to 0, and it is read again at the next poll. The poll
// (reconcile.poll_interval) also covers lost inotify events and queue
// overflows (the Errors channel is read and logged). Reads are coalesced:
// the file is read at once when it changes, but after a read that found
// a block the next waits until 250 ms after it (busyRound), so a dhcpd
// under load costs a few reads, commits and deliveries a second, not one
// per lease, and a lone lease is read as soon as dhcpd writes it.
// An appended block dhcpd would refuse at its next start, and a
// statement it does not read in a leases file at all (something else
// wrote to it), are skipped as dhcpd skips them, logged and counted
// (leasekeeper_reconcile_file_problems_total{kind="refused"|"unknown"}).
// A whole read tells them too, one line for each kind naming the first
// (dhcpd's own rewrite holds none, so they were written since); a file
// of such statements and no lease is logged as an error, as most likely
// not dhcpd's leases file at all.
// A path that names no file (dhcpd never ran, or the setting names a
// file dhcpd does not write) is waited for: a warning says so once,
// leasekeeper_reconcile_leases_file_missing is 1 and /status shows since
// when, until the file appears and is read whole. A file that cannot be
// read (its permissions, a directory at its path, an I/O error) holds
// every synthesised event: an error says so once (and again if the error
// changes), leasekeeper_reconcile_leases_file_unreadable is 1 and /status
// shows since when and the error, until a read succeeds.
//
// A rewrite is told apart as a restart when a server-duid statement
// follows it (dhcpd writes one right after the rename at start; the
// hourly rewrite has none, but for the one dhcpd -6 writes at the head
// of every rewrite, before its IAs, which is not taken for a start) or
// dhcpd's pid file names a new process, else it is hourly; it is logged
// and counted either way. At each restart the
// mode is detected again (Modes, below), since that is when dhcpd read
// its configuration.
//
// # Modes (hooks.go)
//
// Who tells the region about an event dhcpd's hooks report decides what
// the file may add. The mode is detected at start and at every dhcpd
// restart from dhcpd.conf and its includes, scanned as raw text (the
// configuration parser skips on-blocks) for execute() statements that
// report leases: a program named maas-dhcp-helper or leasekeeper-hook,
// one called with the helper's "notify --action" protocol, or one that
// is leasekeeper-hook under any name. Each program is identified by what
// the file is, never by its name: the same file as an installed
// leasekeeper-hook (a diverted maas-dhcp-helper is a link to it), a Go
// binary whose build information names the hook's package, a script
// that talks to MAAS's dhcpd.sock; dpkg's diversions and snap paths are
// reported alongside.
//
//   - replacement: every hook that dhcpd can run is leasekeeper-hook, so
//     each event reaches the agent. Rules 1 to 3 fill in, after the
//     grace, what a hook missed.
//   - complement: a hook runs another program — MAAS's own helper, which
//     sends to MAAS's socket (deb racks that keep it; snap racks, whose
//     helper lies in the read-only snap and cannot be replaced). MAAS
//     delivers what its hooks report; the agent records those changes as
//     told and synthesises only rule 2, the expiries no hook ever
//     reports. Rules 1 and 3 are off: their events would be duplicates.
//     A dropped lease whose address dhcpd gives to another client before
//     its end is not expired: MAAS's helper told the new commit before
//     the file showed it, and an expiry after it would clear the
//     address for the new client as well (internal/maasmodel). MAAS then
//     keeps the old MAC linked to the address until that MAC's next
//     news deletes the record, which the new client's next renewal makes
//     again.
//   - hookless: no reporting hook, or none dhcpd can run (missing, not
//     executable): the grace is 0 and every change reaches the outbox as
//     soon as dhcpd has written it.
//
// When detection cannot tell — dhcpd.config unset or unreadable (MAAS
// writes its dhcpd.conf root-only), a program it cannot read or does not
// know — it picks complement and logs a warning
// (leasekeeper_reconcile_mode_unsure is 1). That is the safe side: the
// region applies events in arrival order with no timestamp comparison,
// so a synthesised duplicate that arrives after newer news overwrites it
// (an expiry for A after the commit to B frees B's address), while
// complement costs at most the file's safety net for hooks that did
// reach the agent (whose own events are queued in every mode). The
// reconcile.mode key forces a mode; detection is still logged.
//
// # Events the region cannot take
//
// The region's leases API wants exactly six octets in mac. A DHCPv6
// event's MAC is the Ethernet address in the client's DUID (DUID-LLT,
// DUID-LL; from the hook's --mac, or the IA's identifier in the file);
// an event without one (DUID-EN, DUID-UUID, other hardware, no MAC at
// all) is kept back: recorded as told, not queued, counted in
// leasekeeper_events_kept_back_total{kind} and logged, never a dead
// letter.
//
// # Persistence (persist.go)
//
// The state (per IP: last block, what the region was told, pending
// synthesised events; the baseline flag; the read position) lives in the
// outbox file's key/value area and is written with outbox.Update, so a
// change to it and the events it queues commit together or not at all.
// Only the addresses that changed are written. The position (device,
// inode, offset, and hashes of the first bytes and of the bytes before
// the offset) lets a restarted agent read only the new tail of an
// unchanged file, drain the old file if dhcpd replaced it while the
// agent was down and it is still there as dhcpd.leases~, and otherwise
// read the file whole and reconcile it against the stored table — which
// is how an agent that was down while dhcpd restarted with a smaller
// range still sends the expiry.
//
// An agent that follows dhcpd.leases6 too runs a second reconciler on it
// (Config.Family, Config.Bucket): its state in a bucket of its own in the
// same outbox, the hooks' events handed to the reconciler of their
// address's family (FamilyOf). An agent that followed one file before
// recorded the other family's hook events with it; those records are
// dropped at start, since rule 3 would end leases that file never shows.
// An agent started without dhcpd.leases6 drops the second reconciler's
// bucket (agent.Assemble): kept, it would be stale once the key is set
// again.
//
// State changes with no event to queue (a block appended that the hook
// already reported) are persisted within a couple of seconds rather than
// at once: a crash before that loses nothing, since the file is read
// again from the last persisted position and yields the same changes.
//
// # The task (reconciler.go)
//
// Reconciler is an agent task (Run) and also the hook socket's sink
// (Accept): every event queued, from a hook, the spool or the file,
// updates the record of what the region was told in the transaction that
// queues it. Synthesised events are logged with their reason and counted
// in leasekeeper_synthesised_total{reason}.
package reconcile
