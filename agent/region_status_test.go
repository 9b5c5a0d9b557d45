package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
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
