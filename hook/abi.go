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

// The error numbers the hook tests for (errnoText below has every
// number's text).
const (
	_EPERM  errno = 0x1
	_ENOENT errno = 0x2
	_EINTR  errno = 0x4
	_EIO    errno = 0x5
	_EAGAIN errno = 0xb
	_EACCES errno = 0xd
	_EEXIST errno = 0x11
	_EINVAL errno = 0x16
	_ENOSYS errno = 0x26
	_ELOOP  errno = 0x28

	_EWOULDBLOCK = _EAGAIN
)

// errnoText is what package syscall's Errno says, indexed by number: the
// same numbers on every architecture the hook builds for (mips, sparc,
// alpha and parisc number them otherwise); TestABI checks every one.
var errnoText = [...]string{
	1:   "operation not permitted",
	2:   "no such file or directory",
	3:   "no such process",
	4:   "interrupted system call",
	5:   "input/output error",
	6:   "no such device or address",
	7:   "argument list too long",
	8:   "exec format error",
	9:   "bad file descriptor",
	10:  "no child processes",
	11:  "resource temporarily unavailable",
	12:  "cannot allocate memory",
	13:  "permission denied",
	14:  "bad address",
	15:  "block device required",
	16:  "device or resource busy",
	17:  "file exists",
	18:  "invalid cross-device link",
	19:  "no such device",
	20:  "not a directory",
	21:  "is a directory",
	22:  "invalid argument",
	23:  "too many open files in system",
	24:  "too many open files",
	25:  "inappropriate ioctl for device",
	26:  "text file busy",
	27:  "file too large",
	28:  "no space left on device",
	29:  "illegal seek",
	30:  "read-only file system",
	31:  "too many links",
	32:  "broken pipe",
	33:  "numerical argument out of domain",
	34:  "numerical result out of range",
	35:  "resource deadlock avoided",
	36:  "file name too long",
	37:  "no locks available",
	38:  "function not implemented",
	39:  "directory not empty",
	40:  "too many levels of symbolic links",
	42:  "no message of desired type",
	43:  "identifier removed",
	44:  "channel number out of range",
	45:  "level 2 not synchronized",
	46:  "level 3 halted",
	47:  "level 3 reset",
	48:  "link number out of range",
	49:  "protocol driver not attached",
	50:  "no CSI structure available",
	51:  "level 2 halted",
	52:  "invalid exchange",
	53:  "invalid request descriptor",
	54:  "exchange full",
	55:  "no anode",
	56:  "invalid request code",
	57:  "invalid slot",
	59:  "bad font file format",
	60:  "device not a stream",
	61:  "no data available",
	62:  "timer expired",
	63:  "out of streams resources",
	64:  "machine is not on the network",
	65:  "package not installed",
	66:  "object is remote",
	67:  "link has been severed",
	68:  "advertise error",
	69:  "srmount error",
	70:  "communication error on send",
	71:  "protocol error",
	72:  "multihop attempted",
	73:  "RFS specific error",
	74:  "bad message",
	75:  "value too large for defined data type",
	76:  "name not unique on network",
	77:  "file descriptor in bad state",
	78:  "remote address changed",
	79:  "can not access a needed shared library",
	80:  "accessing a corrupted shared library",
	81:  ".lib section in a.out corrupted",
	82:  "attempting to link in too many shared libraries",
	83:  "cannot exec a shared library directly",
	84:  "invalid or incomplete multibyte or wide character",
	85:  "interrupted system call should be restarted",
	86:  "streams pipe error",
	87:  "too many users",
	88:  "socket operation on non-socket",
	89:  "destination address required",
	90:  "message too long",
	91:  "protocol wrong type for socket",
	92:  "protocol not available",
	93:  "protocol not supported",
	94:  "socket type not supported",
	95:  "operation not supported",
	96:  "protocol family not supported",
	97:  "address family not supported by protocol",
	98:  "address already in use",
	99:  "cannot assign requested address",
	100: "network is down",
	101: "network is unreachable",
	102: "network dropped connection on reset",
	103: "software caused connection abort",
	104: "connection reset by peer",
	105: "no buffer space available",
	106: "transport endpoint is already connected",
	107: "transport endpoint is not connected",
	108: "cannot send after transport endpoint shutdown",
	109: "too many references: cannot splice",
	110: "connection timed out",
	111: "connection refused",
	112: "host is down",
	113: "no route to host",
	114: "operation already in progress",
	115: "operation now in progress",
	116: "stale file handle",
	117: "structure needs cleaning",
	118: "not a XENIX named type file",
	119: "no XENIX semaphores available",
	120: "is a named type file",
	121: "remote I/O error",
	122: "disk quota exceeded",
	123: "no medium found",
	124: "wrong medium type",
	125: "operation canceled",
	126: "required key not available",
	127: "key has expired",
	128: "key has been revoked",
	129: "key was rejected by service",
	130: "owner died",
	131: "state not recoverable",
	132: "operation not possible due to RF-kill",
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
