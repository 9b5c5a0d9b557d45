package reconcile_test

// Lab tests of the reconciler on a MAAS-shaped rack: dhcpd.conf with
// MAAS's own "Notify MAAS" blocks, whose helper (a stand-in for MAAS's
// maas-dhcp-helper) sends to MAAS's socket, not the agent's.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// maasSocket stands in for what receives MAAS's helper's datagrams
// (rackd up to MAAS 3.5, maas-agent from 3.6): it records them.
type maasSocket struct {
	t    *testing.T
	mu   sync.Mutex
	got  []event.Event
	conn *net.UnixConn
}

func listenMAAS(t *testing.T, path string) *maasSocket {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	m := &maasSocket{t: t, conn: c}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return // closed
			}
			ev, err := event.ParseDatagram(buf[:n], event.SourceHook)
			if err != nil {
				t.Errorf("MAAS's socket got %q: %v", buf[:n], err)
				continue
			}
			m.mu.Lock()
			m.got = append(m.got, ev)
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return m
}

func (m *maasSocket) events() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, ev := range m.got {
		out = append(out, fmt.Sprintf("%s %s %s", ev.Action, ev.IP, ev.MAC))
	}
	return out
}

// wait waits until MAAS's socket got the event.
func (m *maasSocket) wait(action string, ip netip.Addr, mac string, within time.Duration) {
	m.t.Helper()
	want := fmt.Sprintf("%s %s %s", action, ip, mac)
	deadline := time.Now().Add(within)
	for {
		for _, e := range m.events() {
			if e == want {
				return
			}
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("MAAS's socket never got %q; it has:\n  %s", want, strings.Join(m.events(), "\n  "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLabComplement: MAAS's helper stays in dhcpd.conf (not diverted),
// sending to MAAS's own socket. The agent detects complement mode by
// itself; MAAS's socket gets every hooked commit, release and expiry and
// the region gets none of them from the agent. Then the range shrinks and
// dhcpd restarts, dropping an active lease with no hook: the region gets
// exactly one event, the expiry of that lease, not before its end.
func TestLabComplement(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two leases to end (-short)")
	}
	t.Parallel()
	w := newWorld(t, hooksMAAS, 12)
	maas := listenMAAS(t, w.maasSock)
	w.startDhcpd(100, 150)
	w.startAgent()
	if logs := w.agent.logs.String(); !strings.Contains(logs, `"mode":"complement"`) || strings.Contains(logs, `"level":"warn"`) {
		t.Fatalf("agent not sure of complement mode:\n%s", logs)
	}
	c1, c2, c3 := w.lab.AddClient("c1"), w.lab.AddClient("c2"), w.lab.AddClient("c3")
	ip1, ip2, ip3 := w.dhclient(c1), w.dhclient(c2), w.dhclient(c3)
	for _, c := range []struct {
		ip netip.Addr
		c  *lab.Client
	}{{ip1, c1}, {ip2, c2}, {ip3, c3}} {
		maas.wait(event.Commit, c.ip, mac(c.c), 5*time.Second)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	maas.wait(event.Release, ip2, mac(c2), 5*time.Second)

	// c3 vanishes; dhcpd expires its lease and runs on expiry.
	if err := c3.Kill(); err != nil {
		t.Fatal(err)
	}
	maas.wait(event.Expiry, ip3, mac(c3), time.Until(time.Unix(w.leaseEnds(ip3), 0))+10*time.Second)

	// c1 vanishes too, and the range shrinks away from its address
	// before its lease ends: no hook will ever report it.
	if err := c1.Kill(); err != nil {
		t.Fatal(err)
	}
	ends := w.leaseEnds(ip1)
	w.restartDhcpd(shrinkAway(ip1, ip2))
	if strings.Contains(readFile(t, w.d.LeasesPath()), "lease "+ip1.String()+" ") {
		t.Fatalf("dhcpd kept %s after the shrink; the test premise is gone", ip1)
	}
	w.waitArrival(ip1, event.Expiry, mac(c1), time.Until(time.Unix(ends, 0))+10*time.Second)
	time.Sleep(w.grace + 2*time.Second) // anything else would come now

	all := w.arrivals(netip.Addr{})
	if len(all) != 1 {
		t.Fatalf("the region got %d events, want only the dropped lease's expiry:\n%s", len(all), describeArrivals(all))
	}
	w.checkOnlyExpiry(ip1, mac(c1), ends)
	w.stopAgent()
	if got := w.lastSynth; len(got) != 1 || got["vanished"] != 1 {
		t.Errorf("synthesised %v, want vanished=1 only", got)
	}
	t.Logf("MAAS's socket got:\n  %s", strings.Join(maas.events(), "\n  "))
	if n := strings.Count(w.lastLogs.String(), `"mode":"complement"`); n < 2 {
		t.Errorf("the mode was logged %d times, want at start and at dhcpd's restart", n)
	}
}
