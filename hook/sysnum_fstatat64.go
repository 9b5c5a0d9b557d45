//go:build linux && (arm || mips || mipsle)

package main

import "syscall"

// sysFstatat is fstatat(2) as this architecture numbers it (rawStat):
// fstatat64, whose struct is syscall.Stat_t here.
const sysFstatat = syscall.SYS_FSTATAT64

const haveFstatat = true
