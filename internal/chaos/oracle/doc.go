// Package oracle checks a chaos run (internal/chaos): it knows the truth,
// the leases files dhcpd wrote over the run, every generation kept, and
// judges what the region received against it. It is pure: parsed files
// and the region's records in, a Report out.
//
// The truth, per IP, is a sequence of versions: Active(MAC) or
// Inactive(the MAC whose lease ended). Each lease block dhcpd wrote, in
// write order across generations, moves the IP to a version; a renewal
// (Active for the same MAC again) and repeated inactive blocks collapse.
// A lease that was active in one generation and is absent from the next
// rewrite's table (the reload drop) becomes Inactive(MAC) marked Vanished,
// due at the lease's own end.
//
// The region's items, in arrival order, are matched per IP against the
// versions, always forwards from the last match (a repeat of the current
// version is a duplicate, allowed). Rules, each a Violation kind:
//
//	false    an item matching no version of its IP: an event the files never showed
//	         (except one dhcpd's hook told just before dhcpd died, before it wrote
//	         the lease, and the expiry ending such a commit's lease: Input.Deaths)
//	order    an item matching only versions older than the current one: an older
//	         state applied after a newer (this includes an expiry for an old MAC
//	         after the IP was committed to a new MAC)
//	early    an expiry of a Vanished version arriving before the lease's end
//	lost     a version passed over with no item for it (a commit or a lease end
//	         the region never heard), except the expiry of a Vanished lease whose
//	         IP went to another MAC next (never sent, by design)
//	final    the region's view at the end differs from the files' last word
//	         (applied with the region's semantics: keyed by IP, a commit moves the
//	         MAC's other address away, an end for another MAC changes nothing)
//
// Check also measures the delivery lag: for each version the region
// heard of, from its Due (when its first block was read from the file, as
// ParseChunks records; a Vanished lease's end) to the first item for it.
package oracle
