package main

import (
	"errors"
	"strconv"
	"unsafe"
)

// spoolFile is the file, in the spool directory, that hooks append to.
// The agent drains it by renaming it away (see doc.go).
const spoolFile = "events.jsonl"

// spoolAttempts bounds how often the hook reopens the spool file when
// the agent renames it between the hook's open and its lock. Once is
// enough unless the agent drains in a tight loop.
const spoolAttempts = 4

// deliver hands the event's JSON to the agent's socket, or to the spool
// when the agent cannot take it, or when the spool already holds events
// (those are older and must stay ahead of this one). It never waits:
// the send is non-blocking, the spool lock is tried, not waited for.
// It fails only when neither way took the event.
func deliver(msg []byte, socket, spoolDir string) error {
	path := cstring(&spoolBuf, spoolDir, "/", spoolFile)
	if path == nil {
		// Not a path the kernel takes: the spool cannot exist.
		if err := send(socket, msg); err != nil {
			return lost(socket, err, spoolDir, errors.New("not a usable path"), false)
		}
		return nil
	}
	if rawStat(atFDCWD, path, &stat1, true) == 0 {
		// Sticky spool: earlier events wait in it, so this one follows
		// them. Only if the spool cannot be written does it go to the
		// socket after all: late (its timestamp_ns orders it) beats lost.
		serr := appendSpool(spoolDir, path, msg)
		if serr == nil {
			return nil
		}
		if err := send(socket, msg); err != nil {
			return lost(socket, err, spoolDir, serr, true)
		}
		return nil
	}
	err := send(socket, msg)
	if err == nil {
		return nil
	}
	// Any failure to send means the agent did not take it: ENOENT (no
	// socket), ECONNREFUSED (nobody bound), EAGAIN (receive queue full),
	// ENOBUFS, EACCES, EPROTOTYPE (not a datagram socket)…
	if serr := appendSpool(spoolDir, path, msg); serr != nil {
		return lost(socket, err, spoolDir, serr, false)
	}
	return nil
}

// lost is deliver's error when neither way took the event, the spool
// named first when it was tried first. Not inlined: its strings stay
// out of deliver's frame (TestStartStack).
//
//go:noinline
func lost(socket string, sendErr error, spoolDir string, spoolErr error, spoolFirst bool) error {
	sent := "send to " + socket + ": " + sendErr.Error()
	spooled := "spool " + spoolDir + "/" + spoolFile + ": " + spoolErr.Error()
	if spoolFirst {
		return errors.New(spooled + "; " + sent)
	}
	return errors.New(sent + "; " + spooled)
}

// send sends msg as one datagram to the unix socket at path, without
// blocking.
func send(path string, msg []byte) error {
	if len(path) >= len(sun.Path) {
		return _EINVAL
	}
	fd, _, e := syscall6(sysSocket, _AF_UNIX, _SOCK_DGRAM|_SOCK_NONBLOCK|_SOCK_CLOEXEC, 0, 0, 0, 0)
	if e != 0 {
		return errno(e)
	}
	sun.Family = _AF_UNIX
	for i := 0; i < len(path); i++ {
		sun.Path[i] = int8(path[i])
	}
	sun.Path[len(path)] = 0
	salen := unsafe.Offsetof(sun.Path) + uintptr(len(path)) + 1
	for {
		_, _, e = syscall6(sysSendto, fd, uintptr(unsafe.Pointer(unsafe.SliceData(msg))), uintptr(len(msg)), 0, uintptr(unsafe.Pointer(&sun)), salen)
		if errno(e) != _EINTR {
			break
		}
	}
	rawClose(int(fd))
	return errnoErr(errno(e))
}

// appendSpool appends msg and a newline to the spool file (at path,
// NUL-terminated, in dir) with one O_APPEND write, holding a shared
// lock so the agent's drain (which renames the file, then takes an
// exclusive lock) waits for it. It creates the spool directory when it
// is missing.
func appendSpool(dir string, path *byte, msg []byte) error {
	line := append(msg, '\n')
	made := false
	for attempt := 0; attempt < spoolAttempts; attempt++ {
		// Never through a symbolic link (ELOOP, also for a dangling one
		// that O_CREAT would otherwise follow), never blocking on a FIFO;
		// only a regular file takes the line.
		fd, e := rawOpen(atFDCWD, path, _O_WRONLY|_O_APPEND|_O_CREAT|_O_CLOEXEC|_O_NOFOLLOW|_O_NONBLOCK|_O_NOCTTY, 0o640)
		if e == _ENOENT && !made {
			made = true
			if err := mkdirAll(dir, 0o750); err != nil {
				return err
			}
			attempt--
			continue
		}
		if e != 0 {
			return e
		}
		if e := rawStat(fd, nil, &stat1, false); e != 0 || stat1.Mode&_S_IFMT != _S_IFREG {
			rawClose(fd)
			if e != 0 {
				return statErr(e)
			}
			return errors.New("not a regular file")
		}
		current, err := lockCurrent(fd, &stat1, path)
		if err == nil && current {
			err = writeLine(fd, line)
		}
		if e := rawClose(fd); err == nil && e != 0 {
			err = e
		}
		if err != nil || current {
			return err
		}
		// The agent took the file between our open and our lock: the
		// next open creates a fresh one.
	}
	return errors.New("the spool file was replaced on every attempt")
}

// lockCurrent takes a shared lock on fd, whose fstat is held, without
// waiting and reports whether fd is still the file at path. A file the
// agent holds exclusively is one it has already renamed away to drain
// it, and a file that no longer sits at path is one the agent took
// before we locked it. (An open file's device and inode do not change:
// the fstat made before the lock serves after it.)
func lockCurrent(fd int, held *statxT, path *byte) (bool, error) {
	for {
		e := rawFlock(fd, _LOCK_SH|_LOCK_NB)
		if e == _EWOULDBLOCK {
			return false, nil
		}
		if e == _EINTR {
			continue
		}
		if e != 0 {
			return false, e
		}
		break
	}
	named := &stat2
	if e := rawStat(atFDCWD, path, named, false); e != 0 {
		if e == _ENOENT {
			return false, nil
		}
		return false, statErr(e)
	}
	return held.DevMajor == named.DevMajor && held.DevMinor == named.DevMinor && held.Ino == named.Ino, nil
}

// writeLine writes line with a single write: with O_APPEND on a local
// filesystem that one write lands whole after every other, even if other
// hooks append at the same time. A second write would not be atomic with
// the first, so a short write (a full disk) is an error, and the reader
// resynchronises on the torn line (doc.go).
func writeLine(fd int, line []byte) error {
	for {
		n, e := rawWrite(fd, line)
		if e == _EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		if n != len(line) {
			return errors.New("short write (" + strconv.Itoa(n) + " of " + strconv.Itoa(len(line)) + " bytes): filesystem full?")
		}
		return nil
	}
}

// mkdirAll creates dir and any missing parents, like os.MkdirAll.
func mkdirAll(dir string, mode uint32) error {
	err := mkdir(dir, mode)
	if err == 0 || err == _EEXIST {
		return nil
	}
	if err != _ENOENT {
		return errors.New("mkdir " + dir + ": " + err.Error())
	}
	i := len(dir) - 1
	for i > 0 && dir[i] != '/' {
		i--
	}
	if i <= 0 {
		return errors.New("mkdir " + dir + ": " + err.Error())
	}
	if err := mkdirAll(dir[:i], mode); err != nil {
		return err
	}
	if err := mkdir(dir, mode); err != 0 && err != _EEXIST {
		return errors.New("mkdir " + dir + ": " + err.Error())
	}
	return nil
}

func mkdir(dir string, mode uint32) errno {
	p, e := cpath(dir)
	if e != 0 {
		return e
	}
	return rawMkdir(p, mode)
}
