package reconcile

import (
	"io"
	"net/netip"
	"path/filepath"

	"github.com/leasekeeper/leasekeeper/internal/safefile"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// readConf reads dhcpd.conf (and its includes): the one reader of it for
// the ranges (outOfRange) and the failover pair (PairOf). A whole
// rewrite of the leases file reads it once and keeps it for the restart
// that rewrite may turn out to be (Reconciler.conf).
func readConf(conf string) (*dhcpdconf.Config, error) {
	f, err := safefile.Open(conf, safefile.FollowLinks)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return dhcpdconf.Parse(f, dhcpdconf.Options{
		BaseDir: filepath.Dir(conf),
		Name:    conf,
		Open:    func(p string) (io.ReadCloser, error) { return safefile.Open(p, safefile.FollowLinks) },
	})
}

// outOfRange returns State.OutOfRange for dhcpd.conf's IPv4 ranges: an
// address in none of them is one dhcpd's rewrite drops.
func outOfRange(cfg *dhcpdconf.Config) func(netip.Addr) bool {
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
	}
}
