package regionstub

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/leasekeeper/leasekeeper/agent/event"
)

const good = `{"action":"commit","ip_family":"ipv4","hostname":"h1","mac":"02:00:00:0a:0b:0c","ip":"203.0.113.10","timestamp":1700000000,"lease_time":600}`

// item returns good with key k replaced by the raw JSON v, or removed when v is "".
func item(k, v string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(good), &m); err != nil {
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

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		ok    bool
		n     int // items when valid
		index int // of the error
		field string
	}{
		{name: "one item", ok: true, body: "[" + good + "]", n: 1},
		{name: "empty batch", ok: true, body: "[]", n: 0},
		{name: "two items", ok: true, body: "[" + good + "," + item("action", `"expiry"`) + "]", n: 2},
		{name: "ipv6", ok: true, body: "[" + `{"action":"release","ip_family":"ipv6","hostname":"","mac":"02:00:00:0a:0b:0c","ip":"2001:db8::7","timestamp":0,"lease_time":0}]`, n: 1},
		{name: "infiniband mac", ok: true, body: "[" + item("mac", `"80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c"`) + "]", n: 1},
		{name: "unicode hostname", ok: true, body: "[" + item("hostname", `"hôte-\u00e9"`) + "]", n: 1},

		{name: "object not array", body: good, index: -1},
		{name: "garbage", body: "[{", index: -1},
		{name: "item not object", body: `[` + good + `, 7]`, index: 1},
		{name: "null item", body: `[null]`, index: 0},
		{name: "missing action", body: "[" + item("action", "") + "]", field: "action"},
		{name: "missing hostname", body: "[" + item("hostname", "") + "]", field: "hostname"},
		{name: "missing lease_time", body: "[" + item("lease_time", "") + "]", field: "lease_time"},
		{name: "extra key", body: "[" + item("timestamp_ns", "1") + "]", field: "timestamp_ns"},
		{name: "unknown action", body: "[" + item("action", `"renew"`) + "]", field: "action"},
		{name: "unknown family", body: "[" + item("ip_family", `"ipv5"`) + "]", field: "ip_family"},
		{name: "mac unpadded", body: "[" + item("mac", `"2:0:0:a:b:c"`) + "]", field: "mac"},
		{name: "mac upper case", body: "[" + item("mac", `"02:00:00:0A:0B:0C"`) + "]", field: "mac"},
		{name: "mac short", body: "[" + item("mac", `"02:00:00:0a:0b"`) + "]", field: "mac"},
		{name: "mac empty", body: "[" + item("mac", `""`) + "]", field: "mac"},
		{name: "bad ip", body: "[" + item("ip", `"203.0.113.300"`) + "]", field: "ip"},
		{name: "ip with zone", body: "[" + item("ip", `"fe80::1%eth0"`) + "]", field: "ip"},
		{name: "v6 address as ipv4", body: "[" + item("ip", `"2001:db8::1"`) + "]", field: "ip"},
		{name: "v4 address as ipv6", body: `[{"action":"commit","ip_family":"ipv6","hostname":"","mac":"02:00:00:0a:0b:0c","ip":"203.0.113.1","timestamp":1,"lease_time":1}]`, field: "ip"},
		{name: "v4-mapped as ipv6", body: `[{"action":"commit","ip_family":"ipv6","hostname":"","mac":"02:00:00:0a:0b:0c","ip":"::ffff:203.0.113.1","timestamp":1,"lease_time":1}]`, field: "ip"},
		{name: "timestamp string", body: "[" + item("timestamp", `"1700000000"`) + "]", field: "timestamp"},
		{name: "timestamp float", body: "[" + item("timestamp", `1.5`) + "]", field: "timestamp"},
		{name: "lease_time negative", body: "[" + item("lease_time", `-1`) + "]", field: "lease_time"},
		{name: "lease_time null", body: "[" + item("lease_time", `null`) + "]", field: "lease_time"},
		{name: "hostname null", body: "[" + item("hostname", `null`) + "]", field: "hostname"},
		{name: "hostname number", body: "[" + item("hostname", `5`) + "]", field: "hostname"},
		{name: "action bool", body: "[" + item("action", `true`) + "]", field: "action"},
		{name: "second item bad", body: "[" + good + "," + item("mac", `"zz"`) + "]", index: 1, field: "mac"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, err := Validate([]byte(tc.body))
			if tc.ok {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if len(items) != tc.n {
					t.Fatalf("got %d items, want %d", len(items), tc.n)
				}
				return
			}
			var ie *ItemError
			if !errors.As(err, &ie) {
				t.Fatalf("Validate = %v, want an *ItemError", err)
			}
			if ie.Index != tc.index || ie.Field != tc.field {
				t.Errorf("error at item %d field %q (%v), want item %d field %q", ie.Index, ie.Field, err, tc.index, tc.field)
			}
		})
	}
}

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
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
}

type answer struct {
	status     int
	retryAfter string
	body       apiError
}

func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (answer, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
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
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	b, _ := io.ReadAll(resp.Body)
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

func TestAcceptsAndRecords(t *testing.T) {
	s, c := start(t, Options{})
	if !strings.HasPrefix(s.URL(), "https://127.0.0.1:") || !strings.HasSuffix(s.URL(), DefaultPath) {
		t.Errorf("URL %s", s.URL())
	}
	second := item("action", `"expiry"`)
	if a := mustPost(t, c, s.URL(), "["+good+","+second+"]", "Idempotency-Key", "k1", "User-Agent", "leasekeeper/test"); a.status != http.StatusNoContent {
		t.Fatalf("status %d, want 204", a.status)
	}
	// A bad item fails its whole batch: nothing of it is recorded.
	a := mustPost(t, c, s.URL(), "["+good+","+item("ip", `"nope"`)+"]")
	if a.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422", a.status)
	}
	if len(a.body.Details) != 1 || a.body.Details[0].Field != "ip" || a.body.Details[0].Index == nil || *a.body.Details[0].Index != 1 {
		t.Errorf("422 body %+v does not name item 1, field ip", a.body)
	}
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
	if got := s.ItemsFor("203.0.113.11"); len(got) != 0 {
		t.Errorf("ItemsFor another IP = %v", got)
	}
	b := s.Batches()
	if len(b) != 1 || b[0].IdempotencyKey != "k1" {
		t.Errorf("Batches = %+v", b)
	}
	r := s.Requests()
	if len(r) != 2 || r[0].UserAgent != "leasekeeper/test" || !r[0].Accepted || r[1].Accepted || r[1].Status != 422 {
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

func TestProtocolErrors(t *testing.T) {
	s, c := start(t, Options{})
	if a := mustPost(t, c, s.URL(), "["+good+"]", "Content-Type", "text/plain"); a.status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: status %d, want 415", a.status)
	}
	resp, err := c.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
	if a := mustPost(t, c, strings.TrimSuffix(s.URL(), "leases")+"other", "["+good+"]"); a.status != http.StatusNotFound {
		t.Errorf("other path: status %d, want 404", a.status)
	}
	if s.Len() != 0 {
		t.Errorf("recorded %d items", s.Len())
	}
}

func TestCustomPath(t *testing.T) {
	s, c := start(t, Options{Path: "/region/leases"})
	if a := mustPost(t, c, s.URL(), "["+good+"]"); a.status != http.StatusNoContent || !strings.HasSuffix(s.URL(), "/region/leases") {
		t.Errorf("%s: status %d", s.URL(), a.status)
	}
}

func TestAuth(t *testing.T) {
	anon := func(s *Server) *http.Client { return client(&tls.Config{RootCAs: s.PKI().CAPool()}) }
	t.Run("client cert required", func(t *testing.T) {
		s, c := start(t, Options{})
		if _, err := post(t, anon(s), s.URL(), "["+good+"]"); err == nil {
			t.Error("a client without a certificate was answered")
		}
		// A certificate from another CA is refused too.
		other, err := NewPKI()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := post(t, client(&tls.Config{RootCAs: s.PKI().CAPool(), Certificates: []tls.Certificate{other.ClientCertificate()}}), s.URL(), "["+good+"]"); err == nil {
			t.Error("a client with a foreign certificate was answered")
		}
		if a := mustPost(t, c, s.URL(), "["+good+"]"); a.status != http.StatusNoContent {
			t.Errorf("with the client cert: status %d", a.status)
		}
		if s.Len() != 1 {
			t.Errorf("recorded %d items, want 1", s.Len())
		}
	})
	t.Run("token or cert", func(t *testing.T) {
		s, c := start(t, Options{Token: "s3cret"})
		for _, tc := range []struct {
			name string
			c    *http.Client
			hdr  []string
			want int
		}{
			{"nothing", anon(s), nil, http.StatusUnauthorized},
			{"wrong token", anon(s), []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
			{"not bearer", anon(s), []string{"Authorization", "Basic s3cret"}, http.StatusUnauthorized},
			{"token", anon(s), []string{"Authorization", "Bearer s3cret"}, http.StatusNoContent},
			{"cert", c, nil, http.StatusNoContent},
		} {
			if a := mustPost(t, tc.c, s.URL(), "["+good+"]", tc.hdr...); a.status != tc.want {
				t.Errorf("%s: status %d, want %d", tc.name, a.status, tc.want)
			}
		}
		if s.Len() != 2 {
			t.Errorf("recorded %d items, want 2", s.Len())
		}
	})
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
	if a := mustPost(t, client(&tls.Config{RootCAs: p1.CAPool(), Certificates: []tls.Certificate{cert}}), s.URL(), "["+good+"]"); a.status != http.StatusNoContent {
		t.Errorf("status %d", a.status)
	}
}

func TestFaults(t *testing.T) {
	body := "[" + good + "]"
	t.Run("unavailable", func(t *testing.T) {
		s, c := start(t, Options{})
		s.Unavailable(300*time.Millisecond, "2")
		a := mustPost(t, c, s.URL(), body)
		if a.status != http.StatusServiceUnavailable || a.retryAfter != "2" {
			t.Errorf("got %d Retry-After %q, want 503 Retry-After 2", a.status, a.retryAfter)
		}
		time.Sleep(350 * time.Millisecond)
		if a := mustPost(t, c, s.URL(), body); a.status != http.StatusNoContent {
			t.Errorf("after the window: status %d", a.status)
		}
		if s.Len() != 1 {
			t.Errorf("recorded %d items, want 1", s.Len())
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
		if s.Len() != 1 {
			t.Errorf("recorded %d items, want 1", s.Len())
		}
	})
	t.Run("lost answer", func(t *testing.T) {
		s, c := start(t, Options{})
		s.FailNext(1, Fault{Close: true, Accept: true})
		if _, err := post(t, c, s.URL(), body); err == nil {
			t.Error("no transport error")
		}
		if s.Len() != 1 {
			t.Errorf("recorded %d items, want 1 (accepted, answer lost)", s.Len())
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
		other := item("ip", `"203.0.113.11"`)
		a := mustPost(t, c, s.URL(), "["+other+","+good+"]")
		if a.status != http.StatusNotFound || len(a.body.Details) != 1 || *a.body.Details[0].Index != 1 {
			t.Errorf("poisoned batch: %d %+v, want 404 naming item 1", a.status, a.body)
		}
		if a := mustPost(t, c, s.URL(), "["+other+"]"); a.status != http.StatusNoContent {
			t.Errorf("clean batch: status %d", a.status)
		}
		s.Unpoison("203.0.113.10")
		if a := mustPost(t, c, s.URL(), body); a.status != http.StatusNoContent {
			t.Errorf("after Unpoison: status %d", a.status)
		}
		if s.Len() != 2 {
			t.Errorf("recorded %d items, want 2", s.Len())
		}
	})
	t.Run("slow", func(t *testing.T) {
		s, c := start(t, Options{})
		s.SetDelay(200 * time.Millisecond)
		t0 := time.Now()
		if a := mustPost(t, c, s.URL(), body); a.status != http.StatusNoContent {
			t.Errorf("status %d", a.status)
		}
		if d := time.Since(t0); d < 200*time.Millisecond {
			t.Errorf("answered in %v, want ≥ 200ms", d)
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
	s, c := start(t, Options{})
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
	if code := do("POST", "/fail?next=1&status=500"); code != 200 {
		t.Fatalf("/fail: %d", code)
	}
	if a := mustPost(t, c, s.URL(), "["+good+"]"); a.status != 500 {
		t.Errorf("status %d, want the injected 500", a.status)
	}
	for _, p := range []string{"/fail?for=x", "/fail?for=1s&status=999", "/delay?d=x", "/flaky?p=2"} {
		if code := do("POST", p); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", p, code)
		}
	}
	do("POST", "/poison?ip=203.0.113.10")
	if a := mustPost(t, c, s.URL(), "["+good+"]"); a.status != 404 {
		t.Errorf("poisoned: status %d, want 404", a.status)
	}
	do("POST", "/clear")
	mustPost(t, c, s.URL(), "["+good+"]")
	resp, err := http.Get(ctl.URL + "/items?ip=203.0.113.10")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var items []event.RegionItem
	if err := json.NewDecoder(resp.Body).Decode(&items); err != nil || len(items) != 1 {
		t.Errorf("/items: %v %v", items, err)
	}
}
