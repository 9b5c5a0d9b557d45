package main

import "strconv"

// cleanResult says what cleanLeases did.
type cleanResult struct {
	removed int // host statements removed
	// stopped is the offset at which the scan met something it does not
	// understand (see stopWhy), -1 when it read the whole input. From
	// there on the input is copied as it is.
	stopped int
	stopWhy string
}

// cleanLeases returns in without its top-level `host NAME { … }`
// statements, each with the line end that follows its closing brace:
// what MAAS's "maas-dhcp-helper clean" removes, found by a scanner that
// knows dhcpd's quoting, comments and nesting instead of a regular
// expression. Everything else is kept byte for byte. When nothing is
// removed it returns in itself.
func cleanLeases(in []byte) ([]byte, cleanResult) {
	spans, r := hostStatements(in)
	if len(spans) == 0 {
		return in, r
	}
	out := make([]byte, 0, len(in))
	kept := 0
	for _, sp := range spans {
		out = append(out, in[kept:sp.start]...)
		kept = sp.end
	}
	return append(out, in[kept:]...), r
}

// span is in[start:end].
type span struct{ start, end int }

// hostStatements finds the host statements cleanLeases removes.
//
// The scan stops, and the rest is left as it is, at the first thing that
// makes statement boundaries uncertain: a raw newline inside a quoted
// string (dhcpd escapes control bytes, so the string is broken), a '}'
// closing nothing, or a statement still open at the end of the input (a
// torn write). Leaving a host statement in place is harmless to dhcpd;
// removing anything that is not one would lose leases. One limit: the
// scan goes by braces and does not know which blocks dhcpd refuses, and
// dhcpd's recovery from a refused block skips the statement after it; a
// host removed from there moves that skip onto the next statement
// (TestCleanAfterRefusedBlock). dhcpd's rewrite at each start keeps
// none of the blocks it refused.
func hostStatements(in []byte) ([]span, cleanResult) {
	r := cleanResult{stopped: -1}
	var spans []span
	for i := skipBlank(in, 0); i < len(in); i = skipBlank(in, i) {
		end, braced, bad, why := statementEnd(in, i)
		if why != "" {
			r.stopped, r.stopWhy = bad, why
			break
		}
		if braced && isHostKeyword(in, i) {
			switch {
			case end < len(in) && in[end] == '\n':
				end++
			case end+1 < len(in) && in[end] == '\r' && in[end+1] == '\n':
				end += 2
			}
			spans = append(spans, span{i, end})
		}
		i = end
	}
	r.removed = len(spans)
	return spans, r
}

// isHostKeyword reports whether the statement at in[i:] starts with the
// keyword host, followed by what may come between it and the host's
// name: white space, a comment, or the quote of a quoted name. dhcpd's
// lexer ends a word at any byte but a letter, a digit, '-' and '_'
// (read_num_or_name, common/conflex.c), and takes keywords in any case
// (intern: tolower and strcasecmp), so "HOST" is a host statement to
// dhcpd as well, though dhcpd itself writes "host"; ASCII letters fold
// with 0x20.
func isHostKeyword(in []byte, i int) bool {
	if len(in)-i <= 4 {
		return false
	}
	if c := in[i+4]; !isBlank(c) && c != '#' && c != '"' {
		return false
	}
	for k, c := range []byte("host") {
		if in[i+k]|0x20 != c {
			return false
		}
	}
	return true
}

// statementEnd finds the end of the top-level statement starting at
// in[i]: just after its ';' or after the '}' that closes its outermost
// block. braced says it had a block. When the statement's extent cannot
// be known, why says so and bad is the offset of the trouble.
func statementEnd(in []byte, i int) (end int, braced bool, bad int, why string) {
	depth := 0
	for j := i; j < len(in); j++ {
		switch in[j] {
		case '"':
			k, ok := stringEnd(in, j)
			if !ok {
				if k == len(in) {
					return 0, false, i, "unfinished statement at the end of the file"
				}
				return 0, false, k, "newline inside a quoted string"
			}
			j = k
		case '#':
			for j < len(in) && in[j] != '\n' {
				j++
			}
		case '{':
			depth++
			braced = true
		case '}':
			if depth == 0 {
				return 0, false, j, "'}' closes no block"
			}
			depth--
			if depth == 0 {
				return j + 1, braced, 0, ""
			}
		case ';':
			if depth == 0 {
				return j + 1, braced, 0, ""
			}
		}
	}
	return 0, false, i, "unfinished statement at the end of the file"
}

// stringEnd returns the offset of the '"' closing the string that opens
// at in[j]. A backslash escapes the next byte. It fails at a raw newline
// (the offset returned) or at the end of the input (len(in)).
func stringEnd(in []byte, j int) (int, bool) {
	for k := j + 1; k < len(in); k++ {
		switch in[k] {
		case '"':
			return k, true
		case '\n':
			return k, false
		case '\\':
			if k+1 < len(in) && in[k+1] == '\n' {
				return k + 1, false
			}
			k++
		}
	}
	return len(in), false
}

// skipBlank skips white space and comments from in[i].
func skipBlank(in []byte, i int) int {
	for i < len(in) {
		switch c := in[i]; {
		case isBlank(c):
			i++
		case c == '#':
			for i < len(in) && in[i] != '\n' {
				i++
			}
		default:
			return i
		}
	}
	return i
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// lineAt is the 1-based line number of offset off in b.
func lineAt(b []byte, off int) int {
	n := 1
	for _, c := range b[:off] {
		if c == '\n' {
			n++
		}
	}
	return n
}

// stopNote describes where and why the scan stopped, for a warning.
func (r cleanResult) stopNote(in []byte) string {
	return "line " + strconv.Itoa(lineAt(in, r.stopped)) + ": " + r.stopWhy + "; the file from there on was left as it was"
}
