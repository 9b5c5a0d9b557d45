//go:build !linux || !(amd64 || arm64 || riscv64 || loong64 || ppc64 || ppc64le || s390x || arm)

package main

// The hook makes its system calls itself (sys.go), numbered per
// architecture in abi_*.go: this architecture has no table, so it does
// not build.
var _ int = "leasekeeper-hook: no system call table for this architecture (hook/abi_*.go)"
