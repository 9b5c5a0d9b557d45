package regionstub

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a throw-away certificate authority with one server and one client
// certificate, all ECDSA P-256 (fast to generate in tests).
type PKI struct {
	CAPEM         []byte // the CA certificate; both sides trust it
	ServerCertPEM []byte
	ServerKeyPEM  []byte
	ClientCertPEM []byte
	ClientKeyPEM  []byte

	caPool *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

// Files are the PEM files WriteFiles wrote; CA, ClientCert and ClientKey
// are what an agent's region.ca_file, cert_file and key_file point at.
type Files struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// File names inside a cert dir.
const (
	caFile         = "ca.pem"
	serverCertFile = "server.pem"
	serverKeyFile  = "server-key.pem"
	clientCertFile = "client.pem"
	clientKeyFile  = "client-key.pem"
)

// FilesIn names the PEM files in dir.
func FilesIn(dir string) Files {
	return Files{
		CA:         filepath.Join(dir, caFile),
		ServerCert: filepath.Join(dir, serverCertFile),
		ServerKey:  filepath.Join(dir, serverKeyFile),
		ClientCert: filepath.Join(dir, clientCertFile),
		ClientKey:  filepath.Join(dir, clientKeyFile),
	}
}

// NewPKI makes a CA and signs a server certificate for localhost,
// 127.0.0.1, ::1 and hosts (names or addresses), and a client certificate.
func NewPKI(hosts ...string) (*PKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "leasekeeper region stub CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(cn string, usage x509.ExtKeyUsage, hosts []string) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("%s certificate: %w", cn, err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
	}
	p := &PKI{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	names := append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
	if p.ServerCertPEM, p.ServerKeyPEM, err = leaf("leasekeeper region stub", x509.ExtKeyUsageServerAuth, names); err != nil {
		return nil, err
	}
	if p.ClientCertPEM, p.ClientKeyPEM, err = leaf("leasekeeper agent", x509.ExtKeyUsageClientAuth, nil); err != nil {
		return nil, err
	}
	return p, p.parse()
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func (p *PKI) parse() error {
	p.caPool = x509.NewCertPool()
	if !p.caPool.AppendCertsFromPEM(p.CAPEM) {
		return errors.New("ca: no certificate in PEM")
	}
	var err error
	if p.server, err = tls.X509KeyPair(p.ServerCertPEM, p.ServerKeyPEM); err != nil {
		return fmt.Errorf("server key pair: %w", err)
	}
	if p.client, err = tls.X509KeyPair(p.ClientCertPEM, p.ClientKeyPEM); err != nil {
		return fmt.Errorf("client key pair: %w", err)
	}
	return nil
}

// LoadOrCreatePKI reads the PEM files in dir, or when there are none makes
// a new PKI and writes them, so a restarted stub keeps its identity and an
// agent configured with the files keeps working across the restart.
func LoadOrCreatePKI(dir string, hosts ...string) (*PKI, Files, error) {
	f := FilesIn(dir)
	if _, err := os.Stat(f.CA); err == nil {
		p := &PKI{}
		for _, r := range []struct {
			dst  *[]byte
			path string
		}{{&p.CAPEM, f.CA}, {&p.ServerCertPEM, f.ServerCert}, {&p.ServerKeyPEM, f.ServerKey},
			{&p.ClientCertPEM, f.ClientCert}, {&p.ClientKeyPEM, f.ClientKey}} {
			b, err := os.ReadFile(r.path)
			if err != nil {
				return nil, Files{}, err
			}
			*r.dst = b
		}
		if err := p.parse(); err != nil {
			return nil, Files{}, fmt.Errorf("%s: %w", dir, err)
		}
		return p, f, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, Files{}, err
	}
	p, err := NewPKI(hosts...)
	if err != nil {
		return nil, Files{}, err
	}
	f, err = p.WriteFiles(dir)
	return p, f, err
}

// WriteFiles writes the PEM files into dir (created 0700 if missing); keys
// are written 0600.
func (p *PKI) WriteFiles(dir string) (Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, err
	}
	f := FilesIn(dir)
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{f.CA, p.CAPEM, 0o644},
		{f.ServerCert, p.ServerCertPEM, 0o644},
		{f.ServerKey, p.ServerKeyPEM, 0o600},
		{f.ClientCert, p.ClientCertPEM, 0o644},
		{f.ClientKey, p.ClientKeyPEM, 0o600},
	} {
		if err := os.WriteFile(w.path, w.data, w.mode); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

// CAPool is a pool holding the CA certificate.
func (p *PKI) CAPool() *x509.CertPool { return p.caPool }

// ClientCertificate is the client key pair, for an in-memory client.
func (p *PKI) ClientCertificate() tls.Certificate { return p.client }

// ClientTLSConfig trusts the CA and presents the client certificate.
func (p *PKI) ClientTLSConfig() *tls.Config {
	return &tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{p.client}, MinVersion: tls.VersionTLS12}
}
