//go:build linux && (arm64 || riscv64 || loong64)

package main

// The system call numbers of the kernel's generic table (asm-generic/
// unistd.h), which arm64, riscv64 and loong64 use, and their open(2)
// flags (abi.go).
const (
	sysRead      = 63
	sysWrite     = 64
	sysClose     = 57
	sysGetpid    = 172
	sysSocket    = 198
	sysSendto    = 206
	sysFlock     = 32
	sysFsync     = 82
	sysFchmod    = 52
	sysFchown    = 55
	sysOpenat    = 56
	sysMkdirat   = 34
	sysUnlinkat  = 35
	sysRenameat2 = 276
	sysStatx     = 291

	_O_LARGEFILE = 0 // always, on a 64-bit kernel
)
