//go:build linux && (riscv64 || loong64 || s390x)

package main

// open(2) flags as asm-generic/fcntl.h has them (abi.go).
const (
	_O_DIRECTORY = 0x10000
	_O_NOFOLLOW  = 0x20000
)
