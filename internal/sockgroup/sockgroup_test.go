package sockgroup

import (
	"errors"
	"strings"
	"testing"
)

// TestMayGive: chown(2)'s rule for an owner without CAP_CHOWN.
func TestMayGive(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gid        int
		euid, egid int
		groups     []int
		want       bool
	}{
		{"root", 4, 0, 0, nil, true},
		{"its own group", 998, 999, 998, nil, true},
		{"a supplementary group", 4, 999, 998, []int{120, 4}, true},
		{"not a member", 4, 999, 998, []int{120}, false},
		{"no groups at all", 4, 999, 998, nil, false},
	} {
		if got := mayGive(tc.gid, tc.euid, tc.egid, tc.groups); got != tc.want {
			t.Errorf("%s: mayGive(%d, %d, %d, %v) = %v, want %v", tc.name, tc.gid, tc.euid, tc.egid, tc.groups, got, tc.want)
		}
	}
}

// TestLookupUnknownGroup: a group name no group has is an
// *UnknownGroupError (the agent exits with a configuration error, which
// the unit does not restart on), and the message says what to do.
func TestLookupUnknownGroup(t *testing.T) {
	const name = "leasekeeper-test-no-such-group"
	_, err := Lookup("control.group", name)
	var ug *UnknownGroupError
	if !errors.As(err, &ug) {
		t.Fatalf("Lookup(%q) = %v, want an *UnknownGroupError", name, err)
	}
	for _, want := range []string{"control.group", name, "groupadd", `control.group = ""`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
