package reconcile_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// TestLabReplacement (issue 11, must show): a deb rack whose
// maas-dhcp-helper is diverted to leasekeeper-hook. dhcpd runs MAAS's own
// "Notify MAAS" blocks, with MAAS's --socket, through the diverted name;
// the hook drops that --socket and hands each event to the agent, which
// detects replacement mode by itself and delivers commit, release and
// expiry to the MAAS-shaped region over mutual TLS (server name "maas",
// the rack's client certificate). MAAS's own socket gets nothing.
func TestLabReplacement(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := newWorld(t, hooksDiverted, 8)
	maas := listenMAAS(t, w.maasSock)
	w.startDhcpd(100, 150)
	w.startAgent()
	if logs := w.agent.logs.String(); !strings.Contains(logs, `"mode":"replacement"`) {
		t.Fatalf("agent not in replacement mode:\n%s", logs)
	}
	c1, c2 := w.lab.AddClient("c1"), w.lab.AddClient("c2")
	ip1, ip2 := w.dhclient(c1), w.dhclient(c2)
	w.waitArrival(ip1, event.Commit, mac(c1), 5*time.Second)
	w.waitArrival(ip2, event.Commit, mac(c2), 5*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.waitArrival(ip1, event.Release, mac(c1), 5*time.Second)

	// c2 vanishes; dhcpd expires its lease and runs on expiry.
	if err := c2.Kill(); err != nil {
		t.Fatal(err)
	}
	w.waitArrival(ip2, event.Expiry, mac(c2), time.Until(time.Unix(w.leaseEnds(ip2), 0))+10*time.Second)
	w.stopAgent()

	if got := maas.events(); len(got) != 0 {
		t.Errorf("MAAS's socket got events through the diverted helper: %q", got)
	}
	for reason, n := range w.lastSynth {
		if n != 0 {
			t.Errorf("synthesised %v %s: every event had its hook", n, reason)
		}
	}
	for _, a := range w.arrivals(netip.Addr{}) {
		t.Logf("region <- %s", a)
	}
}
