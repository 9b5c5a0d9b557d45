package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// readyTimeout bounds a dhcpd start: reading the files, the rewrite,
	// opening the interfaces.
	readyTimeout = 20 * time.Second
	// stopGrace is how long dhcpd may take to exit on SIGTERM.
	stopGrace = 5 * time.Second
)

// DhcpdConfig describes a dhcpd to run.
type DhcpdConfig struct {
	Conf      string   // dhcpd.conf content
	Leases    string   // initial dhcpd.leases content; "" for an empty file
	Iface     string   // interface to serve; default the lab's bridge
	Family    int      // 4 (default); 6 needs a lab made WithIPv6 (or CheckLeaseFile)
	ExtraArgs []string // more dhcpd arguments, placed before the interface
	// Prelude, when set, is shell run before dhcpd the way MAAS's
	// maas-dhcpd.service does it: `sh -ec 'PRELUDE; exec dhcpd …'`, with
	// $LEASES_FILE set to the leases file. dhcpd keeps sh's pid; a
	// failing prelude is a failed start, with its output in Logs.
	Prelude string
	// NS is the namespace to run in: the lab's server namespace by
	// default, or another of the lab's namespaces (a second server of a
	// failover pair, joined to the bridge as a client is, see AddServer).
	NS string
}

// Dhcpd is a dhcpd the test owns, running in the lab's server namespace.
type Dhcpd struct {
	Dir string // holds dhcpd.conf, dhcpd.leases, dhcpd.pid and dhcpd.log

	lab                    *Lab
	bin                    string
	cfg                    DhcpdConfig
	conf, leases, pid, log string

	mu   sync.Mutex
	p    *proc
	runs int
	env  []string // more environment for the next start only
}

// StartDhcpd writes cfg's files into a directory of t's, starts
// `dhcpd -4|-6 -f -d -cf CONF -lf LEASES -pf PID [ExtraArgs] IFACE` in the
// server namespace and waits until it serves: "Server starting service."
// logged and the leases file rewritten. It fails the test if dhcpd exits
// or is not ready in time, with dhcpd's log. dhcpd is stopped when t ends.
func (l *Lab) StartDhcpd(t testing.TB, cfg DhcpdConfig) *Dhcpd {
	t.Helper()
	if cfg.Family == 0 {
		cfg.Family = 4
	}
	switch {
	case cfg.Family == 6 && !l.Addr6.IsValid():
		t.Fatalf("lab: dhcpd family 6: the lab has IPv4 only (make it WithIPv6)")
	case cfg.Family != 4 && cfg.Family != 6:
		t.Fatalf("lab: dhcpd family %d: want 4 or 6", cfg.Family)
	}
	if cfg.NS == "" {
		cfg.NS = l.NS
	} else if err := l.own(cfg.NS); err != nil {
		t.Fatalf("lab: dhcpd: %v", err)
	}
	if cfg.Iface == "" {
		cfg.Iface = l.Bridge
		if cfg.NS != l.NS {
			cfg.Iface = "eth0"
		}
	}
	bin, err := l.bin("dhcpd")
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	dir := t.TempDir()
	d := &Dhcpd{
		Dir:    dir,
		lab:    l,
		bin:    bin,
		cfg:    cfg,
		conf:   filepath.Join(dir, "dhcpd.conf"),
		leases: filepath.Join(dir, "dhcpd.leases"),
		pid:    filepath.Join(dir, "dhcpd.pid"),
		log:    filepath.Join(dir, "dhcpd.log"),
	}
	if err := os.WriteFile(d.conf, []byte(cfg.Conf), 0o644); err != nil {
		t.Fatalf("lab: %v", err)
	}
	if err := os.WriteFile(d.leases, []byte(cfg.Leases), 0o644); err != nil {
		t.Fatalf("lab: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("lab: cleanup: %v", err)
		}
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.start(); err != nil {
		t.Fatalf("lab: %v", err)
	}
	return d
}

// start runs dhcpd and waits until it is ready. d.mu is held.
func (d *Dhcpd) start() error {
	// dhcpd refuses to start while the pid in its pid file is alive, and
	// leaves the file behind on SIGTERM.
	if err := os.Remove(d.pid); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ino := inode(d.leases)
	// Held open until dhcpd is ready, the old file keeps its inode number
	// even when a Prelude replaces it (the rename would free it, and
	// dhcpd's new file could get it back).
	if hold, err := os.Open(d.leases); err == nil {
		defer hold.Close()
	}
	d.runs++
	f, err := os.OpenFile(d.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "--- lab: dhcpd start %d ---\n", d.runs)
	f.Close()
	off := fileSize(d.log)

	argv := []string{d.bin, fmt.Sprintf("-%d", d.cfg.Family), "-f", "-d", "-cf", d.conf, "-lf", d.leases, "-pf", d.pid}
	argv = append(argv, d.cfg.ExtraArgs...)
	argv = append(argv, d.cfg.Iface)
	if len(d.env) > 0 {
		argv = append(append([]string{"/usr/bin/env"}, d.env...), argv...)
	}
	if d.cfg.Prelude != "" {
		script := "LEASES_FILE=" + shellQuote(d.leases) + "\n" + d.cfg.Prelude + "\nexec \"$0\" \"$@\""
		argv = append([]string{"/bin/sh", "-ec", script}, argv...)
	}
	p, err := startProc(d.lab.Command(d.cfg.NS, argv...), d.log)
	if err != nil {
		return fmt.Errorf("start dhcpd: %w", err)
	}
	d.p = p

	deadline := time.Now().Add(readyTimeout)
	for {
		logs := readFrom(d.log, off)
		if strings.Contains(logs, "Server starting service.") && d.rewritten(ino) {
			return nil
		}
		if p.exited() {
			d.p = nil
			return fmt.Errorf("dhcpd exited before it was ready (%v); its log:\n%s", p.err, logs)
		}
		if time.Now().After(deadline) {
			d.p = nil
			err := p.stop(syscall.SIGTERM, stopGrace)
			return fmt.Errorf("dhcpd not ready after %v (stop: %v); its log:\n%s", readyTimeout, err, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// rewritten reports whether dhcpd has replaced the leases file that had
// inode old: at start it writes a new file, renames it into place and
// appends a server-duid line. The old inode is still linked as
// dhcpd.leases~ at that point, so the new one cannot reuse its number.
func (d *Dhcpd) rewritten(old uint64) bool {
	if inode(d.leases) == old {
		return false
	}
	b, err := os.ReadFile(d.leases)
	return err == nil && bytes.Contains(b, []byte("\nserver-duid "))
}

func inode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// Stop sends dhcpd SIGTERM and waits for it (killing it after a grace
// period). It reports a dhcpd that had died on its own. Stopping a
// stopped dhcpd does nothing.
func (d *Dhcpd) Stop() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stop()
}

func (d *Dhcpd) stop() error {
	p := d.p
	if p == nil {
		return nil
	}
	d.p = nil
	if p.exited() {
		return fmt.Errorf("dhcpd (pid %d) had exited on its own (%v); its log ends:\n%s",
			p.pid(), p.err, tail(readFrom(d.log, 0), 20))
	}
	if err := p.stop(syscall.SIGTERM, stopGrace); err != nil {
		return fmt.Errorf("dhcpd: %w", err)
	}
	return nil
}

// Kill ends dhcpd with SIGKILL, as a crash or a power cut would: it
// writes nothing more. Restart starts it again.
func (d *Dhcpd) Kill() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.p
	if p == nil {
		return nil
	}
	d.p = nil
	if err := p.stop(syscall.SIGKILL, stopGrace); err != nil {
		return fmt.Errorf("dhcpd: %w", err)
	}
	return nil
}

// Restart stops dhcpd, replaces dhcpd.conf with newConf unless it is
// empty, and starts dhcpd again on the same leases file, waiting until it
// is ready (it rewrites the leases file at every start).
func (d *Dhcpd) Restart(newConf string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.stop(); err != nil {
		return err
	}
	if newConf != "" {
		d.cfg.Conf = newConf
		if err := os.WriteFile(d.conf, []byte(newConf), 0o644); err != nil {
			return err
		}
	}
	return d.start()
}

// Running reports whether dhcpd is up.
func (d *Dhcpd) Running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.p != nil && !d.p.exited()
}

// Pid is dhcpd's process id, 0 when stopped.
func (d *Dhcpd) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p == nil {
		return 0
	}
	return d.p.pid()
}

// LeasesPath is the leases file dhcpd writes.
func (d *Dhcpd) LeasesPath() string { return d.leases }

// ConfPath is the dhcpd.conf dhcpd reads.
func (d *Dhcpd) ConfPath() string { return d.conf }

// Logs returns everything dhcpd logged, every start included.
func (d *Dhcpd) Logs() string { return readFrom(d.log, 0) }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LeaseFileCheck is what dhcpd's lease-file test mode said.
type LeaseFileCheck struct {
	Output string // dhcpd's whole output
	// Wrote is the number of leases dhcpd wrote to its scratch copy of
	// the file ("Wrote N leases to leases file."), -1 when not reported.
	// dhcpd writes each in-range address once, after its start-up
	// expiry processing, and omits free leases with no client identity.
	Wrote int
	// Problems are the lines in which dhcpd complained about the leases
	// or config file ("FILE line N: …", "Corrupt lease file …").
	Problems []string
}

var wroteRe = regexp.MustCompile(`(?m)^Wrote (\d+) leases to leases file\.`)

// CheckLeaseFile runs `dhcpd -4|-6 -T -cf CONF -lf LEASES` on cfg's
// files, written to a directory of t's: dhcpd reads both, runs its
// start-up expiry, writes the table to a scratch file it then deletes,
// and exits. It touches no network, so it needs neither root nor a
// namespace, only dhcpd (the test is skipped without it).
//
// dhcpd -T exits 0 even when it found the leases file corrupt, so callers
// must check Problems as well as the error, which is non-nil only when
// dhcpd could not run or exited non-zero (e.g. a bad dhcpd.conf).
func CheckLeaseFile(t testing.TB, cfg DhcpdConfig) (*LeaseFileCheck, error) {
	t.Helper()
	if _, err := LookBin("dhcpd"); err != nil {
		t.Skipf("lab: %v (install isc-dhcp-server)", err)
	}
	fam := "-4"
	switch cfg.Family {
	case 0, 4:
	case 6:
		fam = "-6"
	default:
		return nil, fmt.Errorf("family %d: want 4 or 6", cfg.Family)
	}
	dir := t.TempDir()
	bin, err := runnable("dhcpd", dir, apparmorEnabled())
	if err != nil {
		return nil, err
	}
	conf, leases := filepath.Join(dir, "dhcpd.conf"), filepath.Join(dir, "dhcpd.leases")
	if err := os.WriteFile(conf, []byte(cfg.Conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(leases, []byte(cfg.Leases), 0o644); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	argv := append([]string{fam, "-T", "-cf", conf, "-lf", leases}, cfg.ExtraArgs...)
	out, err := exec.CommandContext(ctx, bin, argv...).CombinedOutput()
	c := &LeaseFileCheck{Output: string(out), Wrote: -1}
	if m := wroteRe.FindSubmatch(out); m != nil {
		c.Wrote, _ = strconv.Atoi(string(m[1]))
	}
	for _, line := range strings.Split(c.Output, "\n") {
		if strings.HasPrefix(line, leases+" line ") || strings.HasPrefix(line, conf+" line ") ||
			strings.Contains(line, "orrupt lease file") {
			c.Problems = append(c.Problems, line)
		}
	}
	if err != nil {
		return c, fmt.Errorf("dhcpd %s: %w:\n%s", strings.Join(argv, " "), err, out)
	}
	return c, nil
}
