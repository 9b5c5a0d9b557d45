package main

import (
	"errors"
	"strconv"
	"syscall"
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
	dirfd, err := openRetry(-1, dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err == syscall.ENOENT {
		return "" // no directory, no file: nothing to clean
	}
	if err != nil {
		return "cannot open its directory: " + err.Error() + "; left as it was"
	}
	defer syscall.Close(dirfd)

	// O_NOFOLLOW: a symbolic link is never rewritten (its target could be
	// any file) nor replaced by a file. O_NONBLOCK: a FIFO does not block.
	fd, err := openRetry(dirfd, base, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	switch {
	case err == syscall.ENOENT:
		return "" // dhcpd says what it thinks of a missing leases file
	case err == syscall.ELOOP:
		return "a symbolic link, not rewritten; host statements left in place"
	case err != nil:
		return "cannot open: " + err.Error() + "; left as it was"
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return "fstat: " + err.Error() + "; left as it was"
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return "not a regular file; left as it was"
	}
	if st.Size > maxCleanSize {
		return "larger than " + strconv.Itoa(maxCleanSize>>20) + " MiB, not read; left as it was"
	}
	in, err := readAll(fd, st.Size)
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
func replace(dirfd int, base string, fd int, st *syscall.Stat_t, out []byte) (err error) {
	tmp, tfd, err := createTemp(dirfd, base)
	if err != nil {
		return err
	}
	defer func() {
		if tfd >= 0 {
			syscall.Close(tfd)
		}
		if err != nil {
			syscall.Unlinkat(dirfd, tmp)
		}
	}()
	if err := writeAll(tfd, out); err != nil {
		return errorf("write "+tmp, err)
	}
	// Owner first: chown clears the set-id bits chmod then restores.
	if err := syscall.Fchown(tfd, int(st.Uid), int(st.Gid)); err != nil {
		return errorf("give "+tmp+" owner "+strconv.FormatUint(uint64(st.Uid), 10)+":"+strconv.FormatUint(uint64(st.Gid), 10), err)
	}
	if err := syscall.Fchmod(tfd, st.Mode&0o7777); err != nil {
		return errorf("chmod "+tmp, err)
	}
	if err := fsyncRetry(tfd); err != nil {
		return errorf("fsync "+tmp, err)
	}
	if err := syscall.Close(tfd); err != nil {
		tfd = -1
		return errorf("close "+tmp, err)
	}
	tfd = -1
	if err := unchanged(dirfd, base, fd, st); err != nil {
		return err
	}
	if err := syscall.Renameat(dirfd, tmp, dirfd, base); err != nil {
		return errorf("rename "+tmp, err)
	}
	return nil
}

// unchanged checks that the file read (fd, st) was not written to since,
// and is still the one at base: dhcpd is meant to be stopped while its
// leases file is cleaned, and a rename would lose what it appended.
func unchanged(dirfd int, base string, fd int, st *syscall.Stat_t) error {
	var now syscall.Stat_t
	if err := syscall.Fstat(fd, &now); err != nil {
		return errorf("fstat", err)
	}
	if now.Size != st.Size || now.Mtim != st.Mtim {
		return errors.New("the file changed while it was being cleaned (is dhcpd running?)")
	}
	cur, err := openRetry(dirfd, base, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return errorf("reopen", err)
	}
	err = syscall.Fstat(cur, &now)
	syscall.Close(cur)
	if err != nil {
		return errorf("fstat", err)
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
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
	name := base + tempSuffix + strconv.Itoa(syscall.Getpid())
	for n := 0; ; n++ {
		tmp := name
		if n > 0 {
			tmp += "-" + strconv.Itoa(n)
		}
		fd, err := openRetry(dirfd, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err == syscall.EEXIST && n < 16 {
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
	for {
		fd, err := syscall.Openat(dirfd, path, flags, mode)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// atFDCWD is AT_FDCWD, which package syscall does not export on every
// architecture.
const atFDCWD = -100

func fsyncRetry(fd int) error {
	for {
		if err := syscall.Fsync(fd); err != syscall.EINTR {
			return err
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
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return syscall.EIO
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
