// Package orphans frees, in the MAAS region, the addresses whose lease a
// dhcpd reload dropped because the address left every range (seed 001).
// MAAS ignores every leases-API event for an address outside every range
// of its subnet, dynamic or reserved, so the expiry the reconciler sends
// at the lease's end leaves the address "Observed" (DISCOVERED) for ever;
// only the public API 2.0's forced release of the discovered record
// clears it.
//
// IPv4 only: a range6 shrink drops DHCPv6 leases the same way, and MAAS's
// rule for an address outside every range does not look at the family
// (src/maasservicelayer/services/leases.py), but the reconciler makes
// jobs for IPv4 addresses alone and the probe is ARP's; such an address
// stays observed in the region and leasekeeper orphans does not list it.
//
// The reconciler hands each such address over when the lease's own end
// has come (reconcile.Orphan), in the outbox transaction that queues its
// expiry: a Job in the outbox file's "orphans" bucket. The Releaser task
// works the jobs, one at a time, each attempt checked first:
//
//  1. MAAS's record for the address (ipaddresses ?ip=&all=true) must be
//     DISCOVERED and tied to the lease's MAC: no record at all means it
//     is already free (done); another MAC (alone or besides the lease's:
//     a later commit links its MAC to the record), or only another type,
//     means the address is someone else's now: left alone, logged, done
//     (an observed record beside another type's is freed as any: the
//     release takes the observed one only). Whether the key's user may
//     list and release is MAAS's to say (3.8 and later ask the
//     Administrators group's permissions, not is_superuser, unless RBAC
//     is on): a 403 refuses the job, logged at error level with the user
//     whoami names, retried every ten minutes; so does a 401, and one
//     for an OAuth timestamp more than 300 s older than the region's
//     clock ("Expired timestamp", piston3's OAuthServer) is logged as
//     this rack's clock being behind, not as a wrong key;
//  2. nobody may answer an ARP probe for it on the rack's interface for
//     its subnet (rack.ProbeARP): an address that answers is kept
//     and probed again every ProbeInterval (at most a minute), the reason
//     in /status; while it answers, its probe comes first and the
//     region's record is read again (and the address logged) only
//     hourly, not at every probe; one no link of the rack reaches (a
//     relayed subnet) is "blocked" and tried hourly;
//  3. then POST ipaddresses op=release ip force=true discovered=true:
//     204, or 400 "does not exist" (already free), completes the job. A
//     500 "… can't be deleted …" for a record linked to more than one
//     interface is MAAS failing on it every time (its release deletes the record once for each
//     interface: see unreleasable): the job stays "unreleasable", tried
//     hourly, until MAAS deletes the record at the MAC's next lease event;
//  4. a success is checked by reading the record again: MAAS still
//     listing it for the lease's MAC is no free ("unconfirmed", logged
//     at error level, tried every ten minutes). That is what a followed
//     redirect gave (a MAAS with TLS redirects its HTTP port to the TLS
//     one, and a redirected POST arrives as a GET), and what anything in
//     front of the region that answers for it would give.
//
// What MAAS's release deletes besides the record: when the record's
// interface is the lease's unknown one (a MAC that belongs to no machine
// or device), the interface, and with it every other address linked only
// to it, an observed address of the other family of that MAC included
// (src/maasserver/api/ip_addresses.py release, models/interface.py
// unlink_ip_address and ensure_link_up, models/signals/interfaces.py
// delete_related_ip_addresses); MAAS learns that one again at the
// client's next lease event of that family.
//
// A job is withdrawn ("back") when dhcpd.leases lists its address again,
// or a hook told a commit of it since the lease's end, which reaches the
// region before the file shows it (a range grew back over it): the
// record of a newer lease of the same MAC looks exactly like the
// orphan's, and its client may answer no ARP (powered off). The releaser asks the reconciler (SetHeld, Holds) before
// it asks the region and again just before it releases; while the file
// is not known (not read whole yet, or its last read failed) the job is
// "blocked". The API client follows no redirect: a 3xx, like a 404 (no
// handler used here answers one for an address, ip_addresses.py), means
// maas.api_url is not the region's API 2.0; the job is "misdirected",
// logged at error level once, tried every ten minutes and at once after
// a reload.
//
// Transport failures and 5xx answers are retried with backoff (1 s
// doubling to a minute) and survive restarts; 401/403 are configuration
// errors, not retried in a loop. Without [maas] configured, a job waits,
// logged once per address, and /status says the region keeps the
// address until an API key is configured. An attempt's outcome never
// overwrites a newer job the reconciler stored for the address meanwhile.
package orphans
