package release

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// token is a word, a quoted string or one of { } ; in a dhclient file.
type token struct {
	text   string
	quoted bool
	line   int
}

// tokenizer splits dhclient.leases and dhclient.conf text: # comments
// to the end of the line, "strings" with C escapes, the punctuation
// { } ; and words (anything else up to a space or punctuation).
type tokenizer struct {
	r    *bufio.Reader
	line int
	peek *token
}

func newTokenizer(r io.Reader) *tokenizer { return &tokenizer{r: bufio.NewReader(r), line: 1} }

var errEOF = errors.New("end of file")

func (t *tokenizer) next() (token, error) {
	if t.peek != nil {
		tok := *t.peek
		t.peek = nil
		return tok, nil
	}
	for {
		c, err := t.r.ReadByte()
		if err != nil {
			return token{}, errEOF
		}
		switch {
		case c == '\n':
			t.line++
		case c == ' ' || c == '\t' || c == '\r':
		case c == '#':
			for c != '\n' {
				if c, err = t.r.ReadByte(); err != nil {
					return token{}, errEOF
				}
			}
			t.line++
		case c == '{' || c == '}' || c == ';' || c == ',' || c == '=':
			return token{text: string(c), line: t.line}, nil
		case c == '"':
			return t.quoted()
		default:
			var b strings.Builder
			b.WriteByte(c)
			for {
				c, err := t.r.ReadByte()
				if err != nil {
					break
				}
				if strings.IndexByte(" \t\r\n{};,=\"#", c) >= 0 {
					t.r.UnreadByte()
					break
				}
				b.WriteByte(c)
			}
			return token{text: b.String(), line: t.line}, nil
		}
	}
}

func (t *tokenizer) quoted() (token, error) {
	start := t.line
	var b []byte
	for {
		c, err := t.r.ReadByte()
		if err != nil {
			return token{}, fmt.Errorf("line %d: unterminated string", start)
		}
		switch c {
		case '"':
			return token{text: string(b), quoted: true, line: start}, nil
		case '\n':
			t.line++
			b = append(b, c)
		case '\\':
			c, err := t.r.ReadByte()
			if err != nil {
				return token{}, fmt.Errorf("line %d: unterminated string", start)
			}
			switch {
			case c >= '0' && c <= '7':
				// Up to three octal digits, as dhclient writes bytes.
				v := int(c - '0')
				for i := 0; i < 2; i++ {
					d, err := t.r.ReadByte()
					if err != nil || d < '0' || d > '7' {
						if err == nil {
							t.r.UnreadByte()
						}
						break
					}
					v = v*8 + int(d-'0')
				}
				b = append(b, byte(v))
			case c == 'n':
				b = append(b, '\n')
			case c == 't':
				b = append(b, '\t')
			case c == 'r':
				b = append(b, '\r')
			default:
				b = append(b, c)
			}
		default:
			b = append(b, c)
		}
	}
}

// statement reads tokens up to a ";" at this level, or up to the "{"
// that opens a block (returned as the block's opening words, block
// true). Empty statements (a lone ";") are skipped. At a "}" it leaves
// the brace to be read next and returns no words. It returns errEOF at
// a clean end of input.
func (t *tokenizer) statement() (words []token, block bool, err error) {
	for {
		tok, err := t.next()
		if err == errEOF {
			if len(words) > 0 {
				return nil, false, fmt.Errorf("line %d: %q: statement not finished at end of file", words[0].line, words[0].text)
			}
			return nil, false, errEOF
		}
		if err != nil {
			return nil, false, err
		}
		if !tok.quoted {
			switch tok.text {
			case ";":
				if len(words) == 0 {
					// An empty statement: skip it, or the caller would
					// take its nil words for a closing brace.
					continue
				}
				return words, false, nil
			case "{":
				return words, true, nil
			case "}":
				t.peek = &tok
				if len(words) > 0 {
					return nil, false, fmt.Errorf("line %d: %q: missing ';'", words[0].line, words[0].text)
				}
				return nil, false, nil
			}
		}
		words = append(words, tok)
	}
}

// closeBlock consumes a "}" if it is next; ok reports whether it was.
func (t *tokenizer) closeBlock() (bool, error) {
	tok, err := t.next()
	if err != nil {
		return false, err
	}
	if !tok.quoted && tok.text == "}" {
		return true, nil
	}
	t.peek = &tok
	return false, nil
}

// skipBlock skips the rest of a block whose "{" was read.
func (t *tokenizer) skipBlock(start int) error {
	depth := 1
	for depth > 0 {
		tok, err := t.next()
		if err == errEOF {
			return fmt.Errorf("line %d: block not closed at end of file", start)
		}
		if err != nil {
			return err
		}
		if tok.quoted {
			continue
		}
		switch tok.text {
		case "{":
			depth++
		case "}":
			depth--
		}
	}
	return nil
}

// ParseDhclient reads an ISC dhclient lease file (dhclient.leases(5)):
//
//	lease {
//	  interface "eth0";
//	  fixed-address 203.0.113.10;
//	  option dhcp-server-identifier 203.0.113.1;
//	  option dhcp-client-identifier 1:2:0:0:0:0:1;   # only if the server echoed it
//	  renew 2 2026/11/24 10:00:00;
//	  rebind 2 2026/11/24 10:30:00;
//	  expire 2 2026/11/24 11:00:00;                  # UTC; or "expire epoch N;", "expire never;"
//	}
//
// It returns every lease block in file order (dhclient appends one per
// bind and renewal; Current picks the last per interface). "lease6"
// blocks, default-duid and unknown statements are skipped. When the
// file ends inside a block (torn write), the blocks before it are
// returned with the error.
func ParseDhclient(r io.Reader) ([]Lease, error) {
	t := newTokenizer(r)
	var out []Lease
	for {
		words, block, err := t.statement()
		if err == errEOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if words == nil && !block {
			// A stray "}" at the top level.
			tok, _ := t.next()
			return out, fmt.Errorf("line %d: unexpected '}'", tok.line)
		}
		if !block {
			continue
		}
		line := t.line
		if len(words) > 0 {
			line = words[0].line
		}
		if len(words) != 1 || words[0].quoted || words[0].text != "lease" {
			if err := t.skipBlock(line); err != nil {
				return out, err
			}
			continue
		}
		l, err := parseDhclientLease(t, line)
		if err != nil {
			return out, err
		}
		out = append(out, l)
	}
}

func parseDhclientLease(t *tokenizer, line int) (Lease, error) {
	l := Lease{Line: line}
	for {
		closed, err := t.closeBlock()
		if err == errEOF {
			return l, fmt.Errorf("line %d: lease not closed at end of file", line)
		}
		if err != nil {
			return l, err
		}
		if closed {
			if !l.Address.IsValid() {
				return l, fmt.Errorf("line %d: lease without a fixed-address", line)
			}
			return l, nil
		}
		words, block, err := t.statement()
		if err == errEOF {
			return l, fmt.Errorf("line %d: lease not closed at end of file", line)
		}
		if err != nil {
			return l, err
		}
		if block {
			if err := t.skipBlock(line); err != nil {
				return l, err
			}
			continue
		}
		if len(words) == 0 {
			continue
		}
		if err := dhclientStatement(&l, words); err != nil {
			return l, fmt.Errorf("line %d: %w", words[0].line, err)
		}
	}
}

func dhclientStatement(l *Lease, w []token) error {
	switch w[0].text {
	case "interface":
		if len(w) != 2 || !w[1].quoted || w[1].text == "" {
			return errors.New(`interface: want a quoted name`)
		}
		l.Interface = w[1].text
	case "fixed-address":
		if len(w) != 2 {
			return errors.New("fixed-address: want one address")
		}
		a, err := parseIPv4(w[1].text)
		if err != nil {
			return fmt.Errorf("fixed-address: %w", err)
		}
		l.Address = a
	case "expire":
		t, never, err := parseDhclientTime(w[1:])
		if err != nil {
			return fmt.Errorf("expire: %w", err)
		}
		l.Expire, l.Never = t, never
	case "option":
		if len(w) < 3 {
			return nil
		}
		switch w[1].text {
		case "dhcp-server-identifier":
			a, err := parseIPv4(w[2].text)
			if err != nil {
				return fmt.Errorf("dhcp-server-identifier: %w", err)
			}
			l.Server = a
		case "dhcp-client-identifier":
			id, err := parseOptionData(w[2:])
			if err != nil {
				return fmt.Errorf("dhcp-client-identifier: %w", err)
			}
			l.ClientID = id
		case "dhcp-lease-time":
			if n, err := strconv.ParseUint(w[2].text, 10, 32); err == nil {
				l.Lifetime = time.Duration(n) * time.Second
			}
		}
	}
	return nil
}

func parseIPv4(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 address", s)
	}
	return a, nil
}

// parseDhclientTime reads "W YYYY/MM/DD HH:MM:SS" (UTC, dhclient's
// default), "epoch N" (db-time-format local) or "never".
func parseDhclientTime(w []token) (time.Time, bool, error) {
	switch {
	case len(w) == 1 && w[0].text == "never":
		return time.Time{}, true, nil
	case len(w) == 2 && w[0].text == "epoch":
		n, err := strconv.ParseInt(w[1].text, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, false, fmt.Errorf("epoch %q: not a time", w[1].text)
		}
		return time.Unix(n, 0).UTC(), false, nil
	case len(w) == 3:
		t, err := time.Parse("2006/01/02 15:04:05", w[1].text+" "+w[2].text)
		if err != nil || t.Unix() < 0 {
			return time.Time{}, false, fmt.Errorf("%q: not a time", w[1].text+" "+w[2].text)
		}
		return t, false, nil
	}
	return time.Time{}, false, errors.New("want W YYYY/MM/DD HH:MM:SS, epoch N or never")
}

// parseOptionData reads option data as dhclient writes and accepts it:
// a quoted string, or colon-separated hex bytes ("1:2:0:a:b:c", one or
// two digits each).
func parseOptionData(w []token) ([]byte, error) {
	if len(w) != 1 {
		return nil, errors.New("want a quoted string or colon-separated hex")
	}
	if w[0].quoted {
		if w[0].text == "" {
			return nil, errors.New("empty")
		}
		return []byte(w[0].text), nil
	}
	var out []byte
	for _, part := range strings.Split(w[0].text, ":") {
		if len(part) == 1 {
			part = "0" + part
		}
		b, err := hex.DecodeString(part)
		if err != nil || len(b) != 1 {
			return nil, fmt.Errorf("%q: want a quoted string or colon-separated hex", w[0].text)
		}
		out = append(out, b[0])
	}
	return out, nil
}

// ConfClientID is a client identifier dhclient.conf tells dhclient to
// send: literal bytes, or "= hardware" (type 1 and the interface's MAC);
// Unknown for another expression (= concat(…)), which only dhclient
// evaluates: the release then sends none, rather than another scope's
// (RFC 2131, 4.4.6: the client's own, if any; ISC dhcpd finds the lease
// by ciaddr when option 61 finds none).
type ConfClientID struct {
	Bytes    []byte
	Hardware bool
	Unknown  bool
}

// ParseDhclientConf reads the client identifiers a dhclient.conf sends:
//
//	send dhcp-client-identifier 1:2:0:0:0:0:1;        # all interfaces
//	send dhcp-client-identifier "node-7";
//	send dhcp-client-identifier = hardware;
//	interface "eth0" { send dhcp-client-identifier …; }  # one interface
//
// The result maps an interface name, or "" for the global statement, to
// the identifier. dhclient's lease file does not record what it sent
// (dhcpd does not echo option 61 by default), so this is where a
// release finds the identifier the server keyed the lease by. Other
// statements are skipped.
func ParseDhclientConf(r io.Reader) (map[string]ConfClientID, error) {
	t := newTokenizer(r)
	out := map[string]ConfClientID{}
	var walk func(iface string, depth int) error
	walk = func(iface string, depth int) error {
		for {
			if depth > 0 {
				closed, err := t.closeBlock()
				if err == errEOF {
					return errors.New("block not closed at end of file")
				}
				if err != nil {
					return err
				}
				if closed {
					return nil
				}
			}
			words, block, err := t.statement()
			if err == errEOF && depth == 0 {
				return nil
			}
			if err == errEOF {
				return errors.New("block not closed at end of file")
			}
			if err != nil {
				return err
			}
			if block {
				inner := iface
				if len(words) == 2 && words[0].text == "interface" && words[1].quoted {
					inner = words[1].text
				}
				if depth > 8 {
					return errors.New("blocks nested too deep")
				}
				if err := walk(inner, depth+1); err != nil {
					return err
				}
				continue
			}
			if words == nil && depth == 0 {
				tok, _ := t.next()
				return fmt.Errorf("line %d: unexpected '}'", tok.line)
			}
			if len(words) >= 3 && words[0].text == "send" && words[1].text == "dhcp-client-identifier" {
				if words[2].text == "=" && !words[2].quoted {
					if len(words) == 4 && words[3].text == "hardware" {
						out[iface] = ConfClientID{Hardware: true}
					} else {
						out[iface] = ConfClientID{Unknown: true}
					}
					continue
				}
				id, err := parseOptionData(words[2:])
				if err != nil {
					return fmt.Errorf("line %d: send dhcp-client-identifier: %w", words[0].line, err)
				}
				out[iface] = ConfClientID{Bytes: id}
			}
		}
	}
	if err := walk("", 0); err != nil {
		return nil, err
	}
	return out, nil
}
