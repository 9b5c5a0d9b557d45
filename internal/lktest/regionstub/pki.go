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

// Names in the certificates, as MAAS makes them (maasserver/start_up.py,
// _create_cluster_certificate_if_necessary: the CA "maas-ca" signs the
// cluster certificate "maas-cluster" with the one SAN "DNS:maas";
// maasserver/utils/certificates.py adds O=MAAS, OU=the MAAS UUID, and no
// key usage extensions).
const (
	CAName     = "maas-ca"
	ServerCN   = "maas-cluster"
	ServerName = "maas" // the only name in the server certificate: a client's server_name
	maasOrg    = "MAAS"
	maasUUID   = "00000000-0000-4000-8000-0000005eed00" // OU, a fixed stand-in for the MAAS UUID
	// ClientCN is the client certificate's CN: MAAS's agent certificates
	// carry the agent's UUID there (maasapiserver/v3/api/internal/handlers/agent.py).
	ClientCN = "0a9e0000-1eae-4eee-8000-000000000001"
)

// PKI is a throw-away MAAS-style certificate authority with the region's
// server certificate and one rack (client) certificate, all ECDSA P-256
// (MAAS uses RSA 4096, slow to make in tests; the key type changes nothing
// a client sees but the signature algorithm).
type PKI struct {
	CAPEM         []byte // the CA certificate; both sides trust it (MAAS: ca.pem / cacerts.pem)
	ServerCertPEM []byte // CN maas-cluster, SAN DNS:maas only (MAAS: cluster.pem)
	ServerKeyPEM  []byte
	ClientCertPEM []byte // CN ClientCN (MAAS: agent.crt)
	ClientKeyPEM  []byte // (MAAS: agent.key)

	caPool *x509.CertPool
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey // nil when loaded from files
	server tls.Certificate
	client tls.Certificate
}

// Files are the PEM files WriteFiles wrote; CA, ClientCert and ClientKey
// are what an agent's region.ca_file, cert_file and key_file point at.
type Files struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// File names inside a cert dir: MAAS's own names on a rack 3.8+
// (/var/lib/maas/certificates: agent.crt, agent.key, ca.pem) for what the
// agent reads, and the region's cluster.pem/cluster.key for the server.
const (
	caFile         = "ca.pem"
	serverCertFile = "cluster.pem"
	serverKeyFile  = "cluster.key"
	clientCertFile = "agent.crt"
	clientKeyFile  = "agent.key"
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

// NewPKI makes a CA, the region's server certificate and a client
// certificate, named as MAAS names them.
func NewPKI() (*PKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: CAName, Organization: []string{maasOrg}, OrganizationalUnit: []string{maasUUID}},
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
	p := &PKI{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), caCert: ca, caKey: caKey}
	if p.ServerCertPEM, p.ServerKeyPEM, err = p.Sign(ServerCN, ServerName); err != nil {
		return nil, err
	}
	if p.ClientCertPEM, p.ClientKeyPEM, err = p.Sign(ClientCN); err != nil {
		return nil, err
	}
	return p, p.parse()
}

// Sign makes a key and a certificate signed by the CA with the subject
// CN cn ("" = no CN) and the DNS names dnsNames (one that is an IP
// address goes in as that), as MAAS signs its certificates: no key
// usage extensions. Only a PKI made by NewPKI can
// sign (one loaded from files has no CA key).
func (p *PKI) Sign(cn string, dnsNames ...string) (certPEM, keyPEM []byte, err error) {
	if p.caKey == nil {
		return nil, nil, errors.New("regionstub: this PKI has no CA key")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{maasOrg}, OrganizationalUnit: []string{maasUUID}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
	}
	for _, n := range dnsNames {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate %q: %w", cn, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
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
	if p.caCert == nil {
		b, _ := pem.Decode(p.CAPEM)
		ca, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("ca: %w", err)
		}
		p.caCert = ca
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
func LoadOrCreatePKI(dir string) (*PKI, Files, error) {
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
	p, err := NewPKI()
	if err != nil {
		return nil, Files{}, err
	}
	f, err = p.WriteFiles(dir)
	return p, f, err
}

// WriteFiles writes the PEM files into dir (created 0700 if missing); keys
// are written 0600, as MAAS writes agent.key and cluster.key.
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

// WriteRackFiles is WriteFiles with a client certificate of its own,
// signed for CN cn: each MAAS rack has its own agent certificate, whose
// CN is that rack's agent's UUID (ClientCN), so the stub's records tell
// two racks apart (Request.ClientCN, Batch.ClientCN).
func (p *PKI) WriteRackFiles(dir, cn string) (Files, error) {
	f, err := p.WriteFiles(dir)
	if err != nil {
		return Files{}, err
	}
	cert, key, err := p.Sign(cn)
	if err != nil {
		return Files{}, err
	}
	if err := os.WriteFile(f.ClientCert, cert, 0o644); err != nil {
		return Files{}, err
	}
	return f, os.WriteFile(f.ClientKey, key, 0o600)
}

// CAPool is a pool holding the CA certificate.
func (p *PKI) CAPool() *x509.CertPool { return p.caPool }

// ClientCertificate is the client key pair, for an in-memory client.
func (p *PKI) ClientCertificate() tls.Certificate { return p.client }

// ClientTLSConfig is what MAAS's own rack agent does before 3.8 and what
// leasekeeper does: trust the CA, present the client certificate, and
// verify the server certificate for ServerName ("maas").
func (p *PKI) ClientTLSConfig() *tls.Config {
	return &tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{p.client}, ServerName: ServerName, MinVersion: tls.VersionTLS12}
}
