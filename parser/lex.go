package parser

import "bytes"

// The lexer splits dhcpd's leases syntax into tokens over one byte slice.
// It never copies: a token is a span of the buffer. It knows whether the
// buffer is the end of the input (final); when it is not, a token that
// touches the end of the buffer may be cut short and is reported as tEnd,
// so the caller can wait for more bytes instead of guessing.

type tokKind uint8

const (
	tEnd    tokKind = iota // end of the buffer (or a token it may have cut short)
	tWord                  // a run of bytes that are not space, quotes or punctuation
	tString                // a quoted string; span excludes the quotes
	tLBrace
	tRBrace
	tSemi
	tPunct // , = ( ) and friends, one byte
	tBad   // a malformed token (unterminated string); msg says why
	tTorn  // a top-level keyword starting a line inside a statement
)

// Character classes for the lexer's hot loops.
const (
	cWord  = 0
	cSpace = 1
	cPunct = 2
	cNL    = 3
)

// skipStop marks the bytes skipBlock must look at.
var skipStop = func() (t [256]bool) {
	for _, c := range "\"{}#\n" {
		t[c] = true
	}
	return t
}()

var charClass = func() (t [256]uint8) {
	for _, c := range " \t\r\f\v" {
		t[c] = cSpace
	}
	t['\n'] = cNL
	for _, c := range `{};",=()#` {
		t[c] = cPunct
	}
	return t
}()

type lexer struct {
	b     []byte
	p     int  // read position
	line  int  // line at p (1-based)
	final bool // b ends where the input ends
	// inStmt is set once a statement's first token has been read: from
	// then on a top-level keyword at the start of a line is tTorn.
	inStmt bool
	// mid0: b[0] is not at the start of a line (the decoder consumed
	// part of the line already).
	mid0 bool

	// The current token.
	kind  tokKind
	start int // span of the token's text
	end   int
	tline int  // line of the token
	col0  bool // token starts a line
	esc   bool // tString holds a backslash escape
	msg   string
}

// next reads the following token into the lexer.
func (lx *lexer) next() {
	b, p := lx.b, lx.p
	for p < len(b) {
		c := b[p]
		switch charClass[c] {
		case cSpace:
			p++
			continue
		case cNL:
			p++
			lx.line++
			continue
		}
		if c == '#' {
			i := bytes.IndexByte(b[p:], '\n')
			if i < 0 {
				if lx.final {
					p = len(b)
					break
				}
				lx.p = p
				lx.kind = tEnd
				return
			}
			p += i
			continue
		}
		break
	}
	lx.p = p
	lx.tline = lx.line
	lx.start = p
	lx.col0 = (p == 0 && !lx.mid0) || (p > 0 && b[p-1] == '\n')
	if p >= len(b) {
		lx.kind = tEnd
		return
	}
	c := b[p]
	if charClass[c] == cWord {
		q := p + 1
		for q < len(b) && charClass[b[q]] == cWord {
			q++
		}
		if q == len(b) {
			// More bytes may extend the word. Even at the end of the
			// input no statement ends in a word, so the statement is
			// unfinished either way.
			lx.kind = tEnd
			return
		}
		lx.kind, lx.end, lx.p = tWord, q, q
		if lx.inStmt && lx.col0 && topKeyword(b[p:q]) {
			lx.kind = tTorn
		}
		return
	}
	switch c {
	case '"':
		lx.esc = false
		for q := p + 1; q < len(b); q++ {
			switch b[q] {
			case '"':
				lx.kind, lx.start, lx.end, lx.p = tString, p+1, q, q+1
				return
			case '\\':
				lx.esc = true
				if q+1 < len(b) && b[q+1] == '\n' {
					lx.kind, lx.msg, lx.p = tBad, "unterminated string", q+1
					return
				}
				q++
			case '\n':
				// dhcpd escapes control bytes; a raw newline means the
				// string was cut or the file is not dhcpd's.
				lx.kind, lx.msg, lx.p = tBad, "unterminated string", q
				return
			}
		}
		lx.kind = tEnd
		return
	case '{':
		lx.kind = tLBrace
	case '}':
		lx.kind = tRBrace
	case ';':
		lx.kind = tSemi
	default:
		lx.kind = tPunct
	}
	lx.end, lx.p = p+1, p+1
}

// text is the current token's bytes (a string's without quotes, escapes raw).
func (lx *lexer) text() []byte { return lx.b[lx.start:lx.end] }

// is reports whether the current token is the word w.
func (lx *lexer) is(w string) bool {
	return lx.kind == tWord && string(lx.b[lx.start:lx.end]) == w
}

// skipStatus is how skipBlock ended.
type skipStatus uint8

const (
	skipOK    skipStatus = iota // after the matching '}'
	skipShort                   // the buffer ended first
	skipBad                     // an unterminated string
	skipTorn                    // a top-level keyword began a line first
)

// skipBlock skips from just after a '{' to just after its matching '}',
// honouring strings and comments. A line that starts with a top-level
// keyword ends the skip (skipTorn, lx.p at that line): dhcpd indents
// everything inside a block, so that is the next statement and this block
// was cut short.
func (lx *lexer) skipBlock() skipStatus {
	b, p, depth := lx.b, lx.p, 1
	line := lx.line
	for p < len(b) {
		for p < len(b) && !skipStop[b[p]] {
			p++
		}
		if p == len(b) {
			break
		}
		switch b[p] {
		case '\n':
			line++
			if p+1 < len(b) && charClass[b[p+1]] == cWord && keywordAt(b[p+1:]) {
				lx.p, lx.line = p+1, line
				return skipTorn
			}
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				lx.p, lx.line = p+1, line
				return skipOK
			}
		case '"':
			q := p + 1
			for q < len(b) && b[q] != '"' && b[q] != '\n' {
				if b[q] == '\\' && q+1 < len(b) && b[q+1] != '\n' {
					q++
				}
				q++
			}
			if q >= len(b) {
				return skipShort
			}
			if b[q] == '\n' {
				lx.p, lx.line = q, line
				return skipBad
			}
			p = q
		case '#':
			i := bytes.IndexByte(b[p:], '\n')
			if i < 0 {
				return skipShort
			}
			p += i
			continue
		}
		p++
	}
	return skipShort
}

// keywordAt reports whether b starts with a top-level keyword followed by
// a space.
func keywordAt(b []byte) bool {
	i := 0
	for i < len(b) && i < 24 && charClass[b[i]] == cWord {
		i++
	}
	return i < len(b) && (b[i] == ' ' || b[i] == '\t') && topKeyword(b[:i])
}

// unquote decodes a dhcpd string body: \ooo octal, \" \\ and the C escapes
// dhcpd's lexer knows. The result may be any bytes; without escapes it is
// s itself.
func unquote(s []byte) []byte {
	if bytes.IndexByte(s, '\\') < 0 {
		return s
	}
	return unquoteTo(make([]byte, 0, len(s)), s)
}

// unquoteTo appends the decoded string body s to out.
func unquoteTo(out, s []byte) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			out = append(out, c)
			continue
		}
		i++
		switch c = s[i]; c {
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'b':
			out = append(out, '\b')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v, n := 0, 0
			for n < 3 && i < len(s) && s[i] >= '0' && s[i] <= '7' {
				v = v*8 + int(s[i]-'0')
				i++
				n++
			}
			i--
			out = append(out, byte(v))
		default:
			out = append(out, c)
		}
	}
	return out
}
