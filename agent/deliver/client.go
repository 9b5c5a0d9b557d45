package deliver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/agent/config"
)

// MaxRetryAfter caps a region's Retry-After: beyond it the agent retries
// anyway (a clock skew or a typo must not stall delivery for a day).
const MaxRetryAfter = 10 * time.Minute

// How a dead region is noticed on an open connection: TCP keepalive
// probes after keepIdle of silence, every keepInterval, keepCount of them;
// and unacknowledged data gives up after userTimeout. So a request waiting
// for a slow but live region waits, and one whose peer vanished fails
// within about half a minute.
//
// An idle connection is kept for idleTimeout, under the 5 s after which
// MAAS's internal API server (uvicorn, no timeout_keep_alive:
// src/maasapiserver/app.py) closes one: a request written as the server
// closes its idle connection fails unanswered and, the region being
// unable to say it never read it, counts as perhaps applied.
const (
	idleTimeout  = 3 * time.Second
	keepIdle     = 10 * time.Second
	keepInterval = 5 * time.Second
	keepCount    = 3
	userTimeout  = keepIdle + keepInterval*keepCount
)

// MAAS facts the hints name (docs/design.md, "Region API — MAAS as it really is").
const (
	maasPort     = config.MAASRegionPort
	maasCertDir  = config.MAASCertDir
	maasHintCert = "on a MAAS rack: agent.crt and agent.key in " + maasCertDir + " (MAAS 3.8+), cluster.pem and cluster.key before 3.8"
)

// tlsConfig builds the client side TLS: the CA to trust (the system's
// roots when CAFile is empty), the name to verify in the region's
// certificate (ServerName; the URL's host when empty) and the client
// certificate, if any. The chain and the name are both verified: MAAS's
// own agent skips the name, but its certificate names "maas", so
// server_name = "maas" verifies it without giving up the check.
func tlsConfig(cfg *Config, host string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if cfg.ServerName != "" {
		c.ServerName = cfg.ServerName
	}
	// The CA's problem and the client certificate's are told together:
	// one a run, an operator mended them one restart at a time (a cold
	// review).
	var errs []error
	if cfg.CAFile != "" {
		pem, err := readRegionFile(cfg.CAFile)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ca_file: %w%s", err, maasFileHint(cfg.CAFile, err)))
		case !pool.AppendCertsFromPEM(pem):
			errs = append(errs, fmt.Errorf("ca_file %s: no PEM certificate in it", cfg.CAFile))
		default:
			c.RootCAs = pool
		}
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.Join(append(errs, errors.New("cert_file and key_file go together: set both or neither"))...)
	}
	if cfg.CertFile != "" {
		if pair, err := clientPair(cfg); err != nil {
			errs = append(errs, err)
		} else {
			c.Certificates = []tls.Certificate{pair}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// clientPair reads the client certificate and its key.
func clientPair(cfg *Config) (tls.Certificate, error) {
	certPEM, err := readRegionFile(cfg.CertFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file/key_file: %w%s", err, maasFileHint(cfg.CertFile, err))
	}
	keyPEM, err := readRegionFile(cfg.KeyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file/key_file: %w%s", err, maasFileHint(cfg.KeyFile, err))
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file/key_file %s, %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	return pair, nil
}

// credentialWarnings are what is wrong, but not fatal, with the rack's
// credentials tc was built from: a private key others may read, a client
// certificate out of its validity (the region will refuse it; said at
// start and on reload, not first at the first refused handshake).
func credentialWarnings(cfg *Config, tc *tls.Config, now time.Time) []string {
	var out []string
	if cfg.KeyFile != "" {
		if fi, err := os.Stat(cfg.KeyFile); err == nil && fi.Mode().Perm()&0o007 != 0 {
			out = append(out, fmt.Sprintf("region.key_file %s has mode %04o: other users can read the rack's private key; chmod o-rwx it (0600, or 0640 with the agent's group)", cfg.KeyFile, fi.Mode().Perm()))
		}
	}
	if tc == nil || len(tc.Certificates) == 0 || tc.Certificates[0].Leaf == nil {
		return out
	}
	const day = "2006-01-02 15:04 UTC"
	switch leaf := tc.Certificates[0].Leaf; {
	case now.After(leaf.NotAfter):
		out = append(out, fmt.Sprintf("region.cert_file %s expired on %s: the region will refuse it; renew the rack's certificate (%s)", cfg.CertFile, leaf.NotAfter.UTC().Format(day), maasHintCert))
	case now.Before(leaf.NotBefore):
		out = append(out, fmt.Sprintf("region.cert_file %s is valid from %s only: check this rack's clock (timedatectl)", cfg.CertFile, leaf.NotBefore.UTC().Format(day)))
	}
	return out
}

// readRegionFile reads ca_file, cert_file or key_file. When the agent may
// not read it — a MAAS rack keeps its key for MAAS's user only — but
// systemd passed the service a credential of the same base name
// (LoadCredential=agent.key:/var/lib/maas/certificates/agent.key; systemd
// reads the file as root and hands the service a private copy), that copy
// is read instead.
func readRegionFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil || !errors.Is(err, os.ErrPermission) {
		return b, err
	}
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		if c, cerr := os.ReadFile(filepath.Join(dir, filepath.Base(path))); cerr == nil {
			return c, nil
		}
	}
	return nil, err
}

// maasFileHint says what to do about a region file the agent cannot read:
// one of MAAS's (by default) that is missing, or that MAAS keeps from the
// agent's user.
func maasFileHint(path string, err error) string {
	switch {
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf(" (read as user %s; MAAS keeps its rack key for MAAS only: have systemd pass it to the agent, LoadCredential=%s:%s, see README.Debian; --print-config outside the service reads it as root)",
			userName(), filepath.Base(path), path)
	case errors.Is(err, os.ErrNotExist) && strings.HasPrefix(path, maasCertDir+"/"):
		return " (the defaults are a MAAS 3.8+ deb rack's; MAAS 3.6 and 3.7 keep cluster.pem, cluster.key and cacerts.pem there, a snap under /var/snap/maas: see [region] in `leasekeeper agent --print-reference`)"
	}
	return ""
}

// userName is this process's user: its uid's name (not $USER, which
// sudo and su may leave as another user's), or the uid.
func userName() string {
	uid := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(uid); err == nil {
		return u.Username
	}
	return uid
}

// newHTTPClient makes the client for one configuration. Timeout bounds
// connecting and the TLS handshake; once a request is sent the answer is
// awaited as long as the connection is alive (TCP keepalive and
// TCP_USER_TIMEOUT notice a dead peer), up to answerTimeout per attempt
// (set on the request's context): re-sending a batch the region may still
// be applying could land the older copy after a newer batch.
func newHTTPClient(cfg *Config, tc *tls.Config) *http.Client {
	dialer := &net.Dialer{
		Timeout:         cfg.Timeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepIdle, Interval: keepInterval, Count: keepCount},
		Control: func(network, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout/time.Millisecond))
			})
			return errors.Join(err, serr)
		},
	}
	t := &http.Transport{
		// No proxy, whatever HTTPS_PROXY says: the region is reached
		// directly, as MAAS's own rack agent reaches it (its client's
		// Transport sets none: src/maasagent/internal/client/client.go).
		// A proxy set for apt or snap in systemd's DefaultEnvironment
		// must not carry the rack's leases, nor refuse them (a CONNECT
		// to port 5242 is refused by most proxies' defaults).
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: cfg.Timeout,
		MaxIdleConns:        2,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     idleTimeout,
		ForceAttemptHTTP2:   false, // MAAS's uvicorn speaks HTTP/1.1
		// A batch of 100 events is ~15 KiB of JSON: with the
		// default 4 KiB buffer the request went out as four or five TLS
		// records, each a write(2) of its own; with 64 KiB, as one or
		// two (16 KiB is a record's most).
		WriteBufferSize: 64 << 10,
	}
	return &http.Client{
		Transport: t,
		// A redirect is a misconfiguration; following it would turn the
		// POST into a GET (or, for a 307, deliver somewhere not
		// configured). Surface it instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// readToken reads token_file with the one implementation of the checks
// (config.ReadToken: a regular file, mode 0600 or stricter, one token).
func readToken(path string) (string, error) {
	tok, err := config.ReadToken(path)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	return tok, nil
}

// kind is what an attempt's outcome means for the batch.
type kind int

const (
	kindOK      kind = iota // 2xx: delivered
	kindRefused             // 422: an item fails the region's schema
	kindFailed              // 500, or MAAS's service-layer 404: the region could not apply the batch (a poison item, or the region itself)
	kindOutage              // no answer, or 408, 429, 502, 503, 504 and other 5xx: wait and retry
	kindConfig              // the agent's configuration is wrong (3xx, 4xx, TLS trust): retry, never dead-letter
)

// Results of one attempt, the result label of delivery_attempts_total.
var resultLabel = [...]string{
	kindOK:      "ok",
	kindRefused: "rejected",
	kindFailed:  "failed",
	kindOutage:  "retry",
	kindConfig:  "error",
}

// outcome is one attempt's result.
type outcome struct {
	kind       kind
	status     int           // 0 without an answer
	what       string        // "HTTP 500: {…}" or the transport error: what happened
	hint       string        // what an operator can do about it
	retryAfter time.Duration // from Retry-After, when retryAfterOK
	retryOK    bool
	// down: no connection to the region could be made (probe.go): its
	// return is watched for during the wait.
	down bool
}

// classify decides what an answer means. MAAS answers 204 on success,
// 422 for a batch failing its schema, 500 when an item cannot be placed
// (or the region itself fails), 403 without a client certificate; a
// public port (5240, 5443) has no such path (404/405).
func classify(resp *http.Response, answer string, now time.Time, u *url.URL) outcome {
	c := resp.StatusCode
	o := outcome{status: c, what: fmt.Sprintf("HTTP %d", c)}
	if answer != "" {
		o.what += ": " + answer
	}
	// A Retry-After date is on the region's clock, which may be off:
	// measured from the answer's own Date when it has one.
	ref := now
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		ref = d
	}
	o.retryAfter, o.retryOK = parseRetryAfter(resp.Header.Get("Retry-After"), ref)
	switch {
	case c >= 200 && c < 300 && answer == "":
		o.kind = kindOK
	case c >= 200 && c < 300:
		// MAAS answers 204 with no body (maasapiserver's LeasesHandler,
		// status_code=204): a page in a 200 is something else at that
		// address (a proxy's, a captive portal's), which stored nothing.
		o.kind = kindConfig
		o.hint = fmt.Sprintf("the region answered %d with a body, where MAAS's leases API answers 204 with none: is region.url MAAS's internal leases API (https://REGION:%s%s)? Nothing it answered so is counted delivered", c, maasPort, config.MAASLeasesPath)
	case c == http.StatusUnprocessableEntity:
		o.kind = kindRefused
	case c == http.StatusInternalServerError:
		o.kind = kindFailed
	case c == http.StatusNotFound && strings.Contains(answer, `"kind":"Error"`) && strings.Contains(answer, `"code":404`):
		// Not a path the region does not serve (FastAPI answers
		// {"detail":"Not Found"} then): MAAS's service layer found no
		// row it was changing, "Entity not found." (src/maasservicelayer/
		// db/repositories/base.py, update_one: another request changed
		// the same MAC's records meanwhile), rolled back like a 500
		// (TransactionMiddleware runs inside ExceptionMiddleware:
		// src/maasapiserver/main.py). Failing on an event, as a 500:
		// sent again, and dead-lettered only if it keeps failing alone.
		o.kind = kindFailed
	case c == http.StatusBadGateway, c == http.StatusServiceUnavailable, c == http.StatusGatewayTimeout:
		o.kind = kindOutage
		// A gateway's answers: something in front of the region (a load
		// balancer, an HTTP proxy) is up, the region behind it is not.
		// Not MAAS's own nginx on 5242: a TCP stream proxy to the API
		// server's socket (maasserver/templates/http/
		// regiond.nginx.stream.conf.template), it closes the connection
		// instead (classifyErr). One hint for the three: a proxy may
		// answer one then another, and a hint that changes is logged as
		// a new problem.
		o.hint = fmt.Sprintf("%s answers but the service behind it does not: a proxy or load balancer in front of the region answers 502, 503 or 504 while the region's API server is down or restarting (MAAS's own port %s closes the connection instead); nothing to change on this rack: waiting, nothing is lost", u.Host, maasPort)
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests, c >= 500:
		o.kind = kindOutage
	case c >= 300 && c < 400:
		o.kind = kindConfig
		loc := resp.Header.Get("Location")
		o.what += " to " + strconv.Quote(loc)
		o.hint = fmt.Sprintf("the region redirects to %q: set region.url to the address it names (the agent does not follow redirects: followed, a 301 to 303 turns the POST into a GET, and any would deliver somewhere not configured)", loc)
	case c == http.StatusForbidden && strings.Contains(answer, "Client certificate required"):
		o.kind = kindConfig
		o.hint = "the region wants a client certificate: set region.cert_file and region.key_file (" + maasHintCert + ")"
	case c == http.StatusUnauthorized, c == http.StatusForbidden, c == http.StatusProxyAuthRequired:
		o.kind = kindConfig
		o.hint = "the region refuses the agent's credentials: check region.cert_file and region.key_file (" + maasHintCert + ")"
	case c == http.StatusBadRequest && u.Scheme == "http" && strings.Contains(answer, "HTTPS"):
		// Go's and nginx's answer to plain HTTP on a TLS port (a server
		// that does not answer so shows as a closed connection).
		o.kind = kindConfig
		o.hint = "region.url says http:// but the region's port speaks TLS: write https:// (MAAS's internal API is https://REGION:" + maasPort + config.MAASLeasesPath + ")"
	case c == http.StatusNotFound, c == http.StatusMethodNotAllowed, c == http.StatusBadRequest:
		o.kind = kindConfig
		o.hint = wrongPortHint(u, "the region has no leases endpoint at "+u.Path)
	case c == http.StatusRequestEntityTooLarge:
		o.kind = kindConfig
		o.hint = "the region refuses a request this large: lower region.batch_max"
	default:
		o.kind = kindConfig
		o.hint = "the region answered " + http.StatusText(c) + ": check region.url"
	}
	return o
}

// wrongPortHint adds where MAAS serves the endpoint to what was wrong.
func wrongPortHint(u *url.URL, what string) string {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	s := what + ": wrong port or path? MAAS's internal leases API is https://REGION:" + maasPort + config.MAASLeasesPath
	switch port {
	case "5240", "5443":
		s += " (port " + port + " is MAAS's public API)"
	}
	return s
}

// classifyErr decides what an attempt without an answer means (wrote:
// the whole request was written): most are an outage (wait), but a TLS
// trust failure or a plain HTTP port is the configuration and will not
// heal by waiting.
func classifyErr(err error, wrote bool, cfg *Config, u *url.URL, serverName string) outcome {
	o := outcome{kind: kindOutage, what: err.Error(), down: unreachable(err) || (!wrote && cutShort(err))}
	var ue *url.Error
	if errors.As(err, &ue) {
		o.what = ue.Err.Error()
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
		opErr     *net.OpError
		dnsErr    *net.DNSError
	)
	ca := cfg.CAFile
	if ca == "" {
		ca = "the system's roots"
	}
	switch {
	case errors.As(err, &unknownCA):
		o.kind = kindConfig
		o.hint = fmt.Sprintf("the region's certificate is not signed by a CA in region.ca_file (%s): ", ca) +
			wrongPortHint(u, "wrong CA (on a MAAS rack: ca.pem in "+maasCertDir+", cacerts.pem before 3.8)")
	case errors.As(err, &hostname):
		names := hostname.Certificate.DNSNames
		o.kind = kindConfig
		o.hint = fmt.Sprintf("the region's certificate is for %s, not %q: set region.server_name to one of its names (MAAS: \"maas\")",
			strings.Join(names, ", "), serverName)
	case errors.As(err, &invalid):
		o.kind = kindConfig
		// Not invalid.Error(): it names the current time, and a hint
		// that changes on every attempt is logged as a new problem.
		o.hint = "the region's certificate is not valid here: " + certInvalidHint(invalid)
	case errors.As(err, &record), strings.Contains(o.what, "server gave HTTP response to HTTPS client"):
		// (net/http reports a plain HTTP answer to the handshake with a
		// new error that does not wrap the RecordHeaderError.)
		o.kind = kindConfig
		o.hint = wrongPortHint(u, "the region's port does not speak TLS")
	case errors.As(err, &opErr) && opErr.Op == "remote error" && strings.Contains(opErr.Err.Error(), "expired certificate"):
		o.kind = kindConfig
		o.hint = fmt.Sprintf("the region refused this rack's client certificate as expired (region.cert_file %s): renew it (%s)", cfg.CertFile, maasHintCert)
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// The region ended the handshake with an alert: MAAS before 3.8
		// requires a client certificate from its CA right there.
		o.kind = kindConfig
		o.hint = fmt.Sprintf("the region refused the TLS handshake (%v): it wants a client certificate signed by its CA: set region.cert_file and region.key_file (%s)", opErr.Err, maasHintCert)
	case errors.Is(err, syscall.ECONNREFUSED):
		o.hint = fmt.Sprintf("nothing listens at %s: regiond is down, or the port is wrong (MAAS's internal API is on %s)", u.Host, maasPort)
	case o.down && !unreachable(err):
		o.hint = fmt.Sprintf("%s accepted the connection and closed it before the request: on MAAS, nginx on port %s is up but the internal API server behind it is not (restarting, or waiting for its database)", u.Host, maasPort)
	case errors.As(err, &dnsErr):
		o.hint = fmt.Sprintf("cannot resolve %q: check region.url and DNS", dnsErr.Name)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		o.hint = "no answer in time: the region is down or overloaded"
	}
	return o
}

// certInvalidHint says why the region's certificate is refused, from
// the certificate itself (stable from one attempt to the next).
func certInvalidHint(e x509.CertificateInvalidError) string {
	c, day := e.Cert, "2006-01-02 15:04 UTC"
	switch {
	case e.Reason == x509.Expired && c != nil && time.Now().Before(c.NotBefore):
		return fmt.Sprintf("it is valid from %s only: check this rack's clock (timedatectl), or the region's certificate", c.NotBefore.UTC().Format(day))
	case e.Reason == x509.Expired && c != nil:
		return fmt.Sprintf("it expired on %s: renew the region's certificate, or check this rack's clock (timedatectl)", c.NotAfter.UTC().Format(day))
	}
	return e.Error()
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// jitter is exponential backoff with full jitter in
// [min, min·2^attempt] capped at max.
func jitter(min, max time.Duration, attempt int) time.Duration {
	ceil := max
	if attempt < 32 {
		if c := min << attempt; c > 0 && c < max {
			ceil = c
		}
	}
	if ceil <= min {
		return min
	}
	return min + rand.N(ceil-min+1)
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}
