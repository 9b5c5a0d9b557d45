package lktest

import (
	"os"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (mount's size=, e.g. "512k") with mode and
// extra mount flags (syscall.MS_RDONLY) on dir, a directory the test
// made, and unmounts it when the test ends; it skips the test without
// root or the right to mount. Tests use it for a full or read-only disk
// of their own, never the host's.
func Tmpfs(tb testing.TB, dir, size string, mode os.FileMode, flags uintptr) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to mount a tmpfs")
	}
	opts := "size=" + size + ",mode=" + octal(mode)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|flags, opts); err != nil {
		tb.Skipf("cannot mount a tmpfs (%v): needs CAP_SYS_ADMIN", err)
	}
	tb.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
}

func octal(m os.FileMode) string {
	const digits = "01234567"
	p := uint32(m.Perm())
	return string([]byte{'0', digits[p>>6&7], digits[p>>3&7], digits[p&7]})
}
