package reconcile_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// TestLabSameMACTwoLeases: one machine, two client identifiers on one
// MAC (a PXE ROM and the installed system, or two systems on one disk).
// Real dhcpd gives each identifier a lease of its own: a lease found by
// the hardware address whose uid differs from the client's is not the
// client's (server/dhcp.c find_lease). MAAS keeps the region's record
// per MAC: an event of a MAC deletes the MAC's other discovered
// addresses of the family, whatever its action
// (maasservicelayer/services/leases.py store_lease_info), so the first
// identifier's release, delivered as dhcpd reported it, would delete the
// address the machine holds now. The region must end with that address
// still the MAC's, with its host name: the release reaches it, and so
// does the lease the MAC still holds, after it (State.Restatement).
func TestLabSameMACTwoLeases(t *testing.T) {
	for _, hooks := range []string{hooksOK, hooksNone} {
		t.Run(hooks, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, hooks, 120)
			w.startDhcpd(100, 150)
			w.startAgent()
			hw := net.HardwareAddr{0x02, 0, 0, 0, 0x0e, 0x01}
			// Two namespaces, one MAC: each dhclient is one identifier.
			pxe := w.lab.AddClient("pxe", lab.WithMAC(hw), lab.WithDhclientConf(`send dhcp-client-identifier "pxe";`))
			os := w.lab.AddClient("os", lab.WithMAC(hw), lab.WithDhclientConf(`send dhcp-client-identifier "installed";`))
			m := hw.String()
			ip1 := w.dhclient(pxe)
			w.waitArrival(ip1, event.Commit, m, 10*time.Second)
			ip2 := w.dhclient(os)
			if ip2 == ip1 {
				t.Fatalf("dhcpd gave both identifiers %s; the test premise is gone", ip1)
			}
			w.waitArrival(ip2, event.Commit, m, 10*time.Second)
			if l, ok := w.stub.Lease(ip2); !ok || l.MAC != m {
				t.Fatalf("after its commit the region has %s as %+v (%t), want %s's", ip2, l, ok, m)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := pxe.Release(ctx); err != nil {
				t.Fatal(err)
			}
			rel := w.waitArrival(ip1, event.Release, m, 10*time.Second)
			time.Sleep(w.grace + 2*time.Second) // anything else would come now

			l, ok := w.stub.Lease(ip2)
			if !ok || l.MAC != m || l.Hostname != os.Hostname {
				t.Errorf("after the release of %s the region has %s as %+v (%t), want %s's, named %s: the machine still holds it",
					ip1, ip2, l, ok, m, os.Hostname)
			}
			var after []arrival
			for _, a := range w.arrivals(netip.Addr{}) {
				if !a.at.Before(rel.at) {
					after = append(after, a)
				}
			}
			t.Logf("region from the release on:\n%s", describeArrivals(after))
			if _, ok := w.stub.Lease(ip1); ok {
				t.Errorf("the region still lists %s after its release", ip1)
			}
		})
	}
}
