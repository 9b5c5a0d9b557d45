package main

import "golang.org/x/sys/unix"

// fchown(2)'s number, as TestABI checks the others: arm's is fchown32,
// which takes 32-bit ids.
var (
	_ [sysFchown - unix.SYS_FCHOWN32]struct{}
	_ [unix.SYS_FCHOWN32 - sysFchown]struct{}
)
