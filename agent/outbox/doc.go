// Package outbox is the agent's durable queue of lease events for the
// region: every source (hook socket, spool drain, leases-file reconciler)
// appends to it, the deliverer peeks, sends and acks. An event is
// accepted when Append returns nil, and from then on it survives kill -9,
// a reboot and a full disk; it leaves the queue only when acked
// (delivered), dead-lettered (refused by the region) or coalesced (the
// queue is full and the region no longer needs it, see below).
//
// The store is one bbolt file (state.dir/outbox.db): a crash at any
// instant leaves the last committed transaction, never half of one. Why
// bbolt, and the measurements behind the group commit: docs/design.md,
// "The durable outbox".
//
// # Group commit
//
// All writes (Append, Ack, DeadLetter, the dead-letter operations,
// Update) are requests to one writer goroutine. It takes the first
// pending request and everything else already pending (up to 32 768
// events), applies them in order in one bbolt transaction and commits it:
// one pair of fsyncs for the whole group, after which every caller gets
// the result. While it waits on the disk the next group forms in its
// channel, so groups grow with the load, with no timer and no added
// latency when idle. Before draining it yields once, so that callers the
// last commit just released can send their next request into this group.
//
// A request that fails (a missing dead letter, an Update function's
// error) gets its error and the group is redone without it. A commit that
// fails (full disk, I/O error) is retried one request at a time, so an
// Ack, which frees space, is not sunk by a large Append that does not fit.
//
// The number of events per second is therefore about (events in flight)
// / (commit latency). A caller that needs throughput keeps many events in
// flight: many concurrent Append calls, or fewer calls with many events
// each (the hook-socket reader should append everything read while the
// previous Append was in flight in one call).
//
// # Layout
//
// Buckets, all at the top level:
//
//	queue    Seq (8 bytes, big-endian) → event record
//	dead     Seq it had when queued → dead-letter record (time, reason, event)
//	meta     "version" → 1 (Open refuses other versions);
//	         "next_seq" → the next Seq to assign
//	kv       one bucket per caller name (Update, View)
//
// Seq is strictly increasing and never reused, across restarts: next_seq
// is written in the same transaction as the events that use it (so an
// ack of the newest events cannot make a Seq come back). Peek walks the
// queue in key order, which is Seq order. Records are a version byte and
// the fields in a fixed binary order (codec.go); the event's action, MAC
// and IP come first so a coalescing pass decodes only those.
//
// # Bound and coalescing
//
// Options.MaxEvents (default 1 000 000) bounds the queue. When a commit
// would leave more than MaxEvents queued, a compaction pass runs inside
// that same transaction and drops the events the region no longer needs,
// per IP (the region keys rows by IP alone and applies a batch in order).
// Per IP it keeps:
//
//   - the last commit (it binds the IP whatever came before, so nothing
//     earlier matters);
//   - after it, the last expiry or release for that commit's MAC (it frees
//     the IP; the last one carries the final action);
//   - the IP's last event, always (an expiry for another MAC after the
//     commit is a no-op if the region checks the MAC, and frees the IP if
//     it does not; keeping it gives the same result either way);
//   - with no commit queued, the last expiry or release of each MAC (the
//     region's binding is unknown, so each may be the one that frees it);
//   - before the last commit, the last event of each other MAC when it is
//     an expiry or release: MAAS links an address to a new MAC without
//     unlinking the old one, so the old client's end must still reach it
//     first (internal/maasmodel).
//
// Events are only deleted, never moved, so the order of everything kept,
// within and across IPs, is unchanged, and a batch the deliverer already
// holds (always a prefix of the queue) followed by the kept rest leaves
// the region in the same state as the full queue would (tested against a
// model of the region in TestCoalesceEquivalent). Coalesce is the rule as
// a pure function.
//
// That model keys the region's rows by address. MAAS's are not quite
// that (internal/maasmodel): a commit links the address to the new MAC
// without unlinking the old one (hence the last rule above;
// TestCoalesceMAAS), and every event of a MAC deletes the MAC's other
// addresses. A rule exact for MAAS whatever the region held before would
// have to keep most of each MAC's events across addresses, whose order
// decides the links; not built. Coalescing runs only past the bound,
// after a long outage of the region, and says so in the log.
//
// A pass reads the whole queue (about a microsecond of CPU per queued
// event), so once one has run, the next waits until MaxEvents/8 more
// events have been appended: the queue may exceed its bound by that much
// between passes. If a pass leaves more than MaxEvents (more distinct IPs
// than the bound), Append still accepts, since dropping would lose an IP's
// last state: the store logs an error once per episode and sets
// leasekeeper_outbox_over_bound to 1 until the queue is back under its
// bound. An episode starts with the first pass (logged as a warning, with
// leasekeeper_outbox_coalesced_total counting every dropped event) and
// ends when deliveries bring the queue to half its bound (logged).
// Deliverers must expect an Ack for a Seq that is gone: it is ignored.
//
// # Full disk
//
// A commit that fails for lack of space returns an error that says "disk
// full", names the file and wraps syscall.ENOSPC (errors.Is works even
// where bbolt formats the cause into a string). Nothing of the failed
// request is stored: bbolt writes a transaction's pages to unused space
// and only then the meta page that would make them visible, and on an
// error rolls its in-memory state back. The store keeps working, and the
// first commit after space returns succeeds. The one exception is a
// failed fdatasync of the meta page itself (an I/O error, or a full
// thin-provisioned or network file system at writeback): bbolt reads
// that page from the page cache from then on, so the transaction is
// there although its request was told it failed. The store then reads
// its counters again (resync) and gives none of its Seqs twice; the
// request, retried, is queued twice. The file is mapped 64 MiB ahead
// (address space only) and grows by what a commit needs plus 16 MiB
// (bbolt's growth once the mapping is that large, a sparse truncate), and
// never shrinks; pages freed by acks are reused.
//
// # Dead letters
//
// DeadLetter moves an event the region refused out of the queue, with the
// region's answer and the time, in one transaction. RetryDeadLetter puts
// it back at the end of the queue with a new Seq, so it is sent after
// anything queued since for its IP: the operator asked for it.
// DropDeadLetter deletes it.
//
// # Key/value area
//
// Update runs a function on a named bucket inside the writer's group
// transaction and appends the events it returns in that same
// transaction, so a caller's own state (the reconciler's lease table and
// its record of what it has queued) and the events it decided on commit
// together or not at all. View reads a named bucket. The function may run
// more than once and must only touch its bucket.
//
// # Metrics
//
// On Options.Registerer (unregistered by Close): leasekeeper_outbox_depth,
// leasekeeper_deadletters, leasekeeper_outbox_over_bound (gauges),
// leasekeeper_outbox_appended_total, leasekeeper_outbox_coalesced_total,
// leasekeeper_outbox_commit_errors_total (counters),
// leasekeeper_outbox_commit_seconds (histogram of group-commit latency).
// Depth, DeadLetterCount and OldestPending (when the oldest queued event
// was accepted, for the delivery lag) read memory only.
//
// # Lifetime
//
// Open starts the writer; Close stops taking requests, commits what it
// already took and closes the file, so the agent closes the store after
// its producers and the deliverer have stopped. The file is locked: a
// second agent on the same state dir gets ErrLocked from Open.
package outbox
