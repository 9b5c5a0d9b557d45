package maasapi

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestCertProblem: each certificate failure names what to change, and
// only those are certificate problems. A name the certificate lacks
// names the ones it has; a certificate with no subject alternative name
// says it needs one (Go checks no common name: "use one of its names"
// would name one that still fails).
func TestCertProblem(t *testing.T) {
	withSAN := &x509.Certificate{DNSNames: []string{"region.example"}, IPAddresses: []net.IP{net.ParseIP("203.0.113.2")}}
	cnOnly := &x509.Certificate{Subject: pkix.Name{CommonName: "region.example"}}
	expired := &x509.Certificate{NotBefore: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	wrap := func(err error) error {
		return fmt.Errorf("Get \"https://region:5443/MAAS/api/2.0/\": tls: failed to verify certificate: %w", err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string // "" = not a certificate problem
	}{
		{"nil", nil, ""},
		{"refused connection", errors.New("dial tcp 203.0.113.2:5443: connect: connection refused"), ""},
		{"unknown CA", wrap(x509.UnknownAuthorityError{}), "set maas.ca_file"},
		{"other name", wrap(x509.HostnameError{Certificate: withSAN, Host: "maas"}), "is for region.example, 203.0.113.2, not maas"},
		{"common name only", wrap(x509.HostnameError{Certificate: cnOnly, Host: "region.example"}), "names no host"},
		{"expired", wrap(x509.CertificateInvalidError{Cert: expired, Reason: x509.Expired}), "valid from 2025-01-01 00:00:00 to 2026-01-01 00:00:00 only"},
		{"not for this use", wrap(x509.CertificateInvalidError{Reason: x509.IncompatibleUsage}), "refused: x509: certificate specifies an incompatible key usage"},
		{"plain port", errors.New("http: server gave HTTP response to HTTPS client"), "does not speak TLS"},
	} {
		got := CertProblem(tc.err)
		if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
