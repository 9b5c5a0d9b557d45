// Package pair is the channel between the two agents of a dhcpd failover
// pair ([pair] in the configuration): it puts the two racks' deliveries
// to the region in one order.
//
// Each rack delivers on its own, and MAAS applies what it receives in
// arrival order, item by item, with no timestamp check: the internal
// API's POST /leases (maasapiserver/v3/api/internal/handlers/leases.py)
// runs maasservicelayer/services/leases.py store_lease_info for each
// item; the event's timestamp only dates the address record a commit
// creates, it never decides which of two items wins. So news one rack held — its
// queue while the region failed it, or the whole rack while it was down —
// would land after the other rack's newer news of the same address.
// dhcpd's own failover state decides who speaks for what
// (agent/reconcile, failover.go); it cannot decide when each rack's news
// reaches the region. This channel does.
//
// The rule (Clear): an event of this agent's queue goes to the region
// once the peer holds no older event for its address. Older is by Key,
// when dhcpd acted (the hook's nanoseconds, or dhcpd's second for what
// the agent made from the leases file); a tie goes to the primary. Before
// a batch is sent the agent asks the peer (a query naming the batch's
// addresses, at most MaxItems, and what the asker delivered of each) and
// the peer answers, per address, the key of the oldest event it holds
// that is newer than what the asker delivered — queued in its outbox, in
// flight, or made and waiting to be queued — and the newest it delivered
// itself. An event the peer shows newer delivered news for is never sent
// alone (agent: judgePair). An event that may not go holds back the
// batch's later events of its address and of its MAC; the others go past
// it; when none may go, the agent asks again every 100 ms, about the
// batch and what was queued behind it since (Clear's more: the
// deliverer's queue peeked again once it told of new events), so that
// news queued behind a batch held whole goes when the rule lets it. Of a
// batch the region may have applied already, only whole pieces go
// (ClearPieces), and that batch does not grow.
// An event also waits until it is Margin older than the query,
// so that the peer's news of the same moment, still on its way from
// dhcpd's hook, is in the peer's queue when it answers.
//
// Limits, each bounded by pair.hold_max:
//   - a peer that does not answer (its rack down, its agent restarting;
//     an agent answers only once it has stored what its hooks spooled
//     while it was down) holds this agent's deliveries for hold_max (not
//     its DHCPv6 news, which no failover orders), then
//     the agent delivers alone until the peer answers again (probed every
//     second); what the peer held is then sent after newer news, with the
//     newest state the file knows right after it (agent/reconcile,
//     NewestForPair), so that the region is never left on the older;
//   - a piece of the peer's news seen held for hold_max no longer holds
//     this agent's news back (the peer's region link failing, or its
//     start-up judgment of what it held), counting the time it held
//     this agent's back in earlier runs too (Config.Memory), not the
//     time this agent was down;
//   - an event held for its own sake (dated ahead of the clock, or beyond
//     a query's addresses) goes once it has been the first held for
//     hold_max;
//   - events of one queue are in key order per address, not across
//     addresses; with events going past what is held, only a cycle
//     through shared MACs can make the two agents wait on each other,
//     and hold_max breaks it. This agent's copy of news the peer
//     delivered (both servers' hooks of one ack: CopyOf, by the tag the
//     answer names that news by), where it is the batch's first news of
//     its address and MAC, goes whatever would hold it back, to be
//     dropped unsent (Link.Copy), also out of a piece held whole: the
//     waits seen with MAAS's timers ran through such copies.
//
// The datagrams (wire.go) are UDP, signed with HMAC-SHA256 under the
// key both racks share (pair.key_file); an answer carries its query's
// random nonce, so an old answer replayed answers nothing, and a
// datagram from a sender of the receiver's own role is refused. An
// answer is no longer than its query: the channel amplifies nothing.
package pair
