package reconcile

import (
	"io"
	"net/netip"
	"path/filepath"

	"github.com/leasekeeper/leasekeeper/internal/safefile"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// loadRanges reads dhcpd.conf (and its includes) for its IPv4 ranges and
// returns State.OutOfRange for them: an address in none of them is one
// dhcpd's rewrite drops. nil and the error when the file cannot be read
// whole: then no vanished lease is taken for an orphan.
func loadRanges(conf string) (func(netip.Addr) bool, error) {
	f, err := safefile.Open(conf, safefile.FollowLinks)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, err := dhcpdconf.Parse(f, dhcpdconf.Options{
		BaseDir: filepath.Dir(conf),
		Name:    conf,
		Open:    func(p string) (io.ReadCloser, error) { return safefile.Open(p, safefile.FollowLinks) },
	})
	if err != nil {
		return nil, err
	}
	var rs []dhcpdconf.Range
	for _, r := range cfg.Ranges {
		if r.Family == parser.IPv4 && r.Kind == dhcpdconf.RangeKindRange {
			rs = append(rs, r)
		}
	}
	return func(ip netip.Addr) bool {
		for _, r := range rs {
			if r.First.Compare(ip) <= 0 && ip.Compare(r.Last) <= 0 {
				return false
			}
		}
		return true
	}, nil
}
