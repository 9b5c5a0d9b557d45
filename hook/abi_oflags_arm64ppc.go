//go:build linux && (arm64 || ppc64 || ppc64le)

package main

// open(2) flags as arm64's and powerpc's fcntl.h have them (abi.go).
const (
	_O_DIRECTORY = 0x4000
	_O_NOFOLLOW  = 0x8000
)
