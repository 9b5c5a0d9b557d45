package cli

import (
	"fmt"
	"path/filepath"

	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// loadLeases parses a leases file. Blocks dhcpd refuses (left out, as
// dhcpd leaves them out), statements the parser had to skip and an
// unfinished last statement are reported on stderr, not fatal: the rest
// of the file is still dhcpd's truth.
func loadLeases(env *Env, path string) (*parser.Leases, error) {
	f, err := env.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ls, err := parser.ParseLeases(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range ls.Refused() {
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: %s:%v\n", path, r)
	}
	for _, u := range ls.Unknown() {
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: %s:%v (statement skipped, as dhcpd skips it)\n", path, unknownText(u))
	}
	for _, e := range ls.Errors {
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: %s:%v (statement skipped)\n", path, e)
	}
	if ls.Incomplete != nil {
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: %s:%v (ignored: still being written, or torn)\n", path, ls.Incomplete)
	}
	return ls, nil
}

// loadConfig parses a dhcpd.conf; relative includes resolve against the
// file's directory.
func loadConfig(env *Env, path string) (*dhcpdconf.Config, error) {
	f, err := env.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return dhcpdconf.Parse(f, dhcpdconf.Options{
		BaseDir: filepath.Dir(abs),
		Open:    env.Open,
		Name:    path,
	})
}

// unknownText describes a statement dhcpd does not read in a leases file.
func unknownText(u *parser.Unknown) string {
	return fmt.Sprintf("line %d: %s is not a statement of a leases file (dhcpd: \"Corrupt lease file - possible data loss!\")", u.Line, u.What)
}

// notLeases says why a file holds nothing of a leases file, or "": it
// was not empty and ended inside its first statement, so that nothing
// was read whole (dhcpd writes a new leases file whole and renames it
// into place: even one being appended to begins with whole statements).
func notLeases(ls *parser.Leases) string {
	if ls.Statements == 0 && len(ls.Errors) == 0 && ls.Incomplete != nil {
		return fmt.Sprintf("%v, and no statement before it: not a leases file", ls.Incomplete)
	}
	return ""
}

// shownLeases is the error for a file that leases or pools would show
// as an empty table: no lease, and no statement read whole, or only ones
// a leases file does not hold (dhcpd.conf or /etc/passwd given for it;
// before, an empty table and exit 0: a cold review). An empty file, or
// one of comments, is an empty table: dhcpd's before its first lease.
func shownLeases(path string, ls *parser.Leases) error {
	if why := notLeases(ls); why != "" {
		return fmt.Errorf("%s:%s", path, why)
	}
	if n := ls.UnknownCount(); ls.Len() == 0 && n > 0 && n == ls.Statements {
		return fmt.Errorf("%s: no lease, and no statement a leases file holds (warnings above): not a leases file", path)
	}
	return nil
}
