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

	told := make([]map[pairKey]bool, len(files)) // what each file contributed
	for f := range told {
		told[f] = map[pairKey]bool{}
	}
	cur := map[string]Block{} // IP → the pair's last block
	// IP → each file's own last block (its table's at a rewrite): what
	// that peer's dhcpd holds for the address now.
	latest := make([]map[string]Block, len(files))
	for f := range latest {
		latest[f] = map[string]Block{}
	}
	out := []Generation{{Name: "pair-start"}}
	src := []int{} // the file each block of out's last generation came from (-1: a table)
	for _, e := range evs {
		gen := files[e.f][e.g]
		if e.b < 0 {
			// Which leases this rewrite dropped out of its range.
			inTable := map[string]bool{}
			clear(latest[e.f])
			for _, b := range gen.Blocks[:gen.Table] {
				inTable[b.IP] = true
				latest[e.f][b.IP] = b
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
			src = src[:0]
			for range next.Blocks {
				src = append(src, -1)
			}
			for _, ip := range drop {
				delete(cur, ip)
			}
			out = append(out, next)
			continue
		}
		b := gen.Blocks[e.b]
		k := keyOf(b)
		// b ends an older life of the client whose newer life the pair
		// holds; no news while another file still holds that newer life.
		older := endsOlderLife(cur, b)
		stale := older && heldElsewhere(latest, e.f, cur[b.IP])
		latest[e.f][b.IP] = b
		echo := false
		for f := range told {
			if f != e.f && told[f][k] {
				echo = true
			}
		}
		told[e.f][k] = true
		if echo && (stale || !older) {
			// The partner's copy of a block the pair already showed.
			// An offer this file wrote before its copy of a commit is
			// older than the commit in the file's own order, however
			// the two captures interleaved them: no end of it.
			dropSuperseded(&out[len(out)-1], &src, e.f, k, told[e.f], cur)
			continue
		}
		if stale {
			// The end of a life older than the one the pair holds now:
			// a peer that returns expires its stale copy of a lease its
			// partner has since released and leased again (make chaos
			// PAIR=1 SEED=7). Not news. Unless no other peer holds the
			// newer life any more: a returning peer's stale binding
			// update can overwrite its partner's newer lease, and then
			// both dhcpds hold the older life and end it, and the
			// address is free to them both (make chaos PAIR=1 SEED=115:
			// the secondary's log shows "bind update … xid mismatch").
			continue
		}
		last := &out[len(out)-1]
		last.Blocks = append(last.Blocks, b)
		src = append(src, e.f)
		cur[b.IP] = b
	}
	return out
}

// endsOlderLife reports whether b ends an older life of the client whose
// newer life the pair holds (cur). The end is the pair's only when no
// other file holds that newer life (heldElsewhere): a stale update has
// overwritten it there too, and both dhcpds freed the address; a copy of
// an end the other file showed first is then the pair's end all the
// same, however the two captures interleaved.
func endsOlderLife(cur map[string]Block, b Block) bool {
	c, ok := cur[b.IP]
	return ok && !b.Active && c.Active && c.MAC == b.MAC && b.Starts != 0 && b.Starts < c.Starts
}

// heldElsewhere reports whether a file other than f holds c, the pair's
// active life of an address, as its own last block of it: the same
// client's lease, begun no earlier.
func heldElsewhere(latest []map[string]Block, f int, c Block) bool {
	for g := range latest {
		if l, ok := latest[g][c.IP]; ok && g != f && l.Active && l.MAC == c.MAC && l.Starts >= c.Starts {
			return true
		}
	}
	return false
}

// offerAhead is how far ahead of the file's showing it a block's end must
// be for the block to be a lease's offered state (dhcpd gives an offer
// two minutes, server/dhcp.c dhcpdiscover) rather than an end that
// happened (dated when it happened, or a second early).
const offerAhead = 60 * time.Second

// isOffer reports whether b is unbound with its end still well ahead
// when the file showed it: the offered state a failover peer's file
// showed written just before the ack's commit (make chaos PAIR=1, seed
// 95, twice; which write in dhcpd puts it there was not traced in its
// source: supersede_lease does not commit an offer).
func isOffer(b Block) bool {
	return !b.Active && !b.Seen.IsZero() && time.Unix(b.Ends, 0).After(b.Seen.Add(offerAhead))
}

// pairKey is a block's lease state. A copy carries the lease's start too
// (the binding update's start time of state becomes the partner's
// starts: dhcpd server/failover.c): two lives of one MAC can end in the
// same second (the first expired, the next released in it), and only the
// start tells the second's end from a copy of the first's.
type pairKey struct {
	IP, MAC      string
	Active       bool
	Starts, Ends int64
}

func keyOf(b Block) pairKey {
	return pairKey{IP: b.IP, MAC: b.MAC, Active: b.Active, Starts: b.Starts, Ends: b.Ends}
}

// dropSuperseded removes from g (the merge's last generation, src its
// blocks' files) the offers (isOffer) of k's address that file f
// contributed after another file's commit k, now that f wrote its copy
// of k. f wrote them before the copy, so in f's order they are older
// than k; the merge placed them after k only because the two files were
// read at slightly different times, and took them for k's end (make
// chaos PAIR=1 SEED=95: no peer ever ended that commit). Nothing is
// removed if f wrote any other block of the address in between. The
// removed blocks leave f's told set, so a partner that writes them after
// k still tells them. cur[ip] becomes the address's last block left.
// Nothing changes unless k is in g.
func dropSuperseded(g *Generation, src *[]int, f int, k pairKey, told map[pairKey]bool, cur map[string]Block) {
	if !k.Active {
		return
	}
	var stale []int
	orig := -1
	for j := len(g.Blocks) - 1; j >= g.Table; j-- {
		b := g.Blocks[j]
		if b.IP != k.IP {
			continue
		}
		if (*src)[j] != f && keyOf(b) == k {
			orig = j
			break
		}
		if (*src)[j] == f {
			if !isOffer(b) {
				// f's file went on from k (an end of k's life, say):
				// its copy of k is a replay of an older state (a
				// partner in recovery resends what it held, make
				// chaos PAIR=1 SEED=98), not news that came after
				// its own blocks.
				return
			}
			stale = append(stale, j)
		}
	}
	if orig < 0 || len(stale) == 0 {
		return
	}
	drop := map[int]bool{}
	for _, j := range stale {
		drop[j] = true
		delete(told, keyOf(g.Blocks[j]))
	}
	blocks, files := g.Blocks[:0], (*src)[:0]
	for j, b := range g.Blocks {
		if !drop[j] {
			blocks = append(blocks, b)
			files = append(files, (*src)[j])
		}
	}
	g.Blocks, *src = blocks, files
	for j := len(g.Blocks) - 1; j >= 0; j-- {
		if g.Blocks[j].IP == k.IP {
			cur[k.IP] = g.Blocks[j]
			break
		}
	}
}
