package main

import _ "unsafe" // go:linkname

// The process's arguments and environment, as the runtime took them off
// the stack the kernel started it with. These are the runtime's own
// hand-offs to package os and package syscall: runtime/runtime.go defines
// both with a //go:linkname of its own, which is what lets the linker
// resolve them here, where neither is imported (TestStdlibOnly). Were a
// Go release to drop either, the hook would fail to link, not run wrong.
//
// Each returns a copy of the runtime's slice (the strings are shared):
// one allocation, whose slow path is deep. main calls both first thing,
// at the bottom of its stack, where that fits in the 2 KiB a goroutine
// starts with (TestStartStack). Those two copies are all they cost;
// reading /proc/self/cmdline and /proc/self/environ instead cost about
// 4 % of an empty Go program's run (issue 16), and needed /proc.

//go:linkname runtimeArgs os.runtime_args
func runtimeArgs() []string

//go:linkname runtimeEnvs syscall.runtime_envs
func runtimeEnvs() []string

// environ is the environment the process started with (main sets it; the
// hook never changes it), for lookupEnv.
var environ []string

// lookupEnv is syscall.Getenv without its copy of the environment into a
// map: it looks through environ, and the first of a key's entries counts,
// as for syscall.Getenv; an empty key is never set.
func lookupEnv(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	for _, kv := range environ {
		if len(kv) > len(key) && kv[len(key)] == '=' && kv[:len(key)] == key {
			return kv[len(key)+1:], true
		}
	}
	return "", false
}
