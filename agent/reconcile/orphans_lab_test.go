package reconcile_test

// Lab tests of seed 001 closed in the region itself (issue 12): a lease
// dhcpd drops because its address left every range is expired at its own
// end, and the address MAAS keeps as observed (its leases API ignores the
// expiry outside its dynamic ranges) is freed through the API 2.0 stand-in,
// after the region's record and an ARP probe on the rack's link say it is
// unused. The probe runs as the rack: in the lab's server namespace.

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/orphans"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/release/rack"
)

const (
	orphanKey        = "lkConsumer:lkToken:lkSecret"
	orphanProbeEvery = 2 * time.Second
)

// orphanWorld is a world whose stub gates on the lab's range (MAAS's
// dynamic range = dhcpd's) and, with withKey, serves API 2.0 for an
// administrator's key the agent is given.
func orphanWorld(t *testing.T, withKey bool) *world {
	t.Helper()
	w := newWorld(t, hooksOK, 12)
	w.stubRange(100, 150)
	if withKey {
		u, err := w.stub.StartAPI2()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.stub.AddAPIKey(orphanKey, regionstub.Administrator("admin")); err != nil {
			t.Fatal(err)
		}
		w.maasURL, w.maasKeyFile = u, filepath.Join(w.dir, "maas.key")
		if err := os.WriteFile(w.maasKeyFile, []byte(orphanKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.agentOpts = []agent.AssembleOption{agent.WithOrphanProber(func(ctx context.Context, ip netip.Addr, wait time.Duration) (rack.Probe, error) {
		var p rack.Probe
		err := w.lab.InNetns(w.lab.NS, func() error {
			var err error
			p, err = rack.ProbeARP(ctx, ip, wait)
			return err
		})
		return p, err
	}, orphanProbeEvery)}
	return w
}

// stubRange makes MAAS's dynamic range 203.0.113.lo-hi.
func (w *world) stubRange(lo, hi int) {
	p := netip.MustParsePrefix("203.0.113.0/24")
	a := func(n int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(n)}) }
	w.stub.SetSubnets([]regionstub.Subnet{{CIDR: p, Ranges: []regionstub.Range{{First: a(lo), Last: a(hi)}}}})
}

// observed reports whether the region lists ip as observed (DISCOVERED).
func (w *world) observed(ip netip.Addr) bool {
	_, ok := w.stub.Lease(ip)
	return ok
}

// orphanSetup commissions two clients, makes the first vanish (killed;
// its address left on its interface unless dropAddr) and shrinks the
// range in dhcpd.conf and in the region away from it, restarting dhcpd.
// It returns the orphaned address, its client and its lease's end.
func orphanSetup(w *world, dropAddr bool) (netip.Addr, *lab.Client, int64) {
	t := w.t
	t.Helper()
	w.startDhcpd(100, 150)
	w.startAgent()
	c1, c2 := w.lab.AddClient("c1"), w.lab.AddClient("c2")
	ip1, ip2 := w.dhclient(c1), w.dhclient(c2)
	w.waitArrival(ip1, event.Commit, mac(c1), 10*time.Second)
	if !w.observed(ip1) {
		t.Fatalf("the region does not list %s as observed after its commit", ip1)
	}
	if err := c1.Kill(); err != nil {
		t.Fatal(err)
	}
	if dropAddr {
		w.dropAddr(c1)
	}
	ends := w.leaseEnds(ip1)
	lo, hi := shrinkAway(ip1, ip2)
	w.stubRange(lo, hi)
	w.restartDhcpd(lo, hi)
	if strings.Contains(readFile(t, w.d.LeasesPath()), "lease "+ip1.String()+" ") {
		t.Fatalf("dhcpd kept %s after the shrink; the test premise is gone", ip1)
	}
	if time.Now().Unix() >= ends {
		t.Fatalf("the lease of %s ended before the test could look (slow machine?)", ip1)
	}
	if !w.observed(ip1) {
		t.Fatalf("before the lease's end the region must still list %s as observed", ip1)
	}
	return ip1, c1, ends
}

func (w *world) dropAddr(c *lab.Client) {
	w.t.Helper()
	if err := w.lab.IP(c.NS, []string{"addr", "flush", "dev", c.Iface}); err != nil {
		w.t.Fatal(err)
	}
}

// waitFreed waits until the region no longer lists ip.
func (w *world) waitFreed(ip netip.Addr, within time.Duration) time.Time {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for w.observed(ip) {
		if time.Now().After(deadline) {
			w.t.Fatalf("the region still lists %s as observed after %s; API 2.0 requests: %+v\nstatus orphans: %+v",
				ip, within, w.stub.API2Requests(), w.orphanStatus())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Now()
}

func (w *world) orphanStatus() []agent.OrphanReport {
	if w.agent == nil {
		return nil
	}
	return w.agent.a.Report().Orphans
}

// TestLabOrphanFreed is issue 12's first must-show: before the lease's
// end the region lists the dropped address as observed; within a few
// seconds after it, it no longer does — one forced release of the
// discovered record, after the expiry, with nothing answering ARP.
func TestLabOrphanFreed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := orphanWorld(t, true)
	ip, c, ends := orphanSetup(w, true)
	w.waitArrival(ip, event.Expiry, mac(c), time.Until(time.Unix(ends, 0))+10*time.Second)
	at := w.waitFreed(ip, time.Until(time.Unix(ends, 0))+10*time.Second)
	if at.Unix() < ends {
		t.Fatalf("freed at %d, before the lease's end %d", at.Unix(), ends)
	}
	t.Logf("freed %s after the lease's end", at.Sub(time.Unix(ends, 0)).Round(time.Millisecond))
	if n := w.stub.Releases(ip.String()); n != 1 {
		t.Errorf("%d release calls, want 1: %+v", n, w.stub.API2Requests())
	}
	waitFor(t, "status without orphans", func() bool { return len(w.orphanStatus()) == 0 })
	w.stopAgent()
	for _, want := range []string{`"message":"freed the observed address in the region"`} {
		if !strings.Contains(w.lastLogs.String(), want) {
			t.Errorf("log lacks %s", want)
		}
	}
}

// busyOrphan is orphanSetup with the client's address left on its
// interface, once the lease's end has passed and the job is busy.
func busyOrphan(t *testing.T) (*world, netip.Addr, *lab.Client) {
	t.Helper()
	w := orphanWorld(t, true)
	ip, c, ends := orphanSetup(w, false)
	w.waitArrival(ip, event.Expiry, mac(c), time.Until(time.Unix(ends, 0))+10*time.Second)
	waitFor(t, "a busy orphan in status", func() bool {
		s := w.orphanStatus()
		return len(s) == 1 && s[0].State == orphans.StateBusy
	})
	return w, ip, c
}

// TestLabOrphanBusy: the client still holds the address (configured on
// its interface, answering ARP): not freed after the lease's end, status
// says why; once the address is removed from the client it is freed at
// the next probe.
func TestLabOrphanBusy(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w, ip, c := busyOrphan(t)
	s := w.orphanStatus()[0]
	if !strings.Contains(s.Reason, "answers an ARP probe") || s.Next == nil {
		t.Errorf("status: %+v", s)
	}
	if !w.observed(ip) || w.stub.Releases(ip.String()) != 0 {
		t.Fatalf("an address in use was freed")
	}
	w.dropAddr(c)
	w.waitFreed(ip, orphanProbeEvery+10*time.Second)
	if n := w.stub.Releases(ip.String()); n != 1 {
		t.Errorf("%d release calls, want 1", n)
	}
}

// TestLabOrphanNoKey: without [maas] the expiry is still sent, the region
// keeps the address, and status says why.
func TestLabOrphanNoKey(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := orphanWorld(t, false)
	ip, c, ends := orphanSetup(w, true)
	w.waitArrival(ip, event.Expiry, mac(c), time.Until(time.Unix(ends, 0))+10*time.Second)
	waitFor(t, "an unconfigured orphan in status", func() bool {
		s := w.orphanStatus()
		return len(s) == 1 && s[0].State == orphans.StateUnconfigured
	})
	if s := w.orphanStatus()[0]; s.IP != ip.String() || !strings.Contains(s.Reason, "until an API key is configured") {
		t.Errorf("status: %+v", s)
	}
	if !w.observed(ip) {
		t.Fatal("the region freed the address without an API key")
	}
	w.stopAgent()
	if n := strings.Count(w.lastLogs.String(), "until an API key is configured ([maas]"); n != 1 {
		t.Errorf("said %d times that the region keeps the address, want once", n)
	}
}

// TestLabOrphanRegionDown: the region is down across the lease's end and
// the agent restarts meanwhile; once the region is back the address is
// freed, with exactly one release call.
func TestLabOrphanRegionDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w := orphanWorld(t, true)
	ip, _, ends := orphanSetup(w, true)
	w.stub.FailFor(time.Hour, regionstub.Fault{Status: 503})
	waitFor(t, "the orphan retrying against the region that is down", func() bool {
		s := w.orphanStatus()
		return len(s) == 1 && s[0].State == orphans.StateRetrying
	})
	w.stopAgent()
	w.startAgent()
	if got := w.orphanStatus(); len(got) != 1 || got[0].IP != ip.String() {
		t.Fatalf("the restarted agent lost the job: %+v", got)
	}
	if time.Now().Unix() < ends {
		t.Fatal("premise: the lease's end passed while the region was down")
	}
	w.stub.ClearFaults()
	w.waitFreed(ip, 2*time.Minute)
	if n := w.stub.Releases(ip.String()); n != 1 {
		t.Errorf("%d release calls, want exactly 1: %+v", n, w.stub.API2Requests())
	}
}

// TestLabOrphanBack: while the orphan's job waits (its client answers
// ARP), the range grows back over the address in dhcpd and in the region,
// and the same client leases it again, then goes quiet. The region's
// observed record is now that lease's (same MAC, same address, nothing
// answering a probe): the job must be withdrawn ("back", dhcpd.leases
// lists the address again), never released while the lease runs.
func TestLabOrphanBack(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to end (-short)")
	}
	t.Parallel()
	w, ip, c := busyOrphan(t)
	w.stubRange(100, 150)
	w.restartDhcpd(100, 150)
	// dhclient asks for the address it held (its lease file still has it).
	if got := w.dhclient(c); got != ip {
		t.Fatalf("premise: the client leased %s again, not %s", got, ip)
	}
	newEnds := w.leaseEnds(ip)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	w.dropAddr(c)
	waitFor(t, "the job withdrawn", func() bool { return len(w.orphanStatus()) == 0 })
	if time.Now().Unix() >= newEnds {
		t.Fatalf("the new lease ended (%d) before the test could look (slow machine?)", newEnds)
	}
	if n := w.stub.Releases(ip.String()); n != 0 {
		t.Fatalf("%d release calls for an address leased again: %+v", n, w.stub.API2Requests())
	}
	if !w.observed(ip) {
		t.Fatal("the region lost the record of the running lease")
	}
	w.stopAgent()
	if !strings.Contains(w.lastLogs.String(), "dhcpd.leases lists the address again") {
		t.Errorf("the log does not say why the job was withdrawn")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
