// Package regionstub is a stand-in for the MAAS region's internal leases
// endpoint (POST /MAAS/a/v3internal/leases, MAAS 3.6+), for tests and the
// demo. It serves HTTPS with a certificate authority it makes itself,
// checks client certificates and/or a bearer token, validates each batch
// the way MAAS does and records what it accepted, and can be told to fail.
//
//	s, err := regionstub.Start(regionstub.Options{})   // 127.0.0.1:0, client cert required
//	files, err := s.WriteFiles(dir)                    // ca.pem, client.pem, client-key.pem for the agent
//	s.Unavailable(5*time.Second, "1")                  // 503 + Retry-After: 1 for 5 s
//	s.CloseFor(time.Second)                            // reset every connection for 1 s
//	s.FailNext(1, regionstub.Fault{Close: true, Accept: true}) // accept, then lose the answer
//	s.Poison("203.0.113.7", 0)                         // 404 for any batch holding that IP
//	s.SetDelay(200 * time.Millisecond)                 // slow region
//	s.SetFlaky(0.3, seed)                              // 30 % of requests fail at random
//	s.WaitItems(ctx, 5000); s.Items(); s.ItemsFor(ip); s.Batches(); s.Requests()
//
// Like MAAS, a batch is one transaction: a body that is not a JSON array
// of objects with exactly the keys action, ip_family, hostname, mac, ip,
// timestamp and lease_time, each of the right type and value (see
// Validate), is answered 422 naming the first bad item's index and field,
// and nothing of it is recorded. Success is 204 No Content. A request
// without a verified client certificate or the bearer token is refused
// (by the TLS handshake when only certificates are accepted, else 401).
//
// Faults apply in this order: the FailNext queue, then a FailFor window,
// then the flaky draw. A fault with Accept records the batch first, so the
// region did the work but the client never hears it — the one case where a
// correct client may deliver a batch twice. The stub answers over HTTP/1.1
// only, so that closing a connection can really reset it.
package regionstub
