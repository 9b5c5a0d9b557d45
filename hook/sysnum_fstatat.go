//go:build linux && (arm64 || riscv64)

package main

import "syscall"

// sysFstatat is fstatat(2) as this architecture numbers it (rawStat).
const sysFstatat = syscall.SYS_FSTATAT

const haveFstatat = true
