package reconcile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// hookNames are the programs whose execute() in dhcpd.conf means hook
// events reach the agent.
var hookNames = []string{"leasekeeper-hook", "maas-dhcp-helper"}

// HookScan is what dhcpd.conf says about hooks.
type HookScan struct {
	// Programs are the hook programs dhcpd.conf (with its includes)
	// executes, as written.
	Programs []string
	// Runnable are those that exist and are executable (or whose path
	// is relative, which the agent cannot check).
	Runnable []string
	// Files are the files read: dhcpd.conf and its includes.
	Files []string
}

// Hooked reports whether some hook can run: otherwise every event must
// come from the leases file at once ("hookless mode").
func (h HookScan) Hooked() bool { return len(h.Runnable) > 0 }

var (
	executeRe = regexp.MustCompile(`(?i)\bexecute\s*\(\s*"([^"]*)"`)
	includeRe = regexp.MustCompile(`(?i)(?:^|[;{}\s])include\s+"([^"]*)"\s*;`)
)

// scanHooks reads the dhcpd.conf at path and the files it includes for
// execute() statements running leasekeeper-hook or maas-dhcp-helper. It
// reads the raw text (with comments removed) rather than parsing: the
// configuration parser skips on-blocks whole, and this only needs to know
// whether a hook runs at all. Relative include paths are taken relative
// to the including file's directory (dhcpd uses its working directory,
// which is / under systemd; absolute paths are the rule).
func scanHooks(path string) (HookScan, error) {
	var h HookScan
	seen := map[string]bool{}
	var walk func(p string, depth int) error
	walk = func(p string, depth int) error {
		if depth > 10 {
			return fmt.Errorf("%s: includes nested more than 10 deep", p)
		}
		if seen[p] {
			return nil
		}
		seen[p] = true
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Files = append(h.Files, p)
		text := stripComments(raw)
		for _, m := range executeRe.FindAllSubmatch(text, -1) {
			prog := string(m[1])
			if !isHook(prog) {
				continue
			}
			h.Programs = append(h.Programs, prog)
			if runnable(prog) {
				h.Runnable = append(h.Runnable, prog)
			}
		}
		for _, m := range includeRe.FindAllSubmatch(text, -1) {
			inc := string(m[1])
			if !filepath.IsAbs(inc) {
				inc = filepath.Join(filepath.Dir(p), inc)
			}
			if err := walk(inc, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return h, walk(path, 0)
}

func isHook(prog string) bool {
	base := filepath.Base(prog)
	for _, n := range hookNames {
		if base == n || strings.HasPrefix(base, n) {
			return true
		}
	}
	return false
}

// runnable reports whether dhcpd could execute prog.
func runnable(prog string) bool {
	if !filepath.IsAbs(prog) {
		return true
	}
	fi, err := os.Stat(prog)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// stripComments blanks '#' comments outside strings (keeping newlines),
// so a commented-out execute() does not count.
func stripComments(b []byte) []byte {
	out := bytes.Clone(b)
	inStr, comment := false, false
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case comment:
			if c == '\n' {
				comment = false
			} else {
				out[i] = ' '
			}
		case inStr:
			if c == '\\' && i+1 < len(out) {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '#':
			comment = true
			out[i] = ' '
		}
	}
	return out
}
