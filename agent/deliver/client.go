package deliver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
)

// MaxRetryAfter caps a region's Retry-After: beyond it the agent retries
// anyway (a clock skew or a typo must not stall delivery for a day).
const MaxRetryAfter = 10 * time.Minute

// checkURL accepts an absolute https URL, or http to a loopback host.
func checkURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("region url is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("region url: %w", err)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("region url %q has no host", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("region url %q carries credentials; use token_file or a client certificate", u.Redacted())
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("region url %s: plain http is allowed only to a loopback address; use https", u)
		}
	default:
		return nil, fmt.Errorf("region url %s: scheme %q is not https", u, u.Scheme)
	}
	return u, nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// readToken reads a bearer token file, refusing one that group or others
// could read or write, and an empty one.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token_file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token_file %s has mode %04o: group or others can access it; chmod 600 it", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token_file %s is empty", path)
	}
	if strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fmt.Errorf("token_file %s: the token contains white space or control characters", path)
	}
	return tok, nil
}

// tlsConfig builds the client side TLS: the CA to trust (the system's
// roots when CAFile is empty) and the client certificate, if any.
func tlsConfig(cfg *Config) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", cfg.CAFile)
		}
		c.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("cert_file and key_file go together: set both or neither")
	}
	if cfg.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file/key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

func newHTTPClient(cfg *Config, tc *tls.Config) *http.Client {
	t := cleanhttp.DefaultPooledTransport()
	t.TLSClientConfig = tc
	return &http.Client{
		Transport: t,
		Timeout:   cfg.Timeout, // each attempt, body included
		// A redirect is a misconfiguration; following it would turn the
		// POST into a GET. Surface it instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (d *Deliverer) newRetryClient(hc *http.Client) *retryablehttp.Client {
	return &retryablehttp.Client{
		HTTPClient:   hc,
		RetryWaitMin: d.cfg.MinBackoff,
		RetryWaitMax: d.cfg.MaxBackoff,
		RetryMax:     math.MaxInt, // until the context ends
		CheckRetry:   d.checkRetry,
		Backoff:      d.backoff,
	}
}

// Results of one attempt, the result label of delivery_attempts_total.
const (
	resultOK       = "ok"       // 2xx
	resultRetry    = "retry"    // transport error, 408, 429, 5xx: retried
	resultRejected = "rejected" // another 4xx: the content was refused
	resultError    = "error"    // not the items' fault and not transient (401, 403, 3xx…): retried, logged as an error
)

// classify decides what an attempt's outcome means.
func classify(resp *http.Response, err error) (result string, retry bool) {
	if err != nil {
		return resultRetry, true
	}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return resultOK, false
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests, c >= 500:
		return resultRetry, true
	case c == http.StatusUnauthorized, c == http.StatusForbidden, c == http.StatusProxyAuthRequired:
		return resultError, true
	case c >= 400 && c < 500:
		return resultRejected, false
	default:
		return resultError, true
	}
}

// checkRetry is the retryablehttp policy: it runs after every attempt, on
// the sending goroutine, so it also keeps the metrics and the outage log.
func (d *Deliverer) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	result, retry := classify(resp, err)
	d.m.attempts.WithLabelValues(result).Inc()
	if retry {
		what := ""
		if err != nil {
			what = err.Error()
		} else {
			what = "HTTP " + resp.Status
		}
		d.outage.failed(d, what, result == resultError)
	} else {
		d.outage.reachable(d)
	}
	return retry, nil
}

// backoff is exponential with full jitter in [min, min·2^attempt] capped
// at max, unless the answer carried a Retry-After, which wins (at least
// min, at most MaxRetryAfter).
func (d *Deliverer) backoff(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil {
		if ra, ok := parseRetryAfter(resp.Header.Get("Retry-After"), d.now()); ok {
			return clamp(ra, min, MaxRetryAfter)
		}
	}
	return jitter(min, max, attempt)
}

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
