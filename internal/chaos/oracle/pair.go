package oracle

import (
	"fmt"
	"sort"
	"time"
)

// MergePair is a failover pair's truth as one stream of generations for
// Check: the leases files of the two peers (each dhcpd writes every
// binding, its own and its partner's updates), in the order the capture
// read them.
//
// What the pair did is the union of what either file shows, in time
// order: every block a peer appended, except the copy of a block the
// other file already showed (the binding update of the same lease state:
// same IP, binding, MAC, start and end), which is the same event told twice. A
// rewrite's table is not news in a pair: a peer returning from a death
// writes the table it had (its partner's newer blocks reach it after,
// through recovery), so tables are left out, and a lease leaves the
// pair's truth (Vanished, due at its end) at the first rewrite of either
// peer that dropped it because its address left the range that peer's
// dhcpd started with (inRange). A restart that kept the range drops
// nothing, however late its partner's updates reach the new file. That
// first drop is when the pair lost the lease: a shrink applied while one
// rack is down reaches the survivor first.
//
// files are the peers' generations as ParseChunks made them, in the
// order each file was written; inRange reports whether ip lies in the
// range of the dhcpd that wrote files[f][g] (it started on it).
func MergePair(files [][]Generation, inRange func(f, g int, ip string) bool) []Generation {
	type ev struct {
		at      time.Time
		f, g, b int // b < 0: the rewrite that started generation g
	}
	var evs []ev
	for f, gens := range files {
		for g, gen := range gens {
			if g > 0 && gen.Rewrite {
				if at := gen.seen(); !at.IsZero() {
					evs = append(evs, ev{at: at, f: f, g: g, b: -1})
				}
			}
			for b := gen.Table; b < len(gen.Blocks); b++ {
				evs = append(evs, ev{at: gen.Blocks[b].Seen, f: f, g: g, b: b})
			}
		}
	}
	// In time; at one time, file by file in write order (a rewrite
	// before its own blocks).
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })

	// A copy carries the lease's start too (the binding update's start
	// time of state becomes the partner's starts: dhcpd
	// server/failover.c): two lives of one MAC can end in the same
	// second (the first expired, the next released in it), and only
	// the start tells the second's end from a copy of the first's.
	type key struct {
		IP, MAC      string
		Active       bool
		Starts, Ends int64
	}
	told := make([]map[key]bool, len(files)) // what each file contributed
	for f := range told {
		told[f] = map[key]bool{}
	}
	cur := map[string]Block{} // IP → the pair's last block
	out := []Generation{{Name: "pair-start"}}
	for _, e := range evs {
		gen := files[e.f][e.g]
		if e.b < 0 {
			// Which leases this rewrite dropped out of its range.
			inTable := map[string]bool{}
			for _, b := range gen.Blocks[:gen.Table] {
				inTable[b.IP] = true
			}
			var drop []string
			for ip, b := range cur {
				if b.Active && !inTable[ip] && !inRange(e.f, e.g, ip) {
					drop = append(drop, ip)
				}
			}
			if len(drop) == 0 {
				continue
			}
			sort.Strings(drop)
			dropped := map[string]bool{}
			for _, ip := range drop {
				dropped[ip] = true
			}
			// A new generation whose table is the pair's active leases
			// but the dropped ones: Check's Truth makes those Vanished.
			next := Generation{Name: fmt.Sprintf("f%d:%s", e.f+1, gen.Name), Rewrite: true}
			ips := make([]string, 0, len(cur))
			for ip := range cur {
				ips = append(ips, ip)
			}
			sort.Strings(ips)
			for _, ip := range ips {
				if b := cur[ip]; b.Active && !dropped[ip] {
					b.Seen = e.at
					next.Blocks = append(next.Blocks, b)
				}
			}
			next.Table = len(next.Blocks)
			for _, ip := range drop {
				delete(cur, ip)
			}
			out = append(out, next)
			continue
		}
		b := gen.Blocks[e.b]
		k := key{IP: b.IP, MAC: b.MAC, Active: b.Active, Starts: b.Starts, Ends: b.Ends}
		echo := false
		for f := range told {
			if f != e.f && told[f][k] {
				echo = true
			}
		}
		told[e.f][k] = true
		if echo {
			continue // the partner's copy of a block the pair already showed
		}
		if c, ok := cur[b.IP]; ok && !b.Active && c.Active && c.MAC == b.MAC && b.Starts != 0 && b.Starts < c.Starts {
			// The end of a life older than the one the pair holds now:
			// a peer that returns expires its stale copy of a lease its
			// partner has since released and leased again (make chaos
			// PAIR=1 SEED=7). Not news.
			continue
		}
		last := &out[len(out)-1]
		last.Blocks = append(last.Blocks, b)
		cur[b.IP] = b
	}
	return out
}
