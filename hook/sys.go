package main

import (
	"syscall"
	"unsafe"
)

// The system calls of notify's path, and the memory they use.
//
// A Go program's main goroutine starts on a 2 KiB stack, of which about
// 1.1 KiB is usable before the runtime grows it; growing copies the stack
// and unwinds it through tables nothing else reads, onto fresh pages (on
// a virtual machine about 4 % of an empty Go program's run; issue 16,
// doc.go). notify stays within it (TestStartStack): no heap allocation on
// its path past main's first two calls (start.go), as a size class's
// first use goes down the allocator's slow path, several hundred bytes
// deep; its buffers static; its system calls raw. The syscall package's wrappers copy each path to the heap,
// and hand the processor off around each call, which a process with one
// goroutine and calls that return at once has no use for.

// Static buffers: bss, so a page is only touched when used. They make
// notify's functions for one goroutine at a time, which the hook is.
var (
	lineBuf   [maxLine]byte           // run: the event's JSON
	theConfig config                  // run
	spoolBuf  [pathMax]byte           // deliver: the spool file's path, NUL-terminated
	sun       syscall.RawSockaddrUnix // send
	stat1     syscall.Stat_t          // deliver, appendSpool (its fd, for lockCurrent)
	stat2     syscall.Stat_t          // lockCurrent
)

// pathMax is Linux's PATH_MAX, NUL included.
const pathMax = 4096

// cstring copies the concatenation of parts and a NUL into buf and
// returns a pointer to it for a system call, or nil when it does not fit
// or holds a NUL (the kernel would read a shorter path).
func cstring(buf *[pathMax]byte, parts ...string) *byte {
	n := 0
	for _, p := range parts {
		if n+len(p) >= len(buf) {
			return nil
		}
		for i := 0; i < len(p); i++ {
			if p[i] == 0 {
				return nil
			}
		}
		n += copy(buf[n:], p)
	}
	buf[n] = 0
	return &buf[0]
}

// errnoErr returns e as an error, nil for 0.
func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func rawOpen(path *byte, flags int, mode uint32) (int, syscall.Errno) {
	dirfd := atFDCWD
	fd, _, e := syscall.RawSyscall6(syscall.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(path)), uintptr(flags), uintptr(mode), 0, 0)
	return int(fd), e
}

func rawRead(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(n), e
}

func rawClose(fd int) syscall.Errno {
	_, _, e := syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
	return e
}

// rawStat is fstatat(2): of path (nofollow: lstat), or of fd when path
// is nil.
func rawStat(fd int, path *byte, st *syscall.Stat_t, nofollow bool) syscall.Errno {
	if !haveFstatat {
		return statSlow(fd, path, st, nofollow)
	}
	flags := 0
	if path == nil {
		path, flags = &empty, _AT_EMPTY_PATH
	} else if nofollow {
		flags = _AT_SYMLINK_NOFOLLOW
	}
	_, _, e := syscall.RawSyscall6(sysFstatat, uintptr(fd), uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	return e
}

var empty byte // "", NUL-terminated

// statSlow is rawStat through package syscall, for an architecture
// without fstatat(2).
func statSlow(fd int, path *byte, st *syscall.Stat_t, nofollow bool) syscall.Errno {
	var err error
	switch {
	case path == nil:
		err = syscall.Fstat(fd, st)
	case nofollow:
		err = syscall.Lstat(unsafe.String(path, cstrlen(path)), st)
	default:
		err = syscall.Stat(unsafe.String(path, cstrlen(path)), st)
	}
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	if err != nil {
		return syscall.EINVAL
	}
	return 0
}

// cstrlen is the length of the NUL-terminated string at p.
func cstrlen(p *byte) int {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return n
}

const (
	_AT_SYMLINK_NOFOLLOW = 0x100
	_AT_EMPTY_PATH       = 0x1000
)

func rawFlock(fd, how int) syscall.Errno {
	_, _, e := syscall.RawSyscall(syscall.SYS_FLOCK, uintptr(fd), uintptr(how), 0)
	return e
}

// errTooBig is readInto's answer past its limit (no system call returns
// it: Errno values are small).
const errTooBig = syscall.Errno(1 << 20)

// readInto reads fd to its end into buf from its start, growing it on
// the heap past its capacity; past limit bytes (0: none) it stops with
// errTooBig.
func readInto(fd int, buf []byte, limit int) ([]byte, syscall.Errno) {
	buf = buf[:0]
	for {
		if limit > 0 && len(buf) > limit {
			return nil, errTooBig
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, e := rawRead(fd, buf[len(buf):cap(buf)])
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return nil, e
		}
		if n == 0 {
			return buf, 0
		}
		buf = buf[:len(buf)+n]
	}
}
