package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/internal/chaos/oracle"
)

// TestRejudge: a run's kept evidence judges the same again, and a
// violation in it is found again.
func TestRejudge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ip, mac := "203.0.113.10", "02:00:00:00:00:01"
	gens := []oracle.Generation{{Name: "gen000", Blocks: []oracle.Block{
		{IP: ip, MAC: mac, Active: true, Starts: at(0).Unix(), Ends: at(20).Unix(), Seen: at(0)},
		{IP: ip, MAC: mac, Starts: at(0).Unix(), Ends: at(5).Unix(), Seen: at(5)},
	}}}
	items := []oracle.Item{{At: at(1), Action: "commit", IP: ip, MAC: mac, Batch: 1, Timestamp: at(0).Unix(), From: "primary"}}
	ev := Evidence{
		Input:    oracle.Input{Generations: gens, Items: items, End: at(30), Deaths: []time.Time{at(25)}},
		Requests: []oracle.Request{{Key: "k1", At: at(1), Done: at(1), Accepted: true, Items: 1, Status: 200}},
	}
	res := Result{Faults: map[string]int{FDhcpdRestart: 1}, Agent: Measures{Processes: 1, PeakRSS: 1 << 20}, Evidence: &ev}
	res.Report = judgeAgain(res)
	if res.Report.ByRule["lost"] != 1 {
		t.Fatalf("the release never delivered: want one lost, got %v", res.Report.ByRule)
	}
	if v := res.Report.Violations[0].Evidence; !strings.Contains(v, "commit "+mac+"@12:00:01.000 by primary") {
		t.Errorf("the violation does not name the item's sender: %s", v)
	}
	dir := t.TempDir()
	if err := WriteEvidence(dir, res); err != nil {
		t.Fatal(err)
	}
	again, err := Rejudge(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res, again); diff != "" {
		t.Errorf("judged again (-first +again):\n%s", diff)
	}
}

// TestRejudgePairMergesAgain: a pair run's evidence keeps both files, and
// judging it again merges them again with this oracle's MergePair, not
// the merge the run made.
func TestRejudgePairMergesAgain(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ip, mac := "203.0.113.150", "02:00:00:00:00:01"
	commit := oracle.Block{IP: ip, MAC: mac, Active: true, Starts: at(0).Unix(), Ends: at(20).Unix(), Seen: at(0)}
	pf := &PairFiles{
		Files: [][]oracle.Generation{
			{{Name: "gen000", Blocks: []oracle.Block{commit}}},
			{{Name: "gen000", Blocks: []oracle.Block{func() oracle.Block { b := commit; b.Seen = at(1); return b }()}}},
		},
		Ranges: [][][2]int{{{100, 199}}, {{100, 199}}},
	}
	// A merge other than this oracle's (one without the commit), as an
	// older oracle might have kept it.
	stale := []oracle.Generation{{Name: "pair-start"}}
	items := []oracle.Item{{At: at(1), Action: "commit", IP: ip, MAC: mac, Batch: 1, Timestamp: at(0).Unix()}}
	ev := Evidence{Input: oracle.Input{Generations: stale, Items: items, End: at(10)}, Pair: pf}
	dir := t.TempDir()
	if err := WriteEvidence(dir, Result{Faults: map[string]int{}, Agent: Measures{Processes: 1, PeakRSS: 1 << 20}, Evidence: &ev}); err != nil {
		t.Fatal(err)
	}
	if rep := Verdict(ev); rep.ByRule["false"] != 1 {
		t.Fatalf("against the stale merge the commit is news of nothing: want one false, got %v", rep.ByRule)
	}
	again, err := Rejudge(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Report.Violations) != 0 {
		t.Errorf("merged again: violations %+v", again.Report.Violations)
	}
	if pf.InRange(0, 0, "203.0.113.99") || !pf.InRange(1, 0, ip) {
		t.Errorf("InRange: 203.0.113.99 in [100 199] or %s not", ip)
	}
}
