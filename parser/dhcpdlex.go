package parser

// How ISC dhcpd 4.4's own lexer (common/conflex.c) would cut the words our
// lexer reads. Our lexer keeps runs like 02:00:5e or foo.bar as one word;
// dhcpd splits words at every byte that is not a letter, digit, '-' or
// '_', and tells numbers, hex-like names, names and the words it reserves
// apart. Which of those a token is decides whether dhcpd accepts a
// `set` value, a variable name, a uid or a class name, and so whether it
// refuses the whole block (see refuse.go).

// dkind is the kind of a dhcpd token.
type dkind uint8

const (
	dEnd       dkind = iota // more input needed, or the end
	dNumber                 // decimal digits only (NUMBER)
	dNumOrName              // hex digits only, e.g. "a1" or "fab" (NUMBER_OR_NAME)
	dName                   // any other run of letters, digits, '-' and '_' (NAME)
	dKeyword                // a word dhcpd reserves (see dhcpdKeywords)
	dString                 // a quoted string
	dSemi                   // ;
	dLBrace                 // {
	dRBrace                 // }
	dPunct                  // any other single byte: . : % = , ( ) …
	dTorn                   // a top-level keyword starting a line inside a block (lexer's tTorn)
	dBad                    // a malformed token (lexer's tBad)
)

// identifier reports whether dhcpd's is_identifier accepts the kind:
// names and reserved words, not numbers, strings or punctuation.
func (k dkind) identifier() bool { return k == dNumOrName || k == dName || k == dKeyword }

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool  { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isXDigit(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }
func isNameByte(c byte) bool {
	return isDigit(c) || isAlpha(c) || c == '-' || c == '_'
}

// dsplit returns the kind and length of the dhcpd token that starts w
// (w non-empty, from one of our lexer's words).
func dsplit(w []byte) (dkind, int) {
	c := w[0]
	switch {
	case isDigit(c) || c == '-':
		// read_number: NUMBER, promoted to NUMBER_OR_NAME by hex digits
		// and to NAME by anything else that may be in a name; "0x" then a
		// hex digit makes NUMBER_OR_NAME again.
		k, i := dNumber, 1
	scan:
		for ; i < len(w); i++ {
			c := w[i]
			switch {
			case k == dNumber && isDigit(c):
			case k != dName && isXDigit(c):
				k = dNumOrName
			case i == 2 && isXDigit(c) && w[0] == '0' && w[1]|0x20 == 'x':
				k = dNumOrName
			case isNameByte(c):
				k = dName
			default:
				break scan
			}
		}
		if i == 1 && c == '-' {
			return dPunct, 1 // MINUS
		}
		return k, i
	case isAlpha(c):
		// read_num_or_name: NUMBER_OR_NAME unless a byte after the first
		// is not a hex digit; then reserved words are looked up.
		k, i := dNumOrName, 1
		for ; i < len(w) && isNameByte(w[i]); i++ {
			if !isXDigit(w[i]) {
				k = dName
			}
		}
		if isKeyword(w[:i]) {
			k = dKeyword
		}
		return k, i
	}
	return dPunct, 1
}

// isKeyword reports whether dhcpd reserves w (case-insensitively, as
// dhcpd matches them).
func isKeyword(w []byte) bool {
	if len(w) > 40 {
		return false
	}
	var buf [40]byte
	low := buf[:len(w)]
	for i, c := range w {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	_, ok := dhcpdKeywords[string(low)]
	return ok
}

// lower returns w in lower case, reusing w's bytes when it already is.
func lower(w []byte) []byte {
	for i, c := range w {
		if c >= 'A' && c <= 'Z' {
			out := make([]byte, len(w))
			copy(out, w[:i])
			for j := i; j < len(w); j++ {
				c := w[j]
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				out[j] = c
			}
			return out
		}
	}
	return w
}

// dhcpdKeywords are the words dhcpd 4.4.3's lexer reserves (intern() in
// common/conflex.c): they are tokens of their own, never a NAME, so dhcpd
// refuses them as a variable name or a set value.
var dhcpdKeywords = map[string]struct{}{
	"abandoned": {}, "active": {}, "add": {}, "address": {}, "after": {}, "algorithm": {},
	"alias": {}, "all": {}, "allow": {}, "also": {}, "and": {}, "anycast-mac": {}, "append": {},
	"array": {}, "at": {}, "atsfp": {}, "authenticated": {}, "authentication": {},
	"authoring-byte-order": {}, "authoritative": {}, "auto-partner-down": {},
	"backoff-cutoff": {}, "backup": {}, "balance": {}, "big-endian": {}, "billing": {},
	"binary-to-ascii": {}, "binding": {}, "boolean": {}, "boot-unknown-clients": {},
	"booting": {}, "bootp": {}, "bound": {}, "break": {}, "case": {}, "check": {}, "ciaddr": {},
	"class": {}, "client-hostname": {}, "client-identifier": {}, "client-state": {},
	"client-updates": {}, "clients": {}, "close": {}, "cltt": {}, "code": {}, "commit": {},
	"communications-interrupted": {}, "compressed": {}, "concat": {}, "config-option": {},
	"conflict-done": {}, "connect": {}, "create": {}, "db-time-format": {}, "debug": {},
	"declines": {}, "default": {}, "default-duid": {}, "default-lease-time": {}, "define": {},
	"defined": {}, "delete": {}, "deleted": {}, "deny": {}, "disconnect": {},
	"do-forward-update": {}, "do-forward-updates": {}, "domain": {}, "domain-list": {},
	"domain-name": {}, "duplicates": {}, "dynamic": {}, "dynamic-bootp": {},
	"dynamic-bootp-lease-cutoff": {}, "dynamic-bootp-lease-length": {}, "else": {}, "elsif": {},
	"en": {}, "encapsulate": {}, "encode-int": {}, "ends": {}, "epoch": {}, "error": {},
	"ethernet": {}, "eval": {}, "execute": {}, "exists": {}, "expire": {}, "expired": {},
	"expiry": {}, "extract-int": {}, "failover": {}, "fatal": {}, "fddi": {}, "filename": {},
	"fixed-address": {}, "fixed-address6": {}, "fixed-prefix6": {}, "formerr": {}, "free": {},
	"function": {}, "get-lease-hostnames": {}, "gethostbyname": {}, "gethostname": {},
	"giaddr": {}, "group": {}, "hardware": {}, "hash": {}, "hba": {}, "help": {}, "hex": {},
	"host": {}, "host-decl-name": {}, "host-identifier": {}, "hostname": {}, "ia-na": {},
	"ia-pd": {}, "ia-ta": {}, "iaaddr": {}, "iaprefix": {}, "identifier": {}, "if": {},
	"ignore": {}, "include": {}, "infiniband": {}, "infinite": {}, "info": {},
	"initial-delay": {}, "initial-interval": {}, "integer": {}, "interface": {}, "ip-address": {},
	"ip6-address": {}, "is": {}, "key": {}, "key-algorithm": {}, "known": {}, "known-clients": {},
	"lcase": {}, "lease": {}, "lease-id-format": {}, "lease-time": {}, "lease6": {},
	"leased-address": {}, "leasequery": {}, "length": {}, "let": {}, "limit": {},
	"little-endian": {}, "ll": {}, "llt": {}, "load": {}, "local": {}, "log": {}, "match": {},
	"max": {}, "max-balance": {}, "max-lease-misbalance": {}, "max-lease-ownership": {},
	"max-lease-time": {}, "max-life": {}, "max-response-delay": {}, "max-transmit-idle": {},
	"max-unacked-updates": {}, "mclt": {}, "media": {}, "medium": {}, "members": {},
	"min-balance": {}, "min-lease-time": {}, "min-secs": {}, "my": {}, "nameserver": {},
	"netmask": {}, "never": {}, "new": {}, "next": {}, "next-server": {}, "no": {}, "noerror": {},
	"normal": {}, "not": {}, "notauth": {}, "notimp": {}, "notzone": {}, "null": {},
	"nxdomain": {}, "nxrrset": {}, "octal": {}, "of": {}, "omapi": {}, "on": {},
	"one-lease-per-client": {}, "open": {}, "option": {}, "or": {}, "owner": {}, "packet": {},
	"parse-vendor-option": {}, "partner": {}, "partner-down": {}, "paused": {}, "peer": {},
	"pick": {}, "pick-first-value": {}, "pool": {}, "pool6": {}, "port": {},
	"potential-conflict": {}, "preferred-life": {}, "prefix6": {}, "prepend": {}, "primary": {},
	"primary6": {}, "pseudo": {}, "range": {}, "range6": {}, "rebind": {}, "reboot": {},
	"recontact-interval": {}, "recover": {}, "recover-done": {}, "recover-wait": {},
	"refresh": {}, "refused": {}, "reject": {}, "release": {}, "released": {}, "remove": {},
	"renew": {}, "request": {}, "require": {}, "reserved": {}, "reset": {},
	"resolution-interrupted": {}, "retry": {}, "return": {}, "reverse": {}, "rewind": {},
	"script": {}, "search": {}, "secondary": {}, "secondary6": {}, "seconds": {}, "secret": {},
	"select": {}, "select-timeout": {}, "send": {}, "server": {}, "server-duid": {},
	"server-identifier": {}, "server-name": {}, "servfail": {}, "set": {}, "shared-network": {},
	"shutdown": {}, "siaddr": {}, "signed": {}, "size": {}, "space": {}, "spawn": {}, "split": {},
	"starts": {}, "startup": {}, "state": {}, "static": {}, "string": {}, "subclass": {},
	"subnet": {}, "subnet6": {}, "substring": {}, "suffix": {}, "supersede": {}, "switch": {},
	"temporary": {}, "text": {}, "timeout": {}, "timestamp": {}, "token-ring": {},
	"transmission": {}, "tsfp": {}, "tstp": {}, "ucase": {}, "uid": {}, "unauthenticated": {},
	"unknown": {}, "unknown-clients": {}, "unknown-state": {}, "unset": {}, "unsigned": {},
	"update": {}, "use-host-decl-names": {}, "use-lease-addr-for-default-route": {},
	"user-class": {}, "v6relay": {}, "v6relopt": {}, "vendor": {}, "vendor-class": {},
	"width": {}, "with": {}, "yiaddr": {}, "yxdomain": {}, "yxrrset": {}, "zerolen": {},
	"zone": {},
}
