// Package deliver moves queued lease events from the durable outbox to
// the region's leases endpoint (docs/design.md, "Region API — MAAS as it
// really is"), so that every event reaches the region, in order per IP,
// through outages, poison events and configuration mistakes.
//
// # Transport
//
// POST https://REGION:5242/MAAS/a/v3internal/leases, mutual TLS: the
// client certificate and key (on a MAAS rack the rack's own), the CA to
// verify the region against, and the name to verify in its certificate
// (ServerName; MAAS's certificate names only "maas", so the address in
// the URL would not verify; MAAS's own agent skips the name check, this
// one keeps it). A file the agent's user may not read (MAAS keeps the
// rack's key for its own user) is read from the copy systemd passes with
// LoadCredential= under the same base name, when there is one. A bearer
// token (TokenFile) is sent when set, for regions
// other than MAAS, which ignores it. https only, except to a loopback host
// (tests, a local proxy), where no TLS file is read. No HTTP proxy is
// used, whatever HTTPS_PROXY says, as MAAS's own rack agent uses none.
//
// Config.Timeout bounds connecting and the TLS handshake. Once a batch is
// sent the answer is awaited as long as the connection is alive — TCP
// keepalive and TCP_USER_TIMEOUT notice a vanished region within about
// half a minute — up to AnswerTimeout (5 min). The region applies what it
// received even when the client has gone, and applies copies in arrival
// order with no timestamp comparison: re-sending a batch while the first
// copy may still be running could land that copy after the next batch
// (issue 13). Only a region slower than AnswerTimeout, or a connection
// that dies mid-answer, leaves a batch's fate unknown; it is then sent
// again before anything after it. Across a restart the same holds: a run
// that stopped (or was killed) with a request out leaves its start in
// InflightFile, and the next run sends nothing until UnansweredHold (30 s)
// after it, so the region is done with the first copy (inflight.go).
//
// # Order
//
// The region keys rows by IP and handles a batch in one transaction, in
// order. So the Deliverer sends one batch at a time, the oldest queued
// events first, and acks a batch (removes it from the outbox) only after a
// 2xx; it peeks the next batch only after the ack is on disk. A batch is
// never sent while an earlier one is unresolved, so per-IP order holds
// across retries, restarts and splits. The one exception is below
// (a neighbour of a suspect), and it never overtakes an event for the
// same IP or MAC.
//
// # Answers
//
//   - 2xx: delivered, acked. (MAAS answers 204.)
//   - 422 (an item fails the region's schema; the whole batch is refused):
//     the batch is split in halves sent in order, recursively; each good
//     half is delivered, and a lone refused event is dead-lettered with
//     the region's words ("HTTP 422: …", cut to 512 bytes).
//   - 500 (the region could not apply the batch: an address in no subnet,
//     a family mismatch — or the region itself failing; MAAS rolls the
//     whole batch back), and a 404 in MAAS's error shape ("Entity not
//     found.": its service layer lost a row it was changing to another
//     request, rolled back too): split the same way. A lone event failing
//     is retried alone with backoff, PoisonAttempts (5) times in all. If
//     it still fails, a neighbour — the next queued event sharing no IP or
//     MAC with it or with anything it would overtake — is sent alone, then
//     the suspect once more. Only when the neighbour is accepted and the
//     suspect fails again is the suspect dead-lettered, with the region's
//     answer. When no neighbour is accepted (up to three are tried) the
//     region is failing everything: nothing is dead-lettered, the suspect
//     is retried with growing backoff, and Health says so.
//   - No answer (refused connection, reset, timeout), 408, 429, 502, 503,
//     504 and other 5xx: an outage. The same batch is retried for as long
//     as it takes, with exponential backoff and full jitter between
//     MinBackoff and MaxBackoff, or after the Retry-After the region asked
//     for (capped at MaxRetryAfter). Never dead-lettered. A region that
//     refused the connection, or closed it before the request was written
//     (MAAS's nginx with no API server behind it), is probed while
//     waiting, and its return ends the wait (probe.go).
//   - The agent's configuration: a redirect (not followed: it would turn
//     the POST into a GET, or deliver somewhere not configured), 400, 404
//     (FastAPI's {"detail":"Not Found"}), 405 (a wrong port or path:
//     MAAS's public API has no such route),
//     401, 403 (403 "Client certificate required." without a client
//     certificate), another 4xx, and TLS failures that waiting will not
//     heal (the region's certificate not from ca_file, not for
//     server_name; a port that does not speak TLS; a handshake the region
//     ends because it wants a client certificate, as MAAS before 3.8
//     does). Retried like an outage, never dead-lettered, and reported in
//     Health and the log with what to change. Reload puts new settings in
//     force at once.
//
// A retried batch carries the same Idempotency-Key (a hash of its Seqs);
// MAAS ignores it. Every copy is sent by the deliverer itself, its start
// recorded (inflight.go): the HTTP transport never replays one on its
// own, which it would for a request with that header. An event that does not even pass event.Normalize is
// dead-lettered without being sent. Events for the same IP queued after a
// dead-lettered one are still delivered: the region must reach the IP's
// latest state. The dead letter is kept for an operator, who may retry it
// (it then goes behind those events).
//
// # Log and status
//
// A problem is logged when it begins or changes (warn for an outage,
// error otherwise, with a hint an operator can act on), then once every
// WarnEvery while it lasts, and its end once. Health is the same for
// `leasekeeper status`.
//
// # Waiting for credentials
//
// With Config.AwaitCredentials set (a MAAS rack's own certificates,
// which MAAS writes when the rack registers), a CA, certificate or key
// file that does not exist makes a link that waits instead of an error
// from New or Prepare: nothing is sent, no attempt is counted, Health is
// StateWaiting with the missing file and the hint (logged once, at the
// start or the reload that made it), and a Flush returns at once. The
// reload that brings the files ends the wait; files that came but cannot
// be used are told as a configuration error while the wait goes on.
package deliver
