package main

// The Linux kernel's interface as notify and clean use it: constants the
// same on every architecture the hook builds for (abi_*.go holds those
// that differ). The hook does not import package syscall (sys.go), so it
// states them itself; TestABI checks each against golang.org/x/sys/unix
// at compile time, for every architecture TestBuildsForRackArchitectures
// builds.

// open(2) flags; O_DIRECTORY, O_NOFOLLOW and O_LARGEFILE are per
// architecture.
const (
	_O_RDONLY   = 0x0
	_O_WRONLY   = 0x1
	_O_CREAT    = 0x40
	_O_EXCL     = 0x80
	_O_NOCTTY   = 0x100
	_O_APPEND   = 0x400
	_O_NONBLOCK = 0x800
	_O_CLOEXEC  = 0x80000
)

// Sockets and locks.
const (
	_AF_UNIX       = 0x1
	_SOCK_DGRAM    = 0x2
	_SOCK_NONBLOCK = 0x800
	_SOCK_CLOEXEC  = 0x80000
	_LOCK_SH       = 0x1
	_LOCK_NB       = 0x4
)

// The *at(2) calls' directory and flags, statx(2)'s mask and the file
// type bits of a mode.
const (
	atFDCWD              = -100
	_AT_SYMLINK_NOFOLLOW = 0x100
	_AT_EMPTY_PATH       = 0x1000
	_STATX_BASIC_STATS   = 0x7ff
	_S_IFMT              = 0xf000
	_S_IFREG             = 0x8000
)

// The error numbers the hook tests for, or is likely to report.
const (
	_EPERM        errno = 0x1
	_ENOENT       errno = 0x2
	_EINTR        errno = 0x4
	_EIO          errno = 0x5
	_EBADF        errno = 0x9
	_EAGAIN       errno = 0xb
	_ENOMEM       errno = 0xc
	_EACCES       errno = 0xd
	_EEXIST       errno = 0x11
	_EXDEV        errno = 0x12
	_ENOTDIR      errno = 0x14
	_EISDIR       errno = 0x15
	_EINVAL       errno = 0x16
	_ENFILE       errno = 0x17
	_EMFILE       errno = 0x18
	_ETXTBSY      errno = 0x1a
	_EFBIG        errno = 0x1b
	_ENOSPC       errno = 0x1c
	_EROFS        errno = 0x1e
	_ENAMETOOLONG errno = 0x24
	_ENOSYS       errno = 0x26
	_ELOOP        errno = 0x28
	_EPROTOTYPE   errno = 0x5b
	_ENOTSOCK     errno = 0x58
	_EMSGSIZE     errno = 0x5a
	_ENOBUFS      errno = 0x69
	_ECONNREFUSED errno = 0x6f
	_EDQUOT       errno = 0x7a

	_EWOULDBLOCK = _EAGAIN
)

// errnoText is what strerror(3) says (and package syscall's Errno), for
// the numbers above.
var errnoText = [...]string{
	_EPERM:        "operation not permitted",
	_ENOENT:       "no such file or directory",
	_EINTR:        "interrupted system call",
	_EIO:          "input/output error",
	_EBADF:        "bad file descriptor",
	_EAGAIN:       "resource temporarily unavailable",
	_ENOMEM:       "cannot allocate memory",
	_EACCES:       "permission denied",
	_EEXIST:       "file exists",
	_EXDEV:        "invalid cross-device link",
	_ENOTDIR:      "not a directory",
	_EISDIR:       "is a directory",
	_EINVAL:       "invalid argument",
	_ENFILE:       "too many open files in system",
	_EMFILE:       "too many open files",
	_ETXTBSY:      "text file busy",
	_EFBIG:        "file too large",
	_ENOSPC:       "no space left on device",
	_EROFS:        "read-only file system",
	_ENAMETOOLONG: "file name too long",
	_ENOSYS:       "function not implemented",
	_ELOOP:        "too many levels of symbolic links",
	_ENOTSOCK:     "socket operation on non-socket",
	_EMSGSIZE:     "message too long",
	_EPROTOTYPE:   "protocol wrong type for socket",
	_ENOBUFS:      "no buffer space available",
	_ECONNREFUSED: "connection refused",
	_EDQUOT:       "disk quota exceeded",
}

// statxT is struct statx (linux/stat.h), the same on every architecture.
// Only the fields up to the mount id are named; the kernel fills what
// _STATX_BASIC_STATS asks for.
type statxT struct {
	Mask           uint32
	Blksize        uint32
	Attributes     uint64
	Nlink          uint32
	Uid            uint32
	Gid            uint32
	Mode           uint16
	_              uint16
	Ino            uint64
	Size           uint64
	Blocks         uint64
	AttributesMask uint64
	Atime          statxTimestamp
	Btime          statxTimestamp
	Ctime          statxTimestamp
	Mtime          statxTimestamp
	RdevMajor      uint32
	RdevMinor      uint32
	DevMajor       uint32
	DevMinor       uint32
	MntID          uint64
	_              [104]byte
}

type statxTimestamp struct {
	Sec  int64
	Nsec uint32
	_    int32
}

// sockaddrUnix is struct sockaddr_un.
type sockaddrUnix struct {
	Family uint16
	Path   [108]int8
}
