package sockgroup

import "testing"

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
