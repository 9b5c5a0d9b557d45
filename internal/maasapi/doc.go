// Package maasapi is the small part of MAAS's public API 2.0 the agent
// uses to free an address MAAS still lists as observed (DISCOVERED) after
// dhcpd dropped its lease: who the API key belongs to (users op=whoami),
// the region's records for one address (GET ipaddresses/?ip=IP&all=true)
// and the forced release of a discovered record (POST ipaddresses/
// op=release, ip, force=true, discovered=true).
//
// Requests are signed as maascli signs them: OAuth 1.0a with the PLAINTEXT
// method, from the API key "consumer_key:token_key:token_secret" that
// `maas apikey` prints (MAAS makes consumer secrets empty, so the
// signature is "&" followed by the token secret), a fresh nonce and
// timestamp per request, in an Authorization header.
//
// Answers are mapped to errors a caller can branch on: ErrAbsent (400
// "… does not exist." to a forced release: nothing left to free),
// ErrForbidden (403: the key's user lacks the permission), ErrUnauthorized
// (401: MAAS does not know the key); any other failure is a *StatusError
// or a transport error, worth retrying.
package maasapi
