//go:build linux && !(amd64 || ppc64 || ppc64le || s390x || mips64 || mips64le || arm64 || riscv64 || arm || mips || mipsle)

package main

// No fstatat(2) on this architecture (loong64 has statx only): rawStat
// goes through package syscall's wrappers, which allocate.
const (
	sysFstatat  = 0
	haveFstatat = false
)
