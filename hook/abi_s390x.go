//go:build linux && s390x

package main

// s390x's system call numbers (abi.go).
const (
	sysRead      = 3
	sysWrite     = 4
	sysClose     = 6
	sysGetpid    = 20
	sysSocket    = 359
	sysSendto    = 369
	sysFlock     = 143
	sysFsync     = 118
	sysFchmod    = 94
	sysFchown    = 207
	sysOpenat    = 288
	sysMkdirat   = 289
	sysUnlinkat  = 294
	sysRenameat2 = 347
	sysStatx     = 379

	_O_LARGEFILE = 0 // always, on a 64-bit kernel
)
