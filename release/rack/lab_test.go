package rack_test

// End-to-end with the real thing (internal/lktest/lab): Debian's dhcpd in a
// server namespace running the packaging hook snippet with the built
// leasekeeper-hook, which sends to a unixgram socket this test listens
// on; a real dhclient in a client namespace that is then destroyed
// without a release. The release itself runs inside the server namespace
// in a child process (this test binary re-executed, see
// TestHelperRelease) that calls rack.Release: the real frame on
// the real bridge to the real dhcpd.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
	"github.com/leasekeeper/leasekeeper/parser"
	"github.com/leasekeeper/leasekeeper/release/rack"
)

// event is the part of a hook datagram this test checks.
type event struct {
	Action string `json:"action"`
	MAC    string `json:"mac"`
	IP     string `json:"ip"`
}

// rig is a lab with dhcpd running the hook snippet, and the socket the
// hook sends to.
type rig struct {
	lab    *lab.Lab
	dhcpd  *lab.Dhcpd
	events chan event
	spool  string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	lab.Require(t, "dhcpd", "dhclient")
	hook := lab.BuildHook(t)
	// A unix socket path must fit in 108 bytes; t.TempDir() may not.
	dir, err := os.MkdirTemp("", "lk-rr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, spool := filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{lab: lab.New(t), events: make(chan event, 64), spool: spool}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			var e event
			if err := json.Unmarshal(buf[:n], &e); err != nil {
				t.Errorf("hook datagram %q: %v", buf[:n], err)
				continue
			}
			r.events <- e
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })

	conf := "ping-check false;\nauthoritative;\nddns-update-style none;\n" +
		"default-lease-time 600;\nmax-lease-time 600;\n" +
		lab.HookSnippet(t, hook, sock, spool) +
		r.lab.SubnetConf("  range 203.0.113.100 203.0.113.150;")
	r.dhcpd = r.lab.StartDhcpd(t, lab.DhcpdConfig{Conf: conf})
	// A rack's bridge keeps its other ports when one client goes; a
	// bridge left with none has the MAC 00:00:00:00:00:00.
	r.lab.AddClient("other")
	return r
}

// next returns the next hook event, or fails after d.
func (r *rig) next(t *testing.T, d time.Duration) event {
	t.Helper()
	select {
	case e := <-r.events:
		return e
	case <-time.After(d):
		t.Fatalf("no hook event within %v; dhcpd's log:\n%s", d, r.dhcpd.Logs())
		return event{}
	}
}

// quiet fails if a hook event arrives within d.
func (r *rig) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case e := <-r.events:
		t.Errorf("unexpected hook event %+v; dhcpd's log:\n%s", e, r.dhcpd.Logs())
	case <-time.After(d):
	}
}

// leaseThenVanish has client c1 lease an address with real dhclient,
// then destroys it without a release. It returns the address.
func (r *rig) leaseThenVanish(t *testing.T, ctx context.Context, opts ...lab.ClientOption) (*lab.Client, netip.Addr) {
	t.Helper()
	c := r.lab.AddClient("c1", opts...)
	ip, err := c.Dhclient(ctx)
	if err != nil {
		t.Fatalf("Dhclient: %v\ndhcpd:\n%s", err, r.dhcpd.Logs())
	}
	if e := r.next(t, 5*time.Second); e != (event{Action: "commit", MAC: c.MAC.String(), IP: ip.String()}) {
		t.Fatalf("first hook event %+v, want a commit of %s for %s", e, ip, c.MAC)
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	r.quiet(t, 300*time.Millisecond) // no release from the client
	return c, ip
}

// helperResult is what TestHelperRelease prints.
type helperResult struct {
	Error     string `json:"error,omitempty"`
	Refused   bool   `json:"refused,omitempty"`
	Sent      bool   `json:"sent"`
	Verified  bool   `json:"verified"`
	State     string `json:"state"`
	Interface string `json:"interface"`
	Server    string `json:"server"`
	Probe     string `json:"probe"`
}

// release runs rack.Release inside the server namespace.
func (r *rig) release(t *testing.T, ctx context.Context, ip netip.Addr, mac net.HardwareAddr) helperResult {
	t.Helper()
	cmd := r.lab.CommandContext(ctx, r.lab.NS, os.Args[0], "-test.run=^TestHelperRelease$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LK_RR_HELPER=1", "LK_RR_IP="+ip.String(), "LK_RR_MAC="+mac.String(),
		"LK_RR_LEASES="+r.dhcpd.LeasesPath())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("release helper: %v\n%s", err, out)
	}
	i := strings.Index(string(out), "LK_RR_RESULT ")
	if i < 0 {
		t.Fatalf("release helper printed no result:\n%s", out)
	}
	line, _, _ := strings.Cut(string(out[i+len("LK_RR_RESULT "):]), "\n")
	var res helperResult
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("release helper result %q: %v", line, err)
	}
	return res
}

// TestHelperRelease is not a test: the lab tests run this binary with
// LK_RR_HELPER=1 inside the server namespace to call Release there.
func TestHelperRelease(t *testing.T) {
	if os.Getenv("LK_RR_HELPER") != "1" {
		t.Skip("helper process for the lab tests")
	}
	mac, err := net.ParseMAC(os.Getenv("LK_RR_MAC"))
	if err != nil {
		t.Fatal(err)
	}
	opts := rack.Options{
		IP:         netip.MustParseAddr(os.Getenv("LK_RR_IP")),
		MAC:        mac,
		LeasesPath: os.Getenv("LK_RR_LEASES"),
		Timeout:    5 * time.Second,
	}
	res, err := rack.Release(context.Background(), opts)
	out := helperResult{Sent: res.Sent, Verified: res.Verified, State: res.State.String(), Interface: res.Interface, Probe: res.Probe}
	if res.Server.IsValid() {
		out.Server = res.Server.String()
	}
	if err != nil {
		out.Error = err.Error()
		var re *rack.RefusedError
		out.Refused = errors.As(err, &re)
	}
	b, _ := json.Marshal(out)
	fmt.Printf("\nLK_RR_RESULT %s\n", b)
}

// TestLabReleaseForGoneClient: a client leases an address and its
// namespace is deleted without a release; the rack-side release makes
// dhcpd itself release the lease: it logs the DHCPRELEASE, runs on
// release (the hook reports release with the lease's IP and MAC) and
// writes the lease free.
//
// With a client identifier (dhcpd keeps it as the lease's uid and finds
// the lease by it first) the release carries the same identifier.
func TestLabReleaseForGoneClient(t *testing.T) {
	for name, opts := range map[string][]lab.ClientOption{
		"hardware address":  nil,
		"client identifier": {lab.WithDhclientConf("send dhcp-client-identifier 1:2:0:0:0:0:2;")},
	} {
		t.Run(name, func(t *testing.T) { testReleaseForGoneClient(t, opts) })
	}
}

func testReleaseForGoneClient(t *testing.T, clientOpts []lab.ClientOption) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, ip := r.leaseThenVanish(t, ctx, clientOpts...)
	if uid := currentLease(t, r.dhcpd.LeasesPath(), ip).UID; (len(clientOpts) > 0) != (len(uid) > 0) {
		t.Fatalf("lease uid % x: the client identifier setting did not take", uid)
	}

	res := r.release(t, ctx, ip, c.MAC)
	if res.Error != "" || !res.Sent || !res.Verified {
		t.Fatalf("Release: %+v\ndhcpd:\n%s", res, r.dhcpd.Logs())
	}
	if res.Interface != "br0" || res.Server != "203.0.113.1" || res.State != "free" {
		t.Errorf("Release chose %s/%s and saw state %q, want br0/203.0.113.1 and free", res.Interface, res.Server, res.State)
	}
	if e := r.next(t, 5*time.Second); e != (event{Action: "release", MAC: c.MAC.String(), IP: ip.String()}) {
		t.Errorf("hook event %+v, want a release of %s for %s", e, ip, c.MAC)
	}
	wantLog := fmt.Sprintf("DHCPRELEASE of %s from %s (c1) via br0 (found)", ip, c.MAC)
	if !strings.Contains(r.dhcpd.Logs(), wantLog) {
		t.Errorf("dhcpd did not log %q:\n%s", wantLog, r.dhcpd.Logs())
	}
	l := currentLease(t, r.dhcpd.LeasesPath(), ip)
	if st := l.Binding(parser.TimeOf(time.Now())); st != parser.StateFree {
		t.Errorf("leases file: %s is %s, want free", ip, st)
	}
	if strings.Contains(r.dhcpd.Logs(), "execute: ") {
		t.Errorf("dhcpd logged a failed hook:\n%s", r.dhcpd.Logs())
	}

	// Again: the lease is no longer active, so Release refuses.
	res = r.release(t, ctx, ip, c.MAC)
	if !res.Refused || res.Sent {
		t.Errorf("second Release: %+v, want refused and nothing sent", res)
	}
}

// TestLabReleaseForWrongMAC: --for with a MAC that does not own the
// address is refused and nothing reaches dhcpd: no DHCPRELEASE in its
// log, the leases file unchanged, no hook event; the lease stays active.
func TestLabReleaseForWrongMAC(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, ip := r.leaseThenVanish(t, ctx)
	before, err := os.ReadFile(r.dhcpd.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	wrong := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}

	res := r.release(t, ctx, ip, wrong)
	if !res.Refused || res.Sent || !strings.Contains(res.Error, c.MAC.String()) {
		t.Errorf("Release for %s: %+v, want refused naming the owner %s, nothing sent", wrong, res, c.MAC)
	}
	r.quiet(t, 500*time.Millisecond)
	if strings.Contains(r.dhcpd.Logs(), "DHCPRELEASE") {
		t.Errorf("dhcpd received a DHCPRELEASE:\n%s", r.dhcpd.Logs())
	}
	after, err := os.ReadFile(r.dhcpd.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("the leases file changed:\n%s", after)
	}
	if st := currentLease(t, r.dhcpd.LeasesPath(), ip).Binding(parser.TimeOf(time.Now())); st != parser.StateActive {
		t.Errorf("%s is %s, want still active", ip, st)
	}
}

// TestLabReleaseForLiveClient: a client that still holds its address
// (a release on behalf asked for by mistake, or too early) answers the
// ARP probe: nothing is sent, dhcpd sees no DHCPRELEASE and the lease
// stays active. Once the address is gone from the client's interface
// nobody answers, and the release goes through.
func TestLabReleaseForLiveClient(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := r.lab.AddClient("c1")
	ip, err := c.Dhclient(ctx)
	if err != nil {
		t.Fatalf("Dhclient: %v\ndhcpd:\n%s", err, r.dhcpd.Logs())
	}
	if e := r.next(t, 5*time.Second); e != (event{Action: "commit", MAC: c.MAC.String(), IP: ip.String()}) {
		t.Fatalf("first hook event %+v, want a commit of %s for %s", e, ip, c.MAC)
	}

	res := r.release(t, ctx, ip, c.MAC)
	if !res.Refused || res.Sent || !strings.Contains(res.Error, "the client itself answered an ARP probe on br0: it is not gone") {
		t.Fatalf("Release of a live client's address: %+v, want refused: in use", res)
	}
	r.quiet(t, 500*time.Millisecond)
	if strings.Contains(r.dhcpd.Logs(), "DHCPRELEASE") {
		t.Errorf("dhcpd received a DHCPRELEASE:\n%s", r.dhcpd.Logs())
	}
	if st := currentLease(t, r.dhcpd.LeasesPath(), ip).Binding(parser.TimeOf(time.Now())); st != parser.StateActive {
		t.Errorf("%s is %s, want still active", ip, st)
	}

	if err := r.lab.IP(c.NS, []string{"addr", "flush", "dev", c.Iface}); err != nil {
		t.Fatal(err)
	}
	res = r.release(t, ctx, ip, c.MAC)
	if res.Error != "" || !res.Sent || !res.Verified || !strings.HasPrefix(res.Probe, "nobody answered an ARP probe on br0") {
		t.Fatalf("Release once the address is gone: %+v\ndhcpd:\n%s", res, r.dhcpd.Logs())
	}
	if e := r.next(t, 5*time.Second); e != (event{Action: "release", MAC: c.MAC.String(), IP: ip.String()}) {
		t.Errorf("hook event %+v, want a release of %s for %s", e, ip, c.MAC)
	}
}

func currentLease(t *testing.T, path string, ip netip.Addr) *parser.Lease {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ls, err := parser.ParseLeases(f)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := ls.Lookup(netip.PrefixFrom(ip, 32))
	if !ok {
		t.Fatalf("%s: no lease for %s", path, ip)
	}
	return l
}
