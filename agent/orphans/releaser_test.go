package orphans_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
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
	ip       = "203.0.113.100"
	macA     = "02:00:00:00:00:0a"
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
// DISCOVERED for the lease's MAC, nobody answers, and the key is an
// administrator's.
func TestReleaserDecides(t *testing.T) {
	for _, tc := range []struct {
		name      string
		regionMAC string // "" = the region has no record
		key       string
		answered  bool
		result    string
		done      bool
		releases  int
	}{
		{"freed", macA, adminKey, false, "freed", true, 1},
		{"another MAC holds it now", "02:00:00:00:00:0b", adminKey, false, "other-mac", true, 0},
		{"already gone", "", adminKey, false, "gone", true, 0},
		{"someone answers ARP", macA, adminKey, true, orphans.StateBusy, false, 0},
		{"not an administrator's key", macA, userKey, false, orphans.StateRefused, false, 0},
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
			s.AddAPIKey(adminKey, regionstub.APIUser{Name: "admin", Admin: true})
			s.AddAPIKey(userKey, regionstub.APIUser{Name: "user"})
			if tc.regionMAC != "" {
				observe(t, s, tc.regionMAC)
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
			if wantStill := tc.regionMAC != "" && tc.releases == 0; still != wantStill {
				t.Errorf("region still lists it: %v, want %v", still, wantStill)
			}
			if tc.result == "freed" && probes == 0 {
				t.Error("freed without an ARP probe")
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
	s.AddAPIKey(adminKey, regionstub.APIUser{Name: "admin", Admin: true})
	observe(t, s, macA)
	store, err := outbox.Open(filepath.Join(t.TempDir(), "outbox.db"), outbox.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	addr := netip.MustParseAddr(ip)
	if err := store.Update(context.Background(), "test", func(b *bbolt.Bucket) ([]event.Event, error) {
		return nil, orphans.Sink{}.Put(b.Tx(), []reconcile.Orphan{{IP: addr, MAC: macA, Ends: time.Now().Unix()}}, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	silent := func(context.Context, netip.Addr, time.Duration) (rack.Probe, error) {
		return rack.Probe{Iface: "br0"}, nil
	}
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
