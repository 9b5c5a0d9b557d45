// Command demo walks through what leasekeeper is for, with the real
// programs (run it through scripts/demo, `make demo`): ISC dhcpd in a
// network namespace with the packaging snippet running leasekeeper-hook,
// dhclient in two client namespaces, the leasekeeper agent, and a region
// stub printing what the region receives. It shows a commit, a release
// and an expiry reported by the hook, then the failure leasekeeper exists
// for: the dynamic range shrinks, dhcpd restarts and silently drops an
// active lease from dhcpd.leases (no hook runs), and the agent sends the
// expiry itself, at the lease's own end. Everything it starts is removed
// at the end, by pid and by namespace.
//
//	demo -agent bin/leasekeeper -hook /tmp/x/leasekeeper-hook [-lease 12]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/parser"
)

func main() {
	agentBin := flag.String("agent", "bin/leasekeeper", "the leasekeeper binary")
	hookBin := flag.String("hook", "", "the leasekeeper-hook binary (required)")
	snippet := flag.String("snippet", "packaging/dhcpd/leasekeeper.conf", "the dhcpd.conf snippet running the hook")
	lease := flag.Int("lease", 12, "lease time in seconds (short, so the demo is short)")
	flag.Parse()
	if *hookBin == "" {
		fmt.Fprintln(os.Stderr, "usage: demo -agent PATH -hook PATH [-lease SECS]")
		os.Exit(2)
	}
	tb := &lab.ProgramTB{Prog: "demo"}
	code := 0
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(lab.Fatal); !ok {
					panic(p)
				}
				code = 1
			}
		}()
		d := &demo{tb: tb, agentBin: abs(*agentBin), hookBin: abs(*hookBin), snippet: *snippet, lease: *lease, start: time.Now()}
		if err := d.run(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			code = 1
		}
	}()
	say("cleaning up: agent, dhcpd, dhclients, namespaces")
	tb.RunCleanups()
	os.Exit(code)
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

type demo struct {
	tb                         *lab.ProgramTB
	agentBin, hookBin, snippet string
	lease                      int
	start                      time.Time

	lab  *lab.Lab
	d    *lab.Dhcpd
	stub *regionstub.Server
	// apiURL, apiKey: the region's API 2.0 and the key file for it.
	apiURL, apiKey string
	dir            string
	agent          *exec.Cmd
}

var out sync.Mutex

// say prints a line of the narrative.
func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf("\n==> "+format+"\n", args...)
}

func (d *demo) show(who, format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf("    %5.1fs %-7s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

func (d *demo) run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lab.Require(d.tb, "dhcpd", "dhclient")
	d.dir = d.tb.TempDir()

	// The rack is a network namespace: dhcpd, the agent and the region's
	// ports (on its loopback) live there, as on a rack whose region is
	// reached over its network; the clients are namespaces on its bridge.
	d.lab = lab.New(d.tb)
	say("a MAAS-shaped region stub: the internal leases API (port 5242 on MAAS) over mutual TLS, its certificate naming only \"maas\"; API 2.0 with an administrator's key; subnet 203.0.113.0/24, dynamic range .100-.150")
	var stub *regionstub.Server
	var apiURL string
	if err := d.lab.InNetns(d.lab.NS, func() error {
		var err error
		if stub, err = regionstub.Start(regionstub.Options{}); err != nil {
			return err
		}
		apiURL, err = stub.StartAPI2()
		return err
	}); err != nil {
		return err
	}
	d.tb.Cleanup(func() { stub.Close() })
	d.stub = stub
	d.stubRange(100, 150)
	files, err := stub.WriteFiles(filepath.Join(d.dir, "pki"))
	if err != nil {
		return err
	}
	const apiKey = "demoConsumer:demoToken:demoSecret"
	if err := stub.AddAPIKey(apiKey, regionstub.Administrator("admin")); err != nil {
		return err
	}
	d.apiURL, d.apiKey = apiURL, filepath.Join(d.dir, "maas.key")
	if err := os.WriteFile(d.apiKey, []byte(apiKey+"\n"), 0o600); err != nil {
		return err
	}
	go d.printRegion(ctx)

	say("dhcpd in a network namespace, range 203.0.113.100-150, %d s leases, hooks from %s", d.lease, d.snippet)
	d.d = d.lab.StartDhcpd(d.tb, lab.DhcpdConfig{Conf: d.conf(100, 150)})
	d.show("dhcpd", "pid %d, leases file %s", d.d.Pid(), d.d.LeasesPath())

	say("the leasekeeper agent: hook socket, durable outbox, delivery, and the reconciler following dhcpd.leases")
	if err := d.startAgent(files); err != nil {
		return err
	}

	c1, c2 := d.lab.AddClient("c1"), d.lab.AddClient("c2")
	say("c1 asks for a lease: dhcpd runs leasekeeper-hook on commit")
	ip1, err := d.dhclient(ctx, c1)
	if err != nil {
		return err
	}
	if _, err := d.expect(ctx, ip1, "commit", 5*time.Second); err != nil {
		return err
	}

	say("c1 releases it (dhclient -r): dhcpd runs the hook on release")
	if err := c1.Release(ctx); err != nil {
		return err
	}
	if _, err := d.expect(ctx, ip1, "release", 5*time.Second); err != nil {
		return err
	}

	say("c2 takes a lease and vanishes without a release (a destroyed container): dhcpd expires it at its end and runs the hook on expiry")
	ip2, err := d.dhclient(ctx, c2)
	if err != nil {
		return err
	}
	if _, err := d.expect(ctx, ip2, "commit", 5*time.Second); err != nil {
		return err
	}
	if err := c2.Kill(); err != nil {
		return err
	}
	ends2 := d.leaseEnds(ip2)
	d.show("demo", "c2's lease ends at %s, in %.0f s", time.Unix(ends2, 0).Format("15:04:05"), time.Until(time.Unix(ends2, 0)).Seconds())
	if _, err := d.expect(ctx, ip2, "expiry", time.Until(time.Unix(ends2, 0))+10*time.Second); err != nil {
		return err
	}

	say("c3 takes a lease, then its container is force-deleted: no release, no clean shutdown")
	c3 := d.lab.AddClient("c3")
	ip4, err := d.dhclient(ctx, c3)
	if err != nil {
		return err
	}
	if _, err := d.expect(ctx, ip4, "commit", 5*time.Second); err != nil {
		return err
	}
	if err := c3.Destroy(); err != nil {
		return err
	}
	d.show("demo", "c3's namespace is gone; its lease would hold %s for another %.0f s", ip4, time.Until(time.Unix(d.leaseEnds(ip4), 0)).Seconds())
	say("the rack releases it on c3's behalf (leasekeeper release --for): dhcpd frees it and runs the hook on release")
	rel := d.lab.CommandContext(ctx, d.lab.NS, d.agentBin, "release", "--for", ip4.String(), "--mac", c3.MAC.String(), "--leases", d.d.LeasesPath())
	out, err := rel.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		d.show("rack", "%s", line)
	}
	if err != nil {
		return fmt.Errorf("release --for: %w", err)
	}
	if _, err := d.expect(ctx, ip4, "release", 5*time.Second); err != nil {
		return err
	}

	say("the failure leasekeeper exists for: c1 takes a lease again and vanishes; then the range shrinks to leave its address out and dhcpd restarts")
	ip3, err := d.dhclient(ctx, c1)
	if err != nil {
		return err
	}
	if _, err := d.expect(ctx, ip3, "commit", 5*time.Second); err != nil {
		return err
	}
	if err := c1.Destroy(); err != nil {
		return err
	}
	ends3 := d.leaseEnds(ip3)
	lo := int(ip3.As4()[3]) + 1
	d.stubRange(lo, 150) // MAAS's range shrinks with dhcpd's
	if err := d.d.Restart(d.conf(lo, 150)); err != nil {
		return err
	}
	d.show("dhcpd", "restarted with range 203.0.113.%d-150 (pid %d)", lo, d.d.Pid())
	if leases, _ := os.ReadFile(d.d.LeasesPath()); strings.Contains(string(leases), "lease "+ip3.String()+" ") {
		d.show("demo", "(dhcpd kept %s: not the failure this demo shows)", ip3)
	} else {
		d.show("dhcpd", "rewrote dhcpd.leases without %s, and ran no hook: the region would keep it forever", ip3)
	}
	d.show("demo", "the lease c1 was given ends at %s, in %.0f s: the region must not free it earlier", time.Unix(ends3, 0).Format("15:04:05"),
		time.Until(time.Unix(ends3, 0)).Seconds())
	got, err := d.expect(ctx, ip3, "expiry", time.Until(time.Unix(ends3, 0))+10*time.Second)
	if err != nil {
		return fmt.Errorf("the synthesised expiry did not arrive: %w", err)
	}
	d.show("demo", "the expiry arrived %.1f s after the lease's end", got.Sub(time.Unix(ends3, 0)).Seconds())
	if _, ok := d.stub.Lease(ip3); ok {
		d.show("region", "%s still observed: MAAS ignores events outside its dynamic ranges", ip3)
	}
	say("so the agent frees it through MAAS's API 2.0, once the region's record is still DISCOVERED for c1's MAC and nothing answers an ARP probe for it")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := d.stub.Lease(ip3); !ok {
			d.show("region", "%s no longer observed: freed %.1f s after the lease's end", ip3, time.Since(time.Unix(ends3, 0)).Seconds())
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the region still lists %s as observed 30 s after the lease's end", ip3)
		}
		time.Sleep(50 * time.Millisecond)
	}

	say("done: every event reached the region, including the one dhcpd never reported, and the address MAAS would have kept for ever is free")
	d.stopAgent()
	return nil
}

// conf is dhcpd.conf with the packaging snippet, the hook and socket
// paths of this demo, and a range.
// stubRange sets the region's dynamic range of 203.0.113.0/24.
func (d *demo) stubRange(lo, hi int) {
	a := func(n int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(n)}) }
	d.stub.SetSubnets([]regionstub.Subnet{{CIDR: netip.MustParsePrefix("203.0.113.0/24"), Ranges: []regionstub.Range{{First: a(lo), Last: a(hi)}}}})
}

func (d *demo) conf(lo, hi int) string {
	raw, err := os.ReadFile(d.snippet)
	if err != nil {
		d.tb.Fatalf("%v", err)
	}
	hook := strings.ReplaceAll(string(raw), `"/usr/sbin/leasekeeper-hook", "notify",`,
		fmt.Sprintf("%q, \"notify\", \"--socket\", %q, \"--spool\", %q,", d.hookBin, filepath.Join(d.dir, "hook.sock"), filepath.Join(d.dir, "spool")))
	return fmt.Sprintf("ping-check false;\nauthoritative;\nddns-update-style none;\ndefault-lease-time %d;\nmax-lease-time %d;\nmin-lease-time %d;\n%s\n%s",
		d.lease, d.lease, d.lease, hook, d.lab.SubnetConf(fmt.Sprintf("  range 203.0.113.%d 203.0.113.%d;", lo, hi)))
}

func (d *demo) startAgent(files regionstub.Files) error {
	cfg := fmt.Sprintf(`[dhcpd]
leases = %q
config = %q
pid_file = %q
[hook]
socket = %q
spool = %q
[region]
url = %q
ca_file = %q
cert_file = %q
key_file = %q
server_name = "maas"
[state]
dir = %q
[reconcile]
expiry_grace = "3s"
poll_interval = "1s"
[metrics]
listen = ""
[control]
socket = %q
[maas]
api_url = %q
api_key_file = %q
[log]
format = "json"
`, d.d.LeasesPath(), d.d.ConfPath(), filepath.Join(d.d.Dir, "dhcpd.pid"), filepath.Join(d.dir, "hook.sock"), filepath.Join(d.dir, "spool"),
		d.stub.URL(), files.CA, files.ClientCert, files.ClientKey, filepath.Join(d.dir, "state"), filepath.Join(d.dir, "control.sock"),
		d.apiURL, d.apiKey)
	path := filepath.Join(d.dir, "leasekeeper.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	// In the rack's namespace, as dhcpd: it probes the rack's link.
	cmd := d.lab.Command(d.lab.NS, d.agentBin, "agent", "--config", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	d.agent = cmd
	d.tb.Cleanup(d.stopAgent)
	ready := make(chan struct{})
	go d.printAgent(stderr, ready)
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		return errors.New("agent not ready after 20s")
	}
	return nil
}

func (d *demo) stopAgent() {
	if d.agent == nil {
		return
	}
	cmd := d.agent
	d.agent = nil
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// printAgent shows the agent's log lines that tell the story.
func (d *demo) printAgent(r io.Reader, ready chan struct{}) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	once := sync.Once{}
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		msg, _ := m["message"].(string)
		str := func(k string) string { v, _ := m[k].(string); return v }
		switch {
		case msg == "ready":
			once.Do(func() { close(ready) })
			d.show("agent", "ready")
		case strings.HasPrefix(msg, "reconciler mode"):
			d.show("agent", "mode %s: %s", str("mode"), str("why"))
		case msg == "synthesised event":
			d.show("agent", "SYNTHESISED %s %s %s (reason %s): dhcpd never reported it", str("action"), str("ip"), str("mac"), str("reason"))
		case strings.HasPrefix(msg, "dhcpd restarted"):
			d.show("agent", "saw dhcpd restart (%s): the leases file was rewritten", str("by"))
		case msg == "leases file read whole":
			if v, _ := m["vanished"].(float64); v > 0 {
				d.show("agent", "the rewritten file dropped %.0f active lease(s): expiry scheduled at each lease's own end, sent expiry_grace after it", v)
			}
		case m["level"] == "error" || m["level"] == "warn":
			d.show("agent", "%s: %s %v", m["level"], msg, m["error"])
		}
	}
}

// printRegion prints what the region stub accepts, as it arrives.
func (d *demo) printRegion(ctx context.Context) {
	seen := 0
	for ctx.Err() == nil {
		items := d.stub.Items()
		for _, it := range items[seen:] {
			extra := ""
			if it.Action == "commit" {
				extra = fmt.Sprintf(" hostname %q lease_time %d", it.Hostname, it.LeaseTime)
			}
			d.show("region", "<- %-7s %s %s%s", it.Action, it.IP, it.MAC, extra)
		}
		seen = len(items)
		time.Sleep(20 * time.Millisecond)
	}
}

// expect is waitRegion for a step the demo cannot go on without: an
// error if the region did not receive it.
func (d *demo) expect(ctx context.Context, ip netip.Addr, action string, within time.Duration) (time.Time, error) {
	at := d.waitRegion(ctx, ip, action, within)
	if at.IsZero() {
		return at, fmt.Errorf("the region received no %s for %s within %s", action, ip, within.Round(time.Second))
	}
	return at, nil
}

// waitRegion waits for the region to receive action for ip and returns
// when it did (zero if it did not within the limit).
func (d *demo) waitRegion(ctx context.Context, ip netip.Addr, action string, within time.Duration) time.Time {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, b := range d.stub.Batches() {
			for _, it := range b.Items {
				if it.IP == ip.String() && it.Action == action {
					time.Sleep(50 * time.Millisecond) // let the printer show it first
					return b.At
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.show("demo", "!! no %s for %s within %s", action, ip, within.Round(time.Second))
	return time.Time{}
}

func (d *demo) dhclient(ctx context.Context, c *lab.Client) (netip.Addr, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ip, err := c.Dhclient(cctx)
	if err != nil {
		return ip, err
	}
	d.show(c.Name, "bound to %s (MAC %s)", ip, c.MAC)
	return ip, nil
}

func (d *demo) leaseEnds(ip netip.Addr) int64 {
	f, err := os.Open(d.d.LeasesPath())
	if err != nil {
		d.tb.Fatalf("%v", err)
	}
	defer f.Close()
	ls, err := parser.ParseLeases(f)
	if err != nil {
		d.tb.Fatalf("%v", err)
	}
	l, ok := ls.Lookup(netip.PrefixFrom(ip, 32))
	if !ok {
		d.tb.Fatalf("%s is not in the leases file", ip)
	}
	return int64(l.Ends)
}
