//go:build leasekeeper_stackcheck

package main

import _ "unsafe" // go:linkname

// A build for TestStartStack only (-tags leasekeeper_stackcheck, linked
// with -checklinkname=0): the runtime's limit on a goroutine's stack is
// set to the 2 KiB every goroutine starts with, so that the first time
// the hook's stack would grow, it dies with "goroutine stack exceeds
// 2048-byte limit" instead. The runtime sets the limit at the start of
// runtime.main, before the package initialisers; this one runs among
// them, before main.main.

//go:linkname maxstacksize runtime.maxstacksize
var maxstacksize uintptr

func init() { maxstacksize = 2048 }
