package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRegionURLsOf: rackd.conf's maas_url as MAAS reads it (YAML,
// src/provisioningserver/config.py: ClusterConfiguration.maas_url, one URL
// or a list, http://localhost:5240/MAAS when unset) turned into the
// internal API on each host, as src/provisioningserver/rackdservices/
// external.py's RackAgent does (https, the host, port 5242).
func TestRegionURLsOf(t *testing.T) {
	const api = "/MAAS/a/v3internal/leases"
	tests := []struct {
		name, conf string
		want       []string
		err        string
	}{
		{"one URL", "maas_url: http://10.0.0.2:5240/MAAS\n", []string{"https://10.0.0.2:5242" + api}, ""},
		{"a list, in order, repeats once", "maas_url:\n- http://r2.example:5240/MAAS\n- http://r1.example/MAAS\n- https://r2.example:5443/MAAS\n",
			[]string{"https://r2.example:5242" + api, "https://r1.example:5242" + api}, ""},
		{"an IPv6 host in brackets", "maas_url: http://[fd00::2]:5240/MAAS\n", []string{"https://[fd00::2]:5242" + api}, ""},
		{"unset: MAAS's default", "debug: false\n", []string{"https://localhost:5242" + api}, ""},
		{"an empty file: MAAS's default", "", []string{"https://localhost:5242" + api}, ""},
		{"the other settings are not read", "maas_url: http://10.0.0.2:5240/MAAS\ncluster_uuid: x\ntftp_root: /var/lib/maas/boot-resources/current\n", []string{"https://10.0.0.2:5242" + api}, ""},
		{"not YAML", "maas_url: [\n", nil, "not YAML"},
		{"not a mapping", "- http://10.0.0.2:5240/MAAS\n", nil, "not a mapping"},
		{"no host", "maas_url: /MAAS\n", nil, `"/MAAS" is not a URL with a host`},
		{"a number", "maas_url: 5\n", nil, "neither a URL nor a list"},
		{"an item not a string", "maas_url: [http://a/MAAS, 5]\n", nil, "5 is not a URL"},
		{"an empty list", "maas_url: []\n", nil, "names no region"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RegionURLsOf([]byte(tc.conf))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to say %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// rackTree makes files (path → content) under a new root.
func rackTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestFindMAASRack: the deb's and the snap's layouts (the deb's
// maas-dhcpd.service and maas-dhcpd6.service of MAAS 3.x, and
// /usr/sbin/rackd from debian/maas-rack-controller.install; the snap's
// snap/local/tree/usr/bin/run-rackd, run-dhcpd and run-dhcpd6, and its
// modes from src/maascli/snap.py, get_current_mode and set_current_mode;
// src/provisioningserver/certificates.py for the certificates).
func TestFindMAASRack(t *testing.T) {
	const rackd = "maas_url: http://10.0.0.2:5240/MAAS\n"
	const helper = "/usr/sbin/rackd" // maas-rack-controller's
	const snapMode = "/var/snap/maas/common/snap_mode"
	agentCerts := func(dir string) map[string]string {
		return map[string]string{dir + "/agent.crt": "", dir + "/agent.key": "", dir + "/ca.pem": ""}
	}
	clusterCerts := func(dir string) map[string]string {
		return map[string]string{dir + "/cluster.pem": "", dir + "/cluster.key": "", dir + "/cacerts.pem": ""}
	}
	with := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	debDHCPD := DHCPD{Leases: "/var/lib/maas/dhcp/dhcpd.leases", Config: "/var/lib/maas/dhcpd.conf", PIDFile: "/run/maas-dhcp/dhcpd.pid"}
	snapDHCPD := DHCPD{Leases: "/var/snap/maas/common/maas/dhcp/dhcpd.leases", Config: "/var/snap/maas/common/maas/dhcpd.conf", PIDFile: "/var/snap/maas/common/maas/dhcp/dhcpd.pid"}
	with6 := func(d DHCPD, leases6, config6 string) DHCPD { d.Leases6, d.Config6 = leases6, config6; return d }
	tests := []struct {
		name      string
		files     map[string]string
		kind      string // "" = no rack
		dhcpd     DHCPD
		cert      string
		certs     string
		regionErr string
	}{
		{"nothing", nil, "", DHCPD{}, "", "", ""},
		{"MAAS's data without a rack", map[string]string{"/var/lib/maas/dhcpd.conf": "", "/etc/maas/regiond.conf": ""}, "", DHCPD{}, "", "", ""},
		{"deb 3.8", with(map[string]string{helper: "", "/etc/maas/rackd.conf": rackd}, agentCerts("/var/lib/maas/certificates")),
			"deb", debDHCPD, "/var/lib/maas/certificates/agent.crt", "agent", ""},
		{"deb 3.6: cluster certificates", with(map[string]string{helper: "", "/etc/maas/rackd.conf": rackd}, clusterCerts("/var/lib/maas/certificates")),
			"deb", debDHCPD, "/var/lib/maas/certificates/cluster.pem", "cluster", ""},
		{"deb, a set of agent certificates not whole", with(map[string]string{helper: "", "/etc/maas/rackd.conf": rackd, "/var/lib/maas/certificates/agent.crt": ""}, clusterCerts("/var/lib/maas/certificates")),
			"deb", debDHCPD, "/var/lib/maas/certificates/cluster.pem", "cluster", ""},
		{"deb not registered: 3.8's names", map[string]string{helper: "", "/etc/maas/rackd.conf": rackd},
			"deb", debDHCPD, "/var/lib/maas/certificates/agent.crt", "", ""},
		{"deb with dhcpd -6's leases file", map[string]string{helper: "", "/etc/maas/rackd.conf": rackd, "/var/lib/maas/dhcp/dhcpd6.leases": ""},
			"deb", with6(debDHCPD, "/var/lib/maas/dhcp/dhcpd6.leases", "/var/lib/maas/dhcpd6.conf"), "/var/lib/maas/certificates/agent.crt", "", ""},
		{"deb with dhcpd6.conf", map[string]string{helper: "", "/etc/maas/rackd.conf": rackd, "/var/lib/maas/dhcpd6.conf": ""},
			"deb", with6(debDHCPD, "/var/lib/maas/dhcp/dhcpd6.leases", "/var/lib/maas/dhcpd6.conf"), "/var/lib/maas/certificates/agent.crt", "", ""},
		{"deb, rackd.conf not YAML", map[string]string{helper: "", "/etc/maas/rackd.conf": "maas_url: [\n"},
			"deb", debDHCPD, "/var/lib/maas/certificates/agent.crt", "", "/etc/maas/rackd.conf: not YAML"},
		{"snap region+rack", with(map[string]string{"/var/snap/maas/current/rackd.conf": rackd, "/var/snap/maas/common/snap_mode": "region+rack\n"}, agentCerts("/var/snap/maas/current/certificates")),
			"snap", snapDHCPD, "/var/snap/maas/current/certificates/agent.crt", "agent", ""},
		{"snap rack, certificates in common", with(map[string]string{"/var/snap/maas/current/rackd.conf": rackd, "/var/snap/maas/common/snap_mode": "rack"}, agentCerts("/var/snap/maas/common/var/lib/maas/certificates")),
			"snap", snapDHCPD, "/var/snap/maas/common/var/lib/maas/certificates/agent.crt", "agent", ""},
		{"snap 3.6", with(map[string]string{"/var/snap/maas/current/rackd.conf": rackd, snapMode: "rack"}, clusterCerts("/var/snap/maas/current/certificates")),
			"snap", snapDHCPD, "/var/snap/maas/current/certificates/cluster.pem", "cluster", ""},
		{"snap with DHCPv6", map[string]string{"/var/snap/maas/current/rackd.conf": rackd, snapMode: "rack", "/var/snap/maas/common/maas/dhcp/dhcpd6.leases": ""},
			"snap", with6(snapDHCPD, "/var/snap/maas/common/maas/dhcp/dhcpd6.leases", "/var/snap/maas/common/maas/dhcpd6.conf"), "/var/snap/maas/current/certificates/agent.crt", "", ""},
		{"snap region only", map[string]string{"/var/snap/maas/current/rackd.conf": rackd, "/var/snap/maas/common/snap_mode": "region\n"}, "", DHCPD{}, "", "", ""},
		{"snap not initialised", map[string]string{"/var/snap/maas/current/rackd.conf": rackd, "/var/snap/maas/common/snap_mode": "none"}, "", DHCPD{}, "", "", ""},
		{"snap without snap_mode: none", map[string]string{"/var/snap/maas/current/rackd.conf": rackd}, "", DHCPD{}, "", "", ""},
		{"snap 2.8's all", map[string]string{"/var/snap/maas/current/rackd.conf": rackd, snapMode: "all"}, "snap", snapDHCPD, "/var/snap/maas/current/certificates/agent.crt", "", ""},
		{"region+rack snap: the rack's agent.* over the region's cluster.*",
			with(map[string]string{"/var/snap/maas/current/rackd.conf": rackd, snapMode: "region+rack"}, clusterCerts("/var/snap/maas/current/certificates"), agentCerts("/var/snap/maas/common/var/lib/maas/certificates")),
			"snap", snapDHCPD, "/var/snap/maas/common/var/lib/maas/certificates/agent.crt", "agent", ""},
		{"a removed deb's rackd.conf", map[string]string{"/etc/maas/rackd.conf": rackd}, "", DHCPD{}, "", "", ""},
		{"a removed deb's rackd.conf, its helper diverted, and the snap: the snap", map[string]string{"/etc/maas/rackd.conf": rackd, "/usr/sbin/maas-dhcp-helper": "", "/var/snap/maas/current/rackd.conf": rackd, snapMode: "rack"},
			"snap", snapDHCPD, "/var/snap/maas/current/certificates/agent.crt", "", ""},
		{"deb and snap: the deb", map[string]string{helper: "", "/etc/maas/rackd.conf": rackd, "/var/snap/maas/current/rackd.conf": rackd, snapMode: "rack"},
			"deb", debDHCPD, "/var/lib/maas/certificates/agent.crt", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := rackTree(t, tc.files)
			r := FindMAASRack(root)
			if tc.kind == "" {
				if r != nil {
					t.Fatalf("found %+v, want no rack", r)
				}
				return
			}
			if r == nil {
				t.Fatal("no rack found")
			}
			// The paths are under root; compared as the host's.
			host := func(p string) string { return strings.TrimPrefix(p, root) }
			d := DHCPD{host(r.DHCPD.Leases), host(r.DHCPD.Config), host(r.DHCPD.Leases6), host(r.DHCPD.Config6), host(r.DHCPD.PIDFile)}
			if r.Kind != tc.kind || d != tc.dhcpd || host(r.CertFile) != tc.cert || r.Certs != tc.certs || !strings.HasPrefix(r.RackdConf, root+"/") {
				t.Errorf("got %s %+v %s (%q), want %s %+v %s (%q)", r.Kind, r.DHCPD, r.CertFile, r.Certs, tc.kind, tc.dhcpd, tc.cert, tc.certs)
			}
			if dir := filepath.Dir(r.CertFile); filepath.Dir(r.KeyFile) != dir || filepath.Dir(r.CAFile) != dir {
				t.Errorf("key %s and CA %s not beside the certificate %s", r.KeyFile, r.CAFile, tc.cert)
			}
			if tc.regionErr != "" {
				if r.RegionErr == nil || !strings.Contains(r.RegionErr.Error(), tc.regionErr) {
					t.Errorf("RegionErr = %v, want %q", r.RegionErr, tc.regionErr)
				}
			} else if r.RegionErr != nil || !slices.Equal(r.RegionURLs, []string{"https://10.0.0.2:5242/MAAS/a/v3internal/leases"}) {
				t.Errorf("region %q, %v", r.RegionURLs, r.RegionErr)
			}
		})
	}
}

// TestParseOnRack: on a MAAS rack the groups the file and the overrides
// leave unset take the rack's values; a group with any key set keeps
// the file's and the built-in defaults, never half the rack's.
func TestParseOnRack(t *testing.T) {
	rack := &MAASRack{
		Kind: "deb", RackdConf: "/etc/maas/rackd.conf",
		RegionURLs: []string{"https://r1:5242/MAAS/a/v3internal/leases", "https://r2:5242/MAAS/a/v3internal/leases"},
		DHCPD:      DHCPD{Leases: "/var/lib/maas/dhcp/dhcpd.leases", Config: "/var/lib/maas/dhcpd.conf", PIDFile: "/run/maas-dhcp/dhcpd.pid"},
		CertFile:   "/m/cluster.pem", KeyFile: "/m/cluster.key", CAFile: "/m/cacerts.pem", Certs: "cluster",
	}
	def := Default()
	tests := []struct {
		name, file string
		sets       []string
		url        string
		others     []string
		leases     string
		config     string
		cert       string
		keys       []string
	}{
		{"an empty file: all the rack's", "", nil, rack.RegionURLs[0], rack.RegionURLs[1:], rack.DHCPD.Leases, rack.DHCPD.Config, rack.CertFile,
			[]string{"region.url", "region.other_urls", "region.cert_file", "region.key_file", "region.ca_file", "dhcpd.leases", "dhcpd.config", "dhcpd.pid_file", "dhcpd.leases6", "dhcpd.config6"}},
		{"url = \"\" and other_urls = [], the shipped file's: the rack's region", "[region]\nurl = \"\"\nother_urls = []\n", []string{"region.url="},
			rack.RegionURLs[0], rack.RegionURLs[1:], rack.DHCPD.Leases, rack.DHCPD.Config, rack.CertFile,
			[]string{"region.url", "region.other_urls", "region.cert_file", "region.key_file", "region.ca_file", "dhcpd.leases", "dhcpd.config", "dhcpd.pid_file", "dhcpd.leases6", "dhcpd.config6"}},
		{"the file's url: no other_urls from the rack", "[region]\nurl = \"https://mine:5242/MAAS/a/v3internal/leases\"\n", nil,
			"https://mine:5242/MAAS/a/v3internal/leases", nil, rack.DHCPD.Leases, rack.DHCPD.Config, rack.CertFile,
			[]string{"region.cert_file", "region.key_file", "region.ca_file", "dhcpd.leases", "dhcpd.config", "dhcpd.pid_file", "dhcpd.leases6", "dhcpd.config6"}},
		{"the file's leases: dhcpd's other files the built-in defaults", "[dhcpd]\nleases = \"/srv/dhcpd.leases\"\n", nil,
			rack.RegionURLs[0], rack.RegionURLs[1:], "/srv/dhcpd.leases", def.DHCPD.Config, rack.CertFile,
			[]string{"region.url", "region.other_urls", "region.cert_file", "region.key_file", "region.ca_file"}},
		{"an override's key_file: the certificates the defaults'", "", []string{"region.key_file=/etc/k.key"},
			rack.RegionURLs[0], rack.RegionURLs[1:], rack.DHCPD.Leases, rack.DHCPD.Config, def.Region.CertFile,
			[]string{"region.url", "region.other_urls", "dhcpd.leases", "dhcpd.config", "dhcpd.pid_file", "dhcpd.leases6", "dhcpd.config6"}},
		{"leases6 = \"\" in the file takes [dhcpd] from the rack's hands", "[dhcpd]\nleases6 = \"\"\n", nil,
			rack.RegionURLs[0], rack.RegionURLs[1:], def.DHCPD.Leases, def.DHCPD.Config, rack.CertFile,
			[]string{"region.url", "region.other_urls", "region.cert_file", "region.key_file", "region.ca_file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseOn(rack, strings.NewReader(tc.file), "test.toml", tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Region.URL != tc.url || !slices.Equal(c.Region.OtherURLs, tc.others) || c.DHCPD.Leases != tc.leases ||
				c.DHCPD.Config != tc.config || c.Region.CertFile != tc.cert {
				t.Errorf("got url %s, others %q, leases %s, config %s, cert %s", c.Region.URL, c.Region.OtherURLs, c.DHCPD.Leases, c.DHCPD.Config, c.Region.CertFile)
			}
			if c.Rack != rack || !slices.Equal(c.RackKeys, tc.keys) {
				t.Errorf("rack keys %q, want %q", c.RackKeys, tc.keys)
			}
		})
	}

	t.Run("no rack: the file alone, region.url required", func(t *testing.T) {
		_, err := ParseOn(nil, strings.NewReader(""), "test.toml")
		if err == nil || !strings.Contains(err.Error(), "region.url: required") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("rackd.conf gave no region: region.url says why", func(t *testing.T) {
		bad := *rack
		bad.RegionURLs, bad.RegionErr = nil, &os.PathError{Op: "open", Path: "/etc/maas/rackd.conf", Err: os.ErrPermission}
		_, err := ParseOn(&bad, strings.NewReader(""), "test.toml")
		if err == nil || !strings.Contains(err.Error(), "region.url: not set, and open /etc/maas/rackd.conf: permission denied") {
			t.Fatalf("err = %v", err)
		}
		if c, err := ParseOn(&bad, strings.NewReader("[region]\nurl = \"https://mine:5242/MAAS/a/v3internal/leases\"\n"), "test.toml"); err != nil || c.Region.URL != "https://mine:5242/MAAS/a/v3internal/leases" {
			t.Fatalf("the file's url: %v", err)
		}
	})
	t.Run("DefaultOn: no file on a rack", func(t *testing.T) {
		c := DefaultOn(rack)
		if c.Region.URL != rack.RegionURLs[0] || c.DHCPD != rack.DHCPD || c.Region.KeyFile != rack.KeyFile || len(c.RackKeys) != 10 {
			t.Fatalf("got %+v", c)
		}
		if c.Validate() != nil {
			t.Fatalf("invalid: %v", c.Validate())
		}
	})
}
