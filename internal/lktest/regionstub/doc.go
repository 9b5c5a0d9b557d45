// Package regionstub is a stand-in for the MAAS region's internal leases
// endpoint, for tests and the demo. It behaves as MAAS 3.6+ does, point by
// point, each point pinned by a test naming the MAAS file it mirrors
// (stub_test.go; maas.go lists the files):
//
//   - Transport: HTTPS on any port (MAAS: 5242, where nginx's stream proxy
//     passes TLS through to the internal API app; Front stands for it),
//     HTTP/1.1, an idle connection closed after 5 s (uvicorn's default). The server
//     certificate is MAAS's cluster certificate: CN maas-cluster, the one
//     SAN DNS:maas, signed by the CA "maas-ca"; no IP address is in it, so
//     a client verifies it for the name "maas" (server_name), not for the
//     address it dials.
//
//   - Credentials: mutual TLS only. A client certificate must chain to the
//     CA. Without one (or with one that has no CN) MAAS 3.8+ answers 403
//     {"detail":"Client certificate required."}; before 3.8 the TLS
//     handshake itself fails. A bearer token is ignored.
//
//   - Routes: POST /MAAS/a/v3internal/leases only; another method is 405,
//     the same path with a trailing slash a 307 to it, any other path 404.
//
//   - Body: a JSON array of objects with action, ip_family, hostname, mac,
//     ip, timestamp, lease_time. Extra keys and Idempotency-Key are
//     ignored. mac is MAAS's MAC_FIELD_RE (six octets; "" from 3.8 on).
//     Any item failing the schema refuses the whole batch: 422 with
//     pydantic's words per field ("0.mac").
//
//   - Items are applied in order in one transaction. An item MAAS cannot
//     place — its address in no subnet, its family not its subnet's, a
//     timestamp no datetime holds, a commit's lease_time beyond the 32-bit
//     column — fails the whole batch with 500 and MAAS's generic body;
//     nothing of it is applied. The stub keeps the real reason in the
//     request record, as MAAS's log would.
//
//   - An item for an address outside every IP range of its subnet is
//     accepted (204) and ignored.
//
//   - Application is keyed by IP in arrival order, comparing no
//     timestamps: a late or repeated event overwrites newer state (Leases
//     shows the result). A commit from another MAC links the address to
//     it without unlinking the first, whose later news then takes the
//     address from both (internal/maasmodel).
//
//   - 204 on success. Every request is recorded (Requests), every batch
//     taken (Batches, Items).
//
//     s, err := regionstub.Start(regionstub.Options{})  // 127.0.0.1:0, newest MAAS, DefaultSubnets
//     files, err := s.WriteFiles(dir)                   // ca.pem, agent.crt, agent.key for the agent
//     s.AddSubnet(regionstub.WholeSubnet("192.0.2.0/24"))
//     s.Unavailable(5*time.Second, "1")                 // 503 + Retry-After: 1 for 5 s
//     s.CloseFor(time.Second)                           // reset every connection for 1 s
//     s.FailNext(1, regionstub.Fault{Close: true, Accept: true}) // accept, then lose the answer
//     s.Poison("203.0.113.7", 0)                        // 500 for any batch holding that IP
//     s.SetDelay(200 * time.Millisecond)                // slow region (it finishes even if the client left)
//     s.SetFlaky(0.3, seed)                             // 30 % of requests fail at random
//     s.SetSkew(-10 * time.Minute)                      // the region's clock (Date, Retry-After dates) 10 min behind
//     s.WaitItems(ctx, 5000); s.Items(); s.ItemsFor(ip); s.Batches(); s.Requests(); s.Leases()
//
// Faults apply in this order: the FailNext queue, then a FailFor window,
// then the flaky draw; they come after the TLS, certificate and route
// checks. A fault with Accept records the batch first, so the region did
// the work but the client never hears it — the one case where a correct
// client may deliver a batch twice.
package regionstub
