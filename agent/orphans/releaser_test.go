package orphans_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

const (
	adminKey = "aC:aT:aS"
	userKey  = "uC:uT:uS"
	groupKey = "gC:gT:gS" // in the Administrators group, not is_superuser
	flagKey  = "fC:fT:fS" // is_superuser, removed from the Administrators group
	ip       = "203.0.113.100"
	macA     = "02:00:00:00:00:0a"
	macB     = "02:00:00:00:00:0b"
)

// observe has the stub's region record a commit of ip for mac, through
// its leases API over mutual TLS, as the agent's deliverer does.
func observe(t *testing.T, s *regionstub.Server, mac string) {
	t.Helper()
	body, _ := json.Marshal([]event.RegionItem{{Action: event.Commit, Family: event.IPv4, MAC: mac, IP: ip,
		Timestamp: time.Now().Unix(), LeaseTime: 600}})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: s.ClientTLSConfig()}}
	resp, err := hc.Post(s.URL(), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("leases API: %s", resp.Status)
	}
}

// TestReleaserDecides: one attempt on a held address, against the
// MAAS-shaped stub's API 2.0 and a probe that says whether anyone
// answers: the address is freed only when the region's record is still
// DISCOVERED for the lease's MAC, nobody answers, and MAAS lets the key
// list and force-release addresses. Who may is MAAS's to say
// (src/maasserver/authorization.py: 3.8 and later ask for permissions
// an administrator has through the Administrators group, whatever
// is_superuser says). A record linked to more than one interface of the
// lease's MAC is one MAAS's release fails on
// (src/maasserver/api/ip_addresses.py, release;
// src/maasserver/models/interface.py, unlink_ip_address): kept, hourly.
// One linked to a second MAC too is that MAC's lease as well (a commit
// adds its link: src/maasservicelayer/services/leases.py,
// _commit_lease_info): left alone, never released.
func TestReleaserDecides(t *testing.T) {
	for _, tc := range []struct {
		name       string
		regionMACs []string // the commits the region took for ip, in order; none: no record
		ifaces     []string // the region's interfaces with macA (nil: one unknown interface)
		key        string
		answered   bool
		result     string
		done       bool
		releases   int
	}{
		{"freed", []string{macA}, nil, adminKey, false, "freed", true, 1},
		{"another MAC holds it now", []string{macB}, nil, adminKey, false, "other-mac", true, 0},
		{"already gone", nil, nil, adminKey, false, "gone", true, 0},
		{"someone answers ARP", []string{macA}, nil, adminKey, true, orphans.StateBusy, false, 0},
		{"not an administrator's key", []string{macA}, nil, userKey, false, orphans.StateRefused, false, 0},
		{"an administrator by group, not is_superuser", []string{macA}, nil, groupKey, false, "freed", true, 1},
		{"is_superuser, out of the Administrators group", []string{macA}, nil, flagKey, false, orphans.StateRefused, false, 0},
		{"the MAC is a machine's NIC with a VLAN on it", []string{macA}, []string{"eth0", "eth0.100"}, adminKey, false, orphans.StateUnreleasable, false, 1},
		{"linked to a second MAC too", []string{macB, macA}, nil, adminKey, false, "other-mac", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := regionstub.Start(regionstub.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			api, err := s.StartAPI2()
			if err != nil {
				t.Fatal(err)
			}
			s.AddAPIKey(adminKey, regionstub.Administrator("admin"))
			s.AddAPIKey(userKey, regionstub.APIUser{Name: "user"})
			s.AddAPIKey(groupKey, regionstub.APIUser{Name: "ops", Admin: true})
			s.AddAPIKey(flagKey, regionstub.APIUser{Name: "former", Superuser: true})
			if tc.ifaces != nil {
				s.SetInterfaces(macA, tc.ifaces...)
			}
			for _, mac := range tc.regionMACs {
				observe(t, s, mac)
			}
			key, err := maasapi.ParseKey(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			client, err := maasapi.New(api, key, http.DefaultClient, "leasekeeper/test")
			if err != nil {
				t.Fatal(err)
			}
			store, err := outbox.Open(filepath.Join(t.TempDir(), "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			probes := 0
			probe := func(_ context.Context, _ netip.Addr, _ time.Duration) (rack.Probe, error) {
				probes++
				if tc.answered {
					return rack.Probe{Iface: "br0", By: net.HardwareAddr{2, 0, 0, 0, 0, 0xc}}, nil
				}
				return rack.Probe{Iface: "br0"}, nil
			}
			// The job as the reconciler stores it, in the outbox's file,
			// before the Releaser starts (it loads the stored jobs).
			addr := netip.MustParseAddr(ip)
			if err := store.Update(context.Background(), "test", func(b *bbolt.Bucket) ([]event.Event, error) {
				return nil, orphans.Sink{}.Put(b.Tx(), []reconcile.Orphan{{IP: addr, MAC: macA, Ends: time.Now().Unix()}}, time.Now())
			}); err != nil {
				t.Fatal(err)
			}
			r, err := orphans.New(orphans.Config{Client: client, Probe: probe}, store, zerolog.Nop(), prometheus.NewRegistry(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			out, err := r.ReleaseNow(context.Background(), addr)
			if err != nil {
				t.Fatal(err)
			}
			if out.Result != tc.result || out.Done != tc.done {
				t.Errorf("outcome %+v, want %s (done %v)", out, tc.result, tc.done)
			}
			if n := s.Releases(ip); n != tc.releases {
				t.Errorf("%d release calls, want %d: %+v", n, tc.releases, s.API2Requests())
			}
			_, still := s.Lease(addr)
			if wantStill := len(tc.regionMACs) > 0 && tc.result != "freed"; still != wantStill {
				t.Errorf("region still lists it: %v, want %v", still, wantStill)
			}
			if tc.result == "freed" && probes == 0 {
				t.Error("freed without an ARP probe")
			}
			jobs := r.Jobs()
			if tc.done != (len(jobs) == 0) {
				t.Fatalf("jobs after the attempt: %+v (done %v)", jobs, tc.done)
			}
			switch tc.result {
			case orphans.StateRefused:
				// The refusal is MAAS's 403, and names the key's user.
				if !strings.Contains(jobs[0].Reason, "403") || !strings.Contains(jobs[0].Reason, "API key is") {
					t.Errorf("refusal's reason: %q", jobs[0].Reason)
				}
			case orphans.StateUnreleasable:
				if d := jobs[0].Next.Sub(jobs[0].Last); d != time.Hour {
					t.Errorf("next attempt in %v, want an hour", d)
				}
				if !strings.Contains(jobs[0].Reason, "linked to 2 interfaces") {
					t.Errorf("reason: %q", jobs[0].Reason)
				}
			}
		})
	}
}

// TestReleaserReload: without [maas] a held address stays
// "unconfigured"; a reload that sets it (SetClient) frees it at the next
// attempt, without a restart.
func TestReleaserReload(t *testing.T) {
	s, err := regionstub.Start(regionstub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api, err := s.StartAPI2()
	if err != nil {
		t.Fatal(err)
	}
	store, addr := heldJob(t, s)
	r, err := orphans.New(orphans.Config{Probe: silent}, store, zerolog.Nop(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if out, err := r.ReleaseNow(context.Background(), addr); err != nil || out.Result != orphans.StateUnconfigured {
		t.Fatalf("without [maas]: %+v, %v", out, err)
	}
	key, _ := maasapi.ParseKey(adminKey)
	client, err := maasapi.New(api, key, http.DefaultClient, "leasekeeper/test")
	if err != nil {
		t.Fatal(err)
	}
	r.SetClient(client)
	if out, err := r.ReleaseNow(context.Background(), addr); err != nil || out.Result != "freed" {
		t.Fatalf("after the reload: %+v, %v", out, err)
	}
	if _, still := s.Lease(addr); still {
		t.Error("the region still lists the address")
	}
}

// heldJob readies s (the admin key, the region's observed record of ip
// for macA) and an outbox holding the orphan job for ip, as the
// reconciler stores it before the Releaser starts.
func heldJob(t *testing.T, s *regionstub.Server) (*outbox.Store, netip.Addr) {
	t.Helper()
	s.AddAPIKey(adminKey, regionstub.Administrator("admin"))
	observe(t, s, macA)
	store, err := outbox.Open(filepath.Join(t.TempDir(), "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	addr := netip.MustParseAddr(ip)
	if err := store.Update(context.Background(), "test", func(b *bbolt.Bucket) ([]event.Event, error) {
		return nil, orphans.Sink{}.Put(b.Tx(), []reconcile.Orphan{{IP: addr, MAC: macA, Ends: time.Now().Unix()}}, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	return store, addr
}

// TestReleaserUntrustedRegion: a MAAS with TLS whose certificate this
// rack does not trust (a private CA: `maas config-tls enable KEY CERT
// --cacert CA`, src/maasserver/management/commands/config_tls.py) is
// the configuration's problem, not an outage: the address is
// "misdirected", logged at error level once with the fix (maas.ca_file),
// not retried every minute for ever; the reload that sets the CA frees it.
func TestReleaserUntrustedRegion(t *testing.T) {
	s, err := regionstub.Start(regionstub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api, err := s.StartAPI2TLS()
	if err != nil {
		t.Fatal(err)
	}
	store, addr := heldJob(t, s)
	key, _ := maasapi.ParseKey(adminKey)
	untrusting, err := maasapi.New(api, key, &http.Client{}, "leasekeeper/test")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r, err := orphans.New(orphans.Config{Client: untrusting, Probe: silent}, store, zerolog.New(&log), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := r.ReleaseNow(context.Background(), addr)
	if err != nil || out.Result != orphans.StateMisdirected || !strings.Contains(out.Reason, "maas.ca_file") {
		t.Fatalf("untrusted certificate: %+v, %v; want misdirected naming maas.ca_file", out, err)
	}
	if jobs := r.Jobs(); len(jobs) != 1 || jobs[0].Next.Sub(jobs[0].Last) < 10*time.Minute {
		t.Errorf("jobs %+v: want the address kept, tried again in ten minutes", jobs)
	}
	if !strings.Contains(log.String(), `"level":"error"`) || !strings.Contains(log.String(), `"fix":"the region's certificate is not signed by a CA this rack trusts: set maas.ca_file`) {
		t.Errorf("the log does not give the fix at error level:\n%s", log.String())
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.PKI().CAPEM)
	trusting, err := maasapi.New(api, key, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, "leasekeeper/test")
	if err != nil {
		t.Fatal(err)
	}
	r.SetClient(trusting)
	if out, err := r.ReleaseNow(context.Background(), addr); err != nil || out.Result != "freed" {
		t.Fatalf("after the reload with the CA: %+v, %v", out, err)
	}
}

// TestStoredReasonWithoutSecret: a job's reason stored before the client
// left the key's secret out of a wrong signature's 401 (python-oauth in
// piston3 names the expected PLAINTEXT base string, "&" and the secret;
// src/maasserver/api/auth.py passes it on) is read without it: /status
// and `leasekeeper orphans` show the reason.
func TestStoredReasonWithoutSecret(t *testing.T) {
	store, err := outbox.Open(filepath.Join(t.TempDir(), "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	old := `{"ip":"203.0.113.100","mac":"02:00:00:00:00:0a","ends":1,"found":"2026-12-01T00:00:00Z","state":"refused","reason":"maas: the API key was refused (401): Authorization Error: 'Invalid signature. Expected signature base string: &s3cretTokenSecret'","attempts":3,"next":"2026-12-01T00:10:00Z"}`
	if err := store.Update(context.Background(), "test", func(b *bbolt.Bucket) ([]event.Event, error) {
		kv, err := outbox.KVBucket(b.Tx(), orphans.Bucket)
		if err != nil {
			return nil, err
		}
		return nil, kv.Put([]byte(ip), []byte(old))
	}); err != nil {
		t.Fatal(err)
	}
	jobs, err := orphans.Jobs(store)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs %+v, %v", jobs, err)
	}
	if r := jobs[0].Reason; strings.Contains(r, "s3cret") || !strings.Contains(r, "Invalid signature") {
		t.Errorf("reason %q: want the refusal without the secret", r)
	}
}
