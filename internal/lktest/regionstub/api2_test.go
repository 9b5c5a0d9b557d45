package regionstub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/internal/maasapi"
)

const (
	adminKey = "ac:at:as"
	userKey  = "uc:ut:us"
	groupKey = "gc:gt:gs"
	flagKey  = "fc:ft:fs"
)

// api2 is a stub with one observed address (203.0.113.120 for
// 02:00:00:00:00:01) learnt through the leases API, and API 2.0 keys for
// an administrator and a plain user.
func api2(t *testing.T) (*regionstub.Server, string, netip.Addr) {
	t.Helper()
	s, err := regionstub.Start(regionstub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	u, err := s.StartAPI2()
	if err != nil {
		t.Fatal(err)
	}
	s.AddAPIKey(adminKey, regionstub.Administrator("admin")) //nolint:errcheck
	s.AddAPIKey(userKey, regionstub.APIUser{Name: "user"})   //nolint:errcheck
	ip := netip.MustParseAddr("203.0.113.120")
	postItems(t, s, []event.RegionItem{{Action: "commit", Family: "ipv4", MAC: "02:00:00:00:00:01", IP: ip.String(), Timestamp: 1700000000, LeaseTime: 600}})
	if _, ok := s.Lease(ip); !ok {
		t.Fatal("the commit did not make the address observed")
	}
	return s, u, ip
}

func client(t *testing.T, u, key string) *maasapi.Client {
	t.Helper()
	k, err := maasapi.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := maasapi.New(u, k, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// src/maasserver/api/auth.py: no OAuth header, an unknown consumer, a
// wrong token or signature are all 401.
func TestAPI2OAuth(t *testing.T) {
	s, u, _ := api2(t)
	ctx := context.Background()
	resp, err := http.Get(u + "api/2.0/ipaddresses/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous: %d, want 401", resp.StatusCode)
	}
	for _, key := range []string{"xx:at:as", "ac:xx:as", "ac:at:xx"} {
		if _, err := client(t, u, key).Whoami(ctx); !errors.Is(err, maasapi.ErrUnauthorized) {
			t.Errorf("key %s: %v, want 401", key, err)
		}
	}
	// src/maasserver/api/users.py, whoami.
	who, err := client(t, u, adminKey).Whoami(ctx)
	if err != nil || who.Username != "admin" || !who.IsSuperuser {
		t.Errorf("whoami: %+v %v", who, err)
	}
	if n := len(s.API2Requests()); n != 5 {
		t.Errorf("%d requests recorded, want 5", n)
	}
	// piston3's OAuthServer (MAAS's src/maasserver/nonces_cleanup.py
	// reads its timestamp_threshold, 300 s): a request signed more than
	// 300 s before the region's now is refused, 401 "Expired timestamp";
	// one from a clock ahead of the region's is not.
	for _, tc := range []struct {
		skew   time.Duration
		skewed bool
	}{{301 * time.Second, true}, {10 * time.Minute, true}, {295 * time.Second, false}, {-time.Hour, false}} {
		s.SetClockSkew(tc.skew)
		_, err := client(t, u, adminKey).Whoami(ctx)
		if maasapi.IsClockSkew(err) != tc.skewed || (err != nil) != tc.skewed {
			t.Errorf("region's clock %v ahead: %v, want refused %v", tc.skew, err, tc.skewed)
		}
	}
	s.SetClockSkew(0)
	_, err = client(t, u, "ac:at:xx").Whoami(ctx)
	if maasapi.IsClockSkew(err) {
		t.Errorf("a wrong secret taken for a clock: %v", err)
	}
	// A wrong signature's 401 names the signature MAAS expected, the
	// key's real secret (piston3's OAuthServer, passed on by
	// src/maasserver/api/auth.py OAuthUnauthorized); the client's error,
	// which goes to logs and /status, leaves it out.
	req, _ := http.NewRequest(http.MethodGet, u+"api/2.0/users/?op=whoami", nil)
	bad, _ := maasapi.ParseKey("ac:at:xx")
	req.Header.Set("Authorization", bad.Sign())
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "Authorization Error: 'Invalid signature. Expected signature base string: &as'"; string(body) != want {
		t.Errorf("wrong signature: %q, want %q", body, want)
	}
	_, err = client(t, u, "ac:at:xx").Whoami(ctx)
	if msg := err.Error(); strings.Contains(msg, "&as") || !strings.Contains(msg, "Invalid signature") {
		t.Errorf("the client's error keeps the secret or loses the reason: %q", msg)
	}
}

// src/maasserver/api/ip_addresses.py, read: an administrator with all=true
// sees the DISCOVERED record ("Observed", src/maasserver/enum.py) with the
// MAC's interface; a plain user asking for all is refused (403), and so is
// a user with is_superuser outside the Administrators group, while one in
// the group without it is not (3.8 and later ask the group's permission,
// can_view_ipaddresses: src/maasserver/authorization.py).
func TestAPI2ReadIP(t *testing.T) {
	s, u, ip := api2(t)
	ctx := context.Background()
	recs, err := client(t, u, adminKey).Records(ctx, ip)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %+v %v", recs, err)
	}
	r := recs[0]
	if r.AllocType != maasapi.AllocDiscovered || r.AllocTypeName != "Observed" || r.IP != ip.String() ||
		len(r.MACs()) != 1 || r.MACs()[0] != "02:00:00:00:00:01" {
		t.Errorf("record %+v", r)
	}
	if recs, err := client(t, u, userKey).Records(ctx, ip); !errors.Is(err, maasapi.ErrForbidden) ||
		!strings.Contains(err.Error(), regionstub.MsgListAllNeedsAdmin) {
		t.Errorf("a plain user asking for all: %+v %v, want 403", recs, err)
	}
	s.AddAPIKey(flagKey, regionstub.APIUser{Name: "former", Superuser: true}) //nolint:errcheck
	if _, err := client(t, u, flagKey).Records(ctx, ip); !errors.Is(err, maasapi.ErrForbidden) {
		t.Errorf("is_superuser out of the group: %v, want 403", err)
	}
	s.AddAPIKey(groupKey, regionstub.APIUser{Name: "ops", Admin: true}) //nolint:errcheck
	if recs, err := client(t, u, groupKey).Records(ctx, ip); err != nil || len(recs) != 1 {
		t.Errorf("in the group without is_superuser: %+v %v", recs, err)
	}
	if recs, err := client(t, u, adminKey).Records(ctx, netip.MustParseAddr("203.0.113.121")); err != nil || len(recs) != 0 {
		t.Errorf("another address: %+v %v", recs, err)
	}
	k, _ := maasapi.ParseKey(adminKey)
	req, _ := http.NewRequest(http.MethodGet, u+"api/2.0/ipaddresses/?ip=nope", nil)
	req.Header.Set("Authorization", k.Sign())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("ip=nope: %d, want 400", resp.StatusCode)
	}
}

// src/maasserver/api/ip_addresses.py, release: force needs an
// administrator (403); force without discovered leaves a discovered
// record (400 "does not exist"); force+discovered frees it (204), and
// again is 400 "does not exist."; the region's view no longer lists it.
func TestAPI2Release(t *testing.T) {
	s, u, ip := api2(t)
	ctx := context.Background()
	if err := client(t, u, userKey).ReleaseDiscovered(ctx, ip); !errors.Is(err, maasapi.ErrForbidden) ||
		!strings.Contains(err.Error(), regionstub.MsgForceNeedsAdmin) {
		t.Errorf("plain user: %v, want 403", err)
	}
	k, _ := maasapi.ParseKey(adminKey)
	post := func(form url.Values) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, u+"api/2.0/ipaddresses/", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", k.Sign())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 1024)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if code, body := post(url.Values{"op": {"release"}, "ip": {ip.String()}, "force": {"true"}}); code != 400 || !strings.Contains(body, "does not exist.") {
		t.Errorf("force without discovered: %d %q", code, body)
	}
	if code, body := post(url.Values{"op": {"release"}, "ip": {ip.String()}}); code != 400 || !strings.Contains(body, "use force=true") {
		t.Errorf("no force: %d %q", code, body)
	}
	if _, ok := s.Lease(ip); !ok {
		t.Fatal("a refused release freed the address")
	}
	if err := client(t, u, adminKey).ReleaseDiscovered(ctx, ip); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lease(ip); ok {
		t.Error("still observed after the release")
	}
	if err := client(t, u, adminKey).ReleaseDiscovered(ctx, ip); !errors.Is(err, maasapi.ErrAbsent) {
		t.Errorf("again: %v, want ErrAbsent", err)
	}
	if n := s.Releases(ip.String()); n != 5 {
		t.Errorf("%d release requests recorded, want 5", n)
	}
}

// src/maasserver/api/ip_addresses.py, release, unlinks the record from
// each interface in turn; src/maasserver/models/interface.py,
// unlink_ip_address, deletes a DISCOVERED record at the first; the second
// delete raises (django/db/models/base.py, Model.delete) and
// src/maasserver/middleware.py answers 500 with its text, the
// transaction rolled back. The record has two interfaces when the MAC is
// a machine's NIC with a VLAN on it (src/maasservicelayer/services/
// interfaces.py, link_ip to every interface with the MAC), or when a
// second MAC committed the address (internal/maasmodel).
func TestAPI2ReleaseTwoInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vlan   bool
		second string // a second MAC that committed the address
		code   int
	}{
		{"one interface", false, "", 204},
		{"a NIC and its VLAN", true, "", 500},
		{"two MACs", false, "02:00:00:00:00:02", 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, u, ip := api2(t)
			if tc.vlan {
				s.SetInterfaces("02:00:00:00:00:01", "eth0", "eth0.100")
			}
			if tc.second != "" {
				postItems(t, s, []event.RegionItem{{Action: "commit", Family: "ipv4", MAC: tc.second, IP: ip.String(), Timestamp: 1700000100, LeaseTime: 600}})
			}
			ctx := context.Background()
			recs, err := client(t, u, adminKey).Records(ctx, ip)
			if err != nil || len(recs) != 1 {
				t.Fatalf("records: %+v %v", recs, err)
			}
			if n := len(recs[0].Interfaces); n != 1+btoi(tc.vlan)+btoi(tc.second != "") {
				t.Errorf("%d interfaces listed: %+v", n, recs[0].Interfaces)
			}
			err = client(t, u, adminKey).ReleaseDiscovered(ctx, ip)
			var se *maasapi.StatusError
			switch {
			case tc.code == 204 && err != nil:
				t.Errorf("release: %v", err)
			case tc.code == 500 && (!errors.As(err, &se) || se.Status != 500 || se.Body != regionstub.MsgDeletedTwice || !maasapi.IsInternalError(err)):
				t.Errorf("release: %v, want 500 %q", err, regionstub.MsgDeletedTwice)
			}
			if _, still := s.Lease(ip); still != (tc.code == 500) {
				t.Errorf("the region lists the address: %v", still)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// postItems sends items to the leases API over mTLS.
func postItems(t *testing.T, s *regionstub.Server, items []event.RegionItem) {
	t.Helper()
	b, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: s.ClientTLSConfig()}}
	resp, err := c.Post(s.URL(), "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("leases API: %d", resp.StatusCode)
	}
}
