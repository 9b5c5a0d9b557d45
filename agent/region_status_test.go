package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/deliver"
)

// regionStatus is a fakeStatus whose deliverer reports a problem.
type regionStatus struct {
	fakeStatus
	r *RegionReport
}

func (s regionStatus) RegionReport() *RegionReport { return s.r }

// TestStatusRegion: how delivery goes is in /status (region) and in
// systemd's STATUS= line when it is not ok.
func TestStatusRegion(t *testing.T) {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	since := clock.Add(-time.Minute)
	a, err := New(testConfig(), zerolog.Nop(), nil, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	r := &RegionReport{State: "config", Error: `HTTP 403: {"detail":"Client certificate required."}`,
		Hint: "the region wants a client certificate", Since: &since, FailedAttempts: 7}
	a.SetStatus(regionStatus{fakeStatus{depth: 3}, r})
	if diff := cmp.Diff(r, a.Report().Region); diff != "" {
		t.Errorf("/status region (-want +got):\n%s", diff)
	}
	if line := a.statusLine(); !strings.HasSuffix(line, "; region CONFIGURATION ERROR (leasekeeper status)") {
		t.Errorf("STATUS= %q does not say the region is misconfigured", line)
	}
	r.State, r.Since, r.Error, r.Hint = "ok", nil, "", ""
	if line := a.statusLine(); strings.Contains(line, "region") {
		t.Errorf("STATUS= %q mentions a region that is fine", line)
	}
}

// TestRegionWords: every state the deliverer reports is said in words of
// its own, a problem's label in capitals, and only ok and nothing-sent-yet
// are no trouble; a state this build does not know is said as it is.
func TestRegionWords(t *testing.T) {
	seen := map[string]string{}
	for _, st := range deliver.States() {
		r := &RegionReport{State: st}
		w := r.Words()
		if w.Label == "" || w.Summary == "" || w.Label == st && st != deliver.StateOK {
			t.Errorf("state %q has no words of its own: %+v", st, w)
		}
		if other, ok := seen[w.Label]; ok {
			t.Errorf("states %q and %q share the label %q", other, st, w.Label)
		}
		seen[w.Label] = st
		quiet := st == deliver.StateOK || st == deliver.StateUnknown
		if r.Trouble() == quiet {
			t.Errorf("state %q: Trouble() = %v", st, r.Trouble())
		}
		if !quiet && (w.Label != strings.ToUpper(w.Label) || w.Detail == "") {
			t.Errorf("state %q: a problem's label %q is not in capitals, or it has no detail (%q)", st, w.Label, w.Detail)
		}
	}
	r := &RegionReport{State: "pondering"}
	if w := r.Words(); w.Label != "pondering" || w.Summary != "pondering" || !r.Trouble() {
		t.Errorf("an unknown state is said as %+v (trouble %v), want as it is, and trouble", w, r.Trouble())
	}
}
