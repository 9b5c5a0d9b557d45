package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// maasDebRack makes a MAAS 3.8+ deb rack's files under a new root:
// rackd.conf with maasURL (MAAS's ClusterConfiguration,
// src/provisioningserver/config.py) and the rack's certificates
// (src/provisioningserver/certificates.py: agent.crt, agent.key, ca.pem).
func maasDebRack(t *testing.T, maasURL string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/maas"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/maas/rackd.conf"), []byte("maas_url: "+maasURL+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	// maas-rack-controller's helper: the deb is installed.
	if err := os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/maas-dhcp-helper"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := regionstub.LoadOrCreatePKI(filepath.Join(root, "var/lib/maas/certificates")); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestAgentOnMAASRack: on a MAAS rack the package's configuration file,
// as shipped, runs: the region from rackd.conf's maas_url, MAAS's dhcpd
// files and the rack's certificates, which --print-config shows and names
// the source of; without the rack the same file lacks region.url.
func TestAgentOnMAASRack(t *testing.T) {
	root := maasDebRack(t, "http://203.0.113.2:5240/MAAS")
	cfg := "../../packaging/etc/leasekeeper/leasekeeper.toml"
	out, stderr, code := runIn(t, root, "agent", "--config", cfg, "--print-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"# MAAS deb rack (" + root + "/etc/maas/rackd.conf): the region from its maas_url (https://203.0.113.2:5242/MAAS/a/v3internal/leases); its certificates (" + root + "/var/lib/maas/certificates); MAAS's dhcpd files (" + root + "/var/lib/maas/dhcp/dhcpd.leases), for what the file leaves unset\n",
		"url = \"https://203.0.113.2:5242/MAAS/a/v3internal/leases\"\nother_urls = []\n",
		"leases = \"" + root + "/var/lib/maas/dhcp/dhcpd.leases\"\nconfig = \"" + root + "/var/lib/maas/dhcpd.conf\"\n",
		"cert_file = \"" + root + "/var/lib/maas/certificates/agent.crt\"\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	if _, stderr, code := run(t, "agent", "--config", cfg, "--print-config"); code != ExitConfig || !strings.Contains(stderr, "region.url: required") {
		t.Errorf("no rack: exit %d, %s", code, stderr)
	}
	// A rackd.conf that cannot be read: region.url says so.
	bad := maasDebRack(t, "x")
	if err := os.Remove(filepath.Join(bad, "etc/maas/rackd.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(bad, "etc/maas/rackd.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runIn(t, bad, "agent", "--config", cfg, "--print-config"); code != ExitConfig ||
		!strings.Contains(stderr, "region.url: not set, and MAAS's "+bad+"/etc/maas/rackd.conf: read ") {
		t.Errorf("unreadable rackd.conf: exit %d, %s", code, stderr)
	}
}

// TestCheckMAASRack: check-maas says what the rack gave, and notes a
// region.url whose host rackd.conf's maas_url does not name.
func TestCheckMAASRack(t *testing.T) {
	root := maasDebRack(t, "http://127.0.0.1:5240/MAAS")
	cfg := writeFile(t, "lk.toml", "")
	out, _, _ := runIn(t, root, "check-maas", "--config", cfg, "--agent-user", "", "--timeout", "1s")
	if want := "ok       maas-rack: MAAS deb rack (" + root + "/etc/maas/rackd.conf): the region from its maas_url (https://127.0.0.1:5242/MAAS/a/v3internal/leases)"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	cfg = writeFile(t, "lk2.toml", "[region]\nurl = \"https://127.0.0.2:5242/MAAS/a/v3internal/leases\"\n")
	out, _, _ = runIn(t, root, "check-maas", "--config", cfg, "--agent-user", "", "--timeout", "1s")
	for _, want := range []string{
		"ok       maas-rack: MAAS deb rack (" + root + "/etc/maas/rackd.conf): its certificates",
		"note     maas-rack: region.url or other_urls names 127.0.0.2, a host that " + root + "/etc/maas/rackd.conf's maas_url does not (https://127.0.0.1:5242/MAAS/a/v3internal/leases)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
