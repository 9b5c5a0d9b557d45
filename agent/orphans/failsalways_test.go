package orphans

import (
	"errors"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/maasapi"
)

// TestFailsAlways: only Django's refusal to delete the record twice, for
// a record with more than one interface, is the release that always
// fails (src/maasserver/api/ip_addresses.py, release; django's
// Model.delete); any other 500, a 503, or one interface is retried.
func TestFailsAlways(t *testing.T) {
	two := maasapi.IPAddress{Interfaces: []maasapi.Interface{{Name: "eth0"}, {Name: "eth0.100"}}}
	one := maasapi.IPAddress{Interfaces: []maasapi.Interface{{Name: "eth0"}}}
	twice := &maasapi.StatusError{Op: "release", Status: 500, Body: "StaticIPAddress object can't be deleted because its id attribute is set to None."}
	for _, tc := range []struct {
		name string
		rec  maasapi.IPAddress
		err  error
		want bool
	}{
		{"two interfaces, deleted twice", two, twice, true},
		{"one interface, same answer", one, twice, false},
		{"two interfaces, another 500", two, &maasapi.StatusError{Op: "release", Status: 500, Body: "database is locked"}, false},
		{"two interfaces, 503", two, &maasapi.StatusError{Op: "release", Status: 503, Body: "StaticIPAddress object can't be deleted"}, false},
		{"two interfaces, transport error", two, errors.New("connection refused"), false},
	} {
		if got := failsAlways(tc.rec, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
