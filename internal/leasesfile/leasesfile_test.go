package leasesfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck walks dhcpd's ways with its file: appends, a rewrite renamed
// onto the path (the old file kept as NAME~), the path missing for a
// moment, a truncation.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dhcpd.leases")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "lease 203.0.113.5 {\n}\n")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { f.Close() }()
	fi, _ := f.Stat()
	id, read := IDOf(fi), fi.Size()
	check := func(want Change, wantSize int64) {
		t.Helper()
		c, size, err := Check(path, f, id, read)
		if err != nil || c != want || size != wantSize {
			t.Fatalf("Check = %v, %d, %v; want %v, %d", c, size, err, want, wantSize)
		}
	}
	check(Appended, read)

	af, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	af.WriteString("lease 203.0.113.6 {\n}\n")
	af.Close()
	check(Appended, 2*read)

	// dhcpd's rewrite: link the old file to NAME~, write NAME.new, rename.
	if err := os.Link(path, path+"~"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check(Unlinked, 2*read) // between unlink and rename: the file held goes on
	write(path+".new", "lease 203.0.113.6 {\n}\n")
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	check(Replaced, 0)

	// The file followed from now on (the path's) shrinks below what
	// was read from it.
	f.Close()
	if f, err = os.Open(path); err != nil {
		t.Fatal(err)
	}
	fi, _ = f.Stat()
	id = IDOf(fi)
	if err := os.Truncate(path, 10); err != nil {
		t.Fatal(err)
	}
	check(Truncated, 10)
	read = 10
	check(Appended, 10)
}

func TestTornAt(t *testing.T) {
	for _, tc := range []struct {
		name, tail string
		line       int // 0: not torn
	}{
		{"nothing pending", "", 0},
		{"blank", " \t\r\n\n", 0},
		{"comment", "# dhcpd\n  # more\n", 0},
		{"a statement", "\nlease 203.0.113.5 {\n  starts", 11},
		{"after a comment", "# c\n\nlease", 12},
		{"longer than any statement", strings.Repeat(" ", maxTail+1), 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := "lease 203.0.113.4 {\n}\n" + tc.tail
			r := strings.NewReader(file)
			line, torn := TornAt(r, int64(len(file)), len(tc.tail), 10)
			if line != tc.line || torn != (tc.line != 0) {
				t.Errorf("TornAt = %d, %v; want %d", line, torn, tc.line)
			}
		})
	}
	// A tail that cannot be read back is torn.
	if line, torn := TornAt(strings.NewReader("x"), 5, 3, 7); !torn || line != 7 {
		t.Errorf("unreadable tail: %d, %v", line, torn)
	}
}
