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
	p := stmtParser{lx: lexer{b: buf, line: d.line, final: final}, order: d.order, hostOrder: d.hostOrder}
	lx := &p.lx
	consumed := 0
	// commit records that everything before lx.p has been consumed.
	commit := func() {
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
		out.Table.Apply(s)
	})
	out.Bytes, out.Incomplete = n, inc
	return out, err
}

func tooLong(line int) error {
	return &SyntaxError{Line: line, Msg: fmt.Sprintf("statement longer than %d bytes", MaxStatement)}
}
