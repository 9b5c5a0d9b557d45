//go:build linux && amd64

package main

// x86-64's system call numbers and open(2) flags (abi.go).
const (
	sysRead      = 0
	sysWrite     = 1
	sysClose     = 3
	sysGetpid    = 39
	sysSocket    = 41
	sysSendto    = 44
	sysFlock     = 73
	sysFsync     = 74
	sysFchmod    = 91
	sysFchown    = 93
	sysOpenat    = 257
	sysMkdirat   = 258
	sysUnlinkat  = 263
	sysRenameat2 = 316
	sysStatx     = 332

	_O_DIRECTORY = 0x10000
	_O_NOFOLLOW  = 0x20000
	_O_LARGEFILE = 0 // always, on a 64-bit kernel
)
