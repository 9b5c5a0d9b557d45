package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
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

// TestLabBothFamilies: one agent follows a real dhcpd's leases file and a
// real dhcpd -6's (dhcpd.leases6), as on a MAAS rack: dhcpd.conf runs
// leasekeeper-hook, dhcpd6.conf no hook (MAAS's dhcpd6.conf.template,
// src/maasserver/templates/dhcp/, has no "on commit"). One client's DHCPv4
// and another's DHCPv6 leases and releases reach the region, the DHCPv4 ones from
// the hooks (replacement mode: nothing synthesised) and the DHCPv6 ones
// from dhcpd6.leases (hookless mode, detected from dhcpd.config6). Each
// reconciler reports its file and mode in /status and its metrics under
// its family's label. Restarted, the agent finds each family's records
// where that family's reconciler keeps them (none to drop) and sends
// nothing again. Restarted without dhcpd.leases6, it drops that file's
// reconciler's state.
func TestLabBothFamilies(t *testing.T) {
	t.Parallel()
	w := newWorld(t, hooksOK, 600, lab.WithIPv6(netip.MustParsePrefix("2001:db8:1::1/64")))
	w.startDhcpd(100, 199)
	w.d6 = w.lab.StartDhcpd(t, lab.DhcpdConfig{Family: 6, Conf: "default-lease-time 600;\npreferred-lifetime 300;\nmax-lease-time 600;\n" +
		w.lab.Subnet6Conf("  range6 2001:db8:1::100 2001:db8:1::1ff;")})
	w.startAgent()
	st := w.agent.a.Report()
	if st.Mode == nil || st.Mode.Mode != "replacement" || st.Mode6 == nil || st.Mode6.Mode != "hookless" {
		t.Fatalf("modes %+v and %+v; want replacement (dhcpd.conf runs the hook) and hookless (dhcpd6.conf none)", st.Mode, st.Mode6)
	}
	if st.LeasesFile == nil || st.LeasesFile.Path != w.d.LeasesPath() || st.LeasesFile6 == nil || st.LeasesFile6.Path != w.d6.LeasesPath() {
		t.Fatalf("/status leases files %+v and %+v; want %s and %s", st.LeasesFile, st.LeasesFile6, w.d.LeasesPath(), w.d6.LeasesPath())
	}
	c4, c6 := w.lab.AddClient("c4"), w.lab.AddClient("c6")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ip4, err := c4.Dhclient(ctx)
	if err != nil {
		t.Fatalf("dhclient: %v", err)
	}
	ip6, err := c6.Dhclient6(ctx)
	if err != nil {
		t.Fatalf("dhclient -6: %v\ndhcpd -6:\n%s", err, w.d6.Logs())
	}
	for c, ip := range map[*lab.Client]netip.Addr{c4: ip4, c6: ip6} {
		a := w.waitArrival(ip, event.Commit, mac(c), 10*time.Second)
		if want := reconcile.FamilyOf(ip); a.Family != want || a.LeaseTime != 600 {
			t.Errorf("%s: region got %+v, want %s with lease_time 600", ip, a.RegionItem, want)
		}
	}
	if err := c6.Release6(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c4.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.waitArrival(ip6, event.Release, mac(c6), 10*time.Second)
	w.waitArrival(ip4, event.Release, mac(c4), 10*time.Second)
	// A DHCPv6 hook's event (a site whose dhcpd6.conf runs
	// leasekeeper6.conf) joins the DHCPv6 reconciler's records, not the
	// DHCPv4 one's: the restart below would find it there and drop it.
	hooked := netip.MustParseAddr("2001:db8:1::1f0")
	out, err := exec.Command(w.hook, "notify", "--socket", filepath.Join(w.dir, "hook.sock"), "--spool", filepath.Join(w.dir, "spool"),
		"--action", "commit", "--mac", mac(c6), "--ip-family", "ipv6", "--ip", hooked.String(), "--lease-time", "600").CombinedOutput()
	if err != nil {
		t.Fatalf("leasekeeper-hook: %v\n%s", err, out)
	}
	w.waitArrival(hooked, event.Commit, mac(c6), 10*time.Second)
	time.Sleep(w.grace + 2*time.Second) // anything synthesised for the hooks' leases would come now

	synth := countersBy(t, w.agent.reg, "leasekeeper_synthesised_total", "family")
	if synth[event.IPv4] != 0 || synth[event.IPv6] != 2 {
		t.Errorf("synthesised by family %v; want none for ipv4 (the hooks told) and 2 for ipv6 (its commit and release)", synth)
	}
	before := w.arrivals(netip.Addr{})
	var seq []string
	for _, a := range before {
		seq = append(seq, a.String())
	}
	t.Logf("the region got:\n  %s", strings.Join(seq, "\n  "))
	if len(before) != 5 {
		t.Errorf("the region got %d events, want 5", len(before))
	}

	w.stopAgent()
	w.startAgent()
	time.Sleep(2 * time.Second)
	if after := w.arrivals(netip.Addr{}); len(after) != len(before) {
		t.Errorf("restarted, the agent sent %v again", after[len(before):])
	}
	if logs := w.agent.logs.String(); strings.Contains(logs, "addresses of the other family") {
		t.Errorf("restarted, a reconciler found the other family's records:\n%s", logs)
	}

	// Restarted without dhcpd.leases6, the agent drops the DHCPv6
	// reconciler's state: set again, it would be stale.
	w.stopAgent()
	w.d6 = nil
	w.startAgent()
	if logs := w.agent.logs.String(); !strings.Contains(logs, "dhcpd.leases6 is no longer set: dropped") {
		t.Errorf("restarted without dhcpd.leases6, the agent did not drop its reconciler's state:\n%s", logs)
	}
}

// Addresses live 600 s, delegated prefixes 20 s, in prefixWorld's dhcpd.
const prefixHead = "default-lease-time 600;\npreferred-lifetime 300;\nmax-lease-time 600;\n"

// prefixSubnet is the lab's subnet6 with an address range and a pool of
// /56 prefixes whose lifetime is 20 s.
func prefixSubnet(w *world) string {
	return w.lab.Subnet6Conf("  range6 2001:db8:1::100 2001:db8:1::1ff;\n" +
		"  pool6 {\n    prefix6 2001:db8:2:: 2001:db8:2:f00:: /56;\n" +
		"    default-lease-time 20;\n    preferred-lifetime 10;\n    max-lease-time 20;\n  }")
}

// prefixClient starts a client asking for an address and a prefix
// (dhclient -6 -N -P) and waits for the address's commit in the region.
func prefixClient(t *testing.T, w *world) (*lab.Client, netip.Addr) {
	t.Helper()
	c := w.lab.AddClient("c1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ip, err := c.Dhclient6(ctx, "-N", "-P")
	if err != nil {
		t.Fatalf("dhclient -6 -N -P: %v\ndhcpd:\n%s", err, w.d.Logs())
	}
	if lf := readFile(t, c.LeaseFile6()); !strings.Contains(lf, "iaprefix 2001:db8:2:") {
		t.Fatalf("dhclient got no prefix:\n%s", lf)
	}
	w.waitArrival(ip, event.Commit, mac(c), w.grace+10*time.Second)
	return c, ip
}

// prefixEndsAlone has the client go silent (the prefix ends at 20 s, the
// address at 600), waits for dhcpd to expire the prefix and for what
// that brings, and checks the region got nothing but commits of ip.
func prefixEndsAlone(t *testing.T, w *world, c *lab.Client, ip netip.Addr) {
	t.Helper()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	expired := func() bool { return strings.Contains(readFile(t, w.d.LeasesPath()), "binding state expired") }
	deadline := time.Now().Add(45 * time.Second)
	for !expired() && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	if !expired() {
		t.Fatalf("the prefix did not expire in dhcpd6.leases:\n%s", readFile(t, w.d.LeasesPath()))
	}
	time.Sleep(w.grace + 2*time.Second) // what the expiry brings would come now
	var seq []string
	for _, a := range w.arrivals(netip.Addr{}) {
		seq = append(seq, a.String())
		if a.IP != ip.String() {
			t.Errorf("the region got an event for an address the client was not given: %s", a)
		}
		if a.Action != event.Commit {
			t.Errorf("the region got %s while %s is leased for 600 s", a, ip)
		}
	}
	t.Logf("the region got:\n  %s", strings.Join(seq, "\n  "))
}

// TestLabDHCPv6Prefix: a client asking for an address and a delegated
// prefix. dhcpd runs "on commit" for each binding with the same packet,
// and "on expiry" with each binding's scope (server/dhcpv6.c,
// server/mdb6.c), so a hook reading the address from the IA_NA option
// reported the prefix's events as the address's: when the client went
// silent, the prefix's expiry ended the address in the region 580 s
// early. The shipped snippet runs no hook for such a packet, nor at the
// end of a binding whose commit ran none; the agent reports the
// address's commit from dhcpd6.leases, and nothing ends it.
func TestLabDHCPv6Prefix(t *testing.T) {
	t.Parallel()
	w := newWorld(t, hooksOK, 600, lab.WithIPv6(netip.MustParsePrefix("2001:db8:1::1/64")))
	conf := prefixHead + lab.HookSnippet6(t, w.hook, w.dir+"/hook.sock", w.dir+"/spool") + prefixSubnet(w)
	w.d = w.lab.StartDhcpd(t, lab.DhcpdConfig{Family: 6, Conf: conf})
	w.startAgent()
	c, ip := prefixClient(t, w)
	prefixEndsAlone(t, w, c, ip)
}

// TestLabDHCPv6PrefixUpgrade: a prefix bound under the earlier snippet,
// which stored the IA_NA address as clip in every binding's scope, keeps
// that scope across dhcpd's restart and the client's renewals (dhcpd
// writes it to dhcpd6.leases and keeps a binding's scope until it ends:
// server/mdb6.c). The shipped snippet unsets clip at a renewal it runs
// no hook for, so the prefix's later expiry does not end the address.
func TestLabDHCPv6PrefixUpgrade(t *testing.T) {
	t.Parallel()
	w := newWorld(t, hooksOK, 600, lab.WithIPv6(netip.MustParsePrefix("2001:db8:1::1/64")))
	// The earlier leasekeeper6.conf: a hook for every binding.
	call := fmt.Sprintf("%q, \"notify\", \"--socket\", %q, \"--spool\", %q,", w.hook, w.dir+"/hook.sock", w.dir+"/spool")
	earlier := `on commit {
    set clhw = binary-to-ascii(16, 8, ":", option dhcp6.client-id);
    set clip = binary-to-ascii(16, 16, ":", substring(option dhcp6.ia-na, 16, 16));
    execute(` + call + ` "--action", "commit", "--mac", clhw, "--ip-family", "ipv6", "--ip", clip,
        "--lease-time", "600", "--hostname", "(none)");
}
on expiry {
    execute(` + call + ` "--action", "expiry", "--mac", clhw, "--ip-family", "ipv6", "--ip", clip);
}
on release {
    execute(` + call + ` "--action", "release", "--mac", clhw, "--ip-family", "ipv6", "--ip", clip);
}
`
	w.d = w.lab.StartDhcpd(t, lab.DhcpdConfig{Family: 6, Conf: prefixHead + earlier + prefixSubnet(w)})
	w.startAgent()
	c, ip := prefixClient(t, w)
	if !strings.Contains(readFile(t, w.d.LeasesPath()), `set clip = "`) {
		t.Fatalf("the earlier snippet stored no clip:\n%s", readFile(t, w.d.LeasesPath()))
	}
	// The upgrade: dhcpd restarts on the shipped snippet; the client
	// renews (the prefix's T1 is a few seconds) and then goes silent.
	if err := w.d.Restart(prefixHead + lab.HookSnippet6(t, w.hook, w.dir+"/hook.sock", w.dir+"/spool") + prefixSubnet(w)); err != nil {
		t.Fatal(err)
	}
	renewed := func() bool {
		logs := w.d.Logs()
		i := strings.LastIndex(logs, "dhcpd start")
		return i >= 0 && strings.Contains(logs[i:], "Reply NA") && strings.Contains(logs[i:], "Reply PD")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !renewed() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if !renewed() {
		t.Fatalf("no renewal after the restart:\n%s", w.d.Logs())
	}
	prefixEndsAlone(t, w, c, ip)
}
