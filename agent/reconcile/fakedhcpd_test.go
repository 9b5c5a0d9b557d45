package reconcile

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fakeDhcpd writes a leases file the way dhcpd does (dhcpd-facts.md):
// each block appended with one write and an fsync; a rewrite creates
// dhcpd.leases.<time>, writes the table, fsyncs, replaces dhcpd.leases~
// with a hard link to the current file and renames the new file onto the
// path, then (at a start) appends a server-duid line.
type fakeDhcpd struct {
	t    testing.TB
	path string
	n    int
}

const leasesHeader = "# The format of this file is documented in the dhcpd.leases(5) manual page.\n" +
	"# This lease file was written by isc-dhcp-4.4.3-P1\n\n" +
	"# authoring-byte-order entry is generated, DO NOT DELETE\nauthoring-byte-order little-endian;\n\n"

const duidLine = "server-duid \"\\000\\001\\000\\0012\\237\\027\\306&\\210\\037\\357(0\";\n\n"

func newFakeDhcpd(t testing.TB, dir string) *fakeDhcpd {
	t.Helper()
	return &fakeDhcpd{t: t, path: filepath.Join(dir, "dhcpd.leases")}
}

// append writes text at the end of the current file in one write.
func (d *fakeDhcpd) append(text string) {
	d.t.Helper()
	f, err := os.OpenFile(d.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		d.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		d.t.Fatal(err)
	}
}

// rewrite replaces the file with header+body, as dhcpd's rewrite does;
// start appends the server-duid line a start writes after the rename.
func (d *fakeDhcpd) rewrite(body string, start bool) {
	d.t.Helper()
	d.n++
	tmp := fmt.Sprintf("%s.%d", d.path, 1700000000+d.n)
	if err := os.WriteFile(tmp, []byte(leasesHeader+body), 0o644); err != nil {
		d.t.Fatal(err)
	}
	os.Remove(d.path + "~")
	if _, err := os.Stat(d.path); err == nil {
		if err := os.Link(d.path, d.path+"~"); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := os.Rename(tmp, d.path); err != nil {
		d.t.Fatal(err)
	}
	if start {
		d.append(duidLine)
	}
}

// truncate rewrites the file in place (same inode), as no dhcpd does but
// an operator's `> dhcpd.leases` or `cp` would.
func (d *fakeDhcpd) truncate(text string) {
	d.t.Helper()
	if err := os.WriteFile(d.path, []byte(text), 0o644); err != nil {
		d.t.Fatal(err)
	}
}
