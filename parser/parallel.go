package parser

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
	"runtime"
	"sync"
)

// Whole files are decoded in segments on several cores. A segment ends
// where a line starts with a top-level keyword: the decoder always starts
// a statement there (a statement still open at such a line is reported
// torn and decoding resumes at the line), so segments decode
// independently to exactly what one decoder reading the whole file would
// produce. Each segment carries the keyword line that follows it as
// lookahead, so a statement torn at the boundary is reported the same way.
// The exception is dhcpd's recovery after a refused block (refuse.go),
// which reads on through such a line: a segment that ends inside one is
// finished, and the segments after it decoded, by one decoder in file
// order until it is back at a statement boundary.

// segmentSize is how much of the file one segment holds.
const segmentSize = 1 << 20

type segment struct {
	buf   []byte // the segment and its lookahead line
	limit int    // statements start before limit
	line  int    // line number of buf[0]
	last  bool
	// rest: no keyword line was found for far longer than any statement
	// may be (garbage, a file of NUL bytes); buf holds what was read from
	// the last boundary on, and the rest of the input is decoded by one
	// streaming Decoder, in bounded memory, instead of being carried.
	rest bool

	items      []item
	incomplete *IncompleteError
	done       chan struct{}
	// dec is the segment's decoder as it stopped at stop. clean: it
	// stopped at limit in the state a decoder reading the whole file
	// would be in there. A statement dhcpd's recovery from a refused
	// block swallows (refuse.go) may cross the boundary: then the next
	// segments are decoded again, in order, from stop.
	dec   *Decoder
	stop  int
	clean bool
}

type item struct {
	s   Statement
	err error
}

func (s *segment) decode() {
	d := &Decoder{line: s.line, order: binary.NativeEndian, hostOrder: true}
	s.items = make([]item, 0, len(s.buf)/512)
	h := func(st Statement, err error) { s.items = append(s.items, item{st, err}) }
	if s.last {
		n := d.decode(s.buf, true, len(s.buf), h)
		if n < len(s.buf) {
			s.incomplete = &IncompleteError{Line: d.stmtLine}
		}
	} else {
		n := d.decode(s.buf, false, s.limit, h)
		s.dec, s.stop, s.clean = d, n, n == s.limit && d.clean()
	}
	close(s.done)
}

// cutPoint returns the start of the last line in b that begins with a
// top-level keyword and is complete (ends with a newline), and that line's
// length including its newline; ok is false when there is none past 0.
// Lines starting before from are not considered.
func cutPoint(b []byte, from int) (cut, lineLen int, ok bool) {
	end := len(b)
	for end > 0 {
		nl := bytes.LastIndexByte(b[:end], '\n')
		if nl < 0 || nl+1 < from {
			return 0, 0, false
		}
		q := nl + 1
		if q < len(b) && keywordAt(b[q:]) {
			if e := bytes.IndexByte(b[q:], '\n'); e >= 0 {
				return q, e + 1, true
			}
		}
		end = nl
	}
	return 0, 0, false
}

// decodeParallel decodes r to its end on up to workers goroutines and
// hands the results to h in input order. It returns the bytes read, the
// unfinished final statement if any, and the first read error.
func decodeParallel(r io.Reader, workers, segSize int, h Handler) (int64, *IncompleteError, error) {
	if workers < 1 {
		workers = 1
	}
	work := make(chan *segment, workers)
	ordered := make(chan *segment, 2*workers)
	// Segment buffers are recycled: statements never alias them.
	free := make(chan []byte, 3*workers+2)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				s.decode()
			}
		}()
	}

	var total int64
	var readErr error
	go func() {
		defer close(ordered)
		defer close(work)
		var carry []byte
		line := 1
		from := 0 // where a cut in carry can still appear
		for {
			var buf []byte
			select {
			case buf = <-free:
			default:
			}
			// Read at least as much as is carried over, so a statement
			// longer than a segment is copied a logarithmic number of times.
			want := max(segSize, 2*len(carry))
			if cap(buf) < want {
				buf = make([]byte, 0, want)
			}
			buf = append(buf[:0], carry...)
			n, err := io.ReadFull(r, buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			total += int64(n)
			eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
			if err != nil && !eof {
				readErr = err
			}
			s := &segment{buf: buf, line: line, done: make(chan struct{})}
			if eof || readErr != nil {
				s.last, s.limit = true, len(buf)
				ordered <- s
				work <- s
				return
			}
			cut, lineLen, ok := cutPoint(buf, from)
			if !ok && len(buf) > MaxStatement+2*segSize {
				s.rest = true
				close(s.done)
				ordered <- s
				return
			}
			if !ok {
				// A statement longer than a segment: read on. Only the
				// last line, still unfinished, can begin a cut later.
				carry = buf
				from = bytes.LastIndexByte(buf, '\n') + 1
				continue
			}
			from = 0
			s.buf, s.limit = buf[:cut+lineLen], cut
			ordered <- s
			work <- s
			line += bytes.Count(buf[:cut], []byte{'\n'})
			carry = buf[cut:]
		}
	}()

	var incomplete *IncompleteError
	hostBig := binary.NativeEndian.Uint16([]byte{0, 1}) == 1
	fileBig := hostBig
	// emit hands a statement decoded in the host's byte order on.
	emit := func(st Statement, err error) {
		if err != nil {
			h(nil, err)
			return
		}
		var ia *IA
		switch st := st.(type) {
		case *ByteOrder:
			fileBig = st.BigEndian
		case *IA:
			ia = st
		case *Refused:
			ia = st.IA
		}
		// Segments decode IAIDs in the host's order; the file's
		// authoring-byte-order may say otherwise.
		if ia != nil && fileBig != hostBig {
			ia.IAID = bits.ReverseBytes32(ia.IAID)
		}
		h(st, nil)
	}
	release := func(s *segment) {
		select {
		case free <- s.buf[:0]:
		default:
		}
		s.buf = nil
	}
	// seq, when set, decodes in order what a segment's decoder could not
	// finish, and the following segments until it is clean again.
	var seq *Decoder
	for s := range ordered {
		<-s.done
		if s.rest {
			// The reader has stopped: r is ours now. The segment starts
			// at a boundary, where a decoder reading the whole file
			// would start a statement too, unless seq is running.
			d, out := seq, emit
			if d == nil {
				d, out = &Decoder{line: s.line, order: binary.ByteOrder(binary.LittleEndian)}, h
				if fileBig {
					d.order = binary.BigEndian
				}
			}
			d.Feed(s.buf, out)
			n, err := d.DecodeFrom(r, out)
			total += n
			if err != nil && readErr == nil {
				readErr = err
			}
			if err := d.Close(out); err != nil {
				incomplete, _ = err.(*IncompleteError)
			}
			continue
		}
		switch {
		case seq != nil && s.last:
			seq.Feed(s.buf, emit)
			if err := seq.Close(emit); err != nil {
				incomplete, _ = err.(*IncompleteError)
			}
		case seq != nil:
			seq.Feed(s.buf[:s.limit], emit)
			if seq.clean() {
				seq = nil
			}
		default:
			for _, it := range s.items {
				emit(it.s, it.err)
			}
			incomplete = s.incomplete
			if !s.last && !s.clean {
				seq = s.dec
				seq.Feed(s.buf[s.stop:s.limit], emit)
				if seq.clean() {
					seq = nil
				}
			}
		}
		release(s)
	}
	wg.Wait()
	return total, incomplete, readErr
}

// DefaultWorkers is the number of goroutines ParseLeases decodes with.
func DefaultWorkers() int { return runtime.GOMAXPROCS(0) }
