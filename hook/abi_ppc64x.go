//go:build linux && (ppc64 || ppc64le)

package main

// powerpc's system call numbers (abi.go).
const (
	sysRead      = 3
	sysWrite     = 4
	sysClose     = 6
	sysGetpid    = 20
	sysSocket    = 326
	sysSendto    = 335
	sysFlock     = 143
	sysFsync     = 118
	sysFchmod    = 94
	sysFchown    = 95
	sysOpenat    = 286
	sysMkdirat   = 287
	sysUnlinkat  = 292
	sysRenameat2 = 357
	sysStatx     = 383

	_O_LARGEFILE = 0 // always, on a 64-bit kernel
)
