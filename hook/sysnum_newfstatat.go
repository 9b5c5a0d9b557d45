//go:build linux && (amd64 || ppc64 || ppc64le || s390x || mips64 || mips64le)

package main

import "syscall"

// sysFstatat is fstatat(2) as this architecture numbers it (rawStat).
const sysFstatat = syscall.SYS_NEWFSTATAT

const haveFstatat = true
