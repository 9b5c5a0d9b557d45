package orphans_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/orphans"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/internal/maasapi"
	"github.com/leasekeeper/leasekeeper/release/rack"
)

// rig is a region stub with an administrator's key whose API 2.0 (api)
// lists ip as observed for macA, and an outbox file holding one job (ip
// for macA); releaser makes the Releaser over them.
type rig struct {
	stub  *regionstub.Server
	api   string
	store *outbox.Store
	addr  netip.Addr
}

func newRig(t *testing.T) *rig {
	t.Helper()
	s, err := regionstub.Start(regionstub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.AddAPIKey(adminKey, regionstub.Administrator("admin"))
	store, err := outbox.Open(filepath.Join(t.TempDir(), "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	g := &rig{stub: s, store: store, addr: netip.MustParseAddr(ip)}
	if g.api, err = s.StartAPI2(); err != nil {
		t.Fatal(err)
	}
	observe(t, s, macA)
	g.put(t, macA)
	return g
}

// put stores a job for the rig's address as the reconciler does (Sink.Put
// in its own outbox transaction).
func (g *rig) put(t *testing.T, mac string) {
	t.Helper()
	if err := g.store.Update(context.Background(), "test", func(b *bbolt.Bucket) ([]event.Event, error) {
		return nil, orphans.Sink{}.Put(b.Tx(), []reconcile.Orphan{{IP: g.addr, MAC: mac, Ends: time.Now().Unix()}}, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
}

func (g *rig) releaser(t *testing.T, apiURL string, probe orphans.Prober) *orphans.Releaser {
	t.Helper()
	return g.releaserLog(t, apiURL, probe, zerolog.Nop())
}

func (g *rig) releaserLog(t *testing.T, apiURL string, probe orphans.Prober, log zerolog.Logger) *orphans.Releaser {
	t.Helper()
	key, _ := maasapi.ParseKey(adminKey)
	client, err := maasapi.New(apiURL, key, &http.Client{Timeout: 10 * time.Second}, "leasekeeper/test")
	if err != nil {
		t.Fatal(err)
	}
	r, err := orphans.New(orphans.Config{Client: client, Probe: probe}, g.store, log, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func silent(context.Context, netip.Addr, time.Duration) (rack.Probe, error) {
	return rack.Probe{Iface: "br0"}, nil
}

// TestReleaserConfirmsTheFree: a MAAS with TLS on answers its HTTP port's
// /MAAS with a 301 to the same path on its TLS port
// (src/maasserver/templates/http/regiond.nginx.conf.template, the second
// server block when tls_enabled), and Go's http.Client follows a 301 to a
// POST with a GET without the body: the release arrived as a listing of
// the user's reservations, 200, and was counted as freed. The API client
// now follows no redirect: the job is "misdirected", tried again in ten
// minutes, its reason naming maas.api_url ("redirect"); so is a 404, a
// path the region does not serve (MAAS's ip_addresses.py answers an
// unknown address with 400 or an empty list, never 404: "404"). And
// whatever answers a release with success, the Releaser reads the record
// again and keeps the job ("unconfirmed") while the region still lists
// it: here a front that answers the POST itself and passes the reads on.
func TestReleaserConfirmsTheFree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		front func(target *url.URL) http.Handler
		want  string
		next  time.Duration
	}{
		{"redirect", func(target *url.URL) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.String()+r.URL.RequestURI(), http.StatusMovedPermanently)
			})
		}, orphans.StateMisdirected, 10 * time.Minute},
		{"404", func(*url.URL) http.Handler { return http.NotFoundHandler() }, orphans.StateMisdirected, 10 * time.Minute},
		{"success that frees nothing", func(target *url.URL) http.Handler {
			proxy := httputil.NewSingleHostReverseProxy(target)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, "[]") //nolint:errcheck
					return
				}
				proxy.ServeHTTP(w, r)
			})
		}, orphans.StateUnconfirmed, 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t)
			target, err := url.Parse(strings.TrimSuffix(g.api, "/MAAS/"))
			if err != nil {
				t.Fatal(err)
			}
			front := &http.Server{Handler: tc.front(target), ReadHeaderTimeout: 5 * time.Second}
			ln, err := listenLoopback()
			if err != nil {
				t.Fatal(err)
			}
			go front.Serve(ln) //nolint:errcheck // ends with Close
			defer front.Close()

			r := g.releaser(t, "http://"+ln.Addr().String()+"/MAAS/", silent)
			out, err := r.ReleaseNow(context.Background(), g.addr)
			if err != nil {
				t.Fatal(err)
			}
			if _, still := g.stub.Lease(g.addr); !still {
				t.Fatal("the stub freed the address")
			}
			if out.Done || out.Result != tc.want || !strings.Contains(out.Reason, "api_url") {
				t.Fatalf("outcome %+v, want %s naming maas.api_url", out, tc.want)
			}
			jobs := r.Jobs()
			if len(jobs) != 1 || jobs[0].State != tc.want || jobs[0].Next.Sub(jobs[0].Last) != tc.next {
				t.Errorf("jobs after the attempt: %+v", jobs)
			}
			// Straight to the API, the same job is freed.
			r2 := g.releaser(t, g.api, silent)
			if out, err := r2.ReleaseNow(context.Background(), g.addr); err != nil || out.Result != "freed" {
				t.Fatalf("without the front: %+v, %v", out, err)
			}
			if _, still := g.stub.Lease(g.addr); still {
				t.Error("the region still lists the address")
			}
		})
	}
}

// TestReleaserKeepsANewerJob: the reconciler stores a newer job for the
// address (Sink.Put, in its own transaction) while an attempt on the old
// one is on the wire; the attempt's outcome must not overwrite it, or the
// newer lease's address is never freed.
func TestReleaserKeepsANewerJob(t *testing.T) {
	g := newRig(t)
	busy := func(context.Context, netip.Addr, time.Duration) (rack.Probe, error) {
		// Meanwhile the reconciler hands over macB's lease of the address.
		time.Sleep(5 * time.Millisecond) // a distinct Found
		g.put(t, macB)
		return rack.Probe{Iface: "br0", By: []byte{2, 0, 0, 0, 0, 0xc}}, nil
	}
	r := g.releaser(t, g.api, busy)
	if out, err := r.ReleaseNow(context.Background(), g.addr); err != nil || out.Result != orphans.StateBusy {
		t.Fatalf("attempt: %+v, %v", out, err)
	}
	jobs, err := orphans.Jobs(g.store)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].MAC != macB || jobs[0].State != orphans.StateWaiting {
		t.Errorf("stored jobs: %+v, want macB's new job, waiting", jobs)
	}
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// TestReleaserOffLink: an address no link of this rack reaches (a
// relayed subnet: rack.ProbeARP's ErrNotOnLink) cannot be probed now or
// in 30 s; the job is tried hourly, not every ProbeInterval, which asked
// the region for its record twice a minute per address for ever. A
// passing probe failure is still retried every ProbeInterval.
func TestReleaserOffLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
	}{
		{"not on a link", fmt.Errorf("ARP probe: %s: %w", ip, rack.ErrNotOnLink), time.Hour},
		{"a passing failure", errors.New("ARP probe: open a packet socket: resource temporarily unavailable"), orphans.DefaultProbeInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t)
			r := g.releaser(t, g.api, func(context.Context, netip.Addr, time.Duration) (rack.Probe, error) { return rack.Probe{}, tc.err })
			out, err := r.ReleaseNow(context.Background(), g.addr)
			if err != nil || out.Result != orphans.StateBlocked {
				t.Fatalf("attempt: %+v, %v", out, err)
			}
			if j := r.Jobs()[0]; j.Next.Sub(j.Last) != tc.want {
				t.Errorf("next attempt in %v, want %v", j.Next.Sub(j.Last), tc.want)
			}
			if g.stub.Releases(ip) != 0 {
				t.Error("released without a probe")
			}
		})
	}
}

// TestReleaserBackInRange: a job is not withdrawn by anything but its
// end, and jobs wait for hours (unconfigured, refused, busy). If a range
// grows back over the address meanwhile and its client leases it again,
// MAAS stores that lease as a discovered record of the same MAC (an
// address in a range passes services/leases.py store_lease_info), which
// looks exactly like the orphan's; a client powered off then answers no
// probe, and the release freed the region's record of a lease dhcpd
// holds. The releaser asks the leases file (the reconciler's Holds)
// before it asks the region and again just before it releases.
func TestReleaserBackInRange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		held     func(calls int) (bool, bool) // the Holds answer at its calls-th call
		result   string
		released int
	}{
		{"held when the attempt starts", func(int) (bool, bool) { return true, true }, "back", 0},
		{"held again while the probe ran", func(n int) (bool, bool) { return n > 1, true }, "back", 0},
		{"the file not known", func(int) (bool, bool) { return false, false }, orphans.StateBlocked, 0},
		{"not held: freed", func(int) (bool, bool) { return false, true }, "freed", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t)
			r := g.releaser(t, g.api, silent)
			calls := 0
			r.SetHeld(func(a netip.Addr, since int64) (bool, bool) {
				if a != g.addr || since == 0 {
					t.Errorf("Holds(%s, %d), want %s and the lease's end", a, since, g.addr)
				}
				calls++
				return tc.held(calls)
			})
			out, err := r.ReleaseNow(context.Background(), g.addr)
			if err != nil || out.Result != tc.result {
				t.Fatalf("attempt: %+v, %v; want %s", out, err, tc.result)
			}
			if n := g.stub.Releases(ip); n != tc.released {
				t.Errorf("%d releases reached the region, want %d", n, tc.released)
			}
			jobs, err := orphans.Jobs(g.store)
			if err != nil {
				t.Fatal(err)
			}
			if keep := tc.result == orphans.StateBlocked; (len(jobs) == 1) != keep {
				t.Errorf("stored jobs %+v; kept: want %v", jobs, keep)
			}
		})
	}
}

// TestReleaserClockBehind: MAAS refuses a request whose OAuth timestamp is
// more than 300 s older than its clock (401 "Expired timestamp":
// piston3's OAuthServer checks it, src/maasserver/api/auth.py's
// OAuthUnauthorized words the answer, src/maasserver/nonces_cleanup.py
// reads the 300 s). The job is refused as with a wrong key, but the
// log says the rack's clock is behind and how to mend it, not that the
// key is wrong; with the clocks in step the same key frees it.
func TestReleaserClockBehind(t *testing.T) {
	g := newRig(t)
	g.stub.SetClockSkew(10 * time.Minute)
	var logs bytes.Buffer
	r := g.releaserLog(t, g.api, silent, zerolog.New(&logs))
	out, err := r.ReleaseNow(context.Background(), g.addr)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != orphans.StateRefused || !strings.Contains(out.Reason, "Expired timestamp") {
		t.Fatalf("outcome %+v, want refused for the timestamp", out)
	}
	if !strings.Contains(logs.String(), "clock is behind the region's") || strings.Contains(logs.String(), "maas apikey") {
		t.Errorf("log does not point at the clock:\n%s", logs.String())
	}
	// Said once per address while it lasts, not at every attempt.
	if out, _ := r.ReleaseNow(context.Background(), g.addr); out.Result != orphans.StateRefused {
		t.Fatalf("second attempt: %+v", out)
	}
	if n := strings.Count(logs.String(), "clock is behind the region's\""); n != 1 {
		t.Errorf("said %d times in two attempts, want once:\n%s", n, logs.String())
	}
	g.stub.SetClockSkew(0)
	if out, err := r.ReleaseNow(context.Background(), g.addr); err != nil || out.Result != "freed" {
		t.Fatalf("clocks in step: %+v, %v", out, err)
	}
}

// TestReleaserBusyAsksHourly: something answers for the address at every
// probe (a host squatting on it). The first attempt reads the region's
// record, then the probe finds it busy; later attempts, every
// ProbeInterval, probe first and leave the region alone, reading the
// record again only an hour after the last read, and logging the busy
// address then, not at every probe. Once nothing answers the record is
// read and the address freed. Before, every attempt read the record: a
// GET per busy address every 30 s, for ever.
func TestReleaserBusyAsksHourly(t *testing.T) {
	g := newRig(t)
	answer := true
	probe := func(context.Context, netip.Addr, time.Duration) (rack.Probe, error) {
		if answer {
			return rack.Probe{Iface: "br0", By: net.HardwareAddr{2, 0, 0, 0, 0, 0xc}}, nil
		}
		return rack.Probe{Iface: "br0"}, nil
	}
	now := time.Now()
	key, _ := maasapi.ParseKey(adminKey)
	client, err := maasapi.New(g.api, key, nil, "leasekeeper/test")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	r, err := orphans.New(orphans.Config{Client: client, Probe: probe}, g.store, zerolog.New(&logs), reg, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	reads := func() int {
		n := 0
		for _, q := range g.stub.API2Requests() {
			if q.Method == http.MethodGet && strings.HasSuffix(q.Path, "/ipaddresses/") {
				n++
			}
		}
		return n
	}
	base := reads()
	attempt := func(want string) {
		t.Helper()
		out, err := r.ReleaseNow(context.Background(), g.addr)
		if err != nil || out.Result != want {
			t.Fatalf("attempt at %s: %+v, %v; want %s", now.Format(time.TimeOnly), out, err, want)
		}
	}
	said := func() int { return strings.Count(logs.String(), "kept the address: something answers for it") }
	for range 5 {
		attempt(orphans.StateBusy)
		now = now.Add(30 * time.Second)
	}
	if n := reads() - base; n != 1 {
		t.Errorf("read the region's record %d times in 5 busy attempts 30 s apart, want 1", n)
	}
	if n := said(); n != 1 {
		t.Errorf("logged the busy address %d times, want 1", n)
	}
	// leasekeeper_orphans_jobs counts the jobs by state at each scrape.
	if got, err := testutil.GatherAndCount(reg, "leasekeeper_orphans_jobs"); err != nil || got == 0 {
		t.Fatalf("leasekeeper_orphans_jobs: %d series, %v", got, err)
	}
	want := "# HELP leasekeeper_orphans_jobs " + jobsHelp(t, reg) + "\n# TYPE leasekeeper_orphans_jobs gauge\n"
	for _, st := range []string{"waiting", "unconfigured", "retrying", "busy", "blocked", "refused", "unreleasable", "unconfirmed", "misdirected"} {
		n := 0
		if st == orphans.StateBusy {
			n = 1
		}
		want += fmt.Sprintf("leasekeeper_orphans_jobs{state=%q} %d\n", st, n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leasekeeper_orphans_jobs"); err != nil {
		t.Error(err)
	}
	now = now.Add(time.Hour)
	attempt(orphans.StateBusy)
	if n := reads() - base; n != 2 {
		t.Errorf("%d reads after an hour, want 2", n)
	}
	if n := said(); n != 2 {
		t.Errorf("logged the busy address %d times after the hourly read, want 2", n)
	}
	answer = false
	now = now.Add(30 * time.Second)
	attempt("freed")
	if _, still := g.stub.Lease(g.addr); still {
		t.Error("the region still lists the address")
	}
}

// jobsHelp is leasekeeper_orphans_jobs' help text as registered.
func jobsHelp(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "leasekeeper_orphans_jobs" {
			return mf.GetHelp()
		}
	}
	t.Fatal("leasekeeper_orphans_jobs not registered")
	return ""
}

// TestReleaserRetryingWarnsOnce: the region answers 503 for a while (the
// window TestLabOrphanRegionDown runs through with a real dhcpd): each
// attempt is retried with backoff, warned at its first, at debug level
// after, then the address is freed once the region answers.
func TestReleaserRetryingWarnsOnce(t *testing.T) {
	g := newRig(t)
	g.stub.FailFor(time.Hour, regionstub.Fault{Status: 503})
	var logs bytes.Buffer
	r := g.releaserLog(t, g.api, silent, zerolog.New(&logs).Level(zerolog.InfoLevel))
	for range 3 {
		if out, err := r.ReleaseNow(context.Background(), g.addr); err != nil || out.Result != orphans.StateRetrying {
			t.Fatalf("region down: %+v, %v", out, err)
		}
	}
	if n := strings.Count(logs.String(), "could not free the address yet"); n != 1 {
		t.Errorf("warned %d times in three attempts, want once:\n%s", n, logs.String())
	}
	if j := r.Jobs(); len(j) != 1 || j[0].Attempts != 3 {
		t.Errorf("jobs: %+v, want 3 attempts", j)
	}
	g.stub.ClearFaults()
	if out, err := r.ReleaseNow(context.Background(), g.addr); err != nil || out.Result != "freed" {
		t.Fatalf("region back: %+v, %v", out, err)
	}
}

// TestReleaserSaysOnce: a state that lasts is logged once per address,
// not at every attempt (a refused key was logged every ten minutes, per
// address, for ever); a reload ([maas] put in force again: SetClient)
// makes it news again, so a key still refused after the reload that was
// to mend it says so, here with the user MAAS names.
func TestReleaserSaysOnce(t *testing.T) {
	for _, tc := range []struct {
		name, said string
		setup      func(g *rig) string // the API URL to use
		key        string
	}{
		{"refused", "the region refuses to free the address with this API key", func(g *rig) string {
			g.stub.AddAPIKey(userKey, regionstub.APIUser{Name: "user"})
			return g.api
		}, userKey},
		{"misdirected", "maas.api_url does not lead to the region's API", func(*rig) string {
			front := httptest.NewServer(http.NotFoundHandler())
			t.Cleanup(front.Close)
			return front.URL + "/MAAS/"
		}, adminKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t)
			u := tc.setup(g)
			key, _ := maasapi.ParseKey(tc.key)
			client, err := maasapi.New(u, key, nil, "leasekeeper/test")
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			r, err := orphans.New(orphans.Config{Client: client, Probe: silent}, g.store, zerolog.New(&logs), prometheus.NewRegistry(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			attempt := func() {
				t.Helper()
				if out, err := r.ReleaseNow(context.Background(), g.addr); err != nil || out.Done {
					t.Fatalf("attempt: %+v, %v", out, err)
				}
			}
			attempt()
			attempt()
			if n := strings.Count(logs.String(), tc.said); n != 1 {
				t.Errorf("said %d times in two attempts, want once:\n%s", n, logs.String())
			}
			r.SetClient(client)
			attempt()
			if n := strings.Count(logs.String(), tc.said); n != 2 {
				t.Errorf("said %d times after a reload, want twice:\n%s", n, logs.String())
			}
		})
	}
}
