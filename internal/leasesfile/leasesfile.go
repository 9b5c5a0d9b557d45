// Package leasesfile is how leasekeeper follows a file dhcpd writes.
// dhcpd appends a block to its leases file for every change and, at its
// start and about once an hour, writes a whole new file and renames it
// onto the path (the old inode lives on as NAME~, a hard link). A reader
// holding the file open reads on from where it stopped while the path
// still names the file it holds, and reads the path's file whole once the
// path names another file, or when the file held shrank. Check tells
// which; TornAt tells whether what was read ends inside a statement
// (dhcpd is still writing it). The reconciler's follower
// (agent/reconcile/watch.go) and rack-side release (release/rack) both
// follow the file with them.
package leasesfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ID is a file's identity. dhcpd's rewrite keeps the path and changes
// the inode; the old inode's link count says nothing (dhcpd.leases~ is a
// hard link to it), comparing device and inode does.
type ID struct{ Dev, Ino uint64 }

// IDOf is fi's identity (zero where the system gives none).
func IDOf(fi fs.FileInfo) ID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return ID{Dev: uint64(st.Dev), Ino: st.Ino} //nolint:unconvert // Dev is not uint64 everywhere
	}
	return ID{}
}

// Open opens path with open and returns the file with its identity, to
// be given to Check later.
func Open[F interface {
	Stater
	io.Closer
}](path string, open func(string) (F, error)) (F, ID, error) {
	var none F
	f, err := open(path)
	if err != nil {
		return none, ID{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return none, ID{}, err
	}
	return f, IDOf(fi), nil
}

// Change is what happened at the path since the file held was opened.
type Change uint8

const (
	// Appended: the path still names the file held (or names nothing for
	// a moment, between dhcpd's unlink and rename): read on from where
	// the last read stopped.
	Appended Change = iota
	// Replaced: another file was renamed onto the path (dhcpd's rewrite):
	// read it whole.
	Replaced
	// Truncated: the file held is shorter than what was read from it:
	// read it again from its start.
	Truncated
	// Unlinked: the path names no file, and the file held is not
	// truncated: read on in it, as for Appended. dhcpd's rewrite leaves
	// the path empty for a moment (between its unlink and rename); for
	// longer, the file was removed or moved away, and dhcpd writes on to
	// the file it has open until its next rewrite or restart.
	Unlinked
)

// Stater is the file held (an *os.File).
type Stater interface {
	Stat() (fs.FileInfo, error)
}

// Check says what happened to the file at path while held, of identity
// id and read up to read bytes, was open. size is held's size (for
// Appended, Unlinked and Truncated; 0 for Replaced). The errors are os.Stat's on
// path (other than the path not existing) and held's Stat.
func Check(path string, held Stater, id ID, read int64) (c Change, size int64, err error) {
	fi, err := os.Stat(path)
	on := Appended
	switch {
	case err == nil && IDOf(fi) != id:
		return Replaced, 0, nil
	case errors.Is(err, fs.ErrNotExist):
		on = Unlinked
	case err != nil:
		return Appended, 0, err
	}
	hfi, err := held.Stat()
	if err != nil {
		return on, 0, err
	}
	if hfi.Size() < read {
		return Truncated, hfi.Size(), nil
	}
	return on, hfi.Size(), nil
}

// maxTail bounds the pending tail TornAt reads back: a statement longer
// than any dhcpd writes is torn whatever it holds.
const maxTail = 64 << 10

// TornAt says whether the pending bytes an incremental decoder holds at
// the end of what was read (pending bytes of f ending at end; line is
// the decoder's line at their start) are the start of a statement — the
// file ends inside one — rather than blank space and comments, and at
// which line that statement starts. A tail longer than 64 KiB, or one
// that cannot be read back, is torn at line.
func TornAt(f io.ReaderAt, end int64, pending, line int) (at int, torn bool) {
	if pending == 0 {
		return 0, false
	}
	if pending > maxTail {
		return line, true
	}
	buf := make([]byte, pending)
	if _, err := f.ReadAt(buf, end-int64(pending)); err != nil {
		return line, true
	}
	comment := false
	for _, c := range buf {
		switch {
		case c == '\n':
			line++
			comment = false
		case comment:
		case c == '#':
			comment = true
		case c != ' ' && c != '\t' && c != '\r':
			return line, true
		}
	}
	return 0, false
}
