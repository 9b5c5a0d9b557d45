// Package deliver moves queued lease events from the durable outbox to
// the region's leases endpoint (DESIGN.md, "Region API"), so that every
// event reaches the region, in order per IP, through outages and poison
// items.
//
// # Order
//
// The region keys rows by IP and handles a batch in one transaction, in
// order. So the Deliverer sends one batch at a time, the oldest queued
// events first, and acks a batch (removes it from the outbox) only after a
// 2xx; it peeks the next batch only after the ack is on disk. A batch is
// never sent while an earlier one is unresolved, so per-IP order holds
// across retries, restarts and splits.
//
// # Retries
//
// Transport errors, 408, 429 and 5xx are retried for as long as the
// context lives — a region away for an hour loses nothing — with
// exponential backoff and full jitter between MinBackoff and MaxBackoff,
// or after the Retry-After the region asked for (seconds or an HTTP date,
// capped at MaxRetryAfter, never less than MinBackoff). Each attempt is
// bounded by Config.Timeout. 401, 403, 407, 3xx and other statuses that
// are not the items' fault (bad credentials, a redirect) are retried the
// same way and logged as errors: dead-lettering every item for a
// configuration mistake would be worse than waiting for the fix.
//
// A retried batch carries the same Idempotency-Key (a hash of its Seqs).
// The region can see a batch twice only when its fate was unknown to the
// agent: the region processed it but the answer was lost (a timeout, a
// reset, a 502 from a proxy). The duplicate follows the original
// immediately, before any later batch, so it changes nothing the region
// ends up with.
//
// # Poison items
//
// Any other 4xx (the region refused the content) splits the batch in two
// halves, sent first then second, recursively: each good half is delivered
// and acked in order, and the one bad item ends alone; a lone refused item
// goes to the outbox's dead letters with the region's answer
// ("HTTP 422: …", cut to 512 bytes) and delivery continues. An event that
// does not even pass event.Normalize is dead-lettered without being sent.
// Events for the same IP queued after a dead-lettered one are still
// delivered: the region must reach the IP's latest state, and holding them
// back would leave it with a stale row forever. The dead letter is kept
// for an operator, who may retry it (it then goes behind those events).
//
// A wrong URL path that makes the region answer 404 to everything would
// therefore dead-letter everything (recoverably: `leasekeeper deadletter
// retry`); each dead letter is logged at warn.
//
// # Security
//
// https only, except to a loopback host (tests, a local proxy). mTLS with
// ca_file, cert_file and key_file, and/or a bearer token from token_file,
// which must be a non-empty regular file readable by its owner only.
package deliver
