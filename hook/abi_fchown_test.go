//go:build !arm

package main

import "golang.org/x/sys/unix"

// fchown(2)'s number, as TestABI checks the others.
var (
	_ [sysFchown - unix.SYS_FCHOWN]struct{}
	_ [unix.SYS_FCHOWN - sysFchown]struct{}
)
