// Package parser reads the leases files ISC dhcpd writes: dhcpd.leases
// (IPv4 and IPv6). It is pure: readers in, values out; it performs no I/O
// of its own, never logs and keeps no mutable global state. dhcpd.conf,
// a grammar of its own, is read by the subpackage dhcpdconf.
//
// # Leases files
//
// ParseLeases reads a whole file into a Table, the lease table dhcpd would
// load from it; a Decoder reads a file incrementally, as the agent tails
// the live one: Feed (or DecodeFrom) appended bytes, get every complete
// top-level statement back, and the decoder keeps the torn tail of an
// unfinished one. Decoding in one call, in any split of the bytes, or on
// several cores (ParseLeases) yields the same statements and errors; the
// fuzz target FuzzDecodeLeases checks exactly that.
//
// Top-level statements (anything else is skipped through its ';' or its
// balanced block, without an error):
//
//	lease A.B.C.D { … }                          → *Lease
//	ia-na|ia-ta|ia-pd ID { cltt D; iaaddr X { … } | iaprefix P/N { … } … }
//	                                             → *IA (ID: "IAID+DUID" quoted or hex)
//	host NAME { dynamic; [deleted;] hardware T M; fixed-address A, …; uid U; … }
//	                                             → *HostEntry
//	server-duid ID;                              → *ServerDUID (dhcpd appends it at start)
//	authoring-byte-order little-endian|big-endian; → *ByteOrder (decodes later IAIDs)
//	failover peer NAME state { my state S [at D]; partner state S [at D]; mclt N; }
//	                                             → *FailoverState
//	class NAME { lease limit N; … } | subclass NAME DATA [{ … }|;]
//	                                             → *ClassEntry (a limit, not a lease)
//	group …, db-time-format …, lease-id-format … → skipped
//	a block dhcpd refuses, or a statement its    → *Refused (see below)
//	recovery from one swallows
//
// Keywords match in any case, as in dhcpd. Inside a lease block, the
// statements of dhcpd's parse_lease_declaration:
//
//	starts|ends|tstp|tsfp|atsfp|cltt DATE;       DATE: W YYYY/MM/DD HH:MM:SS [OFFSET]
//	                                             | epoch N | never (UTC; 2038 and later read
//	                                             as never, as dhcpd does)
//	binding state S; next binding state S; rewind binding state S;
//	                                             S: free active expired released abandoned
//	                                             reset backup (bootp, reserved: active + flag)
//	hardware TYPE MAC;  uid "…"|HEX;  client-hostname "…"|NAME;  class NAME;
//	set NAME = VALUE;  ddns-fwd-name|ddns-rev-name VALUE;
//	                                             VALUE: "…" | hex octets a1:b2 | %DECIMAL
//	                                             | true | false
//	option|supersede NAME VALUE;  billing …;  reserved;  dynamic-bootp;  abandoned;
//	on commit|expiry|release [or …] { … }        statements skipped, presence kept
//
// Inside iaaddr and iaprefix blocks (dhcpd's parse_ia_*_declaration), whose
// IA holds only cltt and iaaddr (ia-na, ia-ta) or iaprefix (ia-pd) blocks:
//
//	binding state S;  ends DATE;                 both required; S: free active expired
//	                                             released abandoned
//	preferred-life N;  max-life N;  set NAME = VALUE;  on … { … }
//	anything else                                skipped, as dhcpd skips it
//
// # Refused blocks
//
// dhcpd gives up a whole lease block when one of its statements is one it
// rejects: an unknown word (bootp; alone, hostname, IPv6's preferred-life
// and max-life, a stray ';'), a set whose name is a reserved word or whose
// value is none of the forms above (set x = word;, set x = 12;), an
// unknown binding state, a uid that is not hex, a client-hostname without
// a name, a quoted class. It gives up a whole IA, good addresses too, when
// an address lacks binding state or ends, has a state DHCPv6 does not have
// (backup, reset, bootp, reserved), when a set in it lacks '=' or has such
// a value, or when the IA holds anything but cltt and its address blocks.
// It keeps the earlier block for the address (the IA), and then recovers
// token by token, which usually swallows the next statement whole.
// `timestamp` in a lease stops dhcpd 4.4.3 from starting at all. The
// decoder reproduces all of it (refuse.go) and hands each such block out
// as a *Refused, not an error: the table it leaves is exactly dhcpd's.
// testdata/differential holds the cases, checked against real dhcpd.
//
// Lexical rules: strings are "…" with \ooo octal, \" and C escapes and may
// hold { } ; #; dhcpd escapes control bytes, so a raw newline inside a
// string means the string is broken. # starts a comment outside strings.
// MACs may be unpadded (2:0:0:a:b:c). CR is white space.
//
// Semantics, as dhcpd: the last block for an address wins; IPv6 follows
// IAs (an IA's block replaces its previous one; see Table); a block
// without a binding state is active if it ends in the future or carries
// on-expiry/on-release statements, else free (Lease.Binding); the last
// host statement of a name wins and a deleted one removes it.
//
// Robustness: a statement the parser cannot read, and cannot promise to
// read as dhcpd does (a malformed date, address or hardware address, a
// bad on statement, garbage), is reported as a *SyntaxError carrying its
// line and skipped; decoding resumes at the next line that starts with a
// top-level keyword (dhcpd writes those at column 0 and indents
// everything inside a block), so one bad statement never hides the next.
// A block still open when such a line arrives was torn and is reported as
// such. An unfinished last statement is held (Decoder)
// or reported as *IncompleteError (Close, ParseLeases), never guessed.
// Statements longer than MaxStatement are errors, so garbage cannot make
// the decoder hold an unbounded tail.
package parser
