//go:build linux && arm

package main

// 32-bit arm's (EABI) system call numbers and open(2) flags (abi.go).
// fchown is fchown32: the first fchown takes 16-bit ids.
const (
	sysRead      = 3
	sysWrite     = 4
	sysClose     = 6
	sysGetpid    = 20
	sysSocket    = 281
	sysSendto    = 290
	sysFlock     = 143
	sysFsync     = 118
	sysFchmod    = 94
	sysFchown    = 207
	sysOpenat    = 322
	sysMkdirat   = 323
	sysUnlinkat  = 328
	sysRenameat2 = 382
	sysStatx     = 397

	_O_DIRECTORY = 0x4000
	_O_NOFOLLOW  = 0x8000
	_O_LARGEFILE = 0x20000 // files past 2 GiB open, as package syscall's Open does
)
