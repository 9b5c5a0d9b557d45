package parser

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Blocks dhcpd refuses.
//
// dhcpd 4.4 reads its leases file with the same recursive-descent parser
// as its configuration. When a statement inside a lease block is one it
// rejects, parse_lease_declaration gives the block up (the earlier block
// for the address stays in effect) and the top-level loop,
// lease_file_subparse, carries on from wherever the failed parse left the
// input: it reads a token, and unless that is a top-level keyword it logs
// "Corrupt lease file - possible data loss!" and skips to the next ';' or
// over one balanced '{ … }' (skip_to_semi). Whatever was left of the block
// is consumed that way, one statement at a time, and so is its closing
// '}' — whose skip_to_semi then swallows the whole next statement, usually
// the next lease. parse_ia_na_declaration (and _ta, _pd) give an IA up the
// same way when one of its addresses has no binding state, no ends, or a
// state DHCPv6 does not have, and the same recovery follows.
//
// The parser reproduces both halves: the block is handed out as a
// *Refused statement (not an error: the table it leaves is exactly
// dhcpd's), and the decoder then recovers as dhcpd does, reporting the
// statement dhcpd's recovery swallows as another *Refused. Statements
// dhcpd reads with a warning but keeps (a bad `next binding …`, a
// missing ';' after a value, an unknown statement inside an iaaddr) are
// kept. Statements where dhcpd's behaviour depends on more than the
// token it stops at (a malformed date or hardware address, a bad `on`
// statement, a block torn by a later block) stay syntax errors: the
// decoder cannot promise what dhcpd made of them.

// Refused is a block dhcpd refuses when it loads its leases file, or a
// statement its recovery from one swallows: dhcpd leaves it out of its
// table, keeps any earlier block for the same address (IPv6: for the same
// IA), and logs "Corrupt lease file - possible data loss!". Table.Apply
// records it (Table.Refused) and applies what dhcpd does to other IAs
// while reading a refused IA.
type Refused struct {
	Line int // first line of the refused statement
	// What names the statement: "lease 203.0.113.5", "ia-na" (IA holds
	// the rest), or a swallowed statement's first two words.
	What   string
	Reason string // why dhcpd refuses it; "" for a swallowed statement
	// At is the line of the statement dhcpd stopped at; for a swallowed
	// statement, the line of the refused block its recovery started from.
	At int
	// Swallowed: nothing is wrong with the statement itself; dhcpd's
	// recovery from the refused block before it skips it.
	Swallowed bool
	// Fatal: dhcpd 4.4.3 does not start on this file at all (a
	// `timestamp` statement in a lease hits an internal consistency check
	// in parse_lease_declaration: "Impossible error at confpars.c:3227").
	Fatal bool
	// IP is the address of a refused IPv4 lease block.
	IP netip.Addr
	// IA is a refused IPv6 IA, holding the addresses dhcpd read before it
	// gave up: they still take their addresses from other IAs (dhcpd's
	// cleanup_lease6 runs for each as it is read).
	IA *IA

	// recover: the decoder must run dhcpd's top-level recovery next.
	recover bool
}

// StartLine implements Statement.
func (r *Refused) StartLine() int { return r.Line }

// String describes the refusal for a warning: line, statement, and what
// dhcpd does with it.
func (r *Refused) String() string {
	what := r.What
	if r.IA != nil {
		what = fmt.Sprintf("%s iaid %d duid %s", r.IA.Type, r.IA.IAID, HexString(r.IA.DUID))
	}
	switch {
	case r.Swallowed:
		return fmt.Sprintf("line %d: %s: left out, as dhcpd leaves it out: its recovery from the refused block at line %d skips this statement",
			r.Line, what, r.At)
	case r.Fatal:
		return fmt.Sprintf("line %d: %s: %s (line %d): dhcpd 4.4 does not start on this file (\"Impossible error at confpars.c:3227\"); the block is left out",
			r.Line, what, r.Reason, r.At)
	case r.IA != nil:
		return fmt.Sprintf("line %d: %s: dhcpd refuses the whole IA: %s (line %d); it keeps the IA's earlier block, if any",
			r.Line, what, r.Reason, r.At)
	}
	return fmt.Sprintf("line %d: %s: dhcpd refuses the whole block: %s (line %d); it keeps the address's earlier block, if any",
		r.Line, what, r.Reason, r.At)
}

// refusal is how a statement's parser reports that dhcpd gives the block
// up; dhcpd's own skip over the statement has been applied.
type refusal struct {
	reason string
	line   int
	fatal  bool
}

func (r *refusal) Error() string { return r.reason }

func (p *stmtParser) refuse(line int, format string, args ...any) error {
	return &refusal{reason: clip(fmt.Sprintf(format, args...)), line: line}
}

// refused turns a refusal of the statement being parsed into its
// statement. dhcpd's next token may still be inside the word our lexer
// read last, or pushed back: that token starts dhcpd's recovery, so it is
// consumed here as the recovery would (a token, then skip_to_semi).
func (p *stmtParser) refused(r *refusal, what string, ip netip.Addr, ia *IA) (Statement, error) {
	if p.ds.pending() {
		p.dnext()
		if err := p.dskip(0); err != nil {
			return nil, err
		}
	}
	return &Refused{Line: p.line0, What: what, Reason: r.reason, At: r.line, Fatal: r.fatal,
		IP: ip, IA: ia, recover: !r.fatal}, nil
}

// --- dhcpd's tokens over our lexer ---

// dtok is one token as dhcpd's lexer would read it.
type dtok struct {
	kind dkind
	text []byte // a string's without its quotes
	line int
}

// is reports whether t is the word w, matched as dhcpd matches its
// keywords: case-insensitively.
func (t dtok) is(w string) bool {
	return (t.kind == dKeyword || t.kind == dName || t.kind == dNumOrName) && bytes.EqualFold(t.text, []byte(w))
}

// dstream cuts our lexer's tokens into dhcpd's.
type dstream struct {
	rest []byte // the part of our lexer's last word not read yet
	line int
	back dtok // a token pushed back (dpeek)
	has  bool
}

func (s *dstream) pending() bool { return s.has || len(s.rest) > 0 }

// dnext reads the next dhcpd token.
func (p *stmtParser) dnext() dtok {
	s := &p.ds
	if s.has {
		s.has = false
		return s.back
	}
	if len(s.rest) > 0 {
		k, n := dsplit(s.rest)
		t := dtok{kind: k, text: s.rest[:n], line: s.line}
		s.rest = s.rest[n:]
		return t
	}
	lx := &p.lx
	lx.next()
	t := dtok{line: lx.tline}
	switch lx.kind {
	case tEnd, tTorn, tBad:
	default:
		t.text = lx.text()
	}
	switch lx.kind {
	case tWord:
		s.rest, s.line = lx.text(), lx.tline
		return p.dnext()
	case tString:
		t.kind = dString
	case tSemi:
		t.kind = dSemi
	case tLBrace:
		t.kind = dLBrace
	case tRBrace:
		t.kind = dRBrace
	case tPunct:
		t.kind = dPunct
	case tTorn:
		t.kind = dTorn
	case tBad:
		t.kind = dBad
	default:
		t.kind = dEnd
	}
	return t
}

// dpeek returns the next dhcpd token without consuming it.
func (p *stmtParser) dpeek() dtok {
	t := p.dnext()
	p.ds.back, p.ds.has = t, true
	return t
}

// dword makes the word our lexer just read the next dhcpd tokens.
func (p *stmtParser) dword() {
	p.ds.rest, p.ds.line = p.lx.text(), p.lx.tline
}

// dfail turns a token that ends dhcpd's reading of a statement early
// (the end of the buffer, a torn block, a bad token) into our error.
func (p *stmtParser) dfail(t dtok) error {
	lx := &p.lx
	switch t.kind {
	case dEnd:
		return errShort
	case dTorn:
		lx.p, lx.line = lx.start, lx.tline
		return p.torn()
	case dBad:
		return p.fail("%s", lx.msg)
	}
	return nil
}

// stops reports whether t is a token dhcpd's parse cannot go past.
func (t dtok) stops() bool { return t.kind == dEnd || t.kind == dTorn || t.kind == dBad }

// dskip is dhcpd's skip_to_rbrace(depth) — skip_to_semi when depth is 0:
// through the next ';' outside braces or the '}' that closes depth
// blocks, counting braces, from the next token on.
func (p *stmtParser) dskip(depth int) error {
	for {
		t := p.dnext()
		switch t.kind {
		case dRBrace:
			if depth > 0 {
				depth--
			}
			if depth == 0 {
				return nil
			}
		case dLBrace:
			depth++
		case dSemi:
			if depth == 0 {
				return nil
			}
		case dEnd, dTorn, dBad:
			return p.dfail(t)
		}
	}
}

// dsemi is dhcpd's parse_semi where its result is ignored: anything but
// ';' is warned about and skipped, and the statement stands.
func (p *stmtParser) dsemi() error {
	switch t := p.dnext(); {
	case t.kind == dSemi:
		return nil
	case t.stops():
		return p.dfail(t)
	}
	return p.dskip(0)
}

// skipFrom skips as dhcpd's skip_to_rbrace(depth) does when its first
// token is the one our lexer has just read.
func (p *stmtParser) skipFrom(depth int) error {
	lx := &p.lx
	switch lx.kind {
	case tRBrace:
		if depth > 0 {
			depth--
		}
		if depth == 0 {
			return nil
		}
	case tLBrace:
		depth++
	case tSemi:
		if depth == 0 {
			return nil
		}
	}
	return p.dskip(depth)
}

// --- IPv4 lease statements dhcpd may refuse ---

// stateStmt reads `binding state S;`, `next binding state S;` or
// `rewind binding state S;` after its first word (kw) into *dst. dhcpd
// skips a statement missing `binding` or `state` and keeps the block, but
// refuses the block for an unknown state name.
func (p *stmtParser) stateStmt(l *Lease, kw string, dst *State) error {
	lx := &p.lx
	line := lx.tline
	// The form dhcpd writes, without the general machinery.
	prefix := " state "
	if kw != "binding" {
		prefix = " binding state "
	}
	if rest := lx.b[lx.p:]; len(rest) > len(prefix) && string(rest[:len(prefix)]) == prefix {
		save := lx.p
		lx.p += len(prefix) - 1 // fastWord takes the space
		if w, ok := p.fastWord(); ok {
			if s, ok := parseStateBytes(w); ok {
				*dst = s
				return nil
			}
		}
		lx.p = save
	}
	if kw != "binding" {
		switch t := p.dnext(); {
		case t.stops():
			return p.dfail(t)
		case !t.is("binding"):
			return p.dskip(0) // dhcpd: "expecting 'binding'"; the block stands
		}
	}
	switch t := p.dnext(); {
	case t.stops():
		return p.dfail(t)
	case !t.is("state"):
		return p.dskip(0) // "expecting 'state'"; the block stands
	}
	t := p.dnext()
	if t.stops() {
		return p.dfail(t)
	}
	s, ok := StateNone, t.kind == dKeyword
	if ok {
		switch w := lower(t.text); string(w) {
		case "bootp":
			s, l.Bootp = StateActive, true
		case "reserved":
			s, l.Reserved = StateActive, true
		default:
			s, ok = parseStateBytes(w)
		}
	}
	if !ok {
		if err := p.dskip(0); err != nil {
			return err
		}
		return p.refuse(line, "unknown binding state %q", t.text)
	}
	*dst = s
	return p.dsemi()
}

// uidStmt reads `uid ID;` after the keyword: a string, or hex octets
// (dhcpd's parse_numeric_aggregate, which takes any number of hex digits
// per octet and keeps the low byte).
func (p *stmtParser) uidStmt(l *Lease) error {
	lx := &p.lx
	line := lx.tline
	lx.next()
	switch lx.kind {
	case tString:
		l.UID = unquoteTo(l.inline[8:8:16], lx.text())
		return p.dsemi()
	case tWord:
		if b, ok := parseHexTo(l.inline[8:8:16], lx.text()); ok {
			l.UID = b
			return p.dsemi()
		}
		p.dword()
	case tEnd, tTorn, tBad:
		return p.unexpected("an identifier")
	default:
		// dhcpd takes the token as the first number, fails, skips.
		if err := p.skipFrom(0); err != nil {
			return err
		}
		return p.refuse(line, "uid: %q is not an identifier", lx.text())
	}
	var uid []byte
	for {
		t := p.dnext()
		if t.kind != dNumber && t.kind != dNumOrName {
			if t.stops() {
				return p.dfail(t)
			}
			if err := p.dskip(0); err != nil {
				return err
			}
			return p.refuse(line, "uid: %q is not an identifier", t.text)
		}
		uid = append(uid, convertHex(t.text))
		if n := p.dpeek(); n.kind != dPunct || n.text[0] != ':' {
			break
		}
		p.dnext()
	}
	l.UID = uid
	return p.dsemi()
}

// convertHex is dhcpd's convert_num in base 16 for one octet: digits up
// to the first that is not hex, the low byte kept.
func convertHex(b []byte) byte {
	var v uint32
	for _, c := range b {
		d, ok := HexDigit(c)
		if !ok {
			break
		}
		v = v*16 + uint32(d)
	}
	return byte(v)
}

// classStmt reads `class NAME;` after the keyword, which dhcpd reads and
// ignores. A number or a string where the name should be makes dhcpd
// refuse the block, skipping to its end.
func (p *stmtParser) classStmt() error {
	line := p.lx.tline
	t := p.dnext()
	switch {
	case t.kind.identifier():
		return p.dsemi()
	case t.stops():
		return p.dfail(t)
	case t.kind != dSemi:
		if err := p.dskip(1); err != nil {
			return err
		}
	}
	return p.refuse(line, "class: %q is not a class name", t.text)
}

// hostnameStmt reads `client-hostname NAME;` after the keyword: a string,
// or a dotted name dhcpd's parse_host_name reads token by token.
func (p *stmtParser) hostnameStmt() error {
	lx := &p.lx
	line := lx.tline
	start := len(p.strs)
	lx.next()
	switch lx.kind {
	case tString:
		p.strs = unquoteTo(p.strs, lx.text())
		// parse_string reads the ';' itself and fails without it.
		switch t := p.dnext(); {
		case t.stops():
			return p.dfail(t)
		case t.kind != dSemi:
			if err := p.dskip(0); err != nil {
				return err
			}
			return p.refuse(line, "client-hostname: %q after the name", t.text)
		}
	case tWord:
		p.dword()
		w := lx.text()
		named := false
		for {
			t := p.dpeek()
			if !t.kind.identifier() && t.kind != dNumber {
				break
			}
			p.dnext()
			p.strs, named = append(p.strs, t.text...), true
			if d := p.dpeek(); d.kind == dPunct && d.text[0] == '.' {
				p.dnext()
				p.strs = append(p.strs, '.')
				continue
			}
			break
		}
		if !named {
			if err := p.dskip(0); err != nil {
				return err
			}
			return p.refuse(line, "client-hostname: %q is not a host name", w)
		}
		if err := p.dsemi(); err != nil {
			return err
		}
	case tEnd, tTorn, tBad:
		return p.unexpected("a host name")
	default:
		if err := p.skipFrom(0); err != nil {
			return err
		}
		return p.refuse(line, "client-hostname: %q is not a host name", lx.text())
	}
	// dhcpd keeps the name as a C string: a NUL ends it.
	end := len(p.strs)
	if i := bytes.IndexByte(p.strs[start:], 0); i >= 0 {
		end = start + i
	}
	p.host, p.hasHost = [2]int{start, end}, true
	return nil
}

// setStmt reads `set NAME = VALUE;` after the keyword into p.vars. In a
// lease block (v6 false) dhcpd refuses the block for a name it cannot
// take or a missing '='; in an iaaddr it skips a bad name and keeps the
// address, but refuses the IA without '='. A value it cannot read makes
// it refuse either.
func (p *stmtParser) setStmt(v6 bool) error {
	lx := &p.lx
	line := lx.tline
	// The names MAAS writes on every lease, without the general path.
	lx.next()
	var name string
	if lx.kind == tWord {
		if name = knownVarName(lx.text()); name == "" {
			p.dword()
		}
	} else {
		lx.p, lx.line = lx.start, lx.tline // read it again as dhcpd's token
	}
	if name == "" {
		t := p.dnext()
		if t.stops() {
			return p.dfail(t)
		}
		if t.kind != dName && t.kind != dNumOrName {
			if err := p.dskip(0); err != nil {
				return err
			}
			if v6 {
				return nil
			}
			return p.refuse(line, "set: %q cannot be a variable name", t.text)
		}
		name = string(t.text)
	}
	switch t := p.dnext(); {
	case t.stops():
		return p.dfail(t)
	case t.kind != dPunct || t.text[0] != '=':
		if !v6 {
			if err := p.dskip(0); err != nil {
				return err
			}
		}
		return p.refuse(line, "set %s: expected '=', found %q", name, t.text)
	}
	return p.bindingValue(name, line)
}

// bindingValue is dhcpd's parse_binding_value and the parse_semi after
// it: a string, hex octets (a1:b2, never starting with a decimal number),
// %DECIMAL, or true/false. Anything else makes dhcpd refuse the block.
// The value is stored as dhcpd holds it and writes it back: a string or
// hex octets as their bytes, true and false in lower case, %DECIMAL as
// written.
func (p *stmtParser) bindingValue(name string, line int) error {
	lx := &p.lx
	// The form dhcpd writes: a string.
	if !p.ds.pending() {
		save, saveLine := lx.p, lx.line
		if lx.next(); lx.kind == tString {
			p.addVar(name, unquote(lx.text()))
			return p.dsemi()
		}
		lx.p, lx.line = save, saveLine
	}
	t := p.dpeek()
	var val []byte
	switch {
	case t.kind == dString:
		p.dnext()
		val = unquote(t.text)
	case t.kind == dNumOrName:
		p.dnext()
		val = []byte{convertHex(t.text)}
		for {
			if n := p.dpeek(); n.kind != dPunct || n.text[0] != ':' {
				break
			}
			p.dnext()
			x := p.dnext()
			if x.kind != dNumber && x.kind != dNumOrName {
				if x.stops() {
					return p.dfail(x)
				}
				// parse_numeric_aggregate skips to ';', then so does
				// parse_binding_value, once more.
				if err := p.dskip(0); err != nil {
					return err
				}
				if err := p.dskip(0); err != nil {
					return err
				}
				return p.refuse(line, "set %s: %q is not a hex octet", name, x.text)
			}
			val = append(val, convertHex(x.text))
		}
	case t.kind == dPunct && t.text[0] == '%':
		p.dnext()
		x := p.dnext()
		if x.kind != dNumber {
			if x.stops() {
				return p.dfail(x)
			}
			if x.kind != dSemi {
				if err := p.dskip(0); err != nil {
					return err
				}
			}
			return p.refuse(line, "set %s: %q is not %%DECIMAL", name, "%"+string(x.text))
		}
		val = append([]byte{'%'}, x.text...)
	case t.kind == dName:
		p.dnext()
		if !t.is("true") && !t.is("false") {
			if err := p.dskip(0); err != nil {
				return err
			}
			return p.refuse(line, "set %s: %q is not a value dhcpd reads (a string, hex octets, %%DECIMAL, true or false)", name, t.text)
		}
		val = lower(t.text)
	case t.stops():
		p.dnext()
		return p.dfail(t)
	default:
		// "expecting a constant value": a ';' is left for the recovery.
		if t.kind != dSemi {
			if err := p.dskip(0); err != nil {
				return err
			}
		}
		return p.refuse(line, "set %s: %q is not a value dhcpd reads (a string, hex octets, %%DECIMAL, true or false)", name, t.text)
	}
	p.addVar(name, val)
	return p.dsemi()
}

// knownVarName interns the variable names MAAS and dhcpd write on every
// lease, all of them names dhcpd takes; "" for any other.
func knownVarName(b []byte) string {
	switch string(b) {
	case "clhw", "clip", "cllt", "clht", "vendor-class-identifier", "ddns-fwd-name", "ddns-rev-name", "ddns-txt":
		return varName(b)
	}
	return ""
}

// addVar appends a set binding to the block's encoded variables.
func (p *stmtParser) addVar(name string, v []byte) {
	p.vars = binary.AppendUvarint(p.vars, uint64(len(name)))
	p.vars = append(p.vars, name...)
	p.vars = binary.AppendUvarint(p.vars, uint64(len(v)))
	p.vars = append(p.vars, v...)
}

// --- IPv6 ---

// iaBody reads the block of an iaaddr or iaprefix as dhcpd's
// parse_ia_*_declaration does: binding state, preferred-life, max-life,
// ends, set and on; anything else is skipped with the address kept. The
// IA is refused for a missing or non-DHCPv6 binding state, a missing ends,
// a `binding` not followed by `state`, and a set dhcpd cannot read.
func (p *stmtParser) iaBody(l *Lease) error {
	p.vars, p.strs, p.hasHost = p.vars[:0], p.strs[:0], false
	hasState, hasEnds := false, false
	for {
		t := p.dnext()
		line := t.line
		switch {
		case t.kind == dRBrace:
			p.finishStrings(l)
			if !hasState {
				return p.refuse(p.lx.tline, "%s has no binding state", p.where())
			}
			if !hasEnds {
				return p.refuse(p.lx.tline, "%s has no ends", p.where())
			}
			return nil
		case t.stops():
			return p.dfail(t)
		case t.is("binding"):
			if s := p.dnext(); !s.is("state") {
				if s.stops() {
					return p.dfail(s)
				}
				if err := p.dskip(0); err != nil {
					return err
				}
				return p.refuse(line, "%s: binding without state", p.where())
			}
			s := p.dnext()
			st, ok := StateNone, s.kind == dKeyword
			if ok {
				st, ok = parseStateBytes(lower(s.text))
			}
			if !ok || st == StateReset || st == StateBackup {
				if s.stops() {
					return p.dfail(s)
				}
				if err := p.dskip(0); err != nil {
					return err
				}
				return p.refuse(line, "%s: binding state %q, which DHCPv6 does not have", p.where(), s.text)
			}
			l.State, hasState = st, true
			// dhcpd warns about anything but ';' here, and has read it.
			if n := p.dnext(); n.stops() {
				return p.dfail(n)
			}
		case t.is("preferred-life"), t.is("max-life"):
			n := p.dnext()
			if n.kind != dNumber {
				if n.stops() {
					return p.dfail(n)
				}
				if err := p.dskip(0); err != nil {
					return err
				}
				continue
			}
			v, _ := parseUint(n.text, 1<<32-1)
			if t.is("max-life") {
				l.MaxLife = uint32(v)
			} else {
				l.PreferredLife = uint32(v)
			}
			if s := p.dpeek(); s.kind == dSemi {
				p.dnext()
			}
		case t.is("ends") && !p.ds.pending():
			var err error
			if l.Ends, err = p.date(); err != nil {
				return err
			}
			hasEnds = true
		case t.is("set"):
			if err := p.setStmt(true); err != nil {
				return err
			}
		case t.is("on") && !p.ds.pending():
			on, err := p.on()
			if err != nil {
				return err
			}
			l.On |= on
		default:
			// "expecting ia_na contents": skipped, the address kept.
			if err := p.dskip(0); err != nil {
				return err
			}
		}
	}
}

// iaKind names what an IA holds: iaprefix in ia-pd, iaaddr otherwise.
func iaKind(typ string) string {
	if typ == "ia-pd" {
		return "iaprefix"
	}
	return "iaaddr"
}

// --- dhcpd's recovery after a refused block ---

// dhcpdTopKeyword reports whether dhcpd's lease_file_subparse starts a
// statement at w (any case); any other token there is corrupt to it.
func dhcpdTopKeyword(w []byte) bool {
	if len(w) > 20 {
		return false
	}
	switch string(lower(w)) {
	case "lease", "ia-na", "ia-ta", "ia-pd", "class", "subclass", "host", "group",
		"failover", "server-duid", "authoring-byte-order":
		return true
	}
	return false
}
