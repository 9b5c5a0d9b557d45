package lab

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// clockBehindSrc is a preload library that sets dhcpd's time() behind the
// real clock, so that its hourly rewrite comes due when the lab wants it
// (see the file's comment).
//
//go:embed clockbehind/clockbehind.c
var clockBehindSrc []byte

// rewritePeriod is dhcpd's LEASE_REWRITE_PERIOD (ISC dhcp server/db.c).
const rewritePeriod = 3600 * time.Second

// RestartRewritingAfter restarts dhcpd with its configuration unchanged,
// so that its own hourly rewrite of the leases file comes due after
// `after` (1 s..59 min): the first lease committed from then on makes the
// running dhcpd write a new file and rename it into place, as it does an
// hour after its start, with no restart and no server-duid line. The lab
// preloads a small library that sets dhcpd's time() behind the real
// clock; the lease times dhcpd writes do not come from time() and are
// unaffected. Building the library needs a C compiler (cc).
func (d *Dhcpd) RestartRewritingAfter(after time.Duration) error {
	if after < time.Second || after >= rewritePeriod {
		return fmt.Errorf("lab: rewrite after %v: want 1s..59m", after)
	}
	lib, err := d.lab.clockBehind()
	if err != nil {
		return err
	}
	behind := int64((rewritePeriod - after) / time.Second)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.stop(); err != nil {
		return err
	}
	d.env = []string{"LD_PRELOAD=" + lib, "LK_LAB_TIME_BEHIND=" + strconv.FormatInt(behind, 10)}
	defer func() { d.env = nil }()
	return d.start()
}

// Inode is the leases file's inode number (0 if it cannot be read): a
// change without a restart is a running rewrite.
func (d *Dhcpd) Inode() uint64 { return inode(d.leases) }

// clockBehind builds the preload library once per lab.
func (l *Lab) clockBehind() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.bins["clockbehind.so"]; ok {
		return p, nil
	}
	cc, err := LookBin("cc")
	if err != nil {
		return "", errors.New("lab: a rewrite on demand needs a C compiler to build its preload library: apt-get install gcc")
	}
	src := filepath.Join(l.Dir, "clockbehind.c")
	lib := filepath.Join(l.Dir, "clockbehind.so")
	if err := os.WriteFile(src, clockBehindSrc, 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", lib, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("lab: build %s: %v: %s", lib, err, out)
	}
	l.bins["clockbehind.so"] = lib
	return lib, nil
}
