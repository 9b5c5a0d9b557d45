package rack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"strings"

	"github.com/leasekeeper/leasekeeper/internal/leasesfile"
	"github.com/leasekeeper/leasekeeper/internal/safefile"
	"github.com/leasekeeper/leasekeeper/parser"
)

// ErrUnreadable: the leases file holds a statement the parser had to skip
// after the address's last readable block (a bad or torn block for the
// address, or one whose address cannot be told), or it ends inside a
// statement; the address's current lease is unknown.
var ErrUnreadable = errors.New("dhcpd's leases file could not be read where this address's current lease may be")

// leasesFile is what a leaseReader needs of the open leases file (an
// *os.File; tests count the bytes read through it).
type leasesFile interface {
	io.ReadCloser
	io.ReaderAt
	Stat() (fs.FileInfo, error)
}

func openLeases(path string) (leasesFile, error) { return safefile.Open(path, safefile.FollowLinks) }

// leaseReader follows dhcpd's leases file for one address: the whole
// file once, then only what dhcpd appends, through one incremental
// decoder. It keeps the address's last block and the skipped statements
// that could hide a later one, never the whole table, so a release costs
// one pass over the file and then only the appended bytes, however big
// the file and however many releases run at once. A file renamed onto the
// path (dhcpd's rewrite) or truncated is read whole again
// (leasesfile.Check). Not safe for concurrent use.
type leaseReader struct {
	path string
	ip   netip.Addr
	open func(path string) (leasesFile, error)

	f    leasesFile
	id   leasesfile.ID
	read int64 // bytes read from f
	dec  *parser.Decoder

	// lease is the address's last block (nil: none so far).
	lease *parser.Lease
	// hiding are the syntax errors, after lease's block, of statements
	// that may have been a later block for the address.
	hiding []*parser.SyntaxError
	// rereads counts whole reads after the first (tests).
	rereads int
}

func newLeaseReader(path string, ip netip.Addr, open func(string) (leasesFile, error)) *leaseReader {
	if open == nil {
		open = openLeases
	}
	return &leaseReader{path: path, ip: ip, open: open}
}

func (r *leaseReader) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// sync reads what is new: the whole file on the first call or when the
// path now names another file or the file shrank, else what was appended
// since the last call.
func (r *leaseReader) sync(ctx context.Context) error {
	if r.f == nil {
		if err := r.openWhole(); err != nil {
			return fmt.Errorf("dhcpd's leases file: %w", err)
		}
	} else {
		change, _, err := leasesfile.Check(r.path, r.f, r.id, r.read)
		switch {
		case err != nil:
			return fmt.Errorf("dhcpd's leases file: %w", err)
		case change == leasesfile.Replaced:
			// Rewritten: the new file holds dhcpd's whole table, the
			// release included if it was recorded before the rename.
			r.close()
			if err := r.openWhole(); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // between unlink and rename: next time
				}
				return fmt.Errorf("dhcpd's leases file: %w", err)
			}
			r.rereads++
		case change == leasesfile.Truncated:
			r.close()
			if err := r.openWhole(); err != nil {
				return fmt.Errorf("dhcpd's leases file: %w", err)
			}
			r.rereads++
		}
	}
	n, err := r.dec.DecodeFrom(ctxReader{ctx, r.f}, r.handle)
	r.read += n
	if err != nil {
		return fmt.Errorf("reading %s: %w", r.path, err)
	}
	return nil
}

func (r *leaseReader) openWhole() error {
	f, id, err := leasesfile.Open(r.path, r.open)
	if err != nil {
		return err
	}
	r.f, r.id, r.read = f, id, 0
	r.dec = parser.NewDecoder()
	r.lease, r.hiding = nil, nil
	return nil
}

func (r *leaseReader) handle(s parser.Statement, err error) {
	if err != nil {
		var se *parser.SyntaxError
		if !errors.As(err, &se) {
			se = &parser.SyntaxError{Line: r.dec.Line(), Msg: err.Error()}
		}
		if mayBeLease(se, r.ip) {
			r.hiding = append(r.hiding, se)
		}
		return
	}
	if l, ok := s.(*parser.Lease); ok && l.IP == r.ip {
		r.lease, r.hiding = l, nil // the last block wins, as in dhcpd
	}
}

// notLease are the statements a syntax error can name that are not an
// IPv4 lease (parser/doc.go).
var notLease = map[string]bool{
	"ia-na": true, "ia-ta": true, "ia-pd": true, "iaaddr": true, "iaprefix": true,
	"host": true, "server-duid": true, "authoring-byte-order": true, "failover": true,
	"class": true, "subclass": true, "group": true,
}

// mayBeLease reports whether a skipped statement may have been a block
// for ip: the parser's message names the statement ("lease 203.0.113.5:
// …", "host h1: …"); one that names lease ip, or no statement the parser
// knows (a bad token at top level, a statement too long), may be. A lease
// whose address does not parse is no lease of ip's for dhcpd either.
func mayBeLease(se *parser.SyntaxError, ip netip.Addr) bool {
	what, _, ok := strings.Cut(se.Msg, ": ")
	if !ok {
		return true
	}
	kw, arg, _ := strings.Cut(what, " ")
	if kw == "lease" {
		a, err := netip.ParseAddr(arg)
		return err == nil && a == ip
	}
	return !notLease[kw]
}

// tornAt returns the line of a statement the file ends inside (dhcpd is
// writing a block, maybe the address's), or 0 when what was read ends at
// a statement boundary, blank space and comments aside.
func (r *leaseReader) tornAt() int {
	line, _ := leasesfile.TornAt(r.f, r.read, r.dec.Pending(), r.dec.Line())
	return line
}

// unreadable describes why the address's current lease cannot be told,
// or returns "" when it can.
func (r *leaseReader) unreadable() string {
	if len(r.hiding) > 0 {
		se := r.hiding[0]
		s := fmt.Sprintf("%s:%d: %s", r.path, se.Line, se.Msg)
		if len(r.hiding) > 1 {
			s += fmt.Sprintf(", and %d more", len(r.hiding)-1)
		}
		if r.lease != nil {
			s += fmt.Sprintf("; after its block at line %d", r.lease.Line)
		}
		return s
	}
	if line := r.tornAt(); line > 0 {
		return fmt.Sprintf("%s ends inside a statement at line %d (dhcpd still writing it?)", r.path, line)
	}
	return ""
}

// ctxReader stops a long read when ctx ends (DecodeFrom reads 1 MiB at a
// time).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
