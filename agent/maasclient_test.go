package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
	"github.com/leasekeeper/leasekeeper/internal/maasapi"
)

// TestMAASClientCA: a MAAS with TLS serves the operator's certificate,
// often from a private CA (`maas config-tls enable KEY CERT --cacert CA`:
// src/maasserver/management/commands/config_tls.py). With maas.ca_file
// naming that CA the client built from the configuration reaches the
// region; without it the handshake fails, and the failure is told as
// the configuration's (maasapi.CertProblem names maas.ca_file), not as
// an outage to wait out.
func TestMAASClientCA(t *testing.T) {
	s, err := regionstub.Start(regionstub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api, err := s.StartAPI2TLS()
	if err != nil {
		t.Fatal(err)
	}
	const key = "ac:at:as"
	s.AddAPIKey(key, regionstub.Administrator("admin"))
	dir := t.TempDir()
	keyFile, caFile, notPEM := filepath.Join(dir, "maas.key"), filepath.Join(dir, "ca.pem"), filepath.Join(dir, "not.pem")
	for f, b := range map[string][]byte{keyFile: []byte(key + "\n"), caFile: s.PKI().CAPEM, notPEM: []byte("not a certificate\n")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	client := func(ca string) (*maasapi.Client, error) {
		cfg := testConfig()
		cfg.MAAS.APIURL, cfg.MAAS.APIKeyFile, cfg.MAAS.CAFile = api, keyFile, ca
		return maasClient(cfg, "test")
	}

	c, err := client(caFile)
	if err != nil {
		t.Fatal(err)
	}
	if who, err := c.Whoami(context.Background()); err != nil || who.Username != "admin" {
		t.Errorf("with maas.ca_file: %+v, %v", who, err)
	}

	c, err = client("")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Whoami(context.Background())
	if why := maasapi.CertProblem(err); err == nil || !strings.Contains(why, "maas.ca_file") {
		t.Errorf("without maas.ca_file: %v, told as %q; want a certificate problem naming maas.ca_file", err, why)
	}

	// No proxy, whatever HTTPS_PROXY says (net/http reads it once per
	// process and never for loopback, so the transport itself is
	// checked): the requests carry the administrator key's signature.
	for _, ca := range []string{"", caFile} {
		cfg := testConfig()
		cfg.MAAS.CAFile = ca
		if tr, err := maasTransport(cfg); err != nil || tr.Proxy != nil {
			t.Errorf("maas.ca_file %q: transport takes a proxy (%v)", ca, err)
		}
	}

	for _, tc := range []struct{ ca, want string }{
		{notPEM, "no PEM certificate"},
		{filepath.Join(dir, "missing.pem"), "no such file"},
	} {
		if _, err := client(tc.ca); err == nil || !strings.Contains(err.Error(), "maas.ca_file") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("maas.ca_file %s: %v, want an error naming the key and %q", tc.ca, err, tc.want)
		}
	}
}
