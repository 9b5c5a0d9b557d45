package maasapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Allocation types of a MAAS StaticIPAddress (src/maascommon/enums/ipaddress.py).
const (
	AllocAuto         = 0
	AllocSticky       = 1
	AllocUserReserved = 4
	AllocDHCP         = 5
	AllocDiscovered   = 6 // "Observed" in the UI: learnt from a lease
)

// Errors a caller branches on.
var (
	// ErrAbsent: a forced release found no record of that type for the
	// address ("IP address … does not exist."): nothing left to free.
	ErrAbsent = errors.New("maas: no such address record")
	// ErrForbidden: the key's user lacks the permission (not an
	// administrator).
	ErrForbidden = errors.New("maas: the region does not allow this API key's user to do this (403)")
	// ErrUnauthorized: MAAS does not know the key (revoked, mistyped).
	ErrUnauthorized = errors.New("maas: the API key was refused (401)")
)

// StatusError is an answer the client did not expect.
type StatusError struct {
	Op     string
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("maas: %s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Body)
}

// IsClockSkew reports whether err is MAAS refusing a request because its
// OAuth timestamp is more than 300 s older than the region's clock: a 401
// "Expired timestamp" (piston3's OAuthServer checks it before the
// signature; MAAS's src/maasserver/nonces_cleanup.py reads its
// timestamp_threshold). This host's clock is behind the region's; the key
// may be right.
func IsClockSkew(err error) bool {
	return errors.Is(err, ErrUnauthorized) && strings.Contains(err.Error(), "Expired timestamp")
}

// IsMisdirected reports whether err says the client's URL does not lead
// to the region's API 2.0: a redirect (never followed, see New) or a 404.
// MAAS's handlers for the calls made here answer an address they do not
// know with 400 "does not exist" or an empty list, never 404
// (src/maasserver/api/ip_addresses.py, release and read: release's
// docstring lists a 404 its code never raises), so a 404 is a path the
// server does not serve (maas.api_url without /MAAS/, or not the
// region). Retrying does not mend it; the configuration does.
func IsMisdirected(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Status >= 300 && se.Status < 400 || se.Status == http.StatusNotFound)
}

// CertProblem says what is wrong with the region's TLS certificate, or
// with its port, when err is a handshake that failed on it ("" when it
// is not): the configuration, not an outage, and waiting does not mend
// it. A MAAS with TLS serves the operator's certificate (`maas
// config-tls enable KEY CERT --cacert CA`: src/maasserver/management/
// commands/config_tls.py), often from a private CA the system's roots do
// not hold.
func CertProblem(err error) string {
	if err == nil {
		return ""
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknownCA):
		return "the region's certificate is not signed by a CA this rack trusts: set maas.ca_file to the CA certificate that signed it (the one maas config-tls enable took with --cacert)"
	case errors.As(err, &hostname):
		names := certNames(hostname.Certificate)
		if names == "" {
			return fmt.Sprintf("the region's certificate names no host (no subject alternative name; the common name is not checked): it needs one for %s", hostname.Host)
		}
		return fmt.Sprintf("the region's certificate is for %s, not %s: use one of its names in maas.api_url", names, hostname.Host)
	case errors.As(err, &invalid):
		// An expired one is told from the certificate, not by
		// invalid.Error(), which names the current time: a reason that
		// changes at every attempt reads as a new problem.
		if c := invalid.Cert; invalid.Reason == x509.Expired && c != nil {
			return fmt.Sprintf("the region's certificate is valid from %s to %s only: renew it, or check this rack's clock", c.NotBefore.UTC().Format(time.DateTime), c.NotAfter.UTC().Format(time.DateTime))
		}
		return "the region's certificate is refused: " + invalid.Error()
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the region's port does not speak TLS: https://REGION:5443/MAAS/ is MAAS's TLS port, http://REGION:5240/MAAS/ its plain one"
	}
	return ""
}

// certNames lists the names a certificate is valid for ("" for none):
// its DNS and IP subject alternative names (Go checks no common name).
func certNames(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	names := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return strings.Join(names, ", ")
}

// IsInternalError reports whether err is the region's 500 answer (an
// exception in its code, as against 502–504 from nginx or a busy region).
func IsInternalError(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusInternalServerError
}

// Client talks to one region's API 2.0.
type Client struct {
	base string // …/MAAS/api/2.0/
	key  Key
	http *http.Client
	ua   string
}

// New returns a client for apiURL, the URL `maas login` takes
// ("http://REGION:5240/MAAS/", with or without "api/2.0/"). hc nil means
// http.DefaultClient.
func New(apiURL string, key Key, hc *http.Client, userAgent string) (*Client, error) {
	base, err := BaseURL(apiURL)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	// A redirect is never followed: Go follows a 301 or 302 to a POST
	// with a GET without the form, and a release would then "succeed"
	// by listing addresses (a MAAS with TLS redirects its plain-HTTP
	// /MAAS to its TLS port: src/maasserver/templates/http/
	// regiond.nginx.conf.template). do reports the redirect instead.
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: base, key: key, http: &c, ua: userAgent}, nil
}

// expectedBase starts what MAAS's OAuth library appends to a 401 for a
// wrong signature: the signature base string it expected, which for
// PLAINTEXT is the signature itself, "&" and the token's secret (the
// python-oauth code piston3 carries, OAuthServer._check_signature;
// MAAS's src/maasserver/api/auth.py OAuthUnauthorized passes it on as
// "Authorization Error: %r").
const expectedBase = "Expected signature base string"

// WithoutSecret cuts what the region appended to a wrong signature's
// 401, the key's real secret: an answer's text goes to the log, the
// job's reason in the outbox and /status, which the key's secret must
// not.
func WithoutSecret(text string) string {
	i := strings.Index(text, expectedBase)
	if i < 0 {
		return text
	}
	return text[:i] + "(the signature the region expected, the key's secret, left out)"
}

// BaseURL is the API 2.0 root for the URL maas login takes.
func BaseURL(apiURL string) (string, error) {
	u, err := url.Parse(apiURL)
	if err != nil {
		return "", fmt.Errorf("maas api_url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("maas api_url %q: want http(s)://REGION:5240/MAAS/", apiURL)
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/api/2.0")
	u.Path = p + "/api/2.0/"
	return u.String(), nil
}

// Base is the API 2.0 root the client uses.
func (c *Client) Base() string { return c.base }

// User is what whoami returns (the fields used).
type User struct {
	Username    string `json:"username"`
	IsSuperuser bool   `json:"is_superuser"`
}

// Whoami returns the key's user (GET users/?op=whoami).
func (c *Client) Whoami(ctx context.Context) (User, error) {
	var u User
	err := c.do(ctx, "whoami", http.MethodGet, "users/?op=whoami", nil, &u)
	return u, err
}

// Interface is an interface in an address record (the fields used).
type Interface struct {
	ID         int    `json:"id"`
	Name       string `json:"name"`
	MACAddress string `json:"mac_address"`
}

// IPAddress is one record of GET ipaddresses/ (the fields used).
type IPAddress struct {
	IP            string      `json:"ip"`
	AllocType     int         `json:"alloc_type"`
	AllocTypeName string      `json:"alloc_type_name"`
	Interfaces    []Interface `json:"interface_set"`
}

// MACs are the record's interfaces' MAC addresses.
func (a IPAddress) MACs() []string {
	out := make([]string, 0, len(a.Interfaces))
	for _, i := range a.Interfaces {
		out = append(out, strings.ToLower(i.MACAddress))
	}
	return out
}

// Records returns every record MAAS has for ip, of any type (GET
// ipaddresses/?ip=IP&all=true; all needs an administrator's key, or only
// the user's own reservations are listed).
func (c *Client) Records(ctx context.Context, ip netip.Addr) ([]IPAddress, error) {
	var out []IPAddress
	q := url.Values{"ip": {ip.String()}, "all": {"true"}}
	err := c.do(ctx, "read "+ip.String(), http.MethodGet, "ipaddresses/?"+q.Encode(), nil, &out)
	return out, err
}

// ReleaseDiscovered frees the DISCOVERED record of ip (POST ipaddresses/
// op=release ip force=true discovered=true). ErrAbsent when there is none.
func (c *Client) ReleaseDiscovered(ctx context.Context, ip netip.Addr) error {
	form := url.Values{"op": {"release"}, "ip": {ip.String()}, "force": {"true"}, "discovered": {"true"}}
	return c.do(ctx, "release "+ip.String(), http.MethodPost, "ipaddresses/", form, nil)
}

func (c *Client) do(ctx context.Context, op, method, path string, form url.Values, out any) error {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", c.key.Sign())
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("maas: %s: %w", op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("maas: %s: reading the answer: %w", op, err)
	}
	text := WithoutSecret(strings.TrimSpace(string(b)))
	if len(text) > 300 {
		text = text[:300] + "…"
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest && strings.Contains(text, "does not exist"):
		return fmt.Errorf("%w: %s", ErrAbsent, text)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return &StatusError{Op: op, Status: resp.StatusCode, Body: fmt.Sprintf("the region redirects to %q: set maas.api_url to the URL the region answers itself (a MAAS with TLS redirects http://REGION:5240/MAAS/ to its TLS port)", resp.Header.Get("Location"))}
	case resp.StatusCode == http.StatusNotFound:
		return &StatusError{Op: op, Status: resp.StatusCode, Body: fmt.Sprintf("no such path at %s: set maas.api_url to the region's MAAS URL, http://REGION:5240/MAAS/ (https://REGION:5443/MAAS/ with TLS); it answered: %s", c.base, text)}
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: %s", ErrForbidden, text)
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%w: %s", ErrUnauthorized, text)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return &StatusError{Op: op, Status: resp.StatusCode, Body: text}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("maas: %s: answer is not the JSON expected: %w", op, err)
		}
	}
	return nil
}
