package main

import (
	"errors"
	"strconv"
)

// runClean is "leasekeeper-hook clean LEASES_FILE". MAAS's dhcpd units
// run it under sh -e right before exec dhcpd, so it exits 0 whenever
// dhcpd can still start: 2 only for invalid arguments, which is a unit
// that was never going to work.
func runClean(args []string, stdout, stderr int) (code int) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	} else {
		for _, a := range args {
			if a == "-h" || a == "--help" {
				writeString(stdout, usage)
				return exitOK
			}
			if len(a) > 1 && a[0] == '-' {
				writeString(stderr, "leasekeeper-hook: clean: unknown flag "+quote(a)+": want clean LEASES_FILE\n")
				return exitUsage
			}
		}
	}
	switch {
	case len(args) == 0:
		writeString(stderr, "leasekeeper-hook: clean: missing the leases file: want clean LEASES_FILE\n")
		return exitUsage
	case len(args) > 1:
		writeString(stderr, "leasekeeper-hook: clean: more than one argument: want clean LEASES_FILE\n")
		return exitUsage
	case args[0] == "":
		writeString(stderr, "leasekeeper-hook: clean: empty leases file name: want clean LEASES_FILE\n")
		return exitUsage
	}
	path := args[0]
	// A bug here must not stop dhcpd. The file is only ever replaced
	// whole, by a rename, so whatever a panic leaves is a file dhcpd can
	// read: the original or the cleaned copy.
	defer func() {
		if p := recover(); p != nil {
			msg := "internal error"
			switch v := p.(type) {
			case error:
				msg += " (" + v.Error() + ")"
			case string:
				msg += " (" + v + ")"
			}
			writeString(stderr, "leasekeeper-hook: clean "+strconv.Quote(path)+": "+msg+"; the file is whole, cleaned or not\n")
			code = exitOK
		}
	}()
	if note := cleanFile(path); note != "" {
		writeString(stderr, "leasekeeper-hook: clean "+strconv.Quote(path)+": "+note+"\n")
	}
	return exitOK
}

// cleanFile removes the host statements from the leases file at path by
// writing a cleaned copy beside it and renaming it into place. It returns
// "" when the file was cleaned or needed nothing (missing, or no host
// statement), else one line saying what was not done and why. Until the
// rename the original is untouched, so every failure leaves it as it was.
func cleanFile(path string) string {
	dir, base := splitPath(path)
	if base == "" || base == "." || base == ".." {
		return "not a regular file; left as it was"
	}
	dirfd, err := openRetry(-1, dir, _O_RDONLY|_O_DIRECTORY|_O_CLOEXEC, 0)
	if err == _ENOENT {
		return "" // no directory, no file: nothing to clean
	}
	if err != nil {
		return "cannot open its directory: " + err.Error() + "; left as it was"
	}
	defer rawClose(dirfd)

	// O_NOFOLLOW: a symbolic link is never rewritten (its target could be
	// any file) nor replaced by a file. O_NONBLOCK: a FIFO does not block.
	fd, err := openRetry(dirfd, base, _O_RDONLY|_O_NOFOLLOW|_O_NONBLOCK|_O_CLOEXEC, 0)
	switch {
	case err == _ENOENT:
		return "" // dhcpd says what it thinks of a missing leases file
	case err == _ELOOP:
		return "a symbolic link, not rewritten; host statements left in place"
	case err != nil:
		return "cannot open: " + err.Error() + "; left as it was"
	}
	defer rawClose(fd)
	var st statxT
	if err := rawStat(fd, nil, &st, false); err != 0 {
		return "fstat: " + statErr(err).Error() + "; left as it was"
	}
	if st.Mode&_S_IFMT != _S_IFREG {
		return "not a regular file; left as it was"
	}
	if st.Size > maxCleanSize {
		return "larger than " + strconv.Itoa(maxCleanSize>>20) + " MiB, not read; left as it was"
	}
	in, err := readAll(fd, int64(st.Size))
	if err != nil {
		return "read: " + err.Error() + "; left as it was"
	}

	out, r := cleanLeases(in)
	note := ""
	if r.stopped >= 0 {
		note = r.stopNote(in)
	}
	if r.removed == 0 {
		return note
	}
	if err := replace(dirfd, base, fd, &st, out); err != nil {
		return "not cleaned: " + err.Error() + "; left as it was, host statements included"
	}
	if err := fsyncRetry(dirfd); err != nil {
		note = join(note, "cleaned, but syncing the directory failed ("+err.Error()+"): a crash may bring back the uncleaned file")
	}
	return note
}

// replace writes out to a new file in the directory dirfd, with the owner,
// group and permission bits of the original (open as fd, described by
// st), syncs it and renames it onto base. It refuses, removing its new
// file, when the original changed or was replaced meanwhile.
func replace(dirfd int, base string, fd int, st *statxT, out []byte) (err error) {
	tmp, tfd, err := createTemp(dirfd, base)
	if err != nil {
		return err
	}
	defer func() {
		if tfd >= 0 {
			rawClose(tfd)
		}
		if err != nil {
			if p, e := cpath(tmp); e == 0 {
				rawUnlinkat(dirfd, p)
			}
		}
	}()
	if err := writeAll(tfd, out); err != nil {
		return errorf("write "+tmp, err)
	}
	// Owner first: chown clears the set-id bits chmod then restores.
	if err := rawFchown(tfd, st.Uid, st.Gid); err != 0 {
		return errorf("give "+tmp+" owner "+strconv.FormatUint(uint64(st.Uid), 10)+":"+strconv.FormatUint(uint64(st.Gid), 10), err)
	}
	if err := rawFchmod(tfd, uint32(st.Mode&0o7777)); err != 0 {
		return errorf("chmod "+tmp, err)
	}
	if err := fsyncRetry(tfd); err != nil {
		return errorf("fsync "+tmp, err)
	}
	if err := rawClose(tfd); err != 0 {
		tfd = -1
		return errorf("close "+tmp, err)
	}
	tfd = -1
	if err := unchanged(dirfd, base, fd, st); err != nil {
		return err
	}
	if err := renameat(dirfd, tmp, base); err != 0 {
		return errorf("rename "+tmp, err)
	}
	return nil
}

// unchanged checks that the file read (fd, st) was not written to since,
// and is still the one at base: dhcpd is meant to be stopped while its
// leases file is cleaned, and a rename would lose what it appended.
func unchanged(dirfd int, base string, fd int, st *statxT) error {
	var now statxT
	if err := rawStat(fd, nil, &now, false); err != 0 {
		return errorf("fstat", err)
	}
	if now.Size != st.Size || now.Mtime != st.Mtime {
		return errors.New("the file changed while it was being cleaned (is dhcpd running?)")
	}
	cur, err := openRetry(dirfd, base, _O_RDONLY|_O_NOFOLLOW|_O_NONBLOCK|_O_CLOEXEC, 0)
	if err != nil {
		return errorf("reopen", err)
	}
	e := rawStat(cur, nil, &now, false)
	rawClose(cur)
	if e != 0 {
		return errorf("fstat", e)
	}
	if now.DevMajor != st.DevMajor || now.DevMinor != st.DevMinor || now.Ino != st.Ino {
		return errors.New("the file was replaced while it was being cleaned (is dhcpd running?)")
	}
	return nil
}

// tempSuffix marks the cleaned copy until it is renamed into place; one
// left behind (the hook was killed) can be deleted.
const tempSuffix = ".leasekeeper-clean-"

// createTemp creates base + tempSuffix + pid[-n] in dirfd, exclusively:
// it never opens an existing file or follows a link.
func createTemp(dirfd int, base string) (string, int, error) {
	name := base + tempSuffix + strconv.Itoa(getpid())
	for n := 0; ; n++ {
		tmp := name
		if n > 0 {
			tmp += "-" + strconv.Itoa(n)
		}
		fd, err := openRetry(dirfd, tmp, _O_WRONLY|_O_CREAT|_O_EXCL|_O_NOFOLLOW|_O_CLOEXEC, 0o600)
		if err == _EEXIST && n < 16 {
			continue // left by an earlier run that had this pid
		}
		if err != nil {
			return "", -1, errorf("create "+tmp, err)
		}
		return tmp, fd, nil
	}
}

// splitPath splits path at its last '/' into a directory ("." when there
// is none, "/" for the root) and a base name.
func splitPath(path string) (dir, base string) {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			if i == 0 {
				return "/", path[1:]
			}
			return path[:i], path[i+1:]
		}
	}
	return ".", path
}

// openRetry is openat (dirfd -1: relative to the working directory),
// retried on EINTR.
func openRetry(dirfd int, path string, flags int, mode uint32) (int, error) {
	if dirfd < 0 {
		dirfd = atFDCWD
	}
	p, e := cpath(path)
	if e != 0 {
		return -1, e
	}
	for {
		fd, e := rawOpen(dirfd, p, flags, mode)
		if e != _EINTR {
			return fd, errnoErr(e)
		}
	}
}

// renameat renames oldpath to newpath, both in dirfd.
func renameat(dirfd int, oldpath, newpath string) errno {
	o, e := cpath(oldpath)
	if e != 0 {
		return e
	}
	n, e := cpath(newpath)
	if e != 0 {
		return e
	}
	return rawRenameat(dirfd, o, dirfd, n)
}

func fsyncRetry(fd int) error {
	for {
		if e := rawFsync(fd); e != _EINTR {
			return errnoErr(e)
		}
	}
}

// maxCleanSize bounds the leases file clean reads into memory. dhcpd's
// files are far smaller (a lease block is about 300 bytes); this only
// keeps a wrong path (a disk image, say) from exhausting memory.
const maxCleanSize = 1 << 30

// readAll reads fd to its end; size is what fstat said, a hint.
func readAll(fd int, size int64) ([]byte, error) {
	buf, e := readInto(fd, make([]byte, 0, size+1), maxCleanSize)
	switch {
	case e == errTooBig:
		return nil, errors.New("the file grew past the size limit")
	case e != 0:
		return nil, e
	}
	return buf, nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := rawWrite(fd, b)
		if err == _EINTR {
			continue
		}
		if err != 0 {
			return err
		}
		if n == 0 {
			return _EIO
		}
		b = b[n:]
	}
	return nil
}

func errorf(what string, err error) error { return errors.New(what + ": " + err.Error()) }

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
