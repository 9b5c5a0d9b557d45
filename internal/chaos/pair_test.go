package chaos

import (
	"strings"
	"testing"
)

// TestFailoverTimers: the lab's short timers by default, and with
// PairMAASTimers the lines MAAS's template writes for each role
// (src/maasserver/templates/dhcp/dhcpd.conf.template: mclt and split in
// the primary's statement only, no auto-partner-down).
func TestFailoverTimers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maas    bool
		primary bool
		want    []string
	}{
		{"lab primary", false, true, []string{"max-response-delay 5;", "max-unacked-updates 10;", "load balance max seconds 3;", "auto-partner-down 1;", "mclt 10;", "split 255;"}},
		{"lab secondary", false, false, []string{"max-response-delay 5;", "max-unacked-updates 10;", "load balance max seconds 3;", "auto-partner-down 1;"}},
		{"maas primary", true, true, []string{"max-response-delay 60;", "max-unacked-updates 10;", "load balance max seconds 3;", "mclt 3600;", "split 255;"}},
		{"maas secondary", true, false, []string{"max-response-delay 60;", "max-unacked-updates 10;", "load balance max seconds 3;"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &rack{run: &run{opts: Options{PairMAASTimers: tc.maas}}}
			var got []string
			for l := range strings.Lines(k.failoverTimers(tc.primary)) {
				got = append(got, strings.TrimSpace(l))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("failoverTimers(%v) =\n%s\nwant\n%s", tc.primary, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
