package oracle

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/maasmodel"
	"github.com/leasekeeper/leasekeeper/parser"
)

// Block is one IPv4 lease block as dhcpd wrote it.
type Block struct {
	IP     string
	MAC    string // normalised, lower-case, zero-padded; "" without hardware
	Active bool   // binding state active (as dhcpd infers it when absent)
	Ends   int64  // Unix seconds; 0 for never or absent
	Starts int64  // Unix seconds; 0 when absent
	// Seen is when the block was first read from the file (zero:
	// unknown); the start of its delivery lag.
	Seen time.Time
}

// Generation is one leases file (one inode): the table a rewrite wrote,
// then the blocks appended to it.
type Generation struct {
	Name   string
	Blocks []Block
	// Table is how many leading Blocks are the rewrite's table (those
	// before the server-duid line dhcpd appends at start); 0 for a file
	// that was empty when dhcpd started.
	Table int
	// Rewrite tells whether this generation replaced the previous one
	// (dhcpd started on it); leases the table lacks vanished.
	Rewrite bool
}

// ParseGeneration reads one leases file. A torn last block (dhcpd killed
// mid-write, or a copy taken mid-append) is left out, never guessed.
func ParseGeneration(name string, data []byte, now time.Time) Generation {
	return ParseChunks(name, []Chunk{{Data: data}}, now)
}

// Chunk is a piece of a leases file as it was read: the bytes it added
// to what had been read before, and when.
type Chunk struct {
	At   time.Time
	Data []byte
}

// ParseChunks reads one leases file given as the chunks it grew by, in
// order; a block's Seen is the At of the chunk that completed it.
func ParseChunks(name string, chunks []Chunk, now time.Time) Generation {
	g := Generation{Name: name}
	var seen time.Time
	seenDUID := false
	d := parser.NewDecoder()
	h := func(s parser.Statement, err error) {
		switch st := s.(type) {
		case *parser.ServerDUID:
			if !seenDUID {
				seenDUID = true
				g.Table = len(g.Blocks)
				g.Rewrite = true
			}
		case *parser.Lease:
			if st.Family != parser.IPv4 || !st.IP.IsValid() {
				return
			}
			b := Block{IP: st.IP.String(), MAC: NormMAC(st.HardwareAddr.String()),
				Active: st.Binding(parser.Time(now.Unix())) == parser.StateActive, Seen: seen}
			if st.Ends.IsSet() && !st.Ends.IsNever() {
				b.Ends = int64(st.Ends)
			}
			if st.Starts.IsSet() && !st.Starts.IsNever() {
				b.Starts = int64(st.Starts)
			}
			g.Blocks = append(g.Blocks, b)
		}
	}
	for _, c := range chunks {
		seen = c.At
		d.Feed(c.Data, h)
	}
	_ = d.Close(h) // an incomplete tail is dropped
	return g
}

// NormMAC writes a MAC as the region does: six lower-case, zero-padded
// octets ("2:0:0:a:b:c" → "02:00:00:0a:0b:0c"). Anything else is returned
// lower-cased.
func NormMAC(mac string) string {
	parts := strings.Split(strings.ToLower(mac), ":")
	if len(parts) != 6 {
		return strings.ToLower(mac)
	}
	for i, p := range parts {
		if len(p) == 1 {
			parts[i] = "0" + p
		}
	}
	return strings.Join(parts, ":")
}

// Item is one item the region took, with the time its batch arrived.
type Item struct {
	At     time.Time
	Action string // commit, expiry, release
	IP     string
	MAC    string
	// Batch numbers the request that carried the item (items of one
	// batch share it; 0 for all when unknown). The region applies a
	// batch in one transaction (MAAS: src/maasapiserver/common/
	// middlewares/db.py, TransactionMiddleware): only an IP's last item
	// in it is a state the region shows.
	Batch int
	// Timestamp is the event's own time (Unix seconds; 0: unknown).
	Timestamp int64
	// LeaseTime is a commit's lease length in seconds (0: unknown, or
	// not a commit).
	LeaseTime int64
	// From names the rack whose agent sent the item ("": unknown, or
	// one rack): for a person tracing a violation.
	From string
}

// by is " by FROM" for an item whose sender is known.
func (it Item) by() string {
	if it.From == "" {
		return ""
	}
	return " by " + it.From
}

// Input is a run to judge.
type Input struct {
	Generations []Generation // in the order dhcpd wrote them
	Items       []Item       // in the order the region applied them
	// End is when the run was judged: a Vanished lease ending after it
	// is still due, and the region may still hold it.
	End time.Time
	// Refused are the events the agent dead-lettered (the region refused
	// them alone, 422): not lost, but the region never had them, so the
	// IP's final view is not judged.
	Refused []Item
	// Slack is how early an expiry may arrive against a lease's end
	// (dhcpd writes whole seconds); default 1 s.
	Slack time.Duration
	// Deaths are when dhcpd was killed or stopped. dhcpd runs a commit's
	// or a release's hook before it writes the lease: killed (or
	// restarted) in between, it leaves an event its hook told that no
	// file shows. Such an item, its event at most deathSlack before a
	// death (or deathLate after it), is counted (Unwritten), not judged. The region then holds
	// that commit's lease: the expiry that ends it, at or after its end
	// (the agent's rule 2 sends it), is counted too (UnwrittenEnds).
	Deaths []time.Time
}

// deathSlack is how long before dhcpd's death a hook's event the files
// never show is taken for one dhcpd ran and died before writing.
const deathSlack = 2 * time.Second

// deathLate is how long after a death such an event may be stamped: the
// hook dhcpd forked just before it died runs on, orphaned, and stamps
// its event with its own start, after dhcpd is gone (the death is
// recorded once dhcpd has exited). Seen: make chaos SEED=42 at 2b4f016,
// a release's hook in dhcpd.log without dhcpd's "DHCPRELEASE … (found)"
// after it, stamped 05:05:03 against a death recorded at 05:05:02.998.
const deathLate = time.Second

// Version is one state of an IP in the truth.
type Version struct {
	Active   bool
	MAC      string // Active: the holder; inactive: the MAC whose lease ended ("" if none)
	Ends     int64  // the lease's end (latest renewal); for Vanished, the due time
	Vanished bool   // dropped by a rewrite: its end is synthesised
	// Released: an inactive version that ended before its lease's end
	// (a release); false for one that ended at it (an expiry).
	Released bool
	Where    string // generation and block, for evidence
	// Count is how many events the files show for the version: appended
	// blocks collapsed into it (renewals), 1 for a vanished lease, 0 for
	// a rewrite's table repeating it.
	Count int
	// Due is when the region could first hear of the version: when its
	// first block was read from the file; for Vanished, the later of the
	// rewrite's and the lease's end. Zero: unknown.
	Due time.Time
	// Seen is when the file first showed the version (for Vanished, the
	// rewrite); zero: unknown. An item that reached the region well
	// before it cannot be about it (seenSlack).
	Seen time.Time
	// From is when, on dhcpd's clock, the version began: an active one's
	// first start, an inactive one's end (the release or the expiry), a
	// vanished one's life's first start; 0: unknown. An event older than it cannot be about it: a re-post
	// of an earlier commit is not the next lease life's (Item.Timestamp).
	From int64
	// Renewed is an active version's latest start (its renewals'), 0
	// when unknown: an end of the life is no older than it (Truth).
	Renewed int64
	// Cut is, for an inactive version that ended a life before that
	// life's end by a partner's stale binding update (Truth), the end
	// the cut life had (Unix s); 0 otherwise.
	Cut int64
	// Starts is the start of the life the version's block records
	// (Block.Starts), 0 when unknown: an unbound block begun before the
	// life the address holds ends an older one (Truth).
	Starts int64
	// Rejoined lists, for an active version, the ends (Unix s) of cut
	// lives (Cut) of its client that it continued from the very second
	// they ended: the client's next lease began at the cut life's own
	// end. The life goes on, so no end is owed; but the peer whose file
	// the cut did not reach freed the lease at that end and acked the
	// client again, so an expiry dated then is that file's truth too
	// (Check: Report.Rejoined).
	Rejoined []int64
}

// seenSlack is how long before the file was seen to show a version an
// item about it may reach the region: dhcpd runs a commit's hook before
// it writes the lease, and the capture reads the file every 100 ms — on
// a loaded machine seconds late (2 s flagged ten lease lives as lost in
// one CI run). The re-posts this rule is for come tens of seconds before
// the version they would be mistaken for.
const seenSlack = 10 * time.Second

func (v Version) String() string {
	s := "inactive"
	if v.Active {
		s = "active"
	}
	if v.Vanished {
		s = "vanished"
	}
	return fmt.Sprintf("%s(%s ends %s @%s)", s, v.MAC, fmtUnix(v.Ends), v.Where)
}

func fmtUnix(t int64) string {
	if t == 0 {
		return "-"
	}
	return time.Unix(t, 0).UTC().Format("15:04:05")
}

// Violation is one broken promise.
type Violation struct {
	Rule     string // false, order, early, lost, final
	IP       string
	Evidence string
}

func (v Violation) String() string { return fmt.Sprintf("%-6s %-15s %s", v.Rule, v.IP, v.Evidence) }

// Report is the oracle's verdict.
type Report struct {
	IPs        int
	Versions   int            // truth states, all IPs
	Events     map[string]int // truth transitions: commit, end, vanished
	Items      int            // region items
	ItemsBy    map[string]int // by action
	Duplicates int            // items beyond the events the files show for their version
	Unwritten  int            // items whose event dhcpd's hook told just before dhcpd died, never written
	// Rejoined are expiries of a cut life dated at its own end, in the
	// second the same client's next lease began, sent before that
	// lease's commit (Version.Rejoined): neither owed nor false.
	Rejoined int
	// UnwrittenEnds are expiries that ended the lease of an unwritten
	// commit the region held (Input.Deaths).
	UnwrittenEnds int
	Vanished      int // vanished leases
	VanishedHit   int // of which the region got the expiry
	Refused       int // versions never delivered because the agent dead-lettered them
	Posts         Posts
	Lag           Lag // from each version's Due to the first item for it
	Violations    []Violation
	ByRule        map[string]int
}

// cutMargin is how long before its end a life freed with its own times
// counts as cut by a partner's stale binding update (s): dhcpd may free
// a lease a second early. The agent's own bound (agent/reconcile,
// cutMargin) is the same.
const cutMargin = 2

// Truth builds the per-IP versions from the generations.
func Truth(gens []Generation) map[string][]Version {
	vs := map[string][]Version{}
	// IP → "MAC@end" of every unbound block the files showed: a
	// rejoined cut life's end counts only where a file showed it.
	shownEnds := map[string]map[string]bool{}
	endKey := func(mac string, end int64) string { return fmt.Sprintf("%s@%d", mac, end) }
	var push func(ip string, v Version)
	push = func(ip string, v Version) {
		q := vs[ip]
		if n := len(q); n > 0 {
			last := &q[n-1]
			if last.Vanished && v.Active && last.MAC == v.MAC && v.From != 0 && v.From <= last.Ends {
				// Dropped at a rewrite, then taken back by the same
				// client before its end (the range came back): the
				// life goes on, and no expiry is owed.
				vs[ip] = q[:n-1]
				push(ip, v)
				return
			}
			if last.Cut != 0 && v.Active && last.MAC == v.MAC && v.From != 0 && v.From <= last.Cut {
				// Freed by a partner's stale binding update, then the
				// same client's next lease by the end of the life the
				// update cut: the client held its lease throughout (it
				// renewed, or asked again), and the region, told the
				// end, would show the address free meanwhile. The life
				// goes on, and no end is owed (the agent holds such an
				// end to the cut life's end: reconcile, HoldCut).
				cut := last.Cut
				vs[ip] = q[:n-1]
				push(ip, v)
				if v.From == cut && shownEnds[ip][endKey(v.MAC, cut)] {
					// The next lease began in the second the cut life
					// ended, and a file showed the lease freed at that
					// end: a peer the update did not reach freed it then
					// (make chaos PAIR=1 seed 126: the primary, back from
					// its death, freed the secondary's 10 s lease of the
					// client six seconds early in the secondary's file,
					// and at its end in its own; the client's rebind
					// came in that second).
					q := vs[ip]
					q[len(q)-1].Rejoined = append(q[len(q)-1].Rejoined, cut)
				}
				return
			}
			if last.Active && v.Active && last.MAC == v.MAC {
				// A renewal: the lease ends at the end it gave, even
				// one earlier than before (a client asking for a
				// shorter lease: make chaos seed 2030 saw a 120 s lease
				// renewed for 20 s, dropped by a rewrite, and its
				// expiry, at the 20 s end, judged early against the
				// 120 s one).
				last.Ends = v.Ends
				last.Count += v.Count
				last.Renewed = max(last.Renewed, v.Renewed)
				return
			}
			if last.Active && !v.Active && !v.Vanished && v.From != 0 && v.From < last.Renewed {
				// An end dated before the life's latest start: a
				// partner's stale binding update of the life before,
				// freed at its own end, taken over the newer life
				// (server/failover.c dhcp_failover_process_bind_update
				// keeps the update's starts and ends; the hook runs on
				// expiry as it frees the lease). The life ended then,
				// not before it began (make chaos PAIR=1 TIMERS=maas
				// seed 118: a secondary's ack while its partner was
				// down, ended so as the primary came back; its commit
				// and hook expiry were judged false and lost).
				v.From, v.Cut = last.Renewed, last.Ends
			}
			if last.Active && !v.Active && !v.Vanished && last.MAC == v.MAC && v.Starts != 0 && v.Starts < last.Renewed {
				// The same, the older life ending after the newer one
				// began (renewed a second before its end, through the
				// partner; make chaos PAIR=1 TIMERS=maas seed 119: a life
				// begun at 07:00:05, renewed at 07:00:24, the update
				// freeing it at its end, 07:00:25, read at 07:00:34): the
				// block's start says which life it ends. A partner's
				// copy of a lease carries the acker's start (server/
				// failover.c: the update's STOS is the lease's starts),
				// so an end of the life the client holds begins no
				// earlier than its latest start.
				v.Cut = last.Ends
			}
			if last.Active && !v.Active && !v.Vanished && last.MAC == v.MAC && v.Starts != 0 && v.Starts == last.Renewed &&
				v.Ends == last.Ends && v.From+cutMargin <= v.Ends {
				// The life the client holds, freed before its end with
				// its own times (Truth dates it when the file showed
				// it): a partner's stale binding update that carried
				// only its state (make chaos PAIR=1 VLANS=2 TIMERS=maas
				// seed 121: the returning secondary's expiry of its
				// older copy freed the primary's renewed lease 15 s
				// before its end; the primary's dhcpd ran on expiry,
				// and the client's next lease came 13 s later). Cut as
				// above: the same client's next lease by that end
				// continues the life. Freed a second early is only
				// dhcpd's timer (cutMargin).
				v.Cut = last.Ends
			}
			if !last.Active && !v.Active {
				return // still inactive
			}
		} else if !v.Active {
			return // never leased yet: nothing to tell
		}
		vs[ip] = append(q, v)
	}
	for gi, g := range gens {
		if g.Rewrite && gi > 0 {
			inTable := map[string]bool{}
			for _, b := range g.Blocks[:g.Table] {
				inTable[b.IP] = true
			}
			ips := make([]string, 0, len(vs))
			for ip := range vs {
				ips = append(ips, ip)
			}
			sort.Strings(ips)
			for _, ip := range ips {
				q := vs[ip]
				if last := q[len(q)-1]; last.Active && !inTable[ip] {
					// It began with the life it ends (From): an event
					// older than that life is not its expiry.
					v := Version{MAC: last.MAC, Ends: last.Ends, Vanished: true, Where: g.Name + ":rewrite", Count: 1, From: last.From}
					if seen := g.seen(); !seen.IsZero() {
						v.Due, v.Seen = seen, seen
						if end := time.Unix(last.Ends, 0); end.After(seen) {
							v.Due = end
						}
					}
					push(ip, v)
				}
			}
		}
		for bi, b := range g.Blocks {
			if !b.Active {
				if shownEnds[b.IP] == nil {
					shownEnds[b.IP] = map[string]bool{}
				}
				shownEnds[b.IP][endKey(b.MAC, b.Ends)] = true
			}
			v := Version{Active: b.Active, MAC: b.MAC, Ends: b.Ends, Where: fmt.Sprintf("%s#%d", g.Name, bi), Starts: b.Starts}
			if b.Active {
				v.From, v.Renewed = b.Starts, b.Starts
			} else {
				v.From = b.Ends
				if seen := b.Seen.Unix(); !b.Seen.IsZero() && seen < v.From {
					// The file showed it free before its end: a failover
					// peer that freed its stale record of the lease (its
					// expired→free transition runs on expiry, dhcpd's
					// server/mdb.c make_binding_state_transition) and
					// sent that state to its partner, ending the
					// partner's newer life with it. The end came no
					// later than the file showed it.
					v.From = seen
				}
			}
			if bi >= g.Table {
				v.Count = 1
			}
			if !b.Seen.IsZero() {
				v.Due, v.Seen = b.Seen, b.Seen
			}
			if !b.Active {
				v.MAC, v.Ends = "", b.Ends
				if q := vs[b.IP]; len(q) > 0 && q[len(q)-1].Active {
					v.MAC = q[len(q)-1].MAC
					v.Released = b.Ends < q[len(q)-1].Ends
				}
			}
			push(b.IP, v)
		}
	}
	return vs
}

// unwritten reports whether it's event came from a hook dhcpd ran just
// before it died (Input.Deaths).
func unwritten(it Item, deaths []time.Time) bool {
	if it.Timestamp == 0 {
		return false
	}
	for _, d := range deaths {
		if it.Timestamp >= d.Add(-deathSlack).Unix() && it.Timestamp <= d.Add(deathLate).Unix() {
			return true
		}
	}
	return false
}

// seen is when the generation was first read: its first block's Seen.
func (g Generation) seen() time.Time {
	if len(g.Blocks) > 0 {
		return g.Blocks[0].Seen
	}
	return time.Time{}
}

// Lag is the delivery lag: from when the file showed a change (a version's
// Due) to the arrival of the region's first item for it.
type Lag struct {
	N             int
	P50, P99, Max time.Duration
	Worst         string // the IP and version of Max
}

func lagOf(lags []time.Duration, worst string) Lag {
	if len(lags) == 0 {
		return Lag{}
	}
	slices.Sort(lags)
	q := func(p float64) time.Duration { return lags[max(0, int(math.Ceil(p*float64(len(lags))))-1)] }
	return Lag{N: len(lags), P50: q(0.50), P99: q(0.99), Max: lags[len(lags)-1], Worst: worst}
}

// Check judges in against the truth.
func Check(in Input) Report {
	if in.Slack == 0 {
		in.Slack = time.Second
	}
	truth := Truth(in.Generations)
	r := Report{Events: map[string]int{}, ItemsBy: map[string]int{}, ByRule: map[string]int{}, IPs: len(truth), Items: len(in.Items)}
	for _, q := range truth {
		r.Versions += len(q)
		for _, v := range q {
			switch {
			case v.Vanished:
				r.Events["vanished"]++
				r.Vanished++
			case v.Active:
				r.Events["commit"]++
			default:
				r.Events["end"]++
			}
		}
	}
	add := func(rule, ip, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Rule: rule, IP: ip, Evidence: fmt.Sprintf(format, args...)})
		r.ByRule[rule]++
	}

	var lags []time.Duration
	var worst string
	var worstLag time.Duration
	pos := map[string]int{}              // IP → index of the current version
	hit := map[string]map[int]int{}      // IP → version → items matched
	history := map[string][]string{}     // IP → the region's items, for evidence
	endTold := map[string]map[int]bool{} // IP → versions whose end an unwritten item told
	markEndTold := func(ip string, k int) {
		if endTold[ip] == nil {
			endTold[ip] = map[int]bool{}
		}
		endTold[ip][k] = true
	}
	held := map[string]Item{} // IP → the unwritten commit that is the region's last word on it
	// IP → the newest event time of the commits matched so far: an end
	// of a rejoined life (Version.Rejoined) counts only ahead of the
	// next lease's commit, which it would end in the region otherwise.
	lastCommit := map[string]int64{}
	// inner[i]: a later item of the same batch is for the same IP, so
	// item i is a step inside a transaction, not a state the region
	// shows (a batch sent again with more behind it replays older
	// items before the newer ones in one transaction).
	// last[i] is the index of that later, last item.
	inner := make([]bool, len(in.Items))
	last := make([]int, len(in.Items))
	lastIn := map[string]int{} // IP → index of its last item in the current batch
	for i, it := range in.Items {
		if i > 0 && it.Batch != in.Items[i-1].Batch {
			clear(lastIn)
		}
		if k, ok := lastIn[it.IP]; ok && it.Batch != 0 {
			inner[k] = true
		}
		lastIn[it.IP] = i
	}
	for i := len(in.Items) - 1; i >= 0; i-- {
		last[i] = i
		if inner[i] {
			for k := i + 1; k < len(in.Items); k++ {
				if in.Items[k].IP == in.Items[i].IP {
					last[i] = last[k]
					break
				}
			}
		}
	}
	// matcher matches it to a version; with early, an end may match an
	// item up to a second before it (see below).
	matcher := func(it Item, early bool) func(q []Version, k int) bool {
		return func(q []Version, k int) bool {
			v := q[k]
			if !early && !v.Active && !v.Vanished && (it.Action == "release") != v.Released {
				// First an end of its own kind: an expiry, a commit
				// and its release can all fall in one second.
				return false
			}
			if it.Timestamp != 0 && k+1 < len(q) && !q[k+1].Vanished && q[k+1].From != 0 && it.Timestamp > q[k+1].From {
				// The event came after the next version began: it is
				// not about this one (an earlier life of the same MAC
				// whose renewals outlast its release). A vanished
				// version is the same life's end, dropped at a rewrite:
				// the life's renewals are still about the life.
				return false
			}
			if it.Timestamp != 0 && v.From != 0 {
				// dhcpd runs a commit's hook after it stamped the
				// lease's start; it may run on expiry a little before
				// the end's second.
				slack := int64(0)
				switch {
				case v.Vanished:
					// Its From is its life's start: an end in that
					// very second is the previous life's (expired
					// in the second this one began).
					slack = -1
				case early && !v.Active:
					slack = 1
				}
				if it.Timestamp < v.From-slack {
					return false
				}
			} else if !v.Seen.IsZero() && v.Seen.After(it.At.Add(seenSlack)) {
				// Not written yet when the item arrived: the item is a
				// copy of older news, however alike (a re-post of an
				// earlier commit must not pass for the next one).
				return false
			}
			if it.Action == "commit" {
				return v.Active && v.MAC == it.MAC
			}
			return !v.Active && v.MAC == it.MAC
		}
	}
	// forward finds the version, from from to to, an item is about: the
	// first that matches, or, when the item has its event's time (timed),
	// the latest that matches — the state at that time (a release in the
	// second of the next commit is that commit's life's end, not an
	// earlier one's).
	forward := func(q []Version, from, to int, match func([]Version, int) bool, timed bool) int {
		j := -1
		for k := from; k < len(q) && k <= to; k++ {
			if match(q, k) {
				if !timed {
					return k
				}
				j = k
			}
		}
		return j
	}
	for i, it := range in.Items {
		r.ItemsBy[it.Action]++
		q := truth[it.IP]
		history[it.IP] = append(history[it.IP], fmt.Sprintf("%s %s@%s%s", it.Action, it.MAC, it.At.UTC().Format("15:04:05.000"), it.by()))
		match := matcher(it, true)
		p := pos[it.IP] // 0 before the first item
		bound := len(q)
		if inner[i] {
			// A step inside the transaction goes no further than the
			// state the transaction leaves (its IP's last item).
			l := in.Items[last[i]]
			bound = forward(q, p, len(q), matcher(l, true), l.Timestamp != 0)
			if bound < 0 {
				// The last item matches nothing (a hook dhcpd ran just
				// before it died, never written): no bound from it.
				bound = len(q)
			}
		}
		j := -1
		if it.Timestamp != 0 {
			// A version begun by the event's second first: an expiry
			// and a release in the next second of the lease that
			// followed it are two versions (seen: expiry, commit and
			// release in one request).
			j = forward(q, p, bound, matcher(it, false), true)
		}
		if j < 0 {
			j = forward(q, p, bound, match, it.Timestamp != 0)
		}
		if j < 0 && inner[i] {
			r.Duplicates++ // an older step inside a transaction that ends newer
			continue
		}
		if j < 0 && unwritten(it, in.Deaths) {
			r.Unwritten++
			if h, ok := held[it.IP]; it.Action == "commit" {
				held[it.IP] = it
			} else if ok && h.MAC == it.MAC {
				delete(held, it.IP) // that lease's end, unwritten too
			}
			if k := p + 1; it.Action != "commit" && p < len(q) && q[p].Active && q[p].MAC == it.MAC && k < len(q) && !q[k].Active && q[k].MAC == it.MAC {
				// The end of the current life, told as dhcpd died
				// before it wrote it (a release): the region heard
				// the life end, so the end the files show later for
				// it (its expiry) is not lost.
				markEndTold(it.IP, k)
			}
			continue
		}
		if h, ok := held[it.IP]; j < 0 && ok && it.Action == "expiry" && h.MAC == it.MAC {
			// The end of the unwritten commit's lease, which the region
			// holds and no file shows (the agent's rule 2, core.go
			// neverShown): owed, but not before the lease's end.
			r.UnwrittenEnds++
			delete(held, it.IP)
			if h.LeaseTime > 0 && h.Timestamp > 0 && it.At.Add(in.Slack).Unix() < h.Timestamp+h.LeaseTime {
				add("early", it.IP, "expiry %s at %s before the end %s of the unwritten commit it ends (%s)",
					it.MAC, it.At.UTC().Format("15:04:05.000"), fmtUnix(h.Timestamp+h.LeaseTime), fmtUnix(h.Timestamp))
			}
			continue
		}
		if j < 0 && it.Action == "expiry" && rejoined(q, it) && lastCommit[it.IP] < it.Timestamp {
			r.Rejoined++
			continue
		}
		if j < 0 {
			older := -1
			for k := 0; k < p && k < len(q); k++ {
				if match(q, k) {
					older = k
				}
			}
			if older >= 0 {
				add("order", it.IP, "item %d %s %s at %s matches only %s, older than the current %s; the region's items for the IP so far: %s",
					i, it.Action, it.MAC, it.At.UTC().Format("15:04:05.000"), q[older], q[p], strings.Join(history[it.IP], ", "))
			} else {
				add("false", it.IP, "item %d %s %s at %s: the files never showed it; truth %s",
					i, it.Action, it.MAC, it.At.UTC().Format("15:04:05.000"), versions(q))
			}
			continue
		}
		v := q[j]
		switch {
		case v.Vanished && it.Action == "release" && unwritten(it, in.Deaths):
			// The client released it just before dhcpd died, which the
			// file never showed: not an early expiry of the lease the
			// restart then dropped.
			r.Unwritten++
			if j > p {
				// Nor a step past the life the restarted dhcpd kept:
				// the client may renew it before a later rewrite drops
				// it (make chaos SEED=2037: two renewals after such a
				// release were judged older than the drop). The drop's
				// end counts as told, unless a renewal takes it back.
				markEndTold(it.IP, j)
				continue
			}
		case v.Vanished && it.Action != "commit" && it.At.Add(in.Slack).Unix() < v.Ends &&
			!(givenAway(q, j) && (q[j+1].From == 0 || it.At.Add(in.Slack).Unix() >= q[j+1].From)):
			// Before the dropped lease's end, and not once dhcpd gave the
			// address to another client (then its end is owed at once,
			// ahead of that commit).
			add("early", it.IP, "expiry %s at %s before the lease's end %s (%s)", it.MAC, it.At.UTC().Format("15:04:05.000"), fmtUnix(v.Ends), v)
		}
		if hit[it.IP] == nil {
			hit[it.IP] = map[int]int{}
		}
		if v.Vanished && hit[it.IP][j] == 0 {
			r.VanishedHit++
		}
		if hit[it.IP][j] == 0 && !v.Due.IsZero() {
			// The capture reads the file every 100 ms: a hook's event can
			// arrive before the file was read.
			lag := max(it.At.Sub(v.Due), 0)
			lags = append(lags, lag)
			if lag >= worstLag {
				worstLag, worst = lag, fmt.Sprintf("%s %s %s", it.IP, it.Action, v)
			}
		}
		if it.Action == "commit" {
			for k := range endTold[it.IP] {
				if j < k {
					// The region holds the lease active again (a
					// renewal after the unwritten end): the end the
					// files show later is owed once more.
					delete(endTold[it.IP], k)
				}
			}
		}
		if it.Action == "commit" {
			lastCommit[it.IP] = max(lastCommit[it.IP], it.Timestamp)
		}
		hit[it.IP][j]++
		if hit[it.IP][j] > max(v.Count, 1) {
			r.Duplicates++
		}
		pos[it.IP] = j
		delete(held, it.IP)
	}

	r.Lag = lagOf(lags, worst)

	ips := make([]string, 0, len(truth))
	for ip := range truth {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	end := in.End.Unix()
	refused := map[string]bool{} // "IP MAC"
	for _, it := range in.Refused {
		refused[it.IP+" "+it.MAC] = true
	}
	for _, ip := range ips {
		q := truth[ip]
		for k, v := range q {
			if hit[ip][k] > 0 || endTold[ip][k] {
				continue
			}
			if v.Vanished && v.Ends > end && !givenAway(q, k) {
				// Not due yet. Once another MAC has the address it is:
				// MAAS links the address to both MACs until it hears the
				// old lease end (internal/maasmodel).
				continue
			}
			if refused[ip+" "+v.MAC] {
				r.Refused++
				continue
			}
			add("lost", ip, "%s never reached the region; its items: %s", v, strings.Join(history[ip], ", "))
		}
	}

	// The final view, both sides applied with the region's semantics.
	want := newView()
	for _, ev := range truthOrder(in.Generations, end) {
		want.apply(ev.Action, ev.IP, ev.MAC)
	}
	got := newView()
	for _, it := range in.Items {
		got.apply(it.Action, it.IP, it.MAC)
	}
	wantL, gotL := want.leases(), got.leases()
	all := map[string]bool{}
	for ip := range wantL {
		all[ip] = true
	}
	for ip := range gotL {
		all[ip] = true
	}
	finals := make([]string, 0, len(all))
	for ip := range all {
		finals = append(finals, ip)
	}
	sort.Strings(finals)
	for _, ip := range finals {
		if w, g := wantL[ip], gotL[ip]; w != g && !refused[ip+" "+w] && !refused[ip+" "+g] {
			add("final", ip, "region holds %q, the files say %q; truth %s; region's items %s", g, w, versions(truth[ip]), strings.Join(history[ip], ", "))
		}
	}
	return r
}

// rejoined reports whether it, an expiry, is dated at the end of a cut
// life of its MAC that the same client's next lease continued from that
// very second (Version.Rejoined), or a second before it (dhcpd may free
// a lease a second early: cutMargin).
func rejoined(q []Version, it Item) bool {
	for _, v := range q {
		if !v.Active || v.MAC != it.MAC {
			continue
		}
		for _, end := range v.Rejoined {
			if it.Timestamp >= end-1 && it.Timestamp <= end {
				return true
			}
		}
	}
	return false
}

// givenAway reports whether q[k], a lease a rewrite dropped, is followed
// by another client's lease of the address: then the dropped lease is
// over, whatever its end, and MAAS must hear its end before that commit
// (a commit links the address to the new MAC without unlinking the old:
// internal/maasmodel).
func givenAway(q []Version, k int) bool {
	return q[k].Vanished && k+1 < len(q) && q[k+1].Active && q[k+1].MAC != q[k].MAC
}

func versions(q []Version) string {
	s := make([]string, len(q))
	for i, v := range q {
		s[i] = v.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

type truthEvent struct{ Action, IP, MAC string }

// truthOrder is the truth as one stream of region items in write order
// (vanished leases ending at their rewrite's place, if due by end).
func truthOrder(gens []Generation, end int64) []truthEvent {
	var out []truthEvent
	// Replay the generations the way Truth does, emitting each version
	// as it is pushed: Truth's collapsing is mirrored by comparing with
	// the IP's current state.
	cur := map[string]Version{}
	emit := func(ip string, v Version) {
		c, ok := cur[ip]
		if ok && c.Active == v.Active && (!v.Active || c.MAC == v.MAC) {
			if v.Active {
				c.Ends = max(c.Ends, v.Ends)
				cur[ip] = c
			}
			return
		}
		if !ok && !v.Active {
			return
		}
		cur[ip] = v
		if v.Active {
			out = append(out, truthEvent{"commit", ip, v.MAC})
		} else {
			out = append(out, truthEvent{"expiry", ip, v.MAC})
		}
	}
	for gi, g := range gens {
		if g.Rewrite && gi > 0 {
			inTable := map[string]bool{}
			for _, b := range g.Blocks[:g.Table] {
				inTable[b.IP] = true
			}
			ips := make([]string, 0, len(cur))
			for ip := range cur {
				ips = append(ips, ip)
			}
			sort.Strings(ips)
			for _, ip := range ips {
				if c := cur[ip]; c.Active && !inTable[ip] && c.Ends <= end {
					emit(ip, Version{MAC: c.MAC})
				}
			}
		}
		for _, b := range g.Blocks {
			v := Version{Active: b.Active, MAC: b.MAC, Ends: b.Ends}
			if !b.Active {
				if c, ok := cur[b.IP]; ok && c.Active {
					v.MAC = c.MAC
				}
			}
			emit(b.IP, v)
		}
	}
	return out
}

// view is the region's discovered addresses as MAAS keeps them
// (internal/maasmodel, as the region stub applies them), reduced to what
// the oracle compares: per IP the MAC holding it (MACs joined by commas
// when a MAC was left linked to it).
type view struct{ r *maasmodel.Region }

func newView() *view { return &view{maasmodel.New()} }

func (v *view) apply(action, ip, mac string) {
	v.r.Apply(maasmodel.Event{Action: action, IP: ip, MAC: mac})
}

// leases returns IP → MAC.
func (v *view) leases() map[string]string {
	out := make(map[string]string, v.r.Len())
	for _, ip := range v.r.IPs() {
		l, _ := v.r.Lease(ip)
		out[ip] = l.MAC()
	}
	return out
}

// Sorted returns the violations by rule then IP.
func (r *Report) Sorted() []Violation {
	out := append([]Violation(nil), r.Violations...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return ipLess(out[i].IP, out[j].IP)
	})
	return out
}

func ipLess(a, b string) bool {
	x, e1 := netip.ParseAddr(a)
	y, e2 := netip.ParseAddr(b)
	if e1 != nil || e2 != nil {
		return a < b
	}
	return x.Less(y)
}

// Request is one request the region saw.
type Request struct {
	Key      string // Idempotency-Key: one batch, however often posted
	At, Done time.Time
	Accepted bool
	Items    int
	Status   int
}

// Posts is what the request log says about re-posts.
type Posts struct {
	Slow int // accepted requests that took longer than the timeout
	// Overlapping are requests arriving while an earlier request of
	// the same batch was still being applied: the re-post the deliverer
	// must never make (an older state could land after a newer one).
	Overlapping []string
}

// CheckPosts reads the request log: a batch may be posted again only
// once the region answered (or dropped) the previous copy.
func CheckPosts(reqs []Request, timeout time.Duration) Posts {
	var p Posts
	byKey := map[string][]Request{}
	for _, q := range reqs {
		if q.Accepted && q.Done.Sub(q.At) > timeout {
			p.Slow++
		}
		if q.Key != "" {
			byKey[q.Key] = append(byKey[q.Key], q)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		qs := byKey[k]
		sort.Slice(qs, func(i, j int) bool { return qs[i].At.Before(qs[j].At) })
		for i := 1; i < len(qs); i++ {
			for j := 0; j < i; j++ {
				if qs[i].At.Before(qs[j].Done) {
					p.Overlapping = append(p.Overlapping, fmt.Sprintf("batch %s (%d items): a copy arrived at %s while the copy of %s was being applied until %s",
						k, qs[i].Items, qs[i].At.UTC().Format("15:04:05.000"), qs[j].At.UTC().Format("15:04:05.000"), qs[j].Done.UTC().Format("15:04:05.000")))
					break
				}
			}
		}
	}
	return p
}

// Explain is ip's record for a person tracing a violation: its truth's
// versions (where the files showed each, when, and when on dhcpd's clock
// it began) and the region's items for it, in arrival order.
func Explain(in Input, ip string) string {
	var b strings.Builder
	clock := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("15:04:05.000")
	}
	fmt.Fprintf(&b, "truth of %s (version, seen in the file, began on dhcpd's clock):\n", ip)
	for _, v := range Truth(in.Generations)[ip] {
		fmt.Fprintf(&b, "  %-60s seen %s  from %s\n", v, clock(v.Seen), fmtUnix(v.From))
	}
	fmt.Fprintf(&b, "items of %s (arrived, request, action, MAC, the event's time, the sender if known):\n", ip)
	for _, it := range in.Items {
		if it.IP == ip {
			fmt.Fprintf(&b, "  %s  #%-4d %-7s %s  %s%s\n", clock(it.At), it.Batch, it.Action, it.MAC, fmtUnix(it.Timestamp), it.by())
		}
	}
	return b.String()
}
