package regionstub

// Each test names, in its comment, the MAAS file (canonical/maas, 3.6–3.8
// and master) whose behaviour it pins.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

const good = `{"action":"commit","ip_family":"ipv4","hostname":"h1","mac":"02:00:00:0a:0b:0c","ip":"203.0.113.10","timestamp":1700000000,"lease_time":600}`

// withKey returns good with key k replaced by the raw JSON v, or removed when v is "".
func withKey(k, v string) string { return edit(good, k, v) }

func edit(obj, k, v string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		panic(err)
	}
	if v == "" {
		delete(m, k)
	} else {
		m[k] = json.RawMessage(v)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func batch(items ...string) string { return "[" + strings.Join(items, ",") + "]" }

// start runs a stub for the test and returns it with a client it accepts.
func start(t *testing.T, opts Options) (*Server, *http.Client) {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, client(s.ClientTLSConfig())
}

func client(c *tls.Config) *http.Client {
	return &http.Client{
		Timeout:       5 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: c},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type answer struct {
	status     int
	retryAfter string
	location   string
	raw        string
	body       struct {
		Detail  string             `json:"detail"`
		Kind    string             `json:"kind"`
		Code    int                `json:"code"`
		Message string             `json:"message"`
		Details []ValidationDetail `json:"details"`
	}
}

func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (answer, error) {
	t.Helper()
	return do(t, c, http.MethodPost, url, body, hdr...)
}

func do(t *testing.T, c *http.Client, method, url, body string, hdr ...string) (answer, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), location: resp.Header.Get("Location")}
	b, _ := io.ReadAll(resp.Body)
	a.raw = string(b)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &a.body); err != nil {
			t.Errorf("error body %q is not JSON: %v", b, err)
		}
	}
	return a, nil
}

func mustPost(t *testing.T, c *http.Client, url, body string, hdr ...string) answer {
	t.Helper()
	a, err := post(t, c, url, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestServerCertificate: the region's certificate is MAAS's cluster
// certificate, CN maas-cluster with the one SAN DNS:maas
// (src/maasserver/start_up.py, _create_cluster_certificate_if_necessary),
// so a client must verify it for "maas", not for the address it dials
// (src/maasagent/cmd/maas-agent/main.go in 3.7: ServerName "maas").
func TestServerCertificate(t *testing.T) {
	s, c := start(t, Options{})
	b, _ := pem.Decode(s.PKI().ServerCertPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "maas-cluster" || len(cert.DNSNames) != 1 || cert.DNSNames[0] != "maas" ||
		len(cert.IPAddresses) != 0 || len(cert.ExtKeyUsage) != 0 {
		t.Errorf("server certificate: CN %q, DNS %v, IP %v, EKU %v; want maas-cluster, [maas], none, none",
			cert.Subject.CommonName, cert.DNSNames, cert.IPAddresses, cert.ExtKeyUsage)
	}
	// Verified for the address in the URL, it fails.
	byAddr := s.ClientTLSConfig()
	byAddr.ServerName = ""
	_, err = post(t, client(byAddr), s.URL(), batch(good))
	var he x509.HostnameError
	if !errors.As(err, &he) {
		t.Errorf("verifying for 127.0.0.1: %v, want a hostname error", err)
	}
	if a := mustPost(t, c, s.URL(), batch(good)); a.status != http.StatusNoContent {
		t.Errorf("verifying for maas: status %d", a.status)
	}
}

// TestClientCertificate: mutual TLS and nothing else. From 3.8 the
// handshake takes a missing certificate and RequireClientCertMiddleware
// answers 403 for any request without a CN
// (src/maasapiserver/v3/middlewares/client_certificate.py; main.py:
// ssl.CERT_OPTIONAL); before 3.8 uvicorn requires the certificate in the
// handshake (3.6/3.7 src/maasapiserver/main.py: ssl.CERT_REQUIRED). A
// certificate from another CA fails the handshake in both.
func TestClientCertificate(t *testing.T) {
	anon := func(s *Server) *http.Client {
		return client(&tls.Config{RootCAs: s.PKI().CAPool(), ServerName: ServerName})
	}
	with := func(s *Server, certPEM, keyPEM []byte) *http.Client {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		c := s.ClientTLSConfig()
		c.Certificates = []tls.Certificate{pair}
		return client(c)
	}
	t.Run("3.8", func(t *testing.T) {
		s, c := start(t, Options{Version: "3.8"})
		noCN, noCNKey, err := s.PKI().Sign("")
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			c    *http.Client
			hdr  []string
		}{
			{"no certificate", anon(s), nil},
			{"bearer token only", anon(s), []string{"Authorization", "Bearer s3cret"}},
			{"certificate without CN", with(s, noCN, noCNKey), nil},
		} {
			a := mustPost(t, tc.c, s.URL(), batch(good), tc.hdr...)
			if a.status != http.StatusForbidden || a.raw != `{"detail":"Client certificate required."}`+"\n" {
				t.Errorf("%s: %d %q, want 403 Client certificate required.", tc.name, a.status, a.raw)
			}
		}
		other, err := NewPKI()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := post(t, with(s, other.ClientCertPEM, other.ClientKeyPEM), s.URL(), batch(good)); err == nil {
			t.Error("a certificate from another CA was answered")
		}
		if a := mustPost(t, c, s.URL(), batch(good)); a.status != http.StatusNoContent {
			t.Errorf("with the rack's certificate: status %d", a.status)
		}
		if s.Len() != 1 {
			t.Errorf("took %d items, want 1", s.Len())
		}
		r := s.Requests()
		if len(r) != 4 || r[0].Status != 403 || r[3].ClientCN != ClientCN {
			t.Errorf("requests %+v, want three 403s and the rack's 204", r)
		}
	})
	for _, v := range []string{"3.6", "3.7"} {
		t.Run(v, func(t *testing.T) {
			s, c := start(t, Options{Version: v})
			_, err := post(t, anon(s), s.URL(), batch(good))
			if err == nil || !strings.Contains(err.Error(), "certificate required") {
				t.Errorf("no certificate: %v, want the handshake to fail with certificate required", err)
			}
			if a := mustPost(t, c, s.URL(), batch(good)); a.status != http.StatusNoContent {
				t.Errorf("with the rack's certificate: status %d", a.status)
			}
		})
	}
}

// TestRoutes: the internal app serves POST /MAAS/a/v3internal/leases
// (src/maasapiserver/v3/api/internal/handlers/leases.py under
// src/maasagent/internal/client/client.go's "/MAAS/a/v3internal"); any
// other path is FastAPI's 404, another method its 405, the path with a
// trailing slash Starlette's 307 — and without a certificate every path
// is the middleware's 403 (src/maasapiserver/main.py: middlewares before
// routing).
func TestRoutes(t *testing.T) {
	s, c := start(t, Options{})
	base := strings.TrimSuffix(s.URL(), LeasesPath)
	for _, tc := range []struct {
		name, method, path string
		status             int
		raw, location      string
	}{
		{"other path", "POST", "/MAAS/api/2.0/leases", 404, `{"detail":"Not Found"}` + "\n", ""},
		{"v3 public path", "POST", "/MAAS/a/v3/leases", 404, `{"detail":"Not Found"}` + "\n", ""},
		{"GET", "GET", LeasesPath, 405, `{"detail":"Method Not Allowed"}` + "\n", ""},
		{"trailing slash", "POST", LeasesPath + "/", 307, "", LeasesPath},
	} {
		a, err := do(t, c, tc.method, base+tc.path, batch(good))
		if err != nil {
			t.Fatal(err)
		}
		if a.status != tc.status || a.raw != tc.raw || a.location != tc.location {
			t.Errorf("%s: %d %q Location %q, want %d %q %q", tc.name, a.status, a.raw, a.location, tc.status, tc.raw, tc.location)
		}
	}
	anon := client(&tls.Config{RootCAs: s.PKI().CAPool(), ServerName: ServerName})
	if a, _ := post(t, anon, base+"/nowhere", batch(good)); a.status != http.StatusForbidden {
		t.Errorf("other path without a certificate: %d, want 403", a.status)
	}
	if s.Len() != 0 {
		t.Errorf("took %d items", s.Len())
	}
	if r := s.Requests(); len(r) != 5 || r[0].Path != "/MAAS/api/2.0/leases" {
		t.Errorf("requests not all recorded: %+v", r)
	}
}

// TestSchema: what MAAS refuses with 422, the whole batch at once, and
// what it takes: LeaseInfoRequest
// (src/maasapiserver/v3/api/internal/models/requests/leases.py; pydantic
// ignores extra keys), MacAddress (src/maasservicelayer/models/fields.py:
// MAC_FIELD_RE of src/maascommon/fields.py, "" from 3.8 on), the body of
// the answer (src/maasapiserver/common/middlewares/exceptions.py).
func TestSchema(t *testing.T) {
	v6 := `{"action":"release","ip_family":"ipv6","hostname":"","mac":"02:00:00:0a:0b:0c","ip":"2001:db8::7","timestamp":0,"lease_time":0}`
	for _, tc := range []struct {
		name    string
		version string
		body    string
		field   string // "" = taken (204)
		typ     string
		mac     string // the mac MAAS stores, when taken
	}{
		{name: "one item", body: batch(good), mac: "02:00:00:0a:0b:0c"},
		{name: "empty batch", body: "[]"},
		{name: "ipv6", body: batch(v6), mac: "02:00:00:0a:0b:0c"},
		{name: "extra keys ignored", body: batch(edit(withKey("timestamp_ns", "1"), "pid", "7")), mac: "02:00:00:0a:0b:0c"},
		{name: "mac unpadded", body: batch(withKey("mac", `"2:0:0:a:b:c"`)), mac: "02:00:00:0a:0b:0c"},
		{name: "mac upper case", body: batch(withKey("mac", `"02:00:00:0A:0B:0C"`)), mac: "02:00:00:0a:0b:0c"},
		{name: "mac dashes", body: batch(withKey("mac", `"02-00-00-0a-0b-0c"`)), mac: "02:00:00:0a:0b:0c"},
		{name: "mac dotted", body: batch(withKey("mac", `"0200.000a.0b0c"`)), mac: "02:00:00:0a:0b:0c"},
		{name: "mac empty 3.8", body: batch(withKey("mac", `""`)), mac: ""},
		{name: "timestamp as string", body: batch(withKey("timestamp", `"1700000000"`)), mac: "02:00:00:0a:0b:0c"},
		{name: "lease_time 600.0", body: batch(withKey("lease_time", `600.0`)), mac: "02:00:00:0a:0b:0c"},
		{name: "lease_time negative", body: batch(withKey("lease_time", `-1`)), mac: "02:00:00:0a:0b:0c"},
		{name: "unicode hostname", body: batch(withKey("hostname", `"hôte-\u00e9"`)), mac: "02:00:00:0a:0b:0c"},

		{name: "not JSON", body: "[{", typ: "json_invalid"},
		{name: "object not array", body: good, typ: "list_type"},
		{name: "item not object", body: batch(good, "7"), field: "1", typ: "model_attributes_type"},
		{name: "missing action", body: batch(withKey("action", "")), field: "0.action", typ: "missing"},
		{name: "missing hostname", body: batch(withKey("hostname", "")), field: "0.hostname", typ: "missing"},
		{name: "missing lease_time", body: batch(withKey("lease_time", "")), field: "0.lease_time", typ: "missing"},
		{name: "unknown action", body: batch(withKey("action", `"renew"`)), field: "0.action", typ: "enum"},
		{name: "unknown family", body: batch(withKey("ip_family", `"IPv4"`)), field: "0.ip_family", typ: "enum"},
		{name: "hostname null", body: batch(withKey("hostname", `null`)), field: "0.hostname", typ: "string_type"},
		{name: "hostname number", body: batch(withKey("hostname", `5`)), field: "0.hostname", typ: "string_type"},
		{name: "mac 7 octets", body: batch(withKey("mac", `"02:00:00:00:0a:0b:0c"`)), field: "0.mac", typ: "string_pattern_mismatch"},
		{name: "mac a DUID", body: batch(withKey("mac", `"00:01:00:01:2c:4e:5f:60:02:00:00:0a:0b:0c"`)), field: "0.mac", typ: "string_pattern_mismatch"},
		{name: "mac empty 3.7", version: "3.7", body: batch(withKey("mac", `""`)), field: "0.mac", typ: "string_pattern_mismatch"},
		{name: "bad ip", body: batch(withKey("ip", `"203.0.113.300"`)), field: "0.ip", typ: "ip_any_address"},
		{name: "timestamp float", body: batch(withKey("timestamp", `1.5`)), field: "0.timestamp", typ: "int_from_float"},
		{name: "timestamp word", body: batch(withKey("timestamp", `"soon"`)), field: "0.timestamp", typ: "int_parsing"},
		{name: "lease_time null", body: batch(withKey("lease_time", `null`)), field: "0.lease_time", typ: "int_type"},
		{name: "second item bad, first good", body: batch(good, withKey("mac", `"zz"`)), field: "1.mac", typ: "string_pattern_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := start(t, Options{Version: tc.version})
			a := mustPost(t, c, s.URL(), tc.body)
			if tc.typ == "" {
				if a.status != http.StatusNoContent {
					t.Fatalf("status %d %s, want 204", a.status, a.raw)
				}
				if items := s.Items(); len(items) > 0 && items[0].MAC != tc.mac {
					t.Errorf("stored mac %q, want %q", items[0].MAC, tc.mac)
				}
				return
			}
			if a.status != http.StatusUnprocessableEntity || a.body.Kind != "Error" || a.body.Code != 422 || a.body.Message != "Failed to validate the request." {
				t.Fatalf("answer %d %s, want MAAS's 422", a.status, a.raw)
			}
			if len(a.body.Details) == 0 || a.body.Details[0].Field != tc.field || a.body.Details[0].Type != tc.typ || a.body.Details[0].Location != "body" {
				t.Errorf("details %+v, want field %q type %q in body", a.body.Details, tc.field, tc.typ)
			}
			if s.Len() != 0 || len(s.Leases()) != 0 {
				t.Errorf("a refused batch left %d items, %d leases", s.Len(), len(s.Leases()))
			}
		})
	}
}

// TestUnplaceable: an item MAAS cannot place fails the whole batch with
// 500 and its generic body, and the transaction is rolled back: the good
// item before it is not applied either (src/maasservicelayer/services/leases.py,
// store_lease_info: LeaseUpdateError "No subnet exists for", the family
// check, datetime.fromtimestamp; src/maasservicelayer/db/tables.py:
// staticipaddress.lease_time is an Integer column;
// src/maasapiserver/common/middlewares/db.py and exceptions.py: the
// rollback and the 500 body; src/maasservicelayer/db/repositories/subnets.py:
// an IPv4-mapped address is looked up as IPv4).
func TestUnplaceable(t *testing.T) {
	other := withKey("ip", `"203.0.113.11"`)
	v6 := func(ip string) string { return edit(withKey("ip_family", `"ipv6"`), "ip", `"`+ip+`"`) }
	for _, tc := range []struct {
		name, bad, reason string
	}{
		{"ip in no subnet", withKey("ip", `"192.0.2.1"`), "No subnet exists for: 192.0.2.1"},
		{"ipv6 in no subnet", v6("2001:db9::1"), "No subnet exists for: 2001:db9::1"},
		{"ipv4 address sent as ipv6", v6("::ffff:203.0.113.12"), "Family for the subnet does not match"},
		{"ipv6 address sent as ipv4", withKey("ip", `"2001:db8::12"`), "Family for the subnet does not match"},
		{"timestamp past year 9999", withKey("timestamp", `253402300800`), "year is out of range"},
		{"timestamp beyond int64", withKey("timestamp", `99999999999999999999999`), "year is out of range"},
		{"lease_time 2^31", withKey("lease_time", `2147483648`), "value out of int32 range"},
		// src/maasservicelayer/services/dnsresources.py, update_dynamic_hostname:
		// assert coerce_to_valid_hostname(hostname) is not None
		// (src/maascommon/utils/network.py).
		{"hostname of dots", withKey("hostname", `"..."`), "coerce_to_valid_hostname"},
		{"hostname of 65 characters", withKey("hostname", `"`+strings.Repeat("a", 65)+`"`), "coerce_to_valid_hostname"},
		{"hostname of symbols", withKey("hostname", `"_ é _"`), "coerce_to_valid_hostname"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := start(t, Options{})
			a := mustPost(t, c, s.URL(), batch(other, tc.bad))
			want := `{"kind":"Error","code":500,"message":"Unexpected internal server error. Please check the server logs for more details.","details":null}` + "\n"
			if a.status != http.StatusInternalServerError || a.raw != want {
				t.Fatalf("answer %d %q, want MAAS's 500", a.status, a.raw)
			}
			if s.Len() != 0 || len(s.Leases()) != 0 {
				t.Errorf("rolled back batch left %d items, leases %v", s.Len(), s.Leases())
			}
			r := s.Requests()
			if len(r) != 1 || !strings.Contains(r[0].Error, tc.reason) || r[0].Accepted {
				t.Errorf("request record %+v, want the reason %q", r, tc.reason)
			}
			// Alone, the good item is taken.
			if a := mustPost(t, c, s.URL(), batch(other)); a.status != http.StatusNoContent {
				t.Errorf("the good item alone: %d", a.status)
			}
		})
	}
	t.Run("hostnames MAAS takes", func(t *testing.T) {
		s, c := start(t, Options{})
		for _, h := range []string{`""`, `"(none)"`, `"   "`, `""`, `"Node_1.example"`, `"` + strings.Repeat("a", 64) + `"`, `"-a-"`} {
			if a := mustPost(t, c, s.URL(), batch(withKey("hostname", h))); a.status != http.StatusNoContent {
				t.Errorf("hostname %s: %d %s, want 204", h, a.status, a.raw)
			}
		}
		if a := mustPost(t, c, s.URL(), batch(edit(withKey("hostname", `"..."`), "action", `"expiry"`))); a.status != http.StatusNoContent {
			t.Errorf("an expiry's hostname is not looked at: %d", a.status)
		}
	})
	t.Run("lease_time only matters for a commit in a range", func(t *testing.T) {
		s, c := start(t, Options{Subnets: []Subnet{mustSubnet(t, "203.0.113.0/24=203.0.113.100-203.0.113.199")}})
		for _, b := range []string{
			edit(withKey("lease_time", `2147483648`), "action", `"expiry"`), // expiry: not stored
			withKey("lease_time", `2147483648`),                             // 203.0.113.10: outside the range
			edit(withKey("lease_time", `2147483647`), "ip", `"203.0.113.150"`),
		} {
			if a := mustPost(t, c, s.URL(), batch(b)); a.status != http.StatusNoContent {
				t.Errorf("%s: %d %s, want 204", b, a.status, a.raw)
			}
		}
		if a := mustPost(t, c, s.URL(), batch(edit(withKey("lease_time", `2147483648`), "ip", `"203.0.113.150"`))); a.status != 500 {
			t.Errorf("lease_time 2^31 in the range: %d, want 500", a.status)
		}
	})
}

func mustSubnet(t *testing.T, s string) Subnet {
	t.Helper()
	sub, err := ParseSubnet(s)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestRangeGate: an event for an address in a subnet but outside every
// IP range of it is taken (204) and changes nothing
// (src/maasservicelayer/services/leases.py: "We only want to update the
// addresses in the dynamic range"; src/maasservicelayer/db/repositories/ipranges.py,
// get_dynamic_range_for_ip, which looks at every range of the subnet).
func TestRangeGate(t *testing.T) {
	s, c := start(t, Options{Subnets: []Subnet{mustSubnet(t, "203.0.113.0/24=203.0.113.100-203.0.113.149+203.0.113.200-203.0.113.209")}})
	in := edit(withKey("ip", `"203.0.113.120"`), "mac", `"02:00:00:00:00:01"`)
	in2 := edit(withKey("ip", `"203.0.113.205"`), "mac", `"02:00:00:00:00:02"`)
	out := withKey("ip", `"203.0.113.10"`)
	if a := mustPost(t, c, s.URL(), batch(in, out, in2)); a.status != http.StatusNoContent {
		t.Fatalf("status %d %s", a.status, a.raw)
	}
	if got := keys(s.Leases()); !cmp.Equal(got, []string{"203.0.113.120", "203.0.113.205"}) {
		t.Errorf("leases %v, want the two in ranges", got)
	}
	if b := s.Batches(); len(b) != 1 || len(b[0].Items) != 3 || b[0].Ignored != 1 {
		t.Errorf("batches %+v, want 3 items taken, 1 ignored", b)
	}
	// After the range shrinks (the seed-001 case), even a correct expiry
	// for the dropped lease changes nothing.
	s.SetSubnets([]Subnet{mustSubnet(t, "203.0.113.0/24=203.0.113.100-203.0.113.109")})
	if a := mustPost(t, c, s.URL(), batch(edit(in, "action", `"expiry"`))); a.status != http.StatusNoContent {
		t.Fatalf("status %d", a.status)
	}
	if _, ok := s.Lease(netip.MustParseAddr("203.0.113.120")); !ok {
		t.Error("an expiry outside every range cleared the lease")
	}
}

func keys(m map[string]Lease) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestArrivalOrder: items apply in arrival order keyed by IP with no
// timestamp comparison; a MAC's other addresses in the family are
// dropped when it gets news of one; a commit to another MAC links the
// address's row to it as well, and a release from the first MAC then
// takes it from both (src/maasservicelayer/services/leases.py,
// store_lease_info and _release_lease_info; internal/maasmodel names the
// repository files). The Idempotency-Key is
// ignored: a batch sent twice is applied twice
// (src/maasapiserver/v3/api/internal/handlers/leases.py reads no header).
func TestArrivalOrder(t *testing.T) {
	s, c := start(t, Options{})
	mk := func(action, ip, mac string, ts int) string {
		return edit(edit(edit(edit(good, "action", `"`+action+`"`), "ip", `"`+ip+`"`), "mac", `"`+mac+`"`), "timestamp", strconv.Itoa(ts))
	}
	const a, b = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
	steps := []struct {
		body string
		want map[string]string // IP → MAC after
	}{
		{batch(mk("commit", "203.0.113.1", a, 200)), map[string]string{"203.0.113.1": a}},
		// Older, from another MAC: applied all the same, and a stays
		// linked to the address.
		{batch(mk("commit", "203.0.113.1", b, 100)), map[string]string{"203.0.113.1": a + "," + b}},
		// A stale release from a: the address's row loses its IP, so b
		// loses the address too.
		{batch(mk("release", "203.0.113.1", a, 300)), map[string]string{}},
		{batch(mk("commit", "203.0.113.1", b, 350)), map[string]string{"203.0.113.1": b}},
		// b moves to .2: its .1 record goes.
		{batch(mk("commit", "203.0.113.2", b, 400)), map[string]string{"203.0.113.2": b}},
		// An expiry for an unknown MAC does nothing.
		{batch(mk("expiry", "203.0.113.2", "02:00:00:00:00:0c", 500)), map[string]string{"203.0.113.2": b}},
		{batch(mk("release", "203.0.113.2", b, 600)), map[string]string{}},
	}
	for i, st := range steps {
		if ans := mustPost(t, c, s.URL(), st.body, "Idempotency-Key", "same"); ans.status != http.StatusNoContent {
			t.Fatalf("step %d: %d %s", i, ans.status, ans.raw)
		}
		got := map[string]string{}
		for ip, l := range s.Leases() {
			got[ip] = l.MAC
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("step %d: leases (-want +got):\n%s", i, diff)
		}
	}
	if n := len(s.Batches()); n != len(steps) {
		t.Errorf("%d batches with one Idempotency-Key, want %d: the key is ignored", n, len(steps))
	}
}

func TestRecordsAndWait(t *testing.T) {
	s, c := start(t, Options{})
	if !strings.HasPrefix(s.URL(), "https://127.0.0.1:") || !strings.HasSuffix(s.URL(), LeasesPath) {
		t.Errorf("URL %s", s.URL())
	}
	second := withKey("action", `"expiry"`)
	if a := mustPost(t, c, s.URL(), batch(good, second), "Idempotency-Key", "k1", "User-Agent", "leasekeeper/test"); a.status != http.StatusNoContent {
		t.Fatalf("status %d, want 204", a.status)
	}
	mustPost(t, c, s.URL(), batch(good, withKey("ip", `"nope"`)))
	want := []event.RegionItem{
		{Action: "commit", Family: "ipv4", Hostname: "h1", MAC: "02:00:00:0a:0b:0c", IP: "203.0.113.10", Timestamp: 1700000000, LeaseTime: 600},
		{Action: "expiry", Family: "ipv4", Hostname: "h1", MAC: "02:00:00:0a:0b:0c", IP: "203.0.113.10", Timestamp: 1700000000, LeaseTime: 600},
	}
	if diff := cmp.Diff(want, s.Items()); diff != "" {
		t.Errorf("Items (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, s.ItemsFor("203.0.113.10")); diff != "" {
		t.Errorf("ItemsFor (-want +got):\n%s", diff)
	}
	if b := s.Batches(); len(b) != 1 || b[0].IdempotencyKey != "k1" {
		t.Errorf("Batches = %+v", b)
	}
	r := s.Requests()
	if len(r) != 2 || r[0].UserAgent != "leasekeeper/test" || !r[0].Accepted || r[1].Accepted || r[1].Status != 422 ||
		r[0].Done.Before(r[0].At) {
		t.Errorf("Requests = %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.WaitItems(ctx, 2); err != nil {
		t.Error(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := s.WaitItems(ctx2, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitItems(3) = %v, want a deadline error", err)
	}
}

func TestParseSubnet(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: cidr and ranges, "" for an error
	}{
		{"198.18.0.0/15", "198.18.0.0/15 [198.18.0.0-198.19.255.255]"},
		{"203.0.113.7/24", "203.0.113.0/24 [203.0.113.0-203.0.113.255]"},
		{"2001:db8::/64=2001:db8::10-2001:db8::20", "2001:db8::/64 [2001:db8::10-2001:db8::20]"},
		{"203.0.113.0/24=", "203.0.113.0/24 []"},
		{"203.0.113.0/24=203.0.113.9-203.0.113.1", ""},
		{"203.0.113.0/24=198.51.100.1-198.51.100.2", ""},
		{"nonsense", ""},
	} {
		sub, err := ParseSubnet(tc.in)
		got := ""
		if err == nil {
			var rs []string
			for _, r := range sub.Ranges {
				rs = append(rs, r.String())
			}
			got = sub.CIDR.String() + " [" + strings.Join(rs, " ") + "]"
		}
		if got != tc.want {
			t.Errorf("ParseSubnet(%q) = %q (%v), want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := New(Options{Version: "3.5"}); err == nil {
		t.Error("MAAS 3.5 accepted: it has no internal leases API")
	}
}

func TestPKIFiles(t *testing.T) {
	dir := t.TempDir()
	p1, f1, err := LoadOrCreatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, f2, err := LoadOrCreatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f1 != f2 || string(p1.CAPEM) != string(p2.CAPEM) {
		t.Error("a second LoadOrCreatePKI did not reuse the files")
	}
	// An agent configured from the files talks to a stub using them.
	s, _ := start(t, Options{PKI: p2})
	cert, err := tls.LoadX509KeyPair(f1.ClientCert, f1.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if a := mustPost(t, client(&tls.Config{RootCAs: p1.CAPool(), Certificates: []tls.Certificate{cert}, ServerName: "maas"}), s.URL(), batch(good)); a.status != http.StatusNoContent {
		t.Errorf("status %d", a.status)
	}
}

func TestFaults(t *testing.T) {
	body := batch(good)
	t.Run("unavailable", func(t *testing.T) {
		s, c := start(t, Options{})
		s.Unavailable(time.Hour, "2")
		a := mustPost(t, c, s.URL(), body)
		if a.status != http.StatusServiceUnavailable || a.retryAfter != "2" {
			t.Errorf("got %d Retry-After %q, want 503 Retry-After 2", a.status, a.retryAfter)
		}
		s.ClearFaults()
		if a := mustPost(t, c, s.URL(), body); a.status != http.StatusNoContent {
			t.Errorf("after the window: status %d", a.status)
		}
		if s.Len() != 1 {
			t.Errorf("took %d items, want 1", s.Len())
		}
	})
	t.Run("skewed clock", func(t *testing.T) {
		host := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		s, c := start(t, Options{Clock: func() time.Time { return host }})
		s.SetSkew(-10 * time.Minute)
		s.FailNext(1, Fault{Status: http.StatusServiceUnavailable, RetryAt: 5 * time.Second})
		resp, err := c.Post(s.URL(), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get("Date"), "Thu, 01 Jan 2026 11:50:00 GMT"; got != want {
			t.Errorf("Date %q, want %q", got, want)
		}
		if got, want := resp.Header.Get("Retry-After"), "Thu, 01 Jan 2026 11:50:05 GMT"; got != want {
			t.Errorf("Retry-After %q, want %q", got, want)
		}
		s.ClearFaults()
		if !s.Now().Equal(host) {
			t.Errorf("after ClearFaults the clock is %s, want %s", s.Now(), host)
		}
	})
	t.Run("close", func(t *testing.T) {
		s, c := start(t, Options{})
		s.CloseFor(time.Hour)
		if _, err := post(t, c, s.URL(), body); err == nil {
			t.Error("no transport error while closing connections")
		}
		s.ClearFaults()
		if a := mustPost(t, c, s.URL(), body); a.status != http.StatusNoContent {
			t.Errorf("after ClearFaults: status %d", a.status)
		}
	})
	t.Run("lost answer", func(t *testing.T) {
		s, c := start(t, Options{})
		s.FailNext(1, Fault{Close: true, Accept: true})
		if _, err := post(t, c, s.URL(), body); err == nil {
			t.Error("no transport error")
		}
		if s.Len() != 1 {
			t.Errorf("took %d items, want 1 (accepted, answer lost)", s.Len())
		}
	})
	t.Run("next", func(t *testing.T) {
		s, c := start(t, Options{})
		s.FailNext(2, Fault{Status: http.StatusTooManyRequests, RetryAfter: "1"})
		var got []int
		for range 3 {
			got = append(got, mustPost(t, c, s.URL(), body).status)
		}
		if diff := cmp.Diff([]int{429, 429, 204}, got); diff != "" {
			t.Errorf("statuses (-want +got):\n%s", diff)
		}
	})
	t.Run("poison", func(t *testing.T) {
		s, c := start(t, Options{})
		s.Poison("203.0.113.10", 0)
		other := withKey("ip", `"203.0.113.11"`)
		if a := mustPost(t, c, s.URL(), batch(other, good)); a.status != http.StatusInternalServerError || a.body.Message != MsgInternalError {
			t.Errorf("poisoned batch: %d %s, want MAAS's 500", a.status, a.raw)
		}
		if a := mustPost(t, c, s.URL(), batch(other)); a.status != http.StatusNoContent {
			t.Errorf("clean batch: status %d", a.status)
		}
		s.Unpoison("203.0.113.10")
		if a := mustPost(t, c, s.URL(), body); a.status != http.StatusNoContent {
			t.Errorf("after Unpoison: status %d", a.status)
		}
		if s.Len() != 2 {
			t.Errorf("took %d items, want 2", s.Len())
		}
	})
	t.Run("slow region finishes without the client", func(t *testing.T) {
		s, _ := start(t, Options{})
		s.SetDelay(300 * time.Millisecond)
		impatient := client(s.ClientTLSConfig())
		impatient.Timeout = 50 * time.Millisecond
		if _, err := post(t, impatient, s.URL(), body); err == nil {
			t.Fatal("answered within 50ms despite the delay")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.WaitItems(ctx, 1); err != nil {
			t.Errorf("the batch whose client left was not applied: %v", err)
		}
	})
	t.Run("flaky", func(t *testing.T) {
		s, c := start(t, Options{})
		s.SetFlaky(0.5, 7)
		ok := 0
		for range 40 {
			if a, err := post(t, c, s.URL(), body); err == nil && a.status == http.StatusNoContent {
				ok++
			}
		}
		if ok == 0 || ok == 40 {
			t.Errorf("%d of 40 requests succeeded at 50%% failures", ok)
		}
		failed := 0
		for _, r := range s.Requests() {
			if r.Fault != "" {
				failed++
			}
		}
		// A connection a previous fault closed can fail on the client
		// before the stub sees the request: faults + successes may fall
		// short of 40, never exceed it, and faults must be recorded.
		if failed == 0 || failed+ok > 40 {
			t.Errorf("%d faults recorded + %d successes; want some faults and at most 40 in all", failed, ok)
		}
	})
}

func TestControlHandler(t *testing.T) {
	s, c := start(t, Options{Subnets: []Subnet{}})
	ctl := httptest.NewServer(s.ControlHandler())
	defer ctl.Close()
	do := func(method, path string) int {
		req, _ := http.NewRequest(method, ctl.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a := mustPost(t, c, s.URL(), batch(good)); a.status != 500 {
		t.Errorf("no subnets: status %d, want 500", a.status)
	}
	if code := do("POST", "/subnets?add=203.0.113.0/24"); code != 200 {
		t.Fatalf("/subnets: %d", code)
	}
	if code := do("POST", "/fail?next=1&status=503"); code != 200 {
		t.Fatalf("/fail: %d", code)
	}
	if a := mustPost(t, c, s.URL(), batch(good)); a.status != 503 {
		t.Errorf("status %d, want the injected 503", a.status)
	}
	for _, p := range []string{"/fail?for=x", "/fail?for=1s&status=999", "/delay?d=x", "/flaky?p=2", "/subnets?add=x"} {
		if code := do("POST", p); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", p, code)
		}
	}
	do("POST", "/poison?ip=203.0.113.10")
	if a := mustPost(t, c, s.URL(), batch(good)); a.status != 500 {
		t.Errorf("poisoned: status %d, want 500", a.status)
	}
	do("POST", "/clear")
	mustPost(t, c, s.URL(), batch(good))
	get := func(path string, v any) {
		resp, err := http.Get(ctl.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	var items []event.RegionItem
	if get("/items?ip=203.0.113.10", &items); len(items) != 1 {
		t.Errorf("/items: %v", items)
	}
	var leases map[string]Lease
	if get("/leases", &leases); leases["203.0.113.10"].MAC != "02:00:00:0a:0b:0c" {
		t.Errorf("/leases: %v", leases)
	}
	if code := do("DELETE", "/subnets?cidr=203.0.113.0/24"); code != 200 || len(s.Subnets()) != 0 {
		t.Errorf("DELETE /subnets: %d, %v left", code, s.Subnets())
	}
}

// TestRackFiles: each rack's own agent certificate (WriteRackFiles), and
// the region's record of which rack sent each batch (Batch.ClientCN).
// MAAS signs one agent certificate per rack, its CN the agent's UUID
// (src/maasapiserver/v3/api/internal/handlers/agent.py), and reads the CN
// from the request scope (src/maasapiserver/tls.py).
func TestRackFiles(t *testing.T) {
	s, _ := start(t, Options{Version: "3.8"})
	const cn1, cn2 = "0a9e0000-1eae-4eee-8000-000000000011", "0a9e0000-1eae-4eee-8000-000000000012"
	for _, cn := range []string{cn1, cn2} {
		f, err := s.WriteRackFiles(filepath.Join(t.TempDir(), "pki"), cn)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		c := client(&tls.Config{RootCAs: s.PKI().CAPool(), Certificates: []tls.Certificate{cert}, ServerName: ServerName})
		if a := mustPost(t, c, s.URL(), batch(good)); a.status != http.StatusNoContent {
			t.Fatalf("%s: status %d", cn, a.status)
		}
	}
	b := s.Batches()
	if len(b) != 2 || b[0].ClientCN != cn1 || b[1].ClientCN != cn2 {
		t.Errorf("batches' senders %+v, want %s then %s", b, cn1, cn2)
	}
}
