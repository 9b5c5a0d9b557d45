package main

import (
	"errors"
	"strconv"
	"unsafe"
)

// The system calls of the hook, and the memory they use.
//
// The hook makes its system calls through the runtime's own entry point
// (syscall6), not through package syscall: importing that package alone
// runs its initialisers in every process (a copy of the environment,
// sync.OnceFunc closures, getrlimit and setrlimit to raise
// RLIMIT_NOFILE), and a Go program that only sends the hook's datagram
// ran about 2 % of an empty Go program's time faster without it (issue
// 16, doc.go). The price is the kernel's numbers, stated per
// architecture in abi*.go and checked against golang.org/x/sys/unix at
// compile time (TestABI), and a few wrappers here.
//
// A Go program's main goroutine starts on a 2 KiB stack, of which about
// 1.1 KiB is usable before the runtime grows it; growing copies the stack
// and unwinds it through tables nothing else reads, onto fresh pages (on
// a virtual machine about 4 % of an empty Go program's run; issue 16,
// doc.go). notify stays within it (TestStartStack): no heap allocation on
// its path past main's first two calls (start.go), as a size class's
// first use goes down the allocator's slow path, several hundred bytes
// deep; its buffers static. The calls are raw: none tells the scheduler
// it may block, which a process with one goroutine and calls that return
// at once (or, for clean's fsync, are the only work left) has no use for.

// syscall6 is the runtime's system call (internal/runtime/syscall/linux,
// in assembly for each architecture). The linker refuses a //go:linkname
// reference to most of the standard library's internals, but lets this
// one through because the function is written in assembly (cmd/link's
// checkLinkname accepts assembly symbols and their ABI wrappers). That
// is a leniency, not a promise: were a Go release to close it, the hook
// would fail to link, not run wrong (TestBuildsForRackArchitectures
// links it for every architecture the package lists). As for every
// function without a body, the compiler keeps what a pointer converted
// to uintptr in the call's arguments points to alive until the call
// returns.
//
//go:linkname syscall6 internal/runtime/syscall/linux.Syscall6
func syscall6(num, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2, err uintptr)

// exit ends the process with status code (the runtime's exit_group).
//
//go:linkname exit syscall.Exit
func exit(code int)

// timeNow is the wall clock and the monotonic one, as package time's
// Now has them from the runtime (the vDSO's clock_gettime).
//
//go:linkname timeNow time.now
func timeNow() (sec int64, nsec int32, mono int64)

// errno is a system call's error number.
type errno uintptr

func (e errno) Error() string {
	if e < errno(len(errnoText)) && errnoText[e] != "" {
		return errnoText[e]
	}
	return "errno " + strconv.FormatUint(uint64(e), 10)
}

// errnoErr returns e as an error, nil for 0.
func errnoErr(e errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Static buffers: bss, so a page is only touched when used. They make
// notify's functions for one goroutine at a time, which the hook is.
var (
	lineBuf   [maxLine]byte // run: the event's JSON
	theConfig config        // run
	spoolBuf  [pathMax]byte // deliver: the spool file's path, NUL-terminated
	sun       sockaddrUnix  // send
	stat1     statxT        // deliver, appendSpool (its fd, for lockCurrent)
	stat2     statxT        // lockCurrent
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

// cpath is path, NUL-terminated on the heap, or nil with EINVAL when it
// holds a NUL, as package syscall's wrappers make it: for clean and for
// making the spool directory, not for notify's every run.
func cpath(path string) (*byte, errno) {
	b := make([]byte, len(path)+1)
	for i := 0; i < len(path); i++ {
		if path[i] == 0 {
			return nil, _EINVAL
		}
		b[i] = path[i]
	}
	return &b[0], 0
}

func rawOpen(dirfd int, path *byte, flags int, mode uint32) (int, errno) {
	fd, _, e := syscall6(sysOpenat, uintptr(dirfd), uintptr(unsafe.Pointer(path)), uintptr(flags|_O_LARGEFILE), uintptr(mode), 0, 0)
	return int(fd), errno(e)
}

func rawRead(fd int, b []byte) (int, errno) {
	n, _, e := syscall6(sysRead, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	return int(n), errno(e)
}

func rawWrite(fd int, b []byte) (int, errno) {
	n, _, e := syscall6(sysWrite, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	return int(n), errno(e)
}

func rawClose(fd int) errno {
	_, _, e := syscall6(sysClose, uintptr(fd), 0, 0, 0, 0, 0)
	return errno(e)
}

// rawStat is statx(2): of path (nofollow: the link itself), or of fd
// when path is nil. statx's struct is the same on every architecture,
// where fstatat's differs; it needs Linux 4.11.
func rawStat(fd int, path *byte, st *statxT, nofollow bool) errno {
	flags := 0
	if path == nil {
		path, flags = &empty, _AT_EMPTY_PATH
	} else if nofollow {
		flags = _AT_SYMLINK_NOFOLLOW
	}
	_, _, e := syscall6(sysStatx, uintptr(fd), uintptr(unsafe.Pointer(path)), uintptr(flags), _STATX_BASIC_STATS, uintptr(unsafe.Pointer(st)), 0)
	return errno(e)
}

var empty byte // "", NUL-terminated

// statErr is rawStat's error e for a message: where statx is missing
// (Linux before 4.11) or refused (a seccomp filter that predates it), it
// says what the hook needs. Not inlined: its strings stay out of its
// callers' frames (TestStartStack).
//
//go:noinline
func statErr(e errno) error {
	if e == _ENOSYS || e == _EPERM {
		return errors.New("statx: " + e.Error() + " (leasekeeper-hook needs Linux 4.11 or later, with statx(2) allowed)")
	}
	return e
}

func rawFlock(fd, how int) errno {
	_, _, e := syscall6(sysFlock, uintptr(fd), uintptr(how), 0, 0, 0, 0)
	return errno(e)
}

func rawFsync(fd int) errno {
	_, _, e := syscall6(sysFsync, uintptr(fd), 0, 0, 0, 0, 0)
	return errno(e)
}

func rawFchown(fd int, uid, gid uint32) errno {
	_, _, e := syscall6(sysFchown, uintptr(fd), uintptr(uid), uintptr(gid), 0, 0, 0)
	return errno(e)
}

func rawFchmod(fd int, mode uint32) errno {
	_, _, e := syscall6(sysFchmod, uintptr(fd), uintptr(mode), 0, 0, 0, 0)
	return errno(e)
}

func rawMkdir(path *byte, mode uint32) errno {
	dirfd := atFDCWD
	_, _, e := syscall6(sysMkdirat, uintptr(dirfd), uintptr(unsafe.Pointer(path)), uintptr(mode), 0, 0, 0)
	return errno(e)
}

func rawUnlinkat(dirfd int, path *byte) errno {
	_, _, e := syscall6(sysUnlinkat, uintptr(dirfd), uintptr(unsafe.Pointer(path)), 0, 0, 0, 0)
	return errno(e)
}

// rawRenameat is renameat2(2) with no flags: renameat(2) is missing from
// the generic table of the newer architectures.
func rawRenameat(olddirfd int, oldpath *byte, newdirfd int, newpath *byte) errno {
	_, _, e := syscall6(sysRenameat2, uintptr(olddirfd), uintptr(unsafe.Pointer(oldpath)), uintptr(newdirfd), uintptr(unsafe.Pointer(newpath)), 0, 0)
	return errno(e)
}

func getpid() int {
	pid, _, _ := syscall6(sysGetpid, 0, 0, 0, 0, 0, 0)
	return int(pid)
}

// errTooBig is readInto's answer past its limit (no system call returns
// it: errno values are small).
const errTooBig = errno(1 << 20)

// readInto reads fd to its end into buf from its start, growing it on
// the heap past its capacity; past limit bytes (0: none) it stops with
// errTooBig.
func readInto(fd int, buf []byte, limit int) ([]byte, errno) {
	buf = buf[:0]
	for {
		if limit > 0 && len(buf) > limit {
			return nil, errTooBig
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, e := rawRead(fd, buf[len(buf):cap(buf)])
		if e == _EINTR {
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
