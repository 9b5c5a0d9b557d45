// Package safefile opens the files the agent and its tools read (dhcpd's
// leases and configuration, spool files, token and key files) so that
// what sits at the path cannot block or mislead the reader: the open
// never blocks (a FIFO would wait for a writer forever), never follows a
// symbolic link unless asked to, and what was opened must be a regular
// file. The check is made on the open file, not on the path, so the file
// cannot be swapped between the check and the read.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular
// file (a FIFO, a socket, a device, a directory).
var ErrNotRegular = errors.New("not a regular file")

// ErrSymlink is wrapped by the error for a symbolic link opened with
// NoFollow.
var ErrSymlink = errors.New("a symbolic link, which is not followed here")

// Follow says whether a symbolic link at the path itself is followed.
type Follow bool

const (
	// FollowLinks: the path may be a link (an administrator's choice,
	// e.g. dhcpd.leases moved to another disk).
	FollowLinks Follow = true
	// NoFollow: a link at the path is refused (directories others can
	// write into: the spool).
	NoFollow Follow = false
)

// Open opens path read-only as described in the package doc. Errors keep
// fs.ErrNotExist and the like reachable through errors.Is.
func Open(path string, follow Follow) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, flags, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if follow == NoFollow && errors.Is(err, unix.ELOOP) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: ErrSymlink}
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(st.Mode))}
	}
	// Reads of a regular file never block; clear the flag so that the
	// file behaves as any other for the caller.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadFile is os.ReadFile through Open, reading at most limit bytes
// (limit <= 0: no limit); a longer file is an error.
func ReadFile(path string, follow Follow, limit int64) ([]byte, error) {
	f, err := Open(path, follow)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if limit > 0 {
		r = io.LimitReader(f, limit+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if limit > 0 && int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than the %d bytes expected of it", path, limit)
	}
	return b, nil
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("mode %#o", mode)
}
