package oracle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMergePair judges a pair's items against the two peers' files
// merged: the copies of one event in both files are one event; a restart
// that kept the range drops nothing even when its table lacks a lease its
// partner added meanwhile; a shrink drops a lease at the first peer's
// rewrite (the survivor's, while the other is down), and the returning
// peer's stale table is no news.
func TestMergePair(t *testing.T) {
	seen := func(b Block, s int) Block { b.Seen = at(s); return b }
	// The primary (f0) commits ip1 to m1 and ip2 to m2; the secondary
	// (f1) gets both as binding updates a little later.
	prim := []Generation{gen("p0", nil, seen(act(ip1, m1, 100), 1), seen(act(ip2, m2, 100), 2))}
	sec := []Generation{gen("s0", nil, seen(act(ip1, m1, 100), 1), seen(act(ip2, m2, 100), 3))}
	all := func(f, g int, ip string) bool { return true }

	t.Run("copies are one event", func(t *testing.T) {
		m := MergePair([][]Generation{prim, sec}, all)
		r := Check(Input{Generations: m, End: at(50), Items: []Item{item(1, "commit", ip1, m1), item(2, "commit", ip2, m2)}})
		if got := rules(r); len(got) != 0 || r.Duplicates != 0 {
			t.Fatalf("violations %v, duplicates %d; merged %+v", got, r.Duplicates, m)
		}
	})

	t.Run("a restart that kept the range drops nothing", func(t *testing.T) {
		// The secondary restarts at 2: its table has ip1 only, ip2's
		// update comes after.
		sec := []Generation{
			gen("s0", nil, seen(act(ip1, m1, 100), 1)),
			gen("s1", []Block{seen(act(ip1, m1, 100), 2)}, seen(act(ip2, m2, 100), 3)),
		}
		m := MergePair([][]Generation{prim, sec}, all)
		r := Check(Input{Generations: m, End: at(50), Items: []Item{item(1, "commit", ip1, m1), item(2, "commit", ip2, m2)}})
		if got := rules(r); len(got) != 0 {
			t.Fatalf("violations %v; merged %+v", got, m)
		}
	})

	// The primary dies at 5; ip1's client leaves. The secondary restarts
	// at 10 on a range without ip1 (the shrink); the primary returns at
	// 200 on the same range, its table stale. ip1 is expired once, at
	// its end (100), by the survivor.
	shrunk := func(f, g int, ip string) bool { return g == 0 || ip != ip1 }
	prim2 := []Generation{
		prim[0],
		gen("p1", []Block{seen(act(ip2, m2, 100), 200)}),
	}
	sec2 := []Generation{
		sec[0],
		gen("s1", []Block{seen(act(ip2, m2, 100), 10)}),
	}
	m := MergePair([][]Generation{prim2, sec2}, shrunk)
	tests := []struct {
		name  string
		items []Item
		want  []string
		dups  int
	}{{
		name:  "the survivor's expiry at the end",
		items: []Item{item(1, "commit", ip1, m1), item(2, "commit", ip2, m2), item(100, "expiry", ip1, m1)},
	}, {
		name:  "the same expiry again from the returning primary: a duplicate",
		items: []Item{item(1, "commit", ip1, m1), item(2, "commit", ip2, m2), item(100, "expiry", ip1, m1), item(201, "expiry", ip1, m1)},
		dups:  1,
	}, {
		name:  "early",
		items: []Item{item(1, "commit", ip1, m1), item(2, "commit", ip2, m2), item(11, "expiry", ip1, m1)},
		want:  []string{"early " + ip1},
	}, {
		name:  "never expired",
		items: []Item{item(1, "commit", ip1, m1), item(2, "commit", ip2, m2)},
		want:  []string{"final " + ip1, "lost " + ip1},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(Input{Generations: m, End: at(300), Items: tc.items})
			if diff := cmp.Diff(tc.want, rules(r)); diff != "" {
				t.Errorf("violations (-want +got):\n%s\nmerged %+v", diff, m)
			}
			if r.Duplicates != tc.dups {
				t.Errorf("duplicates %d, want %d", r.Duplicates, tc.dups)
			}
			if r.Vanished != 1 {
				t.Errorf("vanished %d, want 1", r.Vanished)
			}
		})
	}
}

// Found in a pair run (make chaos PAIR=1): the secondary expired a life
// of m1 ending at 20 (a second early, as dhcpd may), the primary acked
// the client's next life at 19, and the client released it at 20. The
// release's block is not a copy of the expiry's, though both are
// inactive, of m1, ending at 20: their starts differ.
func TestMergePairTwoLivesEndInOneSecond(t *testing.T) {
	blk := func(b Block, starts int, seenMS int) Block {
		b.Starts, b.Seen = at(starts).Unix(), t0.Add(time.Duration(seenMS)*time.Millisecond)
		return b
	}
	prim := []Generation{gen("p0", nil, blk(act(ip1, m1, 20), 0, 0), blk(free(ip1, m1, 20), 0, 19_100),
		blk(act(ip1, m1, 29), 19, 19_300), blk(free(ip1, m1, 20), 19, 20_000))}
	sec := []Generation{gen("s0", nil, blk(act(ip1, m1, 20), 0, 100), blk(free(ip1, m1, 20), 0, 19_000),
		blk(act(ip1, m1, 29), 19, 19_500), blk(free(ip1, m1, 20), 19, 20_500))}
	m := MergePair([][]Generation{prim, sec}, func(f, g int, ip string) bool { return true })
	ev := func(arriveMS int, action string, ts int) Item {
		it := Item{At: t0.Add(time.Duration(arriveMS) * time.Millisecond), Action: action, IP: ip1, MAC: m1, Timestamp: at(ts).Unix()}
		return it
	}
	r := Check(Input{Generations: m, End: at(50), Items: []Item{ev(50, "commit", 0), ev(19_050, "expiry", 19), ev(19_350, "commit", 19), ev(20_050, "release", 20)}})
	if got := rules(r); len(got) != 0 {
		t.Errorf("violations %v\n%s", got, evidence(r))
	}
	if r.Versions != 4 {
		t.Errorf("versions %d, want 4 (two lives, two ends)", r.Versions)
	}
}

// Found in a pair run (make chaos PAIR=1 SEED=7): the primary returned
// and expired its stale copy of a life (begun at 0) after its partner had
// released that address's next life and leased it again (begun at 16).
// The stale end is no news of the pair's.
func TestMergePairStaleEndOfAReturningPeer(t *testing.T) {
	blk := func(b Block, starts int, seen int) Block {
		b.Starts, b.Seen = at(starts).Unix(), at(seen)
		return b
	}
	prim := []Generation{gen("p0", nil, blk(act(ip1, m1, 20), 0, 0), blk(free(ip1, m1, 20), 0, 24))}
	sec := []Generation{gen("s0", nil, blk(act(ip1, m1, 20), 0, 1), blk(act(ip1, m1, 30), 10, 10), blk(free(ip1, m1, 12), 10, 12),
		blk(act(ip1, m1, 32), 16, 16))}
	m := MergePair([][]Generation{prim, sec}, func(f, g int, ip string) bool { return true })
	ev := func(arrive int, action string, ts int) Item {
		it := item(arrive, action, ip1, m1)
		it.Timestamp = at(ts).Unix()
		return it
	}
	r := Check(Input{Generations: m, End: at(30), Items: []Item{ev(0, "commit", 0), ev(10, "commit", 10), ev(12, "release", 12), ev(16, "commit", 16)}})
	if got := rules(r); len(got) != 0 {
		t.Errorf("violations %v\n%s", got, evidence(r))
	}
}

// Found in a pair run (make chaos PAIR=1 SEED=115 at 15daa2c): the
// primary acked a life (begun at 6, ending at 26) and died before its
// binding update left; the secondary, speaking for the pair, acked the
// client's next life (begun at 25). Back from recovery the primary sent
// its stale update, and the secondary's dhcpd took it over the newer
// lease: both files now hold the older life, and both end it at 26. The
// address is free to both dhcpds: that end is the pair's, though a life
// begun later was told. While the other file still holds the newer life
// (TestMergePairStaleEndOfAReturningPeer) it is not.
func TestMergePairOverwrittenByStaleUpdate(t *testing.T) {
	blk := func(b Block, starts int, seen int) Block {
		b.Starts, b.Seen = at(starts).Unix(), at(seen)
		return b
	}
	old := blk(act(ip1, m1, 26), 6, 6)
	prim := []Generation{gen("p0", nil, old), gen("p1", []Block{blk(act(ip1, m1, 26), 6, 24)}, blk(free(ip1, m1, 26), 6, 26))}
	sec := []Generation{gen("s0", nil, blk(act(ip1, m1, 26), 6, 7), blk(act(ip1, m1, 45), 25, 25),
		blk(act(ip1, m1, 26), 6, 25) /* the stale update */, blk(free(ip1, m1, 26), 6, 27))}
	m := MergePair([][]Generation{prim, sec}, func(f, g int, ip string) bool { return true })
	items := []Item{timed(6, "commit", 6), timed(25, "commit", 25), timed(26, "expiry", 26)}
	if got := rules(Check(Input{Generations: m, End: at(40), Items: items})); len(got) != 0 {
		t.Errorf("the end both files show, of the life both hold: violations %v; merged %+v", got, m)
	}
	// The same, the captures read the secondary's overwrite and its end
	// after the primary's end: the end is the pair's all the same (a
	// cold review: the primary's end, skipped while the secondary held
	// the newer life, made the secondary's a copy, and both were lost).
	secLate := []Generation{gen("s0", nil, blk(act(ip1, m1, 26), 6, 7), blk(act(ip1, m1, 45), 25, 25),
		blk(act(ip1, m1, 26), 6, 27), blk(free(ip1, m1, 26), 6, 28))}
	m = MergePair([][]Generation{prim, secLate}, func(f, g int, ip string) bool { return true })
	items = []Item{timed(6, "commit", 6), timed(25, "commit", 25), timed(28, "expiry", 28)}
	if got := rules(Check(Input{Generations: m, End: at(40), Items: items})); len(got) != 0 {
		t.Errorf("the end both files show, read in the other order: violations %v; merged %+v", got, m)
	}
	items = []Item{timed(6, "commit", 6), timed(25, "commit", 25), timed(26, "expiry", 26)}
	// Without the stale update the secondary holds the newer life, and
	// the primary's end of its stale copy is no news.
	sec = []Generation{gen("s0", nil, blk(act(ip1, m1, 26), 6, 7), blk(act(ip1, m1, 45), 25, 25))}
	m = MergePair([][]Generation{prim, sec}, func(f, g int, ip string) bool { return true })
	if got, want := rules(Check(Input{Generations: m, End: at(40), Items: items})), []string{"false " + ip1, "final " + ip1}; !cmp.Equal(got, want) {
		t.Errorf("the stale end of a life the partner renewed: violations %v, want %v", got, want)
	}
}

// Found in a pair run (make chaos PAIR=1 SEED=95), twice: a peer's file
// shows the offered state of a lease (free, starting now, its end the
// two minutes dhcpd gives an offer: server/dhcp.c dhcpdiscover), then
// the commit of its ack, or its partner's binding update of the ack.
// Captures of the two files are ordered only by when each was read; the
// offer, read a millisecond after the partner's block of the commit,
// came after the commit by time and ended it. In the file that wrote it,
// it came before its copy of the commit: no peer ended that commit (the
// client renewed it). Each file's own order decides. At 203.0.113.161
// the secondary, back from a restart, wrote the offer and then the
// primary's update; at 203.0.113.117 the primary wrote its own offer
// and ack, read after the secondary's copy of the ack.
func TestMergePairFileOrderOverReadOrder(t *testing.T) {
	blk := func(b Block, starts int, seenMS int) Block {
		b.Starts, b.Seen = at(starts).Unix(), t0.Add(time.Duration(seenMS)*time.Millisecond)
		return b
	}
	commit := blk(act(ip1, m1, 38), 28, 28_922)
	offer := blk(free(ip1, m1, 148), 28, 28_923)
	renew := blk(act(ip1, m1, 55), 35, 35_100)
	end := blk(free(ip1, m1, 38), 28, 38_000)
	copyOf := func(b Block, seenMS int) Block { b.Seen = t0.Add(time.Duration(seenMS) * time.Millisecond); return b }
	ev := func(arrive int, action string, ts int) Item {
		it := item(arrive, action, ip1, m1)
		it.Timestamp = at(ts).Unix()
		return it
	}
	all := func(f, g int, ip string) bool { return true }
	tests := []struct {
		name  string
		prim  []Block
		sec   []Block
		items []Item
		want  []string
	}{{
		name:  "the secondary's offer before its copy of the commit ends nothing",
		prim:  []Block{commit, renew},
		sec:   []Block{offer, copyOf(commit, 28_923), copyOf(renew, 35_200)},
		items: []Item{ev(29, "commit", 28), ev(36, "commit", 35)},
	}, {
		name:  "the primary's own offer and commit, read after the secondary's copy, end nothing",
		prim:  []Block{copyOf(offer, 28_924), copyOf(commit, 28_924), copyOf(renew, 35_200)},
		sec:   []Block{copyOf(commit, 28_922), copyOf(renew, 35_100)},
		items: []Item{ev(29, "commit", 28), ev(36, "commit", 35)},
	}, {
		// make chaos PAIR=1 SEED=98, 203.0.113.170: the primary,
		// restarted, expired the lease, then its recovery resent the
		// lease's active state to the secondary, which had expired it
		// too: each file shows the end, then the replayed commit, then
		// the end again. The end is not an offer, and stays.
		name: "a replay of the commit after an end leaves the end",
		prim: []Block{commit, copyOf(end, 41_069), copyOf(commit, 41_142), copyOf(end, 42_145)},
		sec:  []Block{copyOf(commit, 29_100), copyOf(end, 41_047), copyOf(commit, 41_342), copyOf(end, 42_143)},
		// No expiry: the end is lost (the broken merge dropped it, and
		// an expiry sent was then false).
		items: []Item{ev(29, "commit", 28)},
		want:  []string{"final " + ip1, "lost " + ip1},
	}, {
		name: "the same free state that the primary writes after the commit ends it",
		prim: []Block{commit, copyOf(offer, 29_000)},
		sec:  []Block{offer, copyOf(commit, 28_923)},
		// A false ending item would be early; without one the end is lost.
		items: []Item{ev(29, "commit", 28)},
		want:  []string{"final " + ip1, "lost " + ip1},
	}, {
		name:  "a free state the secondary writes after its copy ends the commit",
		prim:  []Block{commit},
		sec:   []Block{copyOf(commit, 28_923), copyOf(offer, 28_923)},
		items: []Item{ev(29, "commit", 28)},
		want:  []string{"final " + ip1, "lost " + ip1},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := MergePair([][]Generation{{gen("p0", nil, tc.prim...)}, {gen("s0", nil, tc.sec...)}}, all)
			r := Check(Input{Generations: m, End: at(60), Items: tc.items})
			if diff := cmp.Diff(tc.want, rules(r)); diff != "" {
				t.Errorf("violations (-want +got):\n%s\nmerged %+v\n%s", diff, m, evidence(r))
			}
		})
	}
}
