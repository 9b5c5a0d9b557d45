package parser

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"
)

// errShort means the buffer ended inside a statement.
var errShort = errors.New("short buffer")

// resumeError is a syntax error after which decoding resumes at a known
// position (a top-level keyword that cut the statement short) instead of
// skipping to the next statement.
type resumeError struct {
	SyntaxError
	at, line int
}

// stmtParser parses one top-level statement from the lexer. ctx and arg
// name what is being parsed, for error messages only; arg aliases the
// buffer and is formatted only when an error is built.
type stmtParser struct {
	lx    lexer
	order binary.ByteOrder
	// hostOrder keeps order fixed at the host's whatever the file says
	// (parallel segments: the merge corrects IAIDs in file order).
	hostOrder bool
	line0     int // first line of the statement
	ctx       string
	arg       []byte
	// Per lease block: the hostname and the encoded set statements (see
	// Lease.vars), materialised as one string when the block ends.
	strs    []byte
	vars    []byte
	host    [2]int
	hasHost bool

	memo     [4]memoBlock
	memoNext int

	// ds reads tokens as dhcpd's lexer would, where what dhcpd does with
	// a statement depends on it (refuse.go).
	ds dstream
}

// memoBlock is a block skipBlock skipped: its bytes from after '{'
// through '}', and the newlines in them.
type memoBlock struct {
	body  []byte
	lines int
}

func (p *stmtParser) where() string {
	if p.arg == nil {
		return shown(p.ctx)
	}
	return shown(p.ctx + " " + string(p.arg))
}

// maxMsg bounds the text of a file quoted in an error: an error about a
// megabyte of garbage must not hold the megabyte.
const maxMsg = 120

// clip shortens s to at most maxMsg bytes, marking the cut.
func clip(s string) string {
	if len(s) <= maxMsg {
		return s
	}
	return strings.ToValidUTF8(s[:maxMsg], "") + "…"
}

// shown is text of the file as an error shows it bare (the statement,
// its address or name): clipped, and quoted as %q quotes a token when it
// holds anything a terminal would not print as it is — control bytes,
// invalid UTF-8 — so that a garbage file cannot put escape sequences on
// the operator's terminal.
func shown(s string) string {
	s = clip(s)
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// fail builds a syntax error at the current token.
func (p *stmtParser) fail(format string, args ...any) error {
	return &SyntaxError{Line: p.lx.tline, Msg: p.where() + ": " + clip(fmt.Sprintf(format, args...))}
}

// unexpected turns the current token into the right error: more input
// needed, a torn block, a bad token, or a plain syntax error.
func (p *stmtParser) unexpected(want string) error {
	lx := &p.lx
	switch lx.kind {
	case tEnd:
		return errShort
	case tTorn:
		lx.p, lx.line = lx.start, lx.tline
		return p.torn()
	case tBad:
		return p.fail("%s", lx.msg)
	}
	return p.fail("expected %s, found %q", want, lx.text())
}

// torn reports a statement cut short by a top-level keyword line at lx.p.
func (p *stmtParser) torn() error {
	return &resumeError{
		SyntaxError: SyntaxError{Line: p.line0,
			Msg: fmt.Sprintf("%s: not closed before line %d (torn write?)", p.where(), p.lx.line)},
		at: p.lx.p, line: p.lx.line,
	}
}

// parseTop parses the statement whose first token is current. It returns
// a nil Statement for statements skipped on purpose.
func (p *stmtParser) parseTop() (Statement, error) {
	lx := &p.lx
	p.line0, p.ctx, p.arg = lx.tline, "", nil
	p.ds = dstream{}
	switch lx.kind {
	case tSemi:
		return nil, nil
	case tWord:
	case tBad:
		return nil, &SyntaxError{Line: lx.tline, Msg: lx.msg}
	default:
		return nil, &SyntaxError{Line: lx.tline, Msg: fmt.Sprintf("unexpected %q at top level", clip(string(lx.text())))}
	}
	w := lx.text()
	if p.ctx = keywordName(w); p.ctx == string(w) {
		// dhcpd matches its keywords case-insensitively.
		p.ctx = keywordName(lower(w))
	}
	switch p.ctx {
	case "lease":
		return p.parseLease()
	case "ia-na", "ia-ta", "ia-pd":
		return p.parseIA()
	case "host":
		return p.parseHost()
	case "server-duid":
		id, err := p.id(nil)
		if err == nil {
			err = p.semi()
		}
		if err != nil {
			return nil, err
		}
		return &ServerDUID{DUID: id, Line: p.line0}, nil
	case "authoring-byte-order":
		return p.parseByteOrder()
	case "failover":
		return p.parseFailover()
	case "class", "subclass":
		return p.parseClass()
	}
	// group: dhcpd reads it (parse_group_declaration), for nothing the
	// table holds. Anything else, db-time-format and lease-id-format
	// (dhcpd.conf's statements) included, dhcpd calls corrupt.
	if p.ctx == "group" {
		return nil, p.skip()
	}
	u := &Unknown{Line: p.line0, What: shown(string(w))}
	if err := p.skip(); err != nil {
		return nil, err
	}
	return u, nil
}

// keywordName returns the top-level keywords as constants, so naming
// the statement being parsed allocates nothing.
func keywordName(w []byte) string {
	switch string(w) {
	case "lease":
		return "lease"
	case "ia-na":
		return "ia-na"
	case "ia-ta":
		return "ia-ta"
	case "ia-pd":
		return "ia-pd"
	case "host":
		return "host"
	case "server-duid":
		return "server-duid"
	case "authoring-byte-order":
		return "authoring-byte-order"
	case "failover":
		return "failover"
	case "class":
		return "class"
	case "subclass":
		return "subclass"
	}
	return string(w)
}

// topKeyword reports whether w starts a top-level statement; seen at the
// start of a line inside a statement it means the statement was cut short.
func topKeyword(w []byte) bool {
	switch string(w) {
	case "lease", "host", "ia-na", "ia-ta", "ia-pd", "server-duid",
		"authoring-byte-order", "failover", "class", "subclass", "group":
		return true
	}
	return false
}

// open reads the '{' that starts a block.
func (p *stmtParser) open() error {
	if p.lx.next(); p.lx.kind != tLBrace {
		return p.unexpected("{")
	}
	return nil
}

// item advances to the next statement of a block: true with its keyword
// current, false at the closing '}'.
func (p *stmtParser) item() (bool, error) {
	lx := &p.lx
	for {
		lx.next()
		switch lx.kind {
		case tRBrace:
			return false, nil
		case tSemi:
			continue
		case tWord:
			return true, nil
		}
		return false, p.unexpected("a statement")
	}
}

func (p *stmtParser) parseLease() (Statement, error) {
	lx := &p.lx
	if lx.next(); lx.kind != tWord {
		return nil, p.unexpected("an address")
	}
	ip, ok := parseIPv4(lx.text())
	if !ok {
		return nil, p.fail("bad IPv4 address %q", lx.text())
	}
	p.arg = lx.text()
	l := newLease(IPv4, ip, p.line0)
	if err := p.open(); err != nil {
		return nil, err
	}
	p.vars, p.strs, p.hasHost = p.vars[:0], p.strs[:0], false
	var fatal *refusal
	for {
		var err error
		switch lx.next(); lx.kind {
		case tRBrace:
			if fatal != nil {
				return p.refused(fatal, p.where(), ip, nil)
			}
			p.finishStrings(l)
			return l, nil
		case tWord:
			err = p.leaseStmt(l, lx.text())
		case tEnd, tTorn, tBad:
			return nil, p.unexpected("a statement")
		default:
			// A stray ';', string or brace is, to dhcpd, an unknown
			// statement.
			line := lx.tline
			if err = p.skipFrom(0); err == nil {
				err = p.refuse(line, "unexpected %q", lx.text())
			}
		}
		if err != nil {
			r, ok := err.(*refusal)
			switch {
			case !ok:
				return nil, err
			case r.fatal:
				// dhcpd exits at start; where it would have gone on
				// does not matter. Read to the end of the block.
				fatal = r
			default:
				st, err := p.refused(r, p.where(), ip, nil)
				if rf, ok := st.(*Refused); ok {
					rf.Fatal = fatal != nil
				}
				return st, err
			}
		}
	}
}

func newLease(f Family, ip netip.Addr, line int) *Lease {
	return &Lease{Family: f, IP: ip, Line: line,
		Starts: NoTime, Ends: NoTime, Tstp: NoTime, Tsfp: NoTime, Atsfp: NoTime, Cltt: NoTime}
}

// finishStrings gives the block's hostname and set values their storage:
// one string for all of them.
func (p *stmtParser) finishStrings(l *Lease) {
	if len(p.strs) == 0 && len(p.vars) == 0 && !p.hasHost {
		return
	}
	n := len(p.strs)
	all := string(append(p.strs, p.vars...))
	if p.hasHost {
		l.ClientHostname = all[p.host[0]:p.host[1]]
	}
	l.vars = all[n:]
}

// leaseStmt parses one statement of an IPv4 lease block, its first word
// kw current. Keywords match case-insensitively, as in dhcpd; a statement
// dhcpd does not know in a lease makes it refuse the block.
func (p *stmtParser) leaseStmt(l *Lease, kw []byte) error {
	var err error
	switch string(kw) {
	case "starts":
		l.Starts, err = p.date()
	case "ends":
		l.Ends, err = p.date()
	case "tstp":
		l.Tstp, err = p.date()
	case "tsfp":
		l.Tsfp, err = p.date()
	case "atsfp":
		l.Atsfp, err = p.date()
	case "cltt":
		l.Cltt, err = p.date()
	case "binding":
		err = p.stateStmt(l, "binding", &l.State)
	case "next":
		err = p.stateStmt(l, "next", &l.NextState)
	case "rewind":
		err = p.stateStmt(l, "rewind", &l.RewindState)
	case "hardware":
		l.HardwareType, l.HardwareAddr, err = p.hardware(l.inline[:0:8])
	case "uid":
		err = p.uidStmt(l)
	case "client-hostname":
		err = p.hostnameStmt()
	case "set":
		err = p.setStmt(false)
	case "option", "supersede":
		var v Var
		if v, err = p.option(); err == nil {
			l.Options = append(l.Options, v)
		}
	case "reserved":
		l.Reserved = true
		err = p.dsemi()
	case "dynamic-bootp":
		l.Bootp = true
		err = p.dsemi()
	case "on":
		var on On
		if on, err = p.on(); err == nil {
			l.On |= on
		}
	case "abandoned":
		// Old dhcpd wrote the state as a statement of its own.
		l.State, l.NextState = StateAbandoned, StateAbandoned
		err = p.dsemi()
	case "ddns-fwd-name", "ddns-rev-name":
		// Older spellings of `set ddns-…-name = …;`, read as dhcpd does.
		err = p.bindingValue(varName(kw), p.lx.tline)
	case "class":
		err = p.classStmt()
	case "billing":
		err = p.skip()
	case "timestamp":
		line := p.lx.tline
		if _, err = p.date(); err == nil {
			err = &refusal{reason: "timestamp", line: line, fatal: true}
		}
	default:
		if low := lower(kw); &low[0] != &kw[0] {
			return p.leaseStmt(l, low)
		}
		line := p.lx.tline
		if err = p.dskip(0); err == nil {
			err = p.refuse(line, "%s", unknownStatement(kw))
		}
	}
	return err
}

// unknownStatement says why dhcpd does not take a word as a statement of
// an IPv4 lease.
func unknownStatement(kw []byte) string {
	switch string(kw) {
	case "bootp":
		return `"bootp;" on its own (dhcpd reads "dynamic-bootp;" or "binding state bootp;")`
	case "preferred-life", "max-life":
		return fmt.Sprintf("%q, an IPv6 statement", kw)
	}
	return fmt.Sprintf("unknown statement %q", clip(string(kw)))
}

func (p *stmtParser) parseIA() (Statement, error) {
	lx := &p.lx
	ia := &IA{Type: p.ctx, Cltt: NoTime, Line: p.line0}
	id, err := p.id(nil)
	if err != nil {
		return nil, err
	}
	if len(id) < 4 {
		return nil, p.fail("identifier shorter than an IAID")
	}
	ia.IAID, ia.DUID = p.order.Uint32(id[:4]), id[4:]
	kind := iaKind(ia.Type)
	// refuse is dhcpd's "corrupt lease file; expecting …": it skips to
	// ';' from the token it found and gives the IA up.
	refuse := func(want string) (Statement, error) {
		text, line := lx.text(), lx.tline
		if err := p.skipFrom(0); err != nil {
			return nil, err
		}
		return p.refused(&refusal{reason: clip(fmt.Sprintf("%q where dhcpd expects %s", text, want)), line: line},
			ia.Type, netip.Addr{}, ia)
	}
	switch lx.next(); lx.kind {
	case tLBrace:
	case tEnd, tTorn, tBad:
		return nil, p.unexpected("{")
	default:
		return refuse("{")
	}
loop:
	for {
		switch lx.next(); {
		case lx.kind == tRBrace:
			break loop
		case lx.kind == tEnd || lx.kind == tTorn || lx.kind == tBad:
			return nil, p.unexpected(kind + " or }")
		case lx.kind == tWord && bytes.EqualFold(lx.text(), []byte("cltt")):
			if ia.Cltt, err = p.date(); err != nil {
				return nil, err
			}
		case lx.kind == tWord && bytes.EqualFold(lx.text(), []byte(kind)):
			l, err := p.parseIAAddr(ia, kind)
			p.ctx, p.arg = ia.Type, nil
			if r, ok := err.(*refusal); ok {
				return p.refused(r, ia.Type, netip.Addr{}, ia)
			} else if err != nil {
				return nil, err
			}
			ia.Leases = append(ia.Leases, l)
		default:
			return refuse(kind + " or }")
		}
	}
	for _, l := range ia.Leases {
		l.Cltt = ia.Cltt
	}
	return ia, nil
}

// parseIAAddr parses `iaaddr ADDR { … }` or `iaprefix P/N { … }` after
// the keyword. A *refusal means dhcpd gives the whole IA up.
func (p *stmtParser) parseIAAddr(ia *IA, kw string) (*Lease, error) {
	lx := &p.lx
	line := lx.tline
	if lx.next(); lx.kind != tWord {
		return nil, p.unexpected("an address")
	}
	var l *Lease
	text := string(lx.text())
	if kw == "iaprefix" {
		pfx, err := netip.ParsePrefix(text)
		if err != nil || !pfx.Addr().Is6() {
			return nil, p.fail("bad IPv6 prefix %q", text)
		}
		l = newLease(IPv6, pfx.Addr(), line)
		l.PrefixLen = uint8(pfx.Bits())
	} else {
		ip, err := netip.ParseAddr(text)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return nil, p.fail("bad IPv6 address %q", text)
		}
		l = newLease(IPv6, ip, line)
	}
	l.IA = ia
	p.ctx, p.arg = kw, lx.text()
	switch lx.next(); lx.kind {
	case tLBrace:
	case tEnd, tTorn, tBad:
		return nil, p.unexpected("{")
	default:
		brace := lx.tline
		if err := p.skipFrom(0); err != nil {
			return nil, err
		}
		return nil, p.refuse(brace, "%s: no '{'", p.where())
	}
	if err := p.iaBody(l); err != nil {
		return nil, err
	}
	return l, nil
}

func (p *stmtParser) parseHost() (*HostEntry, error) {
	name, err := p.name()
	if err != nil {
		return nil, err
	}
	h := &HostEntry{Name: name, Line: p.line0}
	p.arg = p.lx.text()
	if err := p.open(); err != nil {
		return nil, err
	}
	for {
		more, err := p.item()
		if err != nil {
			return nil, err
		}
		if !more {
			return h, nil
		}
		switch string(p.lx.text()) {
		case "dynamic":
			h.Dynamic = true
			err = p.semi()
		case "deleted":
			h.Deleted = true
			err = p.semi()
		case "hardware":
			h.HardwareType, h.HardwareAddr, err = p.hardware(nil)
		case "uid":
			if h.UID, err = p.id(nil); err == nil {
				err = p.semi()
			}
		case "fixed-address", "fixed-address6":
			h.FixedAddresses, err = p.list()
		default:
			err = p.skip()
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *stmtParser) parseByteOrder() (*ByteOrder, error) {
	w, err := p.word()
	if err != nil {
		return nil, err
	}
	bo := &ByteOrder{Line: p.line0}
	switch w {
	case "little-endian":
	case "big-endian":
		bo.BigEndian = true
	default:
		return nil, p.fail("unknown order %q", w)
	}
	if err := p.semi(); err != nil {
		return nil, err
	}
	switch {
	case p.hostOrder:
	case bo.BigEndian:
		p.order = binary.BigEndian
	default:
		p.order = binary.LittleEndian
	}
	return bo, nil
}

func (p *stmtParser) parseFailover() (*FailoverState, error) {
	lx := &p.lx
	if err := p.keyword("peer"); err != nil {
		return nil, err
	}
	name, err := p.name()
	if err != nil {
		return nil, err
	}
	p.ctx, p.arg = "failover peer", lx.text()
	if err := p.keyword("state"); err != nil {
		return nil, err
	}
	f := &FailoverState{Peer: name, MyStateAt: NoTime, PartnerStateAt: NoTime, MCLT: -1, Line: p.line0}
	if err := p.open(); err != nil {
		return nil, err
	}
	for {
		more, err := p.item()
		if err != nil {
			return nil, err
		}
		if !more {
			return f, nil
		}
		switch kw := string(lx.text()); kw {
		case "my", "partner":
			var st string
			at := NoTime
			if err = p.keyword("state"); err == nil {
				st, err = p.word()
			}
			if err == nil {
				if lx.next(); lx.is("at") {
					at, err = p.date()
				} else if lx.kind != tSemi {
					err = p.unexpected("; or at")
				}
			}
			if kw == "my" {
				f.MyState, f.MyStateAt = st, at
			} else {
				f.PartnerState, f.PartnerStateAt = st, at
			}
		case "mclt":
			var n uint32
			n, err = p.uint32()
			f.MCLT = int(n)
		default:
			err = p.skip()
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *stmtParser) parseClass() (*ClassEntry, error) {
	lx := &p.lx
	c := &ClassEntry{Subclass: p.ctx == "subclass", LeaseLimit: -1, Line: p.line0}
	var err error
	if c.Name, err = p.name(); err != nil {
		return nil, err
	}
	p.arg = lx.text()
	if c.Subclass {
		switch lx.next(); lx.kind {
		case tWord:
			c.Data = string(lx.text())
		case tString:
			c.Data = string(unquote(lx.text()))
		default:
			return nil, p.unexpected("match data")
		}
	}
	// "class NAME;" and "subclass NAME DATA;" have no block.
	switch lx.next(); lx.kind {
	case tSemi:
		return c, nil
	case tLBrace:
	default:
		return nil, p.unexpected("{ or ;")
	}
	for {
		more, err := p.item()
		if err != nil {
			return nil, err
		}
		if !more {
			return c, nil
		}
		if lx.is("lease") {
			if err = p.keyword("limit"); err == nil {
				var n uint32
				n, err = p.uint32()
				c.LeaseLimit = int(n)
			}
		} else {
			err = p.skip()
		}
		if err != nil {
			return nil, err
		}
	}
}

// --- token helpers ---

func (p *stmtParser) semi() error {
	if p.lx.next(); p.lx.kind != tSemi {
		return p.unexpected(";")
	}
	return nil
}

// word reads a bare word.
func (p *stmtParser) word() (string, error) {
	if p.lx.next(); p.lx.kind != tWord {
		return "", p.unexpected("a word")
	}
	return string(p.lx.text()), nil
}

// keyword requires the next token to be the word w.
func (p *stmtParser) keyword(w string) error {
	if p.lx.next(); !p.lx.is(w) {
		return p.unexpected(w)
	}
	return nil
}

// name reads a quoted or bare name.
func (p *stmtParser) name() (string, error) {
	lx := &p.lx
	switch lx.next(); lx.kind {
	case tWord:
		return string(lx.text()), nil
	case tString:
		return string(unquote(lx.text())), nil
	}
	return "", p.unexpected("a name")
}

// id reads an identifier written as a quoted string or as hex octets
// (lease-id-format hex), appending its bytes to dst[:0].
func (p *stmtParser) id(dst []byte) ([]byte, error) {
	lx := &p.lx
	switch lx.next(); lx.kind {
	case tString:
		return unquoteTo(dst[:0], lx.text()), nil
	case tWord:
		b, ok := parseHexTo(dst[:0], lx.text())
		if !ok {
			return nil, p.fail("bad hex identifier %q", lx.text())
		}
		return b, nil
	}
	return nil, p.unexpected("an identifier")
}

func parseStateBytes(b []byte) (State, bool) {
	switch string(b) {
	case "free":
		return StateFree, true
	case "active":
		return StateActive, true
	case "expired":
		return StateExpired, true
	case "released":
		return StateReleased, true
	case "abandoned":
		return StateAbandoned, true
	case "reset":
		return StateReset, true
	case "backup":
		return StateBackup, true
	}
	return StateNone, false
}

// hardwareTypes interns the hardware type names dhcpd writes.
func hardwareType(b []byte) string {
	switch string(b) {
	case "ethernet":
		return "ethernet"
	case "token-ring":
		return "token-ring"
	case "fddi":
		return "fddi"
	case "infiniband":
		return "infiniband"
	}
	return string(b)
}

// hardware reads `TYPE ADDR;` after the keyword, appending the address
// to dst[:0].
func (p *stmtParser) hardware(dst []byte) (string, []byte, error) {
	lx := &p.lx
	if rest := lx.b[lx.p:]; len(rest) > 10 && string(rest[:10]) == " ethernet " {
		p.lx.p += 9
		save := p.lx.p
		if w, ok := p.fastWord(); ok {
			if hw, ok := parseHexTo(dst[:0], w); ok {
				return "ethernet", hw, nil
			}
		}
		p.lx.p = save - 9
	}
	if lx.next(); lx.kind != tWord {
		return "", nil, p.unexpected("a hardware type")
	}
	typ := hardwareType(lx.text())
	switch lx.next(); lx.kind {
	case tSemi:
		return typ, nil, nil
	case tWord:
	default:
		return "", nil, p.unexpected("a hardware address")
	}
	hw, ok := parseHexTo(dst[:0], lx.text())
	if !ok {
		return "", nil, p.fail("bad hardware address %q", lx.text())
	}
	return typ, hw, p.semi()
}

func (p *stmtParser) uint32() (uint32, error) {
	lx := &p.lx
	if lx.next(); lx.kind != tWord {
		return 0, p.unexpected("a number")
	}
	n, ok := parseUint(lx.text(), 1<<32-1)
	if !ok {
		return 0, p.fail("bad number %q", lx.text())
	}
	return uint32(n), p.semi()
}

// parseUint parses a decimal number no larger than max.
func parseUint(b []byte, max uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n <= max
}

// date reads a dhcpd date through its semicolon: `W YYYY/MM/DD HH:MM:SS`,
// `epoch N` or `never`.
func (p *stmtParser) date() (Time, error) {
	lx := &p.lx
	if t, ok := fastDate(lx.b[lx.p:]); ok {
		lx.p += fastDateLen
		return t, nil
	}
	return p.slowDate()
}

// slowDate is date through the lexer: any spacing, epoch and never.
func (p *stmtParser) slowDate() (Time, error) {
	lx := &p.lx
	if lx.next(); lx.kind != tWord {
		return NoTime, p.unexpected("a date")
	}
	var t Time
	switch w := lx.text(); string(w) {
	case "never":
		t = Never
	case "epoch":
		if lx.next(); lx.kind != tWord {
			return NoTime, p.unexpected("seconds")
		}
		n, ok := parseUint(lx.text(), uint64(Never)-1)
		if !ok {
			return NoTime, p.fail("bad epoch %q", lx.text())
		}
		t = Time(n)
	default:
		// The weekday is ignored, as dhcpd does.
		if len(w) == 1 {
			if lx.next(); lx.kind != tWord {
				return NoTime, p.unexpected("a date")
			}
			w = lx.text()
		}
		if lx.next(); lx.kind != tWord {
			return NoTime, p.unexpected("a time")
		}
		var ok bool
		if t, ok = parseDate(w, lx.text()); !ok {
			return NoTime, p.fail("bad date %q %q", w, lx.text())
		}
		// dhcpd reads an optional offset in seconds after the time.
		if lx.next(); lx.kind == tWord {
			off, err := strconv.ParseInt(string(lx.text()), 10, 32)
			if err != nil {
				return NoTime, p.fail("bad time zone offset %q", lx.text())
			}
			if t != Never {
				t += Time(off)
			}
			lx.next()
		}
		if lx.kind != tSemi {
			return NoTime, p.unexpected(";")
		}
		return t, nil
	}
	return t, p.semi()
}

// fastWord reads " WORD;" exactly as dhcpd writes it, without the lexer,
// and returns WORD; anything else leaves the position alone.
func (p *stmtParser) fastWord() ([]byte, bool) {
	b, i := p.lx.b, p.lx.p
	if i >= len(b) || b[i] != ' ' {
		return nil, false
	}
	j := i + 1
	for j < len(b) && charClass[b[j]] == cWord {
		j++
	}
	if j == i+1 || j >= len(b) || b[j] != ';' {
		return nil, false
	}
	p.lx.p = j + 1
	return b[i+1 : j], true
}

// fastDateLen is the length of " W YYYY/MM/DD HH:MM:SS;", the form dhcpd
// writes every date in.
const fastDateLen = 23

// fastDate reads a date in exactly the form dhcpd writes, without the
// lexer; anything else (epoch, never, odd spacing) takes the slow path.
func fastDate(b []byte) (Time, bool) {
	if len(b) < fastDateLen || b[0] != ' ' || b[2] != ' ' || b[7] != '/' || b[10] != '/' ||
		b[13] != ' ' || b[16] != ':' || b[19] != ':' || b[22] != ';' {
		return 0, false
	}
	d := func(i int) (int, bool) {
		x, y := b[i]-'0', b[i+1]-'0'
		return int(x)*10 + int(y), x <= 9 && y <= 9
	}
	c, ok1 := d(3)
	yy, ok2 := d(5)
	mo, ok3 := d(8)
	dd, ok4 := d(11)
	h, ok5 := d(14)
	mi, ok6 := d(17)
	s, ok7 := d(20)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || b[1]-'0' > 9 || c < 19 ||
		mo < 1 || mo > 12 || dd < 1 || dd > 31 || h > 23 || mi > 59 || s > 60 {
		return 0, false
	}
	if c*100+yy >= neverYear {
		return Never, true
	}
	return Time(daysFromCivil(c*100+yy, mo, dd)*86400 + int64(h*3600+mi*60+s)), true
}

// varName interns the variable names MAAS and dhcpd write on every lease.
func varName(b []byte) string {
	switch string(b) {
	case "clhw":
		return "clhw"
	case "clip":
		return "clip"
	case "cllt":
		return "cllt"
	case "clht":
		return "clht"
	case "vendor-class-identifier":
		return "vendor-class-identifier"
	case "ddns-fwd-name":
		return "ddns-fwd-name"
	case "ddns-rev-name":
		return "ddns-rev-name"
	case "ddns-txt":
		return "ddns-txt"
	}
	return string(b)
}

// option parses `option NAME VALUE;` after the keyword.
func (p *stmtParser) option() (Var, error) {
	name, err := p.word()
	if err != nil {
		return Var{}, err
	}
	v, err := p.value()
	return Var{Name: name, Value: string(v)}, err
}

// value reads tokens through the semicolon. A lone string is decoded;
// anything else is returned as written. The bytes may alias the buffer.
func (p *stmtParser) value() ([]byte, error) {
	lx := &p.lx
	first, last, n := -1, -1, 0
	var str []byte
	for {
		switch lx.next(); lx.kind {
		case tSemi:
			if n == 1 && str != nil {
				return str, nil
			}
			if first < 0 {
				return nil, nil
			}
			return lx.b[first:last], nil
		case tWord, tString, tPunct:
		default:
			return nil, p.unexpected("a value")
		}
		if first < 0 {
			first = lx.start
			if lx.kind == tString {
				first--
				str = unquote(lx.text())
			}
		}
		last = lx.end
		if lx.kind == tString {
			last++
		}
		n++
	}
}

// list reads comma-separated words or strings through the semicolon.
func (p *stmtParser) list() ([]string, error) {
	lx := &p.lx
	var out []string
	for {
		switch lx.next(); lx.kind {
		case tWord:
			out = append(out, string(lx.text()))
		case tString:
			out = append(out, string(unquote(lx.text())))
		case tSemi:
			return out, nil
		case tPunct:
			if lx.b[lx.start] != ',' {
				return nil, p.unexpected("an address")
			}
		default:
			return nil, p.unexpected("an address")
		}
	}
}

// on parses `on EVENT [or EVENT]… { … }` after the keyword, skipping the
// statements.
func (p *stmtParser) on() (On, error) {
	lx := &p.lx
	var on On
	for {
		switch lx.next(); lx.kind {
		case tLBrace:
			if on == 0 {
				return 0, p.fail("on: no event")
			}
			start := lx.p
			if err := p.skipped(p.skipBlockMemo()); err != nil {
				return 0, err
			}
			// dhcpd stores no statements for an empty block.
			if emptyBlock(lx.b[start : lx.p-1]) {
				return 0, nil
			}
			return on, nil
		case tWord:
			switch string(lx.text()) {
			case "commit":
				on |= OnCommit
			case "expiry":
				on |= OnExpiry
			case "release":
				on |= OnRelease
			case "or":
			default:
				return 0, p.fail("on: unknown event %q", lx.text())
			}
		default:
			return 0, p.unexpected("an event")
		}
	}
}

// emptyBlock reports whether a block body holds only space and comments.
func emptyBlock(b []byte) bool {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '#':
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				return true
			}
			i += j
		case charClass[c] != cSpace && c != '\n':
			return false
		}
	}
	return true
}

// skipBlockMemo is lx.skipBlock remembering the last few blocks it
// skipped: MAAS writes the same on-expiry and on-release statements into
// every lease, and comparing bytes is far cheaper than scanning them.
// Identical bytes skip identically, so the result is the same.
func (p *stmtParser) skipBlockMemo() skipStatus {
	lx := &p.lx
	rest := lx.b[lx.p:]
	for i := range p.memo {
		if m := &p.memo[i]; len(m.body) > 0 && bytes.HasPrefix(rest, m.body) {
			lx.p += len(m.body)
			lx.line += m.lines
			return skipOK
		}
	}
	start, line := lx.p, lx.line
	st := lx.skipBlock()
	if st == skipOK && lx.p-start <= 4096 {
		p.memo[p.memoNext%len(p.memo)] = memoBlock{body: lx.b[start:lx.p], lines: lx.line - line}
		p.memoNext++
	}
	return st
}

// skipped turns skipBlock's status into an error.
func (p *stmtParser) skipped(st skipStatus) error {
	switch st {
	case skipShort:
		return errShort
	case skipBad:
		return p.fail("unterminated string")
	case skipTorn:
		return p.torn()
	}
	return nil
}

// skip skips the rest of an unknown statement: through its semicolon, or
// through its balanced block.
func (p *stmtParser) skip() error {
	lx := &p.lx
	for {
		switch lx.next(); lx.kind {
		case tSemi:
			return nil
		case tLBrace:
			return p.skipped(lx.skipBlock())
		case tWord, tString, tPunct:
		default:
			return p.unexpected(";")
		}
	}
}
