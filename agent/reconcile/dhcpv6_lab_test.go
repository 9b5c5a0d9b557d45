package reconcile_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// TestLabDHCPv6: real dhcpd -6 running the shipped leasekeeper6.conf,
// which passes the client's DUID as --mac, and real dhclient -6 clients,
// one with a DUID-LLT (dhclient's default) and one with a DUID-LL. Their
// commits and the release reach the region with the MAC inside the DUID
// (eth0's), family ipv6 and dhcpd's lease time. The agent follows
// dhcpd6.leases too, in replacement mode: it synthesises nothing the
// hooks reported.
func TestLabDHCPv6(t *testing.T) {
	t.Parallel()
	w := newWorld(t, hooksOK, 600, lab.WithIPv6(netip.MustParsePrefix("2001:db8:1::1/64")))
	conf := "default-lease-time 600;\npreferred-lifetime 300;\nmax-lease-time 600;\n" +
		lab.HookSnippet6(t, w.hook, w.dir+"/hook.sock", w.dir+"/spool") +
		w.lab.Subnet6Conf("  range6 2001:db8:1::100 2001:db8:1::1ff;")
	w.d = w.lab.StartDhcpd(t, lab.DhcpdConfig{Family: 6, Conf: conf})
	w.startAgent()
	if !strings.Contains(w.agent.logs.String(), `"mode":"replacement"`) {
		t.Fatalf("agent not in replacement mode:\n%s", w.agent.logs)
	}
	c1, c2 := w.lab.AddClient("c1"), w.lab.AddClient("c2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ip1, err := c1.Dhclient6(ctx)
	if err != nil {
		t.Fatalf("dhclient -6: %v\ndhcpd:\n%s", err, w.d.Logs())
	}
	ip2, err := c2.Dhclient6(ctx, "-D", "LL")
	if err != nil {
		t.Fatalf("dhclient -6 -D LL: %v\ndhcpd:\n%s", err, w.d.Logs())
	}
	for _, d := range []struct {
		c    *lab.Client
		ip   netip.Addr
		duid string
	}{{c1, ip1, "00:01:00:01:"}, {c2, ip2, "00:03:00:01:" + mac(c2)}} {
		if lf := readFile(t, d.c.LeaseFile6()); !strings.Contains(lf, "default-duid") {
			t.Fatalf("%s: no DUID in dhclient's lease file:\n%s", d.c.Name, lf)
		}
		a := w.waitArrival(d.ip, event.Commit, mac(d.c), 10*time.Second)
		if a.Family != event.IPv6 || a.LeaseTime != 600 {
			t.Errorf("%s: region got %+v, want ipv6 with lease_time 600", d.c.Name, a.RegionItem)
		}
		if !strings.Contains(w.d.Logs(), "to client with duid "+d.duid) {
			t.Errorf("%s: dhcpd's log shows no DUID starting %s:\n%s", d.c.Name, d.duid, w.d.Logs())
		}
		t.Logf("%s: commit %s with MAC %s (eth0's), from a DUID starting %s", d.c.Name, d.ip, a.MAC, d.duid)
	}
	if err := c1.Release6(ctx); err != nil {
		t.Fatal(err)
	}
	w.waitArrival(ip1, event.Release, mac(c1), 10*time.Second)
	time.Sleep(w.grace + 2*time.Second) // anything synthesised would come now

	var seq []string
	for _, a := range w.arrivals(netip.Addr{}) {
		seq = append(seq, a.String())
		if a.MAC != mac(c1) && a.MAC != mac(c2) {
			t.Errorf("the region got a MAC that is no client's: %s", a)
		}
	}
	t.Logf("the region got:\n  %s", strings.Join(seq, "\n  "))
	w.stopAgent()
	if len(w.lastSynth) != 0 {
		t.Errorf("the hooks reported everything, yet the agent synthesised %v", w.lastSynth)
	}
	if logs := w.lastLogs.String(); strings.Contains(logs, "kept back") {
		t.Errorf("events kept back:\n%s", logs)
	}
}
