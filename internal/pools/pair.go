package pools

import (
	"time"

	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/parser/dhcpdconf"
)

// Pair is a failover peer the configuration's pools use, with the
// states its leases file last recorded (`failover peer "NAME" state {
// my state …; partner state …; mclt N; }`). dhcpd-pools shows a pair
// only through its backup counts; these say which side serves: in
// partner-down this server answers for the whole pool, in recover it
// answers nobody until it caught up.
type Pair struct {
	Peer string `json:"peer"`
	Role string `json:"role"` // primary, secondary, or "" when dhcpd.conf says neither
	// MyState and PartnerState are "" when the file records no state
	// for the peer (a file dhcpd has not written in a pair yet).
	MyState        string     `json:"my_state"`
	MyStateAt      *time.Time `json:"my_state_at"` // RFC 3339 UTC; null when not recorded
	PartnerState   string     `json:"partner_state"`
	PartnerStateAt *time.Time `json:"partner_state_at"`
	MCLT           int        `json:"mclt"` // seconds; 0 when not recorded
	// Backup is the number of backup leases in the peer's ranges: free
	// addresses the secondary may hand out on its own.
	Backup int64 `json:"backup"`
}

// Pairs lists the failover peers the ranges of cfg use, in the order
// dhcpd.conf declares them, with their states in t and the backup
// leases rep counted in their ranges. Never nil.
func Pairs(cfg *dhcpdconf.Config, t *parser.Table, rep Report) []Pair {
	backup := map[string]int64{}
	for _, u := range rep.Ranges {
		if u.Failover != "" {
			backup[u.Failover] += u.Backup
		}
	}
	states := map[string]*parser.FailoverState{}
	for _, fs := range t.Failover() {
		states[fs.Peer] = fs
	}
	out := []Pair{}
	for _, fp := range cfg.FailoverPeers {
		if _, used := backup[fp.Name]; !used {
			continue
		}
		p := Pair{Peer: fp.Name, Role: fp.Role, Backup: backup[fp.Name]}
		if fs := states[fp.Name]; fs != nil {
			p.MyState, p.MyStateAt = fs.MyState, timeOf(fs.MyStateAt)
			p.PartnerState, p.PartnerStateAt = fs.PartnerState, timeOf(fs.PartnerStateAt)
			p.MCLT = max(fs.MCLT, 0) // -1: not recorded
		}
		out = append(out, p)
	}
	return out
}

func timeOf(t parser.Time) *time.Time {
	if !t.IsSet() || t == parser.Never {
		return nil
	}
	x := time.Unix(int64(t), 0).UTC()
	return &x
}
