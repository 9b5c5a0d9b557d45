// Package orphans frees, in the MAAS region, the addresses whose lease a
// dhcpd reload dropped because the address left every range (seed 001).
// MAAS ignores every leases-API event for an address outside every range
// of its subnet, dynamic or reserved, so the expiry the reconciler sends
// at the lease's end leaves the address "Observed" (DISCOVERED) for ever;
// only the public API 2.0's forced release of the discovered record
// clears it.
//
// The reconciler hands each such address over when the lease's own end
// has come (reconcile.Orphan), in the outbox transaction that queues its
// expiry: a Job in the outbox file's "orphans" bucket. The Releaser task
// works the jobs, one at a time, each attempt checked first:
//
//  1. MAAS's record for the address (ipaddresses ?ip=&all=true) must be
//     DISCOVERED and tied to the lease's MAC: no record at all means it
//     is already free (done); only another MAC, or only another type,
//     means the address is someone else's now: left alone, logged, done
//     (an observed record beside another type's is freed as any: the
//     release takes the observed one only). Whether the key's user may
//     list and release is MAAS's to say (3.8 and later ask the
//     Administrators group's permissions, not is_superuser, unless RBAC
//     is on): a 403
//     refuses the job, logged at error level with the user whoami names,
//     retried every ten minutes;
//  2. nobody may answer an ARP probe for it on the rack's interface for
//     its subnet (rack.ProbeARP): an address that answers is kept
//     and probed again every ProbeInterval (at most a minute), the reason
//     in /status;
//  3. then POST ipaddresses op=release ip force=true discovered=true:
//     204, or 400 "does not exist" (already free), completes the job. A
//     500 "… can't be deleted …" for a record linked to more than one
//     interface is MAAS failing on it every time (its release deletes the record once for each
//     interface: see unreleasable): the job stays "unreleasable", tried
//     hourly, until MAAS deletes the record at the MAC's next lease event.
//
// Transport failures and 5xx answers are retried with backoff (1 s
// doubling to a minute) and survive restarts; 401/403 are configuration
// errors, not retried in a loop. Without [maas] configured, a job waits,
// logged once per address, and /status says the region keeps the
// address until an API key is configured.
package orphans
