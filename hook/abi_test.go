package main

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestABI: every constant, struct and error text of abi*.go is what
// golang.org/x/sys/unix has for the architecture being built. The
// constants are checked at compile time (same): a wrong one fails this
// file's build, for whichever architecture TestBuildsForRackArchitectures
// cross-compiles the tests for, so no table goes unchecked for lack of
// that machine. Only the error texts are checked at run time.
func TestABI(t *testing.T) {
	for e := range errno(len(errnoText) + 8) {
		if got, want := e.Error(), unix.Errno(e).Error(); got != want {
			t.Errorf("errno %d: %q, unix.Errno says %q", e, got, want)
		}
	}
	if got, want := errno(4095).Error(), "errno 4095"; got != want {
		t.Errorf("an unknown errno: %q, want %q", got, want)
	}
}

// Each pair of array types below compiles only when its two values are
// equal: a negative length fails one of them ("invalid array length").
var (
	_ [sysRead - unix.SYS_READ]struct{}
	_ [unix.SYS_READ - sysRead]struct{}
	_ [sysWrite - unix.SYS_WRITE]struct{}
	_ [unix.SYS_WRITE - sysWrite]struct{}
	_ [sysClose - unix.SYS_CLOSE]struct{}
	_ [unix.SYS_CLOSE - sysClose]struct{}
	_ [sysGetpid - unix.SYS_GETPID]struct{}
	_ [unix.SYS_GETPID - sysGetpid]struct{}
	_ [sysSocket - unix.SYS_SOCKET]struct{}
	_ [unix.SYS_SOCKET - sysSocket]struct{}
	_ [sysSendto - unix.SYS_SENDTO]struct{}
	_ [unix.SYS_SENDTO - sysSendto]struct{}
	_ [sysFlock - unix.SYS_FLOCK]struct{}
	_ [unix.SYS_FLOCK - sysFlock]struct{}
	_ [sysFsync - unix.SYS_FSYNC]struct{}
	_ [unix.SYS_FSYNC - sysFsync]struct{}
	_ [sysFchmod - unix.SYS_FCHMOD]struct{}
	_ [unix.SYS_FCHMOD - sysFchmod]struct{}
	_ [sysOpenat - unix.SYS_OPENAT]struct{}
	_ [unix.SYS_OPENAT - sysOpenat]struct{}
	_ [sysMkdirat - unix.SYS_MKDIRAT]struct{}
	_ [unix.SYS_MKDIRAT - sysMkdirat]struct{}
	_ [sysUnlinkat - unix.SYS_UNLINKAT]struct{}
	_ [unix.SYS_UNLINKAT - sysUnlinkat]struct{}
	_ [sysRenameat2 - unix.SYS_RENAMEAT2]struct{}
	_ [unix.SYS_RENAMEAT2 - sysRenameat2]struct{}
	_ [sysStatx - unix.SYS_STATX]struct{}
	_ [unix.SYS_STATX - sysStatx]struct{}
	_ [_O_RDONLY - unix.O_RDONLY]struct{}
	_ [unix.O_RDONLY - _O_RDONLY]struct{}
	_ [_O_WRONLY - unix.O_WRONLY]struct{}
	_ [unix.O_WRONLY - _O_WRONLY]struct{}
	_ [_O_CREAT - unix.O_CREAT]struct{}
	_ [unix.O_CREAT - _O_CREAT]struct{}
	_ [_O_EXCL - unix.O_EXCL]struct{}
	_ [unix.O_EXCL - _O_EXCL]struct{}
	_ [_O_NOCTTY - unix.O_NOCTTY]struct{}
	_ [unix.O_NOCTTY - _O_NOCTTY]struct{}
	_ [_O_APPEND - unix.O_APPEND]struct{}
	_ [unix.O_APPEND - _O_APPEND]struct{}
	_ [_O_NONBLOCK - unix.O_NONBLOCK]struct{}
	_ [unix.O_NONBLOCK - _O_NONBLOCK]struct{}
	_ [_O_CLOEXEC - unix.O_CLOEXEC]struct{}
	_ [unix.O_CLOEXEC - _O_CLOEXEC]struct{}
	_ [_O_DIRECTORY - unix.O_DIRECTORY]struct{}
	_ [unix.O_DIRECTORY - _O_DIRECTORY]struct{}
	_ [_O_NOFOLLOW - unix.O_NOFOLLOW]struct{}
	_ [unix.O_NOFOLLOW - _O_NOFOLLOW]struct{}
	_ [_O_LARGEFILE - unix.O_LARGEFILE]struct{}
	_ [unix.O_LARGEFILE - _O_LARGEFILE]struct{}
	_ [_AF_UNIX - unix.AF_UNIX]struct{}
	_ [unix.AF_UNIX - _AF_UNIX]struct{}
	_ [_SOCK_DGRAM - unix.SOCK_DGRAM]struct{}
	_ [unix.SOCK_DGRAM - _SOCK_DGRAM]struct{}
	_ [_SOCK_NONBLOCK - unix.SOCK_NONBLOCK]struct{}
	_ [unix.SOCK_NONBLOCK - _SOCK_NONBLOCK]struct{}
	_ [_SOCK_CLOEXEC - unix.SOCK_CLOEXEC]struct{}
	_ [unix.SOCK_CLOEXEC - _SOCK_CLOEXEC]struct{}
	_ [_LOCK_SH - unix.LOCK_SH]struct{}
	_ [unix.LOCK_SH - _LOCK_SH]struct{}
	_ [_LOCK_NB - unix.LOCK_NB]struct{}
	_ [unix.LOCK_NB - _LOCK_NB]struct{}
	_ [atFDCWD - unix.AT_FDCWD]struct{}
	_ [unix.AT_FDCWD - atFDCWD]struct{}
	_ [_AT_SYMLINK_NOFOLLOW - unix.AT_SYMLINK_NOFOLLOW]struct{}
	_ [unix.AT_SYMLINK_NOFOLLOW - _AT_SYMLINK_NOFOLLOW]struct{}
	_ [_AT_EMPTY_PATH - unix.AT_EMPTY_PATH]struct{}
	_ [unix.AT_EMPTY_PATH - _AT_EMPTY_PATH]struct{}
	_ [_STATX_BASIC_STATS - unix.STATX_BASIC_STATS]struct{}
	_ [unix.STATX_BASIC_STATS - _STATX_BASIC_STATS]struct{}
	_ [_S_IFMT - unix.S_IFMT]struct{}
	_ [unix.S_IFMT - _S_IFMT]struct{}
	_ [_S_IFREG - unix.S_IFREG]struct{}
	_ [unix.S_IFREG - _S_IFREG]struct{}
	_ [int(_EPERM) - int(unix.EPERM)]struct{}
	_ [int(unix.EPERM) - int(_EPERM)]struct{}
	_ [int(_ENOENT) - int(unix.ENOENT)]struct{}
	_ [int(unix.ENOENT) - int(_ENOENT)]struct{}
	_ [int(_EINTR) - int(unix.EINTR)]struct{}
	_ [int(unix.EINTR) - int(_EINTR)]struct{}
	_ [int(_EIO) - int(unix.EIO)]struct{}
	_ [int(unix.EIO) - int(_EIO)]struct{}
	_ [int(_EAGAIN) - int(unix.EAGAIN)]struct{}
	_ [int(unix.EAGAIN) - int(_EAGAIN)]struct{}
	_ [int(_EACCES) - int(unix.EACCES)]struct{}
	_ [int(unix.EACCES) - int(_EACCES)]struct{}
	_ [int(_EEXIST) - int(unix.EEXIST)]struct{}
	_ [int(unix.EEXIST) - int(_EEXIST)]struct{}
	_ [int(_EINVAL) - int(unix.EINVAL)]struct{}
	_ [int(unix.EINVAL) - int(_EINVAL)]struct{}
	_ [int(_ENOSYS) - int(unix.ENOSYS)]struct{}
	_ [int(unix.ENOSYS) - int(_ENOSYS)]struct{}
	_ [int(_ELOOP) - int(unix.ELOOP)]struct{}
	_ [int(unix.ELOOP) - int(_ELOOP)]struct{}
	_ [int(_EWOULDBLOCK) - int(unix.EWOULDBLOCK)]struct{}
	_ [int(unix.EWOULDBLOCK) - int(_EWOULDBLOCK)]struct{}
	_ [unsafe.Sizeof(statxT{}) - unsafe.Sizeof(unix.Statx_t{})]struct{}
	_ [unsafe.Sizeof(unix.Statx_t{}) - unsafe.Sizeof(statxT{})]struct{}
	_ [unsafe.Sizeof(sockaddrUnix{}) - unsafe.Sizeof(unix.RawSockaddrUnix{})]struct{}
	_ [unsafe.Sizeof(unix.RawSockaddrUnix{}) - unsafe.Sizeof(sockaddrUnix{})]struct{}
	_ [unsafe.Offsetof(sockaddrUnix{}.Path) - unsafe.Offsetof(unix.RawSockaddrUnix{}.Path)]struct{}
	_ [unsafe.Offsetof(unix.RawSockaddrUnix{}.Path) - unsafe.Offsetof(sockaddrUnix{}.Path)]struct{}
	_ [unsafe.Offsetof(statxT{}.Mask) - unsafe.Offsetof(unix.Statx_t{}.Mask)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Mask) - unsafe.Offsetof(statxT{}.Mask)]struct{}
	_ [unsafe.Offsetof(statxT{}.Nlink) - unsafe.Offsetof(unix.Statx_t{}.Nlink)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Nlink) - unsafe.Offsetof(statxT{}.Nlink)]struct{}
	_ [unsafe.Offsetof(statxT{}.Uid) - unsafe.Offsetof(unix.Statx_t{}.Uid)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Uid) - unsafe.Offsetof(statxT{}.Uid)]struct{}
	_ [unsafe.Offsetof(statxT{}.Gid) - unsafe.Offsetof(unix.Statx_t{}.Gid)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Gid) - unsafe.Offsetof(statxT{}.Gid)]struct{}
	_ [unsafe.Offsetof(statxT{}.Mode) - unsafe.Offsetof(unix.Statx_t{}.Mode)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Mode) - unsafe.Offsetof(statxT{}.Mode)]struct{}
	_ [unsafe.Offsetof(statxT{}.Ino) - unsafe.Offsetof(unix.Statx_t{}.Ino)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Ino) - unsafe.Offsetof(statxT{}.Ino)]struct{}
	_ [unsafe.Offsetof(statxT{}.Size) - unsafe.Offsetof(unix.Statx_t{}.Size)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Size) - unsafe.Offsetof(statxT{}.Size)]struct{}
	_ [unsafe.Offsetof(statxT{}.Mtime) - unsafe.Offsetof(unix.Statx_t{}.Mtime)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Mtime) - unsafe.Offsetof(statxT{}.Mtime)]struct{}
	_ [unsafe.Offsetof(statxT{}.DevMajor) - unsafe.Offsetof(unix.Statx_t{}.Dev_major)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Dev_major) - unsafe.Offsetof(statxT{}.DevMajor)]struct{}
	_ [unsafe.Offsetof(statxT{}.DevMinor) - unsafe.Offsetof(unix.Statx_t{}.Dev_minor)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Dev_minor) - unsafe.Offsetof(statxT{}.DevMinor)]struct{}
	_ [unsafe.Offsetof(statxT{}.MntID) - unsafe.Offsetof(unix.Statx_t{}.Mnt_id)]struct{}
	_ [unsafe.Offsetof(unix.Statx_t{}.Mnt_id) - unsafe.Offsetof(statxT{}.MntID)]struct{}
	_ [unsafe.Offsetof(statxTimestamp{}.Nsec) - unsafe.Offsetof(unix.StatxTimestamp{}.Nsec)]struct{}
	_ [unsafe.Offsetof(unix.StatxTimestamp{}.Nsec) - unsafe.Offsetof(statxTimestamp{}.Nsec)]struct{}
	_ [unsafe.Sizeof(statxTimestamp{}) - unsafe.Sizeof(unix.StatxTimestamp{})]struct{}
	_ [unsafe.Sizeof(unix.StatxTimestamp{}) - unsafe.Sizeof(statxTimestamp{})]struct{}
)
