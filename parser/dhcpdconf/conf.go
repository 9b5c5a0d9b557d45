// Package dhcpdconf reads dhcpd.conf: the declarations that decide which
// addresses dhcpd hands out. Like package parser (whose types it shares)
// it is pure: includes are opened through Options.Open.
//
// Parse reads an ISC dhcpd 4.4 configuration file and returns its
// subnets, dynamic ranges, host reservations and failover peers. It follows
// dhcpd's own parser (server/confpars.c) closely enough that a file dhcpd
// accepts gives the ranges dhcpd uses, and a file whose ranges dhcpd would
// reject gives an error rather than a guess.
//
// Lexical rules (common/conflex.c):
//   - '#' outside a string starts a comment that runs to the end of the line.
//   - A string is "…"; it may hold { } ; # and newlines; escapes are \t \r \n
//     \b, \ooo (octal, first digit 0-3), \xHH, and \c for any other c.
//   - The punctuation { } ; , ( ) / are tokens of their own; any other run of
//     non-blank bytes is a word. Keywords are matched case-insensitively.
//   - CR is blank, and CRLF inside a string reads as LF, so a file behaves
//     the same with either line ending.
//
// Declarations understood (everything else is skipped, see below):
//
//	include "FILE";
//	shared-network NAME { … }                  NAME a word or a string
//	subnet A.B.C.D netmask M.M.M.M { … }       not in a subnet or host
//	subnet6 PREFIX/LEN { … }                   (a subnet belongs to a shared-network only
//	                                           when written directly in its body: dhcpd's
//	                                           group { } drops the link)
//	pool { … }                                 in subnet or shared-network
//	pool6 { … }                                in subnet6
//	range [dynamic-bootp] LOW [HIGH];          in subnet or pool
//	range6 LOW HIGH; | range6 P/LEN [temporary]; | range6 LOW temporary;
//	prefix6 LOW HIGH /BITS;                    range6 and prefix6 in subnet6 or pool6
//	host NAME { hardware TYPE MAC; fixed-address A[, B…]; fixed-address6 X[, Y…]; }
//	group [NAME] { … }
//	failover peer NAME { primary|secondary; … }  at top level or in shared-network
//	failover peer NAME;                        in shared-network: default for its pools
//	                                           (as is a peer declared in the shared-network)
//	failover peer "NAME"; | no failover peer   in pool (dhcpd wants no ';' after
//	                                           "no failover peer"; one is accepted here)
//
// Any other statement — option, set, key, zone, class, subclass, if/elsif/
// else, on commit|expiry|release, switch, authoritative, … — is skipped: up
// to its ';' at the current depth, or through its balanced { } block (so
// "key k { … };" is a block followed by an empty statement; a stray ';' is
// accepted anywhere, where dhcpd would object). The bodies of skipped blocks
// (class, if, on, …) are opaque: nothing in them is a declaration. Skipped
// statements are never an error, with two exceptions: a '{' never closed or
// a statement cut off by the end of its file, and a skipped statement that
// runs onto a new line starting with a declaration keyword (range, subnet,
// pool, host, …), reported as a missing ';' since dhcpd rejects it and
// skipping on would silently drop the declaration.
//
// Placement follows dhcpd: range only directly in a subnet or pool body,
// range6/prefix6 only in a subnet6 or pool6 body, pool only in a subnet or
// shared-network, hardware and fixed-address only in a host. An included file
// is parsed in the scope of its include statement, exactly as dhcpd does it:
// an include in a subnet may hold ranges and pools, but an include in a pool
// may not hold range or failover statements (dhcpd parses it as a generic
// pool-level statement list, and so rejects them). Relative include paths are
// joined to Options.BaseDir (dhcpd opens them relative to its working
// directory, including nested ones). Includes nested more than
// MaxIncludeDepth deep, or including a file already being read, are errors.
//
// Semantics checked, because dhcpd refuses to start otherwise: addresses are
// valid for their family; a subnet has no host bits set; every end of a range
// lies in its subnet (a range in a shared-network pool goes to the most
// specific earlier subnet of that shared-network holding its low address, as
// dhcpd does); range6 P/LEN is aligned and no shorter than its subnet6;
// prefix6 bounds are aligned to /BITS (they need not lie inside the subnet6);
// a pool has a range; a failover peer is declared once, before any reference.
//
// A range written high-to-low is normalised so First <= Last; dhcpd accepts
// both orders (mdb.c new_address_range, inet.c range2cidr). Netmasks must be
// contiguous (dhcpd tolerates others; netip.Prefix cannot express them).
// subnet and subnet6 may share one file here, though a dhcpd runs either -4
// or -6.
package dhcpdconf

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/leasekeeper/leasekeeper/parser"
)

// MaxIncludeDepth bounds include nesting; the main file is depth 0.
const MaxIncludeDepth = 16

// maxNesting bounds nested declaration blocks (group in group …), which
// the parser follows by recursion. Skipped blocks are not counted.
const maxNesting = 256

// Errors a caller may test for with errors.Is.
var (
	ErrIncludeCycle = errors.New("include cycle")
	ErrIncludeDepth = errors.New("includes nested too deep")
	ErrNoOpener     = errors.New("include needs Options.Open")
)

// Options tells Parse how to name positions and open includes.
type Options struct {
	// BaseDir is the directory relative include paths are resolved against
	// (dhcpd's working directory, or the config's directory: caller decides).
	BaseDir string
	// Open opens an included file, given its path after joining with BaseDir.
	// With a nil Open any include is an error.
	Open func(path string) (io.ReadCloser, error)
	// Name is the file name used in positions, e.g. "/etc/dhcp/dhcpd.conf".
	// It also identifies the main file should an include name it again
	// (a relative Name is taken relative to BaseDir for that).
	Name string
}

// Config is what Parse extracts from a dhcpd.conf.
type Config struct {
	Subnets       []Subnet       // subnet and subnet6 declarations, file order
	Ranges        []Range        // every range, range6 and prefix6, file order
	Hosts         []Host         // host declarations, wherever written
	FailoverPeers []FailoverPeer // failover peer declarations (not references)
}

// Subnet is a subnet or subnet6 declaration.
type Subnet struct {
	Prefix netip.Prefix // "subnet A netmask M" or "subnet6 P/len"
	// SharedNetwork is the name of the shared-network whose body holds the
	// declaration, "" if none.
	SharedNetwork string
	Pos           Pos
}

// RangeKind tells which statement a Range came from.
type RangeKind uint8

const (
	RangeKindRange        RangeKind = iota // range LOW [HIGH]; or range6 LOW HIGH;
	RangeKindRange6Prefix                  // range6 P/len; or range6 LOW temporary; (a /64)
	RangeKindPrefix6                       // prefix6 LOW HIGH /BITS;
)

var rangeKindNames = [...]string{"range", "range6-prefix", "prefix6"}

func (k RangeKind) String() string {
	if int(k) < len(rangeKindNames) {
		return rangeKindNames[k]
	}
	return fmt.Sprintf("rangekind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k RangeKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Range is one dynamic address range (or, for prefix6, delegated prefixes).
type Range struct {
	Kind   RangeKind
	Family parser.Family
	// First and Last are inclusive, First <= Last. A single-address range
	// has First == Last; "range6 P/len" gives the prefix's first and last
	// address. For prefix6 they are the network addresses of the first and
	// last delegated /PrefixLen prefix. Both lie in Subnet, except for
	// prefix6 and for "range6 LOW temporary": dhcpd makes that the /64
	// at LOW even in a longer subnet6.
	First, Last  netip.Addr
	PrefixLen    int  // prefix6 /BITS; 0 otherwise
	DynamicBootp bool // range dynamic-bootp …
	Temporary    bool // range6 … temporary
	Subnet       netip.Prefix
	// SharedNetwork is the enclosing shared-network, "" if none (unlike
	// dhcpd-pools, which calls that "All networks").
	SharedNetwork string
	// Pool is 0 for a range directly in its subnet, else n for the n-th
	// pool or pool6 declaration of the whole configuration (1-based, in
	// the order read, includes expanded).
	Pool int
	// Failover names the pool's failover peer, from "failover peer NAME;"
	// in the pool or, failing that, in its shared-network; "" if none.
	Failover string
	Pos      Pos
}

// Host is a host declaration. dhcpd makes hosts global wherever they are
// written.
type Host struct {
	Name         string
	HardwareType string              // "ethernet", "token-ring", "fddi", "infiniband", "unknown-N"; "" if none
	HardwareAddr parser.HardwareAddr // nil if none; empty for "hardware ethernet;"
	// FixedAddresses holds the fixed-address or fixed-address6 values as
	// written: IP literals or DNS names, in order.
	FixedAddresses []string
	Pos            Pos
}

// FailoverPeer is a "failover peer NAME { … }" declaration.
type FailoverPeer struct {
	Name string
	Role string // "primary", "secondary" or "" if neither was given
	Pos  Pos
}

// Pos is a position in a configuration file.
type Pos struct {
	File string
	Line int
}

// String returns "file:line", or "line N" when the file has no name.
func (p Pos) String() string {
	if p.File == "" {
		return "line " + strconv.Itoa(p.Line)
	}
	return p.File + ":" + strconv.Itoa(p.Line)
}

// MarshalText implements encoding.TextMarshaler.
func (p Pos) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Parse parses a dhcpd.conf read from r. Includes are read through
// opts.Open. Any syntax error, misplaced declaration or bad address is an
// error carrying its position; unknown statements are skipped.
func Parse(r io.Reader, opts Options) (*Config, error) {
	src, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", opts.Name, err)
	}
	p := &reader{opts: opts, peers: make(map[string]bool)}
	if opts.Name != "" {
		p.files = append(p.files, p.resolve(opts.Name))
	}
	lx := newLexer(src, opts.Name)
	if err := p.body(lx, &scope{kind: inRoot, direct: true}, nil); err != nil {
		return nil, err
	}
	return &p.cfg, nil
}

// ---- tokenizer ----

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokWord
	tokString
	tokPunct
)

type token struct {
	kind tokKind
	text string // the word, the decoded string, or the punctuation byte
	line int
	bol  bool // first token on its line
}

func (t token) is(p byte) bool { return t.kind == tokPunct && t.text[0] == p }

// kw returns the lower-cased word, or "" for any other token.
func (t token) kw() string {
	if t.kind != tokWord {
		return ""
	}
	return strings.ToLower(t.text)
}

func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of file"
	case tokString:
		return strconv.Quote(t.text)
	}
	return "'" + t.text + "'"
}

type lexer struct {
	src      []byte
	off      int
	line     int
	lastLine int // line of the previous token
	file     string
	back     *token // one token of push-back
}

func newLexer(src []byte, file string) *lexer {
	return &lexer{src: src, line: 1, file: file}
}

func (lx *lexer) pos(line int) Pos { return Pos{File: lx.file, Line: line} }

func blank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func punctByte(c byte) bool {
	switch c {
	case '{', '}', ';', ',', '(', ')', '/':
		return true
	}
	return false
}

func (lx *lexer) unread(t token) { lx.back = &t }

func (lx *lexer) next() (token, error) {
	if lx.back != nil {
		t := *lx.back
		lx.back = nil
		return t, nil
	}
	for lx.off < len(lx.src) {
		c := lx.src[lx.off]
		switch {
		case c == '\n':
			lx.line++
			lx.off++
		case blank(c):
			lx.off++
		case c == '#':
			for lx.off < len(lx.src) && lx.src[lx.off] != '\n' {
				lx.off++
			}
		default:
			t := token{line: lx.line, bol: lx.line != lx.lastLine}
			lx.lastLine = lx.line
			switch {
			case c == '"':
				s, err := lx.str()
				if err != nil {
					return token{}, err
				}
				t.kind, t.text = tokString, s
			case punctByte(c):
				t.kind, t.text = tokPunct, string(c)
				lx.off++
			default:
				start := lx.off
				for lx.off < len(lx.src) {
					c := lx.src[lx.off]
					if blank(c) || punctByte(c) || c == '"' || c == '#' {
						break
					}
					lx.off++
				}
				t.kind, t.text = tokWord, string(lx.src[start:lx.off])
			}
			return t, nil
		}
	}
	return token{kind: tokEOF, line: lx.line, bol: true}, nil
}

// str reads a string starting at the opening quote and decodes it the way
// dhcpd's read_string does, except that CRLF reads as LF.
func (lx *lexer) str() (string, error) {
	startLine := lx.line
	lx.off++ // opening quote
	var b strings.Builder
	getc := func() (byte, bool) {
		if lx.off >= len(lx.src) {
			return 0, false
		}
		c := lx.src[lx.off]
		lx.off++
		if c == '\r' && lx.off < len(lx.src) && lx.src[lx.off] == '\n' {
			c = '\n'
			lx.off++
		}
		if c == '\n' {
			lx.line++
		}
		return c, true
	}
	peekc := func() (byte, bool) {
		if lx.off >= len(lx.src) {
			return 0, false
		}
		return lx.src[lx.off], true
	}
	for {
		c, ok := getc()
		if !ok {
			return "", fmt.Errorf("%s: unterminated string", lx.pos(startLine))
		}
		switch c {
		case '"':
			return b.String(), nil
		case '\\':
			c, ok = getc()
			if !ok {
				return "", fmt.Errorf("%s: unterminated string", lx.pos(startLine))
			}
			switch c {
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'n':
				b.WriteByte('\n')
			case 'b':
				b.WriteByte('\b')
			case '0', '1', '2', '3':
				v := c - '0'
				for i := 0; i < 2; i++ {
					d, ok := peekc()
					if !ok || d < '0' || d > '7' {
						break
					}
					lx.off++
					v = v*8 + d - '0'
				}
				b.WriteByte(v)
			case 'x':
				var v byte
				for i := 0; i < 2; i++ {
					d, ok := peekc()
					if !ok {
						break
					}
					h, isHex := parser.HexDigit(d)
					if !isHex {
						break
					}
					lx.off++
					v = v*16 + h
				}
				b.WriteByte(v)
			default:
				b.WriteByte(c)
			}
		default:
			b.WriteByte(c)
		}
	}
}

// ---- parser ----

type scopeKind uint8

const (
	inRoot scopeKind = iota
	inGroup
	inShared
	inSubnet
	inPool
	inPool6
	inHost
)

// scope mirrors the (group, type, host_decl) triple dhcpd's
// parse_statement works with. Like dhcpd's cloned groups, a group, pool or
// host body carries neither subnet nor shared network of its own.
type scope struct {
	kind scopeKind
	// direct is false for statements read from an include: dhcpd parses an
	// included file with parse_statement only, so the statements a pool or
	// host body handles itself (range, failover, hardware, …) are not
	// available there.
	direct bool
	shared *netDecl    // group->shared_network, in a shared-network body
	subnet *subnetDecl // group->subnet, in a subnet body
	pool   *poolDecl
	host   *Host
}

type netDecl struct {
	name     string         // "" for the implicit one around a lone subnet
	subnets  []netip.Prefix // declared so far, for shared-network pools
	failover string         // "failover peer NAME;" at shared-network level
}

type subnetDecl struct {
	prefix netip.Prefix
	shared *netDecl
}

type poolDecl struct {
	index    int
	subnet   *subnetDecl // nil for a pool declared at shared-network level
	shared   *netDecl
	failover string
	ranges   int
}

type reader struct {
	opts  Options
	cfg   Config
	pools int
	peers map[string]bool
	files []string // include stack, resolved paths
	depth int      // declaration blocks open
}

// declKeyword reports keywords that start declarations that a missing ';' would swallow.
func declKeyword(kw string) bool {
	switch kw {
	case "subnet", "subnet6", "shared-network", "pool", "pool6", "range", "range6",
		"prefix6", "host", "group", "include", "failover":
		return true
	}
	return false
}

// body parses statements until the '}' matching open, or to end of file
// when open is nil (the main file or an include).
func (p *reader) body(lx *lexer, sc *scope, open *token) error {
	if open != nil {
		if p.depth++; p.depth > maxNesting {
			return fmt.Errorf("%s: declarations nested more than %d deep", lx.pos(open.line), maxNesting)
		}
		defer func() { p.depth-- }()
	}
	for {
		t, err := lx.next()
		if err != nil {
			return err
		}
		switch {
		case t.kind == tokEOF:
			if open != nil {
				return fmt.Errorf("%s: unexpected end of file: '{' of line %d is not closed", lx.pos(t.line), open.line)
			}
			return nil
		case t.is('}'):
			if open == nil {
				return fmt.Errorf("%s: unexpected '}'", lx.pos(t.line))
			}
			return nil
		case t.is(';'):
			// empty statement, as after "key k { … };"
		case t.kind == tokWord:
			if err := p.statement(lx, sc, t); err != nil {
				return err
			}
		default:
			if err := p.skip(lx, t); err != nil {
				return err
			}
		}
	}
}

func (p *reader) statement(lx *lexer, sc *scope, t token) error {
	pos := lx.pos(t.line)
	kw := t.kw()
	switch kw {
	case "include":
		return p.include(lx, sc, pos)
	case "subnet", "subnet6":
		if sc.kind == inSubnet || sc.kind == inHost {
			return fmt.Errorf("%s: %s declaration not allowed here", pos, kw)
		}
		return p.subnet(lx, sc, pos, kw == "subnet6")
	case "shared-network":
		if sc.kind == inShared || sc.kind == inSubnet || sc.kind == inHost {
			return fmt.Errorf("%s: shared-network declaration not allowed here", pos)
		}
		return p.sharedNetwork(lx, sc, pos)
	case "pool":
		switch sc.kind {
		case inSubnet, inShared:
			return p.pool(lx, sc, pos, false)
		case inPool, inPool6:
			return fmt.Errorf("%s: pool declared within pool", pos)
		}
		return fmt.Errorf("%s: pool declared outside of subnet or shared-network", pos)
	case "pool6":
		switch sc.kind {
		case inSubnet:
			return p.pool(lx, sc, pos, true)
		case inPool, inPool6:
			return fmt.Errorf("%s: pool6 declared within pool", pos)
		}
		return fmt.Errorf("%s: pool6 declared outside of subnet6", pos)
	case "range":
		if sc.kind == inSubnet || (sc.kind == inPool && sc.direct) {
			return p.rangeV4(lx, sc, pos)
		}
		return fmt.Errorf("%s: range declaration not allowed here", pos)
	case "range6", "prefix6":
		if sc.kind == inSubnet || (sc.kind == inPool6 && sc.direct) {
			if kw == "range6" {
				return p.range6(lx, sc, pos)
			}
			return p.prefix6(lx, sc, pos)
		}
		return fmt.Errorf("%s: %s declaration not allowed here", pos, kw)
	case "host":
		if sc.kind == inHost {
			return fmt.Errorf("%s: host declaration not allowed here", pos)
		}
		return p.hostDecl(lx, sc, pos)
	case "group":
		if sc.kind == inHost {
			return fmt.Errorf("%s: group declaration not allowed here", pos)
		}
		return p.group(lx, sc, pos)
	case "failover":
		return p.failover(lx, sc, pos)
	case "no":
		if sc.kind == inPool && sc.direct {
			return p.noFailover(lx, sc, pos)
		}
	case "hardware", "fixed-address", "fixed-address6":
		if sc.host == nil {
			return fmt.Errorf("%s: %s not allowed here", pos, kw)
		}
		if kw == "hardware" {
			return p.hardware(lx, sc.host, pos)
		}
		return p.fixedAddress(lx, sc.host, pos, kw)
	}
	return p.skip(lx, t)
}

// skip passes over a statement dhcpd may know but leasekeeper does not
// need: through its ';' or its balanced { } block, whichever ends it.
func (p *reader) skip(lx *lexer, first token) error {
	depth := 0
	var open []int
	t := first
	for {
		switch {
		case t.kind == tokEOF:
			if depth > 0 {
				return fmt.Errorf("%s: unexpected end of file: '{' of line %d is not closed", lx.pos(t.line), open[len(open)-1])
			}
			return fmt.Errorf("%s: unexpected end of file: statement of line %d has no ';'", lx.pos(t.line), first.line)
		case t.is('{'):
			depth++
			open = append(open, t.line)
		case t.is('}'):
			if depth == 0 {
				// "option x y }": the enclosing block ends; let it.
				lx.unread(t)
				return nil
			}
			depth--
			open = open[:len(open)-1]
			if depth == 0 {
				return nil
			}
		case t.is(';'):
			if depth == 0 {
				return nil
			}
		case depth == 0 && t.bol && t.line > first.line && declKeyword(t.kw()):
			return fmt.Errorf("%s: missing ';' before %q (statement of line %d)", lx.pos(t.line), t.text, first.line)
		}
		var err error
		if t, err = lx.next(); err != nil {
			return err
		}
	}
}

func (p *reader) expect(lx *lexer, what string, c byte) error {
	t, err := lx.next()
	if err != nil {
		return err
	}
	if !t.is(c) {
		return fmt.Errorf("%s: %s: expected '%c', found %s", lx.pos(t.line), what, c, t)
	}
	return nil
}

// word reads a word token.
func (p *reader) word(lx *lexer, what string) (token, error) {
	t, err := lx.next()
	if err != nil {
		return t, err
	}
	if t.kind != tokWord {
		return t, fmt.Errorf("%s: %s: unexpected %s", lx.pos(t.line), what, t)
	}
	return t, nil
}

// name reads a word or a string.
func (p *reader) name(lx *lexer, what string) (string, error) {
	t, err := lx.next()
	if err != nil {
		return "", err
	}
	if t.kind != tokWord && t.kind != tokString {
		return "", fmt.Errorf("%s: %s: expected a name, found %s", lx.pos(t.line), what, t)
	}
	return t.text, nil
}

func (p *reader) resolve(name string) string {
	if filepath.IsAbs(name) || p.opts.BaseDir == "" {
		return filepath.Clean(name)
	}
	return filepath.Join(p.opts.BaseDir, name)
}

func (p *reader) include(lx *lexer, sc *scope, pos Pos) error {
	t, err := lx.next()
	if err != nil {
		return err
	}
	if t.kind != tokString {
		return fmt.Errorf("%s: include: expected a file name string, found %s", lx.pos(t.line), t)
	}
	if err := p.expect(lx, "include", ';'); err != nil {
		return err
	}
	path := p.resolve(t.text)
	if p.opts.Open == nil {
		return fmt.Errorf("%s: include %q: %w", pos, t.text, ErrNoOpener)
	}
	for _, f := range p.files {
		if f == path {
			return fmt.Errorf("%s: include %q: %w", pos, path, ErrIncludeCycle)
		}
	}
	depth := len(p.files)
	if p.opts.Name == "" {
		depth++
	}
	if depth > MaxIncludeDepth {
		return fmt.Errorf("%s: include %q: %w", pos, path, ErrIncludeDepth)
	}
	rc, err := p.opts.Open(path)
	if err != nil {
		return fmt.Errorf("%s: include %q: %w", pos, t.text, err)
	}
	src, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: include %q: %w", pos, t.text, err)
	}
	inner := *sc
	inner.direct = false
	inner.host = nil // dhcpd passes no host_decl to an included file
	p.files = append(p.files, path)
	err = p.body(newLexer(src, path), &inner, nil)
	p.files = p.files[:len(p.files)-1]
	if err != nil {
		return fmt.Errorf("%s: include %q: %w", pos, t.text, err)
	}
	return nil
}

func (p *reader) subnet(lx *lexer, sc *scope, pos Pos, v6 bool) error {
	var prefix netip.Prefix
	if v6 {
		what := "subnet6"
		t, err := p.word(lx, what)
		if err != nil {
			return err
		}
		addr, err := parseIPv6(t.text)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", pos, what, err)
		}
		if err := p.expect(lx, what, '/'); err != nil {
			return err
		}
		bits, err := p.bits(lx, what, 0, 128)
		if err != nil {
			return err
		}
		prefix = netip.PrefixFrom(addr, bits)
		if prefix.Masked() != prefix {
			return fmt.Errorf("%s: subnet6 %s: host bits set", pos, prefix)
		}
	} else {
		what := "subnet"
		t, err := p.word(lx, what)
		if err != nil {
			return err
		}
		addr, err := parseIPv4(t.text)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", pos, what, err)
		}
		if t, err = lx.next(); err != nil {
			return err
		}
		if t.kw() != "netmask" {
			return fmt.Errorf("%s: subnet: expected netmask, found %s", lx.pos(t.line), t)
		}
		if t, err = p.word(lx, what); err != nil {
			return err
		}
		mask, err := parseIPv4(t.text)
		if err != nil {
			return fmt.Errorf("%s: subnet: netmask: %w", pos, err)
		}
		bits, ok := maskBits(mask)
		if !ok {
			return fmt.Errorf("%s: subnet %s netmask %s: non-contiguous netmask", pos, addr, mask)
		}
		prefix = netip.PrefixFrom(addr, bits)
		if prefix.Masked() != prefix {
			return fmt.Errorf("%s: subnet %s netmask %s: bad subnet number/mask combination", pos, addr, mask)
		}
	}
	open, err := lx.next()
	if err != nil {
		return err
	}
	if !open.is('{') {
		return fmt.Errorf("%s: subnet %s: expected '{', found %s", lx.pos(open.line), prefix, open)
	}
	// Only a shared-network body (or a file it includes) puts a subnet in
	// that shared-network. Elsewhere, even in a group inside one, dhcpd's
	// group carries no shared network and the subnet gets an implicit one.
	shared := &netDecl{}
	if sc.kind == inShared {
		shared = sc.shared
	}
	sub := &subnetDecl{prefix: prefix, shared: shared}
	p.cfg.Subnets = append(p.cfg.Subnets, Subnet{Prefix: prefix, SharedNetwork: shared.name, Pos: pos})
	inner := &scope{kind: inSubnet, direct: true, subnet: sub}
	if err := p.body(lx, inner, &open); err != nil {
		return err
	}
	// Like dhcpd, a shared-network pool sees only subnets declared before it.
	shared.subnets = append(shared.subnets, prefix)
	return nil
}

func (p *reader) sharedNetwork(lx *lexer, sc *scope, pos Pos) error {
	name, err := p.name(lx, "shared-network")
	if err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%s: zero-length shared network name", pos)
	}
	open, err := lx.next()
	if err != nil {
		return err
	}
	if !open.is('{') {
		return fmt.Errorf("%s: shared-network %s: expected '{', found %s", lx.pos(open.line), name, open)
	}
	sh := &netDecl{name: name}
	inner := &scope{kind: inShared, direct: true, shared: sh}
	if err := p.body(lx, inner, &open); err != nil {
		return err
	}
	if len(sh.subnets) == 0 {
		return fmt.Errorf("%s: shared-network %s: empty shared-network declaration", pos, name)
	}
	return nil
}

func (p *reader) pool(lx *lexer, sc *scope, pos Pos, v6 bool) error {
	what := "pool"
	kind := inPool
	if v6 {
		what, kind = "pool6", inPool6
	}
	open, err := lx.next()
	if err != nil {
		return err
	}
	if !open.is('{') {
		return fmt.Errorf("%s: %s: expected '{', found %s", lx.pos(open.line), what, open)
	}
	p.pools++
	pl := &poolDecl{index: p.pools, shared: sc.shared}
	if sc.kind == inSubnet {
		pl.subnet, pl.shared = sc.subnet, sc.subnet.shared
	}
	if !v6 && pl.shared != nil {
		pl.failover = pl.shared.failover
	}
	inner := &scope{kind: kind, direct: true, pool: pl}
	first := len(p.cfg.Ranges)
	if err := p.body(lx, inner, &open); err != nil {
		return err
	}
	// The peer belongs to the pool, wherever in it the statement stands.
	for i := first; i < len(p.cfg.Ranges); i++ {
		if p.cfg.Ranges[i].Pool == pl.index {
			p.cfg.Ranges[i].Failover = pl.failover
		}
	}
	if pl.ranges == 0 {
		if v6 {
			return fmt.Errorf("%s: pool6 declaration with no range6 or prefix6", pos)
		}
		return fmt.Errorf("%s: pool declaration with no address range", pos)
	}
	return nil
}

func (p *reader) group(lx *lexer, sc *scope, pos Pos) error {
	open, err := lx.next()
	if err != nil {
		return err
	}
	if open.kind == tokWord || open.kind == tokString { // optional name
		if open, err = lx.next(); err != nil {
			return err
		}
	}
	if !open.is('{') {
		return fmt.Errorf("%s: group: expected '{', found %s", lx.pos(open.line), open)
	}
	inner := &scope{kind: inGroup, direct: true}
	return p.body(lx, inner, &open)
}

// rangeV4 parses "range [dynamic-bootp] LOW [HIGH];".
func (p *reader) rangeV4(lx *lexer, sc *scope, pos Pos) error {
	const what = "range"
	t, err := p.word(lx, what)
	if err != nil {
		return err
	}
	dynamic := false
	if t.kw() == "dynamic-bootp" {
		dynamic = true
		if t, err = p.word(lx, what); err != nil {
			return err
		}
	}
	low, err := parseIPv4(t.text)
	if err != nil {
		return fmt.Errorf("%s: range: %w", pos, err)
	}
	high := low
	if t, err = lx.next(); err != nil {
		return err
	}
	if !t.is(';') {
		if t.kind != tokWord {
			return fmt.Errorf("%s: range: unexpected %s", lx.pos(t.line), t)
		}
		if high, err = parseIPv4(t.text); err != nil {
			return fmt.Errorf("%s: range: %w", pos, err)
		}
		if err := p.expect(lx, what, ';'); err != nil {
			return err
		}
	}
	sub := sc.subnet
	if sc.kind == inPool {
		sub = sc.pool.subnet
	}
	if sub == nil {
		// A pool in a shared-network: dhcpd takes the subnet holding LOW
		// among those declared so far. Prefer the most specific, as
		// dhcpd's subnet list is ordered inner-first.
		sh := sc.pool.shared
		best := -1
		for _, pr := range sh.subnets {
			if pr.Contains(low) && pr.Bits() > best {
				sub, best = &subnetDecl{prefix: pr, shared: sh}, pr.Bits()
			}
		}
		if sub == nil {
			return fmt.Errorf("%s: range %s: address range not on network %s (a pool must follow its subnet declarations)", pos, low, sh.name)
		}
	}
	for _, a := range [2]netip.Addr{low, high} {
		if !sub.prefix.Contains(a) {
			return fmt.Errorf("%s: range: address %s not in subnet %s", pos, a, sub.prefix)
		}
	}
	if dynamic && sc.pool != nil && sc.pool.failover != "" {
		return fmt.Errorf("%s: range: dynamic-bootp is not permitted in a pool with failover peer %s", pos, sc.pool.failover)
	}
	if high.Less(low) {
		low, high = high, low
	}
	p.addRange(sc, sub, Range{
		Kind: RangeKindRange, Family: parser.IPv4, First: low, Last: high,
		DynamicBootp: dynamic, Pos: pos,
	})
	return nil
}

func (p *reader) addRange(sc *scope, sub *subnetDecl, r Range) {
	r.Subnet = sub.prefix
	r.SharedNetwork = sub.shared.name
	if sc.pool != nil {
		r.Pool = sc.pool.index
		sc.pool.ranges++
	}
	p.cfg.Ranges = append(p.cfg.Ranges, r)
}

// range6 parses "range6 LOW HIGH;", "range6 P/LEN [temporary];" and
// "range6 LOW temporary;".
func (p *reader) range6(lx *lexer, sc *scope, pos Pos) error {
	const what = "range6"
	sub := sc.subnet
	if sc.kind == inPool6 {
		sub = sc.pool.subnet
	}
	t, err := p.word(lx, what)
	if err != nil {
		return err
	}
	low, err := parseIPv6(t.text)
	if err != nil {
		return fmt.Errorf("%s: range6: %w", pos, err)
	}
	if !sub.prefix.Contains(low) {
		return fmt.Errorf("%s: range6: start address %s is outside subnet %s", pos, low, sub.prefix)
	}
	r := Range{Kind: RangeKindRange, Family: parser.IPv6, Pos: pos}
	if t, err = lx.next(); err != nil {
		return err
	}
	switch {
	case t.is('/'):
		bits, err := p.bits(lx, what, 0, 128)
		if err != nil {
			return err
		}
		if bits < sub.prefix.Bits() {
			return fmt.Errorf("%s: range6 %s/%d: network mask shorter than subnet %s", pos, low, bits, sub.prefix)
		}
		pr := netip.PrefixFrom(low, bits)
		if pr.Masked() != pr {
			return fmt.Errorf("%s: range6 %s: host bits set", pos, pr)
		}
		r.Kind, r.First, r.Last = RangeKindRange6Prefix, low, lastAddr(pr)
		if t, err = lx.next(); err != nil {
			return err
		}
		if t.kw() == "temporary" {
			r.Temporary = true
			if t, err = lx.next(); err != nil {
				return err
			}
		}
		lx.unread(t)
	case t.kw() == "temporary":
		pr := netip.PrefixFrom(low, 64)
		if pr.Masked() != pr {
			return fmt.Errorf("%s: range6 %s temporary: not a /64 network address", pos, low)
		}
		r.Kind, r.First, r.Last, r.Temporary = RangeKindRange6Prefix, low, lastAddr(pr), true
	case t.kind == tokWord:
		high, err := parseIPv6(t.text)
		if err != nil {
			return fmt.Errorf("%s: range6: %w", pos, err)
		}
		if !sub.prefix.Contains(high) {
			return fmt.Errorf("%s: range6: end address %s is outside subnet %s", pos, high, sub.prefix)
		}
		if high.Less(low) {
			low, high = high, low
		}
		r.First, r.Last = low, high
	default:
		return fmt.Errorf("%s: range6: unexpected %s", lx.pos(t.line), t)
	}
	if err := p.expect(lx, what, ';'); err != nil {
		return err
	}
	p.addRange(sc, sub, r)
	return nil
}

// prefix6 parses "prefix6 LOW HIGH /BITS;". dhcpd does not require the
// prefixes to lie inside the subnet6.
func (p *reader) prefix6(lx *lexer, sc *scope, pos Pos) error {
	const what = "prefix6"
	sub := sc.subnet
	if sc.kind == inPool6 {
		sub = sc.pool.subnet
	}
	if !sub.prefix.Addr().Is6() {
		return fmt.Errorf("%s: prefix6 in IPv4 subnet %s", pos, sub.prefix)
	}
	var ends [2]netip.Addr
	for i := range ends {
		t, err := p.word(lx, what)
		if err != nil {
			return err
		}
		if ends[i], err = parseIPv6(t.text); err != nil {
			return fmt.Errorf("%s: prefix6: %w", pos, err)
		}
	}
	if err := p.expect(lx, what, '/'); err != nil {
		return err
	}
	bits, err := p.bits(lx, what, 1, 127)
	if err != nil {
		return err
	}
	for _, a := range ends {
		if pr := netip.PrefixFrom(a, bits); pr.Masked() != pr {
			return fmt.Errorf("%s: prefix6: %s is not a /%d network address", pos, a, bits)
		}
	}
	if err := p.expect(lx, what, ';'); err != nil {
		return err
	}
	low, high := ends[0], ends[1]
	if high.Less(low) {
		low, high = high, low
	}
	p.addRange(sc, sub, Range{
		Kind: RangeKindPrefix6, Family: parser.IPv6, First: low, Last: high, PrefixLen: bits, Pos: pos,
	})
	return nil
}

func (p *reader) bits(lx *lexer, what string, lo, hi int) (int, error) {
	t, err := p.word(lx, what)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(t.text)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s: %s: prefix length %q not in %d-%d", lx.pos(t.line), what, t.text, lo, hi)
	}
	return n, nil
}

func (p *reader) hostDecl(lx *lexer, sc *scope, pos Pos) error {
	// dhcpd's parse_host_name takes a (dotted) name, not a string.
	nt, err := p.word(lx, "host")
	if err != nil {
		return err
	}
	name := nt.text
	open, err := lx.next()
	if err != nil {
		return err
	}
	if !open.is('{') {
		return fmt.Errorf("%s: host %s: expected '{', found %s", lx.pos(open.line), name, open)
	}
	h := &Host{Name: name, Pos: pos}
	inner := &scope{kind: inHost, direct: true, host: h}
	if err := p.body(lx, inner, &open); err != nil {
		return err
	}
	p.cfg.Hosts = append(p.cfg.Hosts, *h)
	return nil
}

// hardware parses "hardware TYPE [XX:XX:…];" like parse_hardware_param.
func (p *reader) hardware(lx *lexer, h *Host, pos Pos) error {
	const what = "hardware"
	if h.HardwareType != "" {
		return fmt.Errorf("%s: host %s: hardware address already configured", pos, h.Name)
	}
	t, err := p.word(lx, what)
	if err != nil {
		return err
	}
	typ := t.kw()
	switch {
	case typ == "ethernet", typ == "token-ring", typ == "fddi", typ == "infiniband":
	case strings.HasPrefix(typ, "unknown-"):
	default:
		return fmt.Errorf("%s: hardware: unknown hardware type %q", pos, t.text)
	}
	if t, err = lx.next(); err != nil {
		return err
	}
	addr := parser.HardwareAddr{}
	if !t.is(';') {
		if t.kind != tokWord {
			return fmt.Errorf("%s: hardware: unexpected %s", lx.pos(t.line), t)
		}
		if addr, err = parseHardware(t.text); err != nil {
			return fmt.Errorf("%s: hardware: %w", pos, err)
		}
		if err := p.expect(lx, what, ';'); err != nil {
			return err
		}
	}
	h.HardwareType, h.HardwareAddr = typ, addr
	return nil
}

// fixedAddress parses "fixed-address A[, B…];" or fixed-address6.
func (p *reader) fixedAddress(lx *lexer, h *Host, pos Pos, kw string) error {
	if len(h.FixedAddresses) > 0 {
		return fmt.Errorf("%s: host %s: only one fixed address declaration per host", pos, h.Name)
	}
	var list []string
	for {
		t, err := p.word(lx, kw)
		if err != nil {
			return err
		}
		if kw == "fixed-address6" {
			if _, err := parseIPv6(t.text); err != nil {
				return fmt.Errorf("%s: %s: %w", pos, kw, err)
			}
		} else if looksNumeric(t.text) {
			if _, err := parseIPv4(t.text); err != nil {
				return fmt.Errorf("%s: %s: %w", pos, kw, err)
			}
		}
		list = append(list, t.text)
		if t, err = lx.next(); err != nil {
			return err
		}
		if t.is(';') {
			break
		}
		if !t.is(',') {
			return fmt.Errorf("%s: %s: expected ',' or ';', found %s", lx.pos(t.line), kw, t)
		}
	}
	h.FixedAddresses = list
	return nil
}

// failover handles "failover peer NAME { … }", "failover peer NAME;" and
// "failover peer NAME state { … }".
func (p *reader) failover(lx *lexer, sc *scope, pos Pos) error {
	inPool := sc.kind == inPool && sc.direct
	if sc.kind != inRoot && sc.kind != inShared && !inPool {
		return fmt.Errorf("%s: failover peers may only be defined in shared-network declarations and the outer scope", pos)
	}
	t, err := p.word(lx, "failover")
	if err != nil {
		return err
	}
	if t.kw() != "peer" {
		return fmt.Errorf("%s: failover: expected peer, found %s", lx.pos(t.line), t)
	}
	if t, err = lx.next(); err != nil {
		return err
	}
	if t.kind != tokString && (inPool || t.kind != tokWord) {
		return fmt.Errorf("%s: failover peer: expected a name, found %s", lx.pos(t.line), t)
	}
	name := t.text
	if t, err = lx.next(); err != nil {
		return err
	}
	switch {
	case t.is(';'):
		if !p.peers[name] {
			return fmt.Errorf("%s: reference to unknown failover peer %s", pos, name)
		}
		switch {
		case inPool:
			sc.pool.failover = name
		case sc.kind == inShared:
			sc.shared.failover = name
		default:
			return fmt.Errorf("%s: failover peer reference not in shared-network declaration", pos)
		}
		return nil
	case inPool:
		return fmt.Errorf("%s: failover peer %s: expected ';', found %s", lx.pos(t.line), name, t)
	case t.kw() == "state":
		if !p.peers[name] {
			return fmt.Errorf("%s: state declaration for unknown failover peer %s", pos, name)
		}
		return p.skip(lx, t)
	case !t.is('{'):
		return fmt.Errorf("%s: failover peer %s: expected '{', found %s", lx.pos(t.line), name, t)
	}
	if p.peers[name] {
		return fmt.Errorf("%s: redeclaration of failover peer %s", pos, name)
	}
	p.peers[name] = true
	if sc.kind == inShared {
		// dhcpd: a peer declared in a shared-network is its default.
		sc.shared.failover = name
	}
	fp := FailoverPeer{Name: name, Pos: pos}
	open := t
	for {
		if t, err = lx.next(); err != nil {
			return err
		}
		switch {
		case t.kind == tokEOF:
			return fmt.Errorf("%s: unexpected end of file: '{' of line %d is not closed", lx.pos(t.line), open.line)
		case t.is('}'):
			p.cfg.FailoverPeers = append(p.cfg.FailoverPeers, fp)
			return nil
		case t.is(';'):
		case t.kw() == "primary" || t.kw() == "secondary":
			role := t.kw()
			if err := p.expect(lx, "failover peer "+name+": "+role, ';'); err != nil {
				return err
			}
			fp.Role = role
		default:
			if err := p.skip(lx, t); err != nil {
				return err
			}
		}
	}
}

// noFailover parses "no failover peer" in a pool. dhcpd 4.4 reads no ';'
// after it (and then rejects the ';' as a stray statement); take either.
func (p *reader) noFailover(lx *lexer, sc *scope, pos Pos) error {
	for _, w := range [2]string{"failover", "peer"} {
		t, err := lx.next()
		if err != nil {
			return err
		}
		if t.kw() != w {
			return fmt.Errorf("%s: no: expected \"failover peer\", found %s", lx.pos(t.line), t)
		}
	}
	t, err := lx.next()
	if err != nil {
		return err
	}
	if !t.is(';') {
		lx.unread(t)
	}
	sc.pool.failover = ""
	return nil
}

// ---- atoms ----

// parseIPv4 parses a dotted quad the way dhcpd does: four decimal numbers
// 0-255, leading zeros allowed (and decimal, not octal).
func parseIPv4(s string) (netip.Addr, error) {
	var a [4]byte
	part, n, digits := 0, 0, 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if digits == 0 || part > 3 {
				return netip.Addr{}, fmt.Errorf("bad IPv4 address %q", s)
			}
			a[part] = byte(n)
			part, n, digits = part+1, 0, 0
			continue
		}
		c := s[i]
		if c < '0' || c > '9' {
			return netip.Addr{}, fmt.Errorf("bad IPv4 address %q", s)
		}
		n = n*10 + int(c-'0')
		digits++
		if n > 255 {
			return netip.Addr{}, fmt.Errorf("bad IPv4 address %q", s)
		}
	}
	if part != 4 {
		return netip.Addr{}, fmt.Errorf("bad IPv4 address %q", s)
	}
	return netip.AddrFrom4(a), nil
}

// parseIPv6 parses an IPv6 literal as inet_pton does (no zone).
func parseIPv6(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("bad IPv6 address %q", s)
	}
	return a, nil
}

// looksNumeric reports whether a fixed-address value is meant as a
// dotted quad rather than a host name.
func looksNumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && s[i] != '.' {
			return false
		}
	}
	return true
}

// maskBits returns the prefix length of a contiguous netmask.
func maskBits(m netip.Addr) (int, bool) {
	b := m.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	bits := 0
	for v&0x80000000 != 0 {
		bits++
		v <<= 1
	}
	return bits, v == 0
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	for i := p.Bits(); i < 128; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom16(b)
}

// parseHardware parses colon-separated hex bytes, "2:0:0:a:b:c" too.
func parseHardware(s string) (parser.HardwareAddr, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 20 {
		return nil, fmt.Errorf("hardware address %q too long", s)
	}
	out := make(parser.HardwareAddr, 0, len(parts))
	for _, part := range parts {
		v, err := strconv.ParseUint(part, 16, 8)
		if err != nil || part == "" || part[0] == '+' {
			return nil, fmt.Errorf("bad hardware address %q", s)
		}
		out = append(out, byte(v))
	}
	return out, nil
}
