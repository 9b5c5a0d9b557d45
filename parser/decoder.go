package parser

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// MaxStatement bounds one top-level statement. A longer one is reported as
// a syntax error and skipped, so a garbage file cannot make the decoder
// hold an unbounded tail.
const MaxStatement = 1 << 20

// Decoder reads a leases file incrementally: Feed it bytes as they are
// appended and it hands back every complete top-level statement, keeping
// the torn tail of an unfinished one for the next call. Decoding a file in
// one call or in any split of its bytes yields the same statements and
// errors.
//
// After a syntax error the decoder skips to the next line that starts with
// a top-level keyword (dhcpd writes those at column 0 and indents
// everything inside a block), so one bad statement never hides the next.
type Decoder struct {
	tail   []byte // unconsumed bytes: an unfinished statement
	line   int    // line number of tail[0]
	off    int64  // input offset of tail[0]
	resync bool   // skipping to the next top-level statement
	order  binary.ByteOrder
	// hostOrder: decode IAIDs in the host's order regardless of
	// authoring-byte-order (see decodeParallel).
	hostOrder bool
	closed    bool
	// stmtLine is the first line of the statement being decoded.
	stmtLine int
	// rec: dhcpd's recovery after a refused block is running (refuse.go).
	rec recovery
	// mid: the input consumed so far does not end at a line's end.
	mid bool
}

// Handler receives decoded statements and syntax errors in input order;
// exactly one of s and err is non-nil. Statements are the handler's to
// keep.
type Handler func(s Statement, err error)

// NewDecoder returns a decoder at the start of a file. IA identifiers
// are decoded in the host's byte order until the file names its
// authoring-byte-order, as dhcpd does.
func NewDecoder() *Decoder {
	return &Decoder{line: 1, order: binary.NativeEndian}
}

// Offset is the number of input bytes consumed: the end of the last
// complete statement (plus any skipped garbage).
func (d *Decoder) Offset() int64 { return d.off }

// clean reports whether the decoder is where a decoder starting at the
// same offset would be: nothing held, no resync or recovery running.
func (d *Decoder) clean() bool { return len(d.tail) == 0 && !d.resync && !d.rec.on }

// Recovering reports whether the decoder is inside dhcpd's recovery
// after a refused block (see Refused): Offset is then no statement
// boundary, and a new Decoder started there would not read what follows
// as dhcpd does. Resume positions should be taken when it is false.
func (d *Decoder) Recovering() bool { return d.rec.on }

// Pending is the number of bytes held back as an unfinished statement.
func (d *Decoder) Pending() int { return len(d.tail) }

// Line is the line number at Offset.
func (d *Decoder) Line() int { return d.line }

// Feed decodes p, appended to what earlier calls left unfinished.
func (d *Decoder) Feed(p []byte, h Handler) {
	buf := p
	if len(d.tail) > 0 {
		d.tail = append(d.tail, p...)
		buf = d.tail
	}
	n := d.decode(buf, false, len(buf), h)
	d.tail = append(d.tail[:0], buf[n:]...)
}

// readChunk is how much DecodeFrom asks for at a time.
const readChunk = 1 << 20

// DecodeFrom reads r to its end (io.EOF), decoding as it goes, and keeps an
// unfinished final statement for the next Feed, DecodeFrom or Close. It
// reads into the decoder's own buffer, so no byte is copied twice. It
// returns the bytes read and the first read error other than io.EOF.
func (d *Decoder) DecodeFrom(r io.Reader, h Handler) (int64, error) {
	var total int64
	for {
		if cap(d.tail)-len(d.tail) < readChunk/2 {
			grown := make([]byte, len(d.tail), len(d.tail)+readChunk)
			copy(grown, d.tail)
			d.tail = grown
		}
		n, err := r.Read(d.tail[len(d.tail):cap(d.tail)])
		total += int64(n)
		if n > 0 {
			buf := d.tail[:len(d.tail)+n]
			c := d.decode(buf, false, len(buf), h)
			d.tail = buf[:copy(buf, buf[c:])]
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Close decodes what is left as the end of the input. It returns an
// *IncompleteError when the input ended inside a statement; that
// statement is not returned, never guessed.
func (d *Decoder) Close(h Handler) error {
	if d.closed {
		return nil
	}
	d.closed = true
	buf := d.tail
	d.tail = nil
	n := d.decode(buf, true, len(buf), h)
	if n < len(buf) {
		return &IncompleteError{Line: d.stmtLine}
	}
	return nil
}

// decode consumes complete statements from buf and returns how many bytes
// it consumed. With final set, buf is the end of the input and anything
// left unconsumed is an unfinished statement. No statement starting at or
// after limit is decoded.
func (d *Decoder) decode(buf []byte, final bool, limit int, h Handler) int {
	p := stmtParser{lx: lexer{b: buf, line: d.line, final: final, mid0: d.mid}, order: d.order, hostOrder: d.hostOrder}
	lx := &p.lx
	consumed := 0
	// commit records that everything before lx.p has been consumed.
	commit := func() {
		if lx.p > consumed {
			d.mid = buf[lx.p-1] != '\n'
		}
		d.off += int64(lx.p - consumed)
		consumed = lx.p
		d.line = lx.line
	}
	for {
		if d.resync {
			pos, line, found := resyncPoint(buf, lx.p, lx.line, final)
			lx.p, lx.line = pos, line
			commit()
			if !found {
				return consumed
			}
			d.resync = false
		}
		if d.rec.on {
			if !d.recoverStep(&p, buf, final, limit, h, commit) {
				return consumed
			}
			continue
		}
		start, startLine := lx.p, lx.line
		lx.inStmt = false
		lx.next()
		lx.inStmt = true
		if lx.start >= limit && lx.kind != tEnd {
			lx.p, lx.line = limit, lx.tline
			commit()
			return consumed
		}
		if lx.kind == tEnd {
			// White space before lx.p is consumed: a run of it, however
			// long, is never held or read again. What lx.p points at (a
			// word or comment cut by the end of buf) is held, unless it is
			// longer than any statement: then it is garbage (a file of NUL
			// bytes is one endless word), reported and skipped to the next
			// keyword line, so that memory and time stay linear.
			commit()
			if len(buf)-lx.p > MaxStatement {
				// A comment is skipped silently, as a whole read would;
				// a word starts a statement that is too long.
				if buf[lx.p] != '#' {
					h(nil, tooLong(lx.line))
				}
				d.resync = true
				continue
			}
			if final && lx.p < len(buf) {
				d.stmtLine = lx.line // a word cut by the end of the input
			} else if final {
				lx.p = len(buf)
				commit()
			}
			return consumed
		}
		d.stmtLine = lx.tline
		tokStart, tokLine := lx.start, lx.tline
		st, err := p.parseTop()
		// However the input is split, a statement reaching past
		// MaxStatement is this one error, not whatever its end holds.
		reach := lx.p
		if err == errShort {
			reach = len(buf)
		}
		if reach-tokStart > MaxStatement {
			err = tooLong(tokLine)
		}
		re, resume := err.(*resumeError)
		switch {
		case err == nil:
			commit()
			if r, ok := st.(*Refused); ok && r.recover {
				d.rec = recovery{on: true, from: r.Line}
			}
			if st != nil {
				h(st, nil)
			}
		case err == errShort:
			lx.p, lx.line = start, startLine
			return consumed
		case resume:
			h(nil, &re.SyntaxError)
			lx.p, lx.line = re.at, re.line
			commit()
		default:
			// Resume the search for the next statement after this
			// statement's first token, so it is not found again.
			h(nil, err)
			lx.p, lx.line = tokStart, tokLine
			d.resync = true
		}
		d.order = p.order
	}
}

// recovery is where dhcpd's top-level loop is after a refused block
// (lease_file_subparse): reading a token, or skipping to ';' or over a
// block after one it did not know. It is kept token by token, across
// Feed calls: a recovery that outlasts the input is not a torn statement,
// and when the input ends it ends, as dhcpd's does at the end of the file.
type recovery struct {
	on    bool
	from  int  // line of the refused block
	skip  bool // in the skip
	depth int  // braces open in the skip
	n     int  // tokens read in the skip
	line  int  // line of the token the skip follows
	sw    *Refused
	swn   int // n when sw's first word was read
}

// recoverStep reads one token of dhcpd's recovery. A token that starts a
// top-level statement where dhcpd reads one ends the recovery; a
// statement the skip swallows whole is reported as a *Refused when the
// skip ends. It returns false when decode must return (more input
// needed, or limit reached).
func (d *Decoder) recoverStep(p *stmtParser, buf []byte, final bool, limit int, h Handler, commit func()) bool {
	lx := &p.lx
	rc := &d.rec
	lx.inStmt = false
	lx.next()
	switch {
	case lx.kind == tEnd:
		commit()
		switch {
		case len(buf)-lx.p > MaxStatement:
			if buf[lx.p] != '#' {
				h(nil, tooLong(lx.line))
			}
			*rc = recovery{}
			d.resync = true
			return true
		case final:
			// dhcpd's recovery ends with the file; a word cut by the end
			// is the last thing it skips.
			lx.p = len(buf)
			commit()
			if rc.sw != nil {
				h(rc.sw, nil)
			}
			*rc = recovery{}
		}
		return false
	case lx.start >= limit:
		lx.p, lx.line = limit, lx.tline
		commit()
		return false
	case lx.kind == tBad:
		h(nil, &SyntaxError{Line: lx.tline, Msg: lx.msg})
		lx.p, lx.line = lx.start, lx.tline
		commit()
		*rc = recovery{}
		d.resync = true
		return true
	case !rc.skip && lx.kind == tWord && dhcpdTopKeyword(lx.text()):
		lx.p, lx.line = lx.start, lx.tline
		commit()
		*rc = recovery{}
		return true
	case !rc.skip:
		// "Corrupt lease file - possible data loss!": skip_to_semi.
		rc.skip, rc.depth, rc.n, rc.line, rc.sw = true, 0, 0, lx.tline, nil
		commit()
		return true
	}
	i := rc.n
	rc.n++
	end := false
	switch lx.kind {
	case tRBrace:
		if rc.depth > 0 {
			rc.depth--
		}
		end = rc.depth == 0
	case tLBrace:
		rc.depth++
	case tSemi:
		end = rc.depth == 0
	case tWord, tString:
		w := lx.text()
		switch {
		case lx.kind == tWord && rc.depth > 0 && lx.col0 && topKeyword(w):
			// A block inside the skip interrupted by a keyword line was
			// torn: resume there, as everywhere else.
			msg := fmt.Sprintf("not closed before line %d (torn write?)", lx.tline)
			if rc.sw != nil {
				msg = rc.sw.What + ": " + msg
			}
			h(nil, &SyntaxError{Line: rc.line, Msg: msg})
			lx.p, lx.line = lx.start, lx.tline
			commit()
			*rc = recovery{}
			return true
		case rc.sw == nil && lx.kind == tWord && rc.depth == 0 && (i == 0 || lx.col0) && dhcpdTopKeyword(w):
			rc.sw, rc.swn = &Refused{Line: lx.tline, What: string(lower(w)), Swallowed: true, At: rc.from}, i
		case rc.sw != nil && i == rc.swn+1:
			rc.sw.What += " " + shown(string(w)) // the address or name
		}
	}
	commit()
	if end {
		if rc.sw != nil {
			h(rc.sw, nil)
		}
		rc.skip, rc.sw = false, nil
	}
	return true
}

// resyncPoint finds the next line at or after from that starts with a
// top-level keyword. found reports a keyword line at pos. Otherwise pos is
// where to resume the search when more input arrives: the last newline,
// if what follows it could still become a keyword, else the end.
func resyncPoint(buf []byte, from, line int, final bool) (pos, atLine int, found bool) {
	p := from
	for {
		i := bytes.IndexByte(buf[p:], '\n')
		if i < 0 {
			return len(buf), line, false
		}
		nl := p + i
		q := nl + 1
		if keywordAt(buf[q:]) {
			return q, line + 1, true
		}
		if !final && couldBeKeyword(buf[q:]) {
			return nl, line, false
		}
		p, line = q, line+1
	}
}

// couldBeKeyword reports whether b, the whole rest of the buffer, is a
// keyword line cut short.
func couldBeKeyword(b []byte) bool {
	for i, c := range b {
		if charClass[c] != cWord {
			return false // a whole word that keywordAt rejected, or none
		}
		if i >= 24 {
			return false
		}
	}
	return true
}

// Leases is everything a leases file says, resolved as dhcpd resolves it.
type Leases struct {
	*Table
	// Errors are the statements the decoder had to skip.
	Errors []error
	// Incomplete is set when the file ends inside a statement.
	Incomplete *IncompleteError
	// Statements counts the statements read whole (not those skipped on
	// purpose, nor Errors).
	Statements int
	// Bytes is the number of bytes read.
	Bytes int64
}

// ParseLeases reads a whole leases file, decoding on every core. Syntax
// errors do not stop it: they are collected in Errors. The returned error
// is only a read error.
func ParseLeases(r io.Reader) (*Leases, error) {
	return ParseLeasesWorkers(r, DefaultWorkers())
}

// ParseLeasesWorkers is ParseLeases on a given number of goroutines; the
// result does not depend on it.
func ParseLeasesWorkers(r io.Reader, workers int) (*Leases, error) {
	return parseLeases(r, workers, segmentSize)
}

func parseLeases(r io.Reader, workers, segSize int) (*Leases, error) {
	out := &Leases{Table: NewTable()}
	n, inc, err := decodeParallel(r, workers, segSize, func(s Statement, err error) {
		if err != nil {
			out.Errors = append(out.Errors, err)
			return
		}
		out.Statements++
		out.Table.Apply(s)
	})
	out.Bytes, out.Incomplete = n, inc
	return out, err
}

func tooLong(line int) error {
	return &SyntaxError{Line: line, Msg: fmt.Sprintf("statement longer than %d bytes", MaxStatement)}
}
