package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MAASRack is a MAAS rack controller installed on this host, as MAAS lays
// it out: what FindMAASRack read there. On such a host the keys a file
// leaves unset take the rack's values rather than plain Debian's, by group
// (ParseOn): the region from rackd.conf's maas_url, dhcpd's files, and the
// rack's certificate, key and MAAS's CA.
type MAASRack struct {
	Kind      string // "deb" or "snap"
	RackdConf string // the rackd.conf read, as a path on the host
	// RegionURLs is the internal leases API on each host of rackd.conf's
	// maas_url, in its order, without repeats; RegionErr says why there
	// is none (rackd.conf unreadable, or a maas_url that is no URL).
	RegionURLs []string
	RegionErr  error
	// DHCPD is MAAS's dhcpd files for Kind: DHCPv4's always, DHCPv6's
	// when dhcpd -6 has a leases file or a configuration there.
	DHCPD DHCPD
	// The rack's certificate, key and MAAS's CA: a whole set of 3.8+'s
	// names (agent.*) in any of MAAS's certificate directories, else of
	// 3.6/3.7's (cluster.*), the first directory first; Certs names the set ("agent",
	// "cluster"), "" when none was found (then 3.8+'s names in the first
	// directory: a rack not registered yet).
	CertFile, KeyFile, CAFile string
	Certs                     string

	layout maasLayout // what was looked at, under the root (Sources)
}

// RackGroups are the keys a MAAS rack gives values to, by group: the rack's
// values go to a group only when neither the file nor an override sets any
// of its keys, so that a file's [dhcpd] or region is never half the rack's.
var RackGroups = [][]string{
	{"region.url", "region.other_urls"},
	{"region.cert_file", "region.key_file", "region.ca_file"},
	{"dhcpd.leases", "dhcpd.config", "dhcpd.pid_file", "dhcpd.leases6", "dhcpd.config6"},
}

// maasLayout is where one kind of MAAS install keeps what the agent reads.
type maasLayout struct {
	kind      string
	rackdConf string
	// installed is a file the install has while it is installed (a
	// removed deb leaves its configuration behind); "" for none.
	installed string
	// modeFile says whether the install runs a rack: only with one of
	// rackModes in it (the snap's snap_mode; missing: no rack); "" for
	// an install that is a rack whenever installed.
	modeFile string
	dhcpd    DHCPD // DHCPv6's included; dropped when neither file exists
	certDirs []string
}

// maasLayouts: the deb (MAAS 3.x: debian/maas-dhcp.maas-dhcpd.service and
// maas-dhcpd6.service, removed from MAAS's tree when MAAS became
// snap-only; ClusterConfigurationMeta's default in
// src/provisioningserver/config.py) and the snap (snap/local/tree/usr/bin/
// run-rackd, run-dhcpd and run-dhcpd6: rackd.conf in $SNAP_DATA, dhcpd's
// files in $SNAP_COMMON/maas). Certificates: src/provisioningserver/
// certificates.py, under MAAS_ROOT (/var/lib/maas; the snap's $SNAP_DATA),
// and the snap's $SNAP_COMMON/var/lib/maas where maas-agent init keeps them
// from 3.8.
var maasLayouts = []maasLayout{
	{
		kind:      "deb",
		rackdConf: "/etc/maas/rackd.conf",
		// maas-rack-controller's (debian/maas-rack-controller.install
		// until MAAS dropped its debs), gone when the package is
		// removed; not maas-dhcp-helper, which a diversion to
		// leasekeeper-hook leaves behind.
		installed: "/usr/sbin/rackd",
		dhcpd: DHCPD{
			Leases:  "/var/lib/maas/dhcp/dhcpd.leases",
			Config:  "/var/lib/maas/dhcpd.conf",
			PIDFile: "/run/maas-dhcp/dhcpd.pid",
			Leases6: "/var/lib/maas/dhcp/dhcpd6.leases",
			Config6: "/var/lib/maas/dhcpd6.conf",
		},
		certDirs: []string{MAASCertDir},
	},
	{
		kind:      "snap",
		rackdConf: "/var/snap/maas/current/rackd.conf",
		modeFile:  "/var/snap/maas/common/snap_mode",
		dhcpd: DHCPD{
			Leases:  "/var/snap/maas/common/maas/dhcp/dhcpd.leases",
			Config:  "/var/snap/maas/common/maas/dhcpd.conf",
			PIDFile: "/var/snap/maas/common/maas/dhcp/dhcpd.pid",
			Leases6: "/var/snap/maas/common/maas/dhcp/dhcpd6.leases",
			Config6: "/var/snap/maas/common/maas/dhcpd6.conf",
		},
		certDirs: []string{"/var/snap/maas/current/certificates", "/var/snap/maas/common/var/lib/maas/certificates"},
	},
}

// MAASLeasesFiles are the leases files MAAS's dhcpd and dhcpd -6 write, the
// deb's and the snap's (maasLayouts).
func MAASLeasesFiles() (v4, v6 []string) {
	for _, l := range maasLayouts {
		v4, v6 = append(v4, l.dhcpd.Leases), append(v6, l.dhcpd.Leases6)
	}
	return v4, v6
}

// rackModes are the snap modes with a rack: what `maas init region+rack`
// and `maas init rack` write (src/maascli/snap.py set_current_mode), and
// "all", the mode before 2.9 that run-rackd still tests. region, none, or
// no snap_mode file at all (get_current_mode: none; before `maas init`,
// or after maas-deb-migrate copied a rack-less deb's files) run none.
var rackModes = []string{"region+rack", "rack", "all"}

// certSets are MAAS's certificate file names, newest first: certificate,
// key, CA (get_maas_agent_cert_paths, get_maas_cluster_cert_paths).
var certSets = []struct{ name, cert, key, ca string }{
	{"agent", "agent.crt", "agent.key", "ca.pem"},
	{"cluster", "cluster.pem", "cluster.key", "cacerts.pem"},
}

// MAASRegionPort and MAASLeasesPath: the internal API MAAS's own rack agent
// reaches on each region host (src/provisioningserver/rackdservices/
// external.py, RackAgent: https, each maas_url's host, port 5242; nginx
// passes the port through to the internal API server, which takes mutual
// TLS), and its leases endpoint.
const (
	MAASRegionPort = "5242"
	MAASLeasesPath = "/MAAS/a/v3internal/leases"
	// defaultMAASURL is maas_url when rackd.conf has none
	// (ClusterConfiguration.maas_url's if_missing).
	defaultMAASURL = "http://localhost:5240/MAAS"
)

// maxRackdConf bounds the rackd.conf read: MAAS's is a few lines.
const maxRackdConf = 1 << 20

// FindMAASRack looks for a MAAS rack controller under root ("/" on a
// host; a test's directory otherwise) and returns it, or nil when there is
// none: neither the deb's rackd.conf with its helper installed nor the
// snap's, or a snap that runs no rack. Where both are installed the deb
// is taken. Its paths are under root. It only reads rackd.conf (and the
// snap's mode) and looks whether files exist.
func FindMAASRack(root string) *MAASRack {
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	for _, l := range maasLayouts {
		l = l.under(root)
		if _, err := os.Lstat(l.rackdConf); err != nil {
			continue
		}
		if l.installed != "" && !exists(l.installed) {
			continue
		}
		if l.modeFile != "" {
			if b, err := os.ReadFile(l.modeFile); err != nil || !slices.Contains(rackModes, strings.TrimSpace(string(b))) {
				continue
			}
		}
		r := &MAASRack{Kind: l.kind, RackdConf: l.rackdConf, DHCPD: l.dhcpd, layout: l}
		if !exists(l.dhcpd.Leases6) && !exists(l.dhcpd.Config6) {
			r.DHCPD.Leases6, r.DHCPD.Config6 = "", ""
		}
		r.RegionURLs, r.RegionErr = readRackdConf(l.rackdConf)
		if r.RegionErr != nil {
			r.RegionErr = fmt.Errorf("MAAS's %s: %w", l.rackdConf, r.RegionErr)
		}
		// Newest names first, in any directory: on a region+rack snap
		// the region's own cluster.* may sit in one directory while the
		// rack's agent.* is in the other.
		dir, set := l.certDirs[0], certSets[0]
	find:
		for _, s := range certSets {
			for _, d := range l.certDirs {
				if exists(filepath.Join(d, s.cert)) && exists(filepath.Join(d, s.key)) && exists(filepath.Join(d, s.ca)) {
					dir, set, r.Certs = d, s, s.name
					break find
				}
			}
		}
		r.CertFile, r.KeyFile, r.CAFile = filepath.Join(dir, set.cert), filepath.Join(dir, set.key), filepath.Join(dir, set.ca)
		return r
	}
	return nil
}

// under is l with its paths under root.
func (l maasLayout) under(root string) maasLayout {
	at := func(p *string) {
		if *p != "" {
			*p = filepath.Join(root, *p)
		}
	}
	for _, p := range []*string{&l.rackdConf, &l.installed, &l.modeFile, &l.dhcpd.Leases, &l.dhcpd.Config, &l.dhcpd.PIDFile, &l.dhcpd.Leases6, &l.dhcpd.Config6} {
		at(p)
	}
	l.certDirs = slices.Clone(l.certDirs)
	for i := range l.certDirs {
		at(&l.certDirs[i])
	}
	return l
}

// readRackdConf reads rackd.conf's maas_url and returns the leases API on
// each of its hosts.
func readRackdConf(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRackdConf+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRackdConf {
		return nil, fmt.Errorf("larger than %d KiB: not MAAS's rackd.conf", maxRackdConf>>10)
	}
	return RegionURLsOf(b)
}

// RegionURLsOf returns the internal leases API on each host of maas_url in
// rackd.conf's text b, in order and without repeats, as MAAS's rack agent
// derives its controllers: each maas_url's host, https, port 5242 (an
// IPv6 host in brackets, which MAAS's f-string leaves out). MAAS reads
// the file as YAML (ConfigurationFile.load): an empty file is no setting,
// maas_url one URL or a list of them, and its default when unset is
// http://localhost:5240/MAAS.
func RegionURLsOf(b []byte) ([]string, error) {
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	m, ok := doc.(map[string]any)
	if doc != nil && !ok {
		return nil, errors.New("not a mapping of settings")
	}
	var raw []any
	switch v := m["maas_url"].(type) {
	case nil:
		raw = []any{defaultMAASURL}
	case string:
		raw = []any{v}
	case []any:
		raw = v
	default:
		return nil, fmt.Errorf("maas_url: %v is neither a URL nor a list of them", v)
	}
	if len(raw) == 0 {
		return nil, errors.New("maas_url: an empty list names no region")
	}
	var out []string
	for _, r := range raw {
		s, ok := r.(string)
		if !ok {
			return nil, fmt.Errorf("maas_url: %v is not a URL", r)
		}
		u, err := url.Parse(s)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("maas_url: %q is not a URL with a host", s)
		}
		api := "https://" + net.JoinHostPort(u.Hostname(), MAASRegionPort) + MAASLeasesPath
		if !slices.Contains(out, api) {
			out = append(out, api)
		}
	}
	return out, nil
}

// apply gives c the rack's value of each group of RackGroups none of whose
// keys is in set, and returns the keys it gave. err is the region group's
// when rackd.conf gave no region (RegionErr).
func (r *MAASRack) apply(c *Config, set func(key string) bool) (keys []string, err error) {
	for _, g := range RackGroups {
		if slices.ContainsFunc(g, set) {
			continue
		}
		switch g[0] {
		case "region.url":
			if r.RegionErr != nil {
				err = r.RegionErr
				continue
			}
			c.Region.URL, c.Region.OtherURLs = r.RegionURLs[0], slices.Clone(r.RegionURLs[1:])
			if len(c.Region.OtherURLs) == 0 {
				c.Region.OtherURLs = nil
			}
		case "region.cert_file":
			c.Region.CertFile, c.Region.KeyFile, c.Region.CAFile = r.CertFile, r.KeyFile, r.CAFile
		case "dhcpd.leases":
			c.DHCPD = r.DHCPD
		}
		keys = append(keys, g...)
	}
	return keys, err
}

// AwaitedCerts is, when the certificate, key and CA are the rack's (the
// group came from it) and it has none yet, what to tell while the agent
// waits for them: a rack not registered yet, whose files MAAS writes when
// it registers. "" otherwise.
func (c *Config) AwaitedCerts() string {
	if c.Rack == nil || c.Rack.Certs != "" || !slices.Contains(c.RackKeys, "region.cert_file") {
		return ""
	}
	return fmt.Sprintf("this MAAS rack has no certificates yet: is it registered? MAAS writes them (to %s) when the rack registers with the region; the agent follows them and delivers from then on, and events wait in the outbox meanwhile", strings.Join(c.Rack.layout.certDirs, " or "))
}

// Describe is one line saying what the rack gave: for the agent's log,
// --print-config and check-maas.
func (r *MAASRack) Describe(keys []string) string {
	if len(keys) == 0 {
		return fmt.Sprintf("MAAS %s rack (%s): the file sets every key it would give", r.Kind, r.RackdConf)
	}
	var parts []string
	for _, g := range RackGroups {
		if !slices.Contains(keys, g[0]) {
			continue
		}
		switch g[0] {
		case "region.url":
			parts = append(parts, "the region from its maas_url ("+strings.Join(r.RegionURLs, ", ")+")")
		case "region.cert_file":
			what := "its certificates (" + filepath.Dir(r.CertFile)
			if r.Certs == "" {
				what += ", none there yet: is the rack registered?"
			}
			parts = append(parts, what+")")
		case "dhcpd.leases":
			what := "MAAS's dhcpd files (" + r.DHCPD.Leases
			if r.DHCPD.Leases6 != "" {
				what += ", " + r.DHCPD.Leases6
			}
			parts = append(parts, what+")")
		}
	}
	return fmt.Sprintf("MAAS %s rack (%s): %s, for what the file leaves unset", r.Kind, r.RackdConf, strings.Join(parts, "; "))
}
