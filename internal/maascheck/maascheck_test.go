package maascheck

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
)

// pki is a CA with the region's server certificate (CN maas-cluster,
// DNS:maas only, as MAAS issues it) and a rack's client certificate.
type pki struct {
	ca                   *x509.Certificate
	caKey                *ecdsa.PrivateKey
	caFile               string
	server               tls.Certificate
	clientCert, clientKy string
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	p := &pki{}
	var err error
	p.caKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "maas-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caFile = writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", der)
	p.server = p.issue(t, "maas-cluster", []string{"maas"}, x509.ExtKeyUsageServerAuth, 2)
	client := p.issue(t, "rack-1", nil, x509.ExtKeyUsageClientAuth, 3)
	p.clientCert = writePEM(t, filepath.Join(dir, "agent.crt"), "CERTIFICATE", client.Certificate[0])
	kb, _ := x509.MarshalECPrivateKey(client.PrivateKey.(*ecdsa.PrivateKey))
	p.clientKy = writePEM(t, filepath.Join(dir, "agent.key"), "EC PRIVATE KEY", kb)
	return p
}

func (p *pki) issue(t *testing.T, cn string, dns []string, usage x509.ExtKeyUsage, serial int64) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// region serves what MAAS's internal API answers on the leases endpoint
// to a GET: 403 without a client certificate (RequireClientCertMiddleware),
// 405 with one (only POST is routed).
func (p *pki) region(t *testing.T, server tls.Certificate) *httptest.Server {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.TLS == nil || len(r.TLS.PeerCertificates) == 0:
			http.Error(w, `{"detail":"Client certificate required."}`, http.StatusForbidden)
		case r.Method != http.MethodPost:
			http.Error(w, `{"detail":"Method Not Allowed"}`, http.StatusMethodNotAllowed)
		default:
			t.Errorf("check-maas sent a %s", r.Method)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{server}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// world is a rack: a dhcpd.conf running MAAS's helper (a stand-in
// script) with --socket, and the agent's configuration.
type world struct {
	t       *testing.T
	dir     string
	pki     *pki
	srv     *httptest.Server
	cfg     *config.Config
	socket  string
	opts    Options
	helper  string
	dhcpdIn string
}

func newWorld(t *testing.T) *world {
	dir := t.TempDir()
	w := &world{t: t, dir: dir, pki: newPKI(t, dir), socket: filepath.Join(dir, "dhcpd.sock")}
	w.srv = w.pki.region(t, w.pki.server)
	w.helper = filepath.Join(dir, "maas-dhcp-helper")
	if err := os.WriteFile(w.helper, []byte("#!/usr/bin/env python3\n\"\"\"Utility script used by maas-dhcpd and maas-dhcpd6.\"\"\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	w.dhcpdIn = filepath.Join(dir, "dhcpd.conf")
	w.writeConf(`on commit { execute("` + w.helper + `", "notify", "--action", "commit", "--socket", "` + w.socket + `"); }` + "\n")
	u, _ := url.Parse(w.srv.URL)
	cfg := config.Default()
	cfg.DHCPD.Config = w.dhcpdIn
	cfg.Region.URL = "https://" + u.Host + leasesPath
	cfg.Region.CertFile, cfg.Region.KeyFile, cfg.Region.CAFile = w.pki.clientCert, w.pki.clientKy, w.pki.caFile
	cfg.Region.TokenFile = ""
	cfg.DHCPD.Leases = filepath.Join(dir, "dhcpd.leases")
	w.cfg = cfg
	// No dhcpd runs in this world: the machine's (other tests') are not
	// looked at (TestLeasesFile covers that check).
	// Nor is the machine's leasekeeper.service (systemctl), if any.
	none := func() []string { return nil }
	w.opts = Options{Config: cfg, Detect: &reconcile.DetectEnv{}, Port: u.Port(), Timeout: 5 * time.Second,
		ProcRoot: t.TempDir(), MAASLeases: []string{}, MAASLeases6: []string{}, Credentials: none, Capabilities: none, SupplementaryGroups: none}
	return w
}

func (w *world) writeConf(text string) {
	w.t.Helper()
	if err := os.WriteFile(w.dhcpdIn, []byte(text), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// listen makes something receive on the helper's socket, as maas-agent
// does from MAAS 3.6 (rackd before).
func (w *world) listen() {
	w.t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: w.socket, Net: "unixgram"})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close() })
}

// check runs the checks and returns "severity check" per finding, and the
// report.
func (w *world) check() ([]string, *Report) {
	w.t.Helper()
	rep := Run(context.Background(), w.opts)
	var got []string
	for _, f := range rep.Findings {
		got = append(got, f.Severity+" "+f.Check)
		w.t.Logf("%-7s %s: %s | fix: %s", f.Severity, f.Check, f.Message, f.Fix)
	}
	return got, rep
}

func has(got []string, want ...string) bool {
	for _, x := range want {
		found := false
		for _, g := range got {
			if g == x {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func find(rep *Report, check, sev string) *Finding {
	for i, f := range rep.Findings {
		if f.Check == check && f.Severity == sev {
			return &rep.Findings[i]
		}
	}
	return nil
}

// TestComplementRack: MAAS's helper, not diverted, with maas-agent
// listening; the region reachable as MAAS requires. Nothing is wrong:
// complement mode is explained.
func TestComplementRack(t *testing.T) {
	w := newWorld(t)
	w.listen()
	got, rep := w.check()
	if rep.Problems != 0 || rep.Mode.Mode != reconcile.ModeComplement {
		t.Fatalf("%d problems, mode %s: %q", rep.Problems, rep.Mode.Mode, got)
	}
	if !has(got, "ok mode", "note hook", "ok helper-socket", "note leases-file", "ok region-url", "ok certificates", "ok region") {
		t.Errorf("findings %q", got)
	}
	if f := find(rep, "hook", Note); !strings.Contains(f.Message, "not diverted") || !strings.Contains(f.Fix, "divert") {
		t.Errorf("the note does not say what undiverted means: %+v", f)
	}
}

func TestProblems(t *testing.T) {
	tests := []struct {
		name  string
		setup func(w *world)
		want  string // "severity check" that must be among the findings
		words string // in its message
	}{
		{"nothing receives the helper's datagrams", func(w *world) {}, "problem helper-socket", "lost"},
		{"wrong port", func(w *world) { w.opts.Port = "5242" }, "problem region-url", "only on port 5242"},
		{"wrong path", func(w *world) {
			w.listen()
			w.cfg.Region.URL = strings.Replace(w.cfg.Region.URL, leasesPath, "/MAAS/api/2.0/", 1)
		}, "problem region-url", "leases endpoint"},
		{"a bearer token", func(w *world) { w.listen(); w.cfg.Region.TokenFile = "/etc/leasekeeper/region.token" }, "problem certificates", "no bearer token"},
		{"no client certificate", func(w *world) { w.listen(); w.cfg.Region.CertFile, w.cfg.Region.KeyFile = "", "" }, "problem certificates", "not set"},
		{"certificate file missing", func(w *world) { w.listen(); w.cfg.Region.CertFile = filepath.Join(w.dir, "nope.crt") }, "problem certificates", "no such file"},
		{"certificate from another CA", func(w *world) {
			w.listen()
			other := newPKI(t, t.TempDir())
			w.cfg.Region.CertFile, w.cfg.Region.KeyFile = other.clientCert, other.clientKy
		}, "problem certificates", "does not chain"},
		{"region certificate for another name", func(w *world) {
			w.listen()
			w.srv.Close()
			w.srv = w.pki.region(t, w.pki.issue(t, "other", []string{"other"}, x509.ExtKeyUsageServerAuth, 9))
			u, _ := url.Parse(w.srv.URL)
			w.cfg.Region.URL, w.opts.Port = "https://"+u.Host+leasesPath, u.Port()
		}, "problem region", "server_name"},
		{"region refuses connections", func(w *world) { w.listen(); w.srv.Close() }, "problem region", "refuses"},
		// Another region controller (region.other_urls): checked as
		// region.url is. Nothing listens on 127.0.0.2.
		{"another controller refuses connections", func(w *world) {
			w.listen()
			w.cfg.Region.OtherURLs = []string{"https://127.0.0.2:" + w.opts.Port + leasesPath}
		}, "problem region", "127.0.0.2"},
		{"another controller's path", func(w *world) {
			w.listen()
			w.cfg.Region.OtherURLs = []string{"https://127.0.0.2:" + w.opts.Port + "/MAAS/api/2.0/"}
		}, "problem region-url", "other_urls"},
		{"the program cannot run", func(w *world) { os.Chmod(w.helper, 0o644) }, "problem hook", "cannot run"},
		{"dhcpd.config unset: unsure", func(w *world) { w.cfg.DHCPD.Config = "" }, "problem mode", "not set"},
		{"forced replacement over MAAS's helper", func(w *world) { w.listen(); w.cfg.Reconcile.Mode = "replacement" }, "problem mode", "second copies"},
		// A snap's helper cannot be diverted: where nothing receives its
		// events (MAAS 3.6 after 3.6.5), hookless is the remedy.
		{"nothing receives a snap's helper's datagrams", func(w *world) { w.opts.Detect.SnapDir = w.dir }, "problem helper-socket", `mode = "hookless"`},
		// What the agent's own validation refuses stops it at start
		// (a cold review: check-maas said nothing of it).
		{"a value the agent refuses", func(w *world) { w.listen(); w.cfg.Region.BatchMax = 0 }, "problem config", "region.batch_max"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.setup(w)
			got, rep := w.check()
			sev, check, _ := strings.Cut(tc.want, " ")
			f := find(rep, check, sev)
			if f == nil || !strings.Contains(f.Message+" "+f.Fix, tc.words) {
				t.Fatalf("want %s mentioning %q; got %q", tc.want, tc.words, got)
			}
			if rep.Problems == 0 || (sev == Problem && f.Fix == "") {
				t.Errorf("problems %d, fix %q", rep.Problems, f.Fix)
			}
		})
	}
}

// TestStatxFinding: where leasekeeper-hook is dhcpd's hook, a kernel
// that refuses statx(2) (missing before Linux 4.11: ENOSYS; refused by a
// seccomp filter: EPERM) is a problem, as the hook can then neither
// spool nor clean; with MAAS's helper as the hook it is nobody's concern,
// and this machine's own statx is taken as it answers.
func TestStatxFinding(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ours  bool
		statx func() error
		want  bool
	}{
		{"this machine's kernel", true, nil, false},
		{"no statx", true, func() error { return syscall.ENOSYS }, true},
		{"statx refused", true, func() error { return syscall.EPERM }, true},
		{"another error", true, func() error { return syscall.EACCES }, false},
		{"MAAS's helper, no statx", false, func() error { return syscall.ENOSYS }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.statx == nil {
				if err := statxRoot(); err != nil {
					t.Skipf("this machine's statx(2) fails (%v): the case is for one where it works", err)
				}
			}
			w := newWorld(t)
			w.listen()
			if tc.ours {
				w.opts.Detect.OurHooks = []string{w.helper}
			}
			w.opts.Statx = tc.statx
			_, rep := w.check()
			var f *Finding
			for i, x := range rep.Findings {
				if x.Check == "hook" && strings.Contains(x.Message, "refuses statx(2)") {
					f = &rep.Findings[i]
				}
			}
			if (f != nil) != tc.want {
				t.Fatalf("statx finding %v, want one: %v", f, tc.want)
			}
			if f != nil && (f.Severity != Problem || !strings.Contains(f.Message, "Linux 4.11") || f.Fix == "") {
				t.Errorf("%+v", *f)
			}
		})
	}
}

// TestRegionURLFix: a region.url wrong in scheme, port and path at once
// gets one fix, the same URL in every finding, with the host kept (an
// IPv6 one in brackets); the path's fix once kept the wrong port (a cold
// review).
func TestRegionURLFix(t *testing.T) {
	for _, tc := range []struct{ url, fix string }{
		{"http://127.0.0.1:1/leases", "use https://127.0.0.1:5242" + leasesPath},
		{"http://[2001:db8::1]/leases", "use https://[2001:db8::1]:5242" + leasesPath},
	} {
		w := newWorld(t)
		// MAAS's port, not the test region's; an http URL is never
		// dialled (the check stops before its connection).
		w.cfg.Region.URL, w.opts.Port = tc.url, ""
		_, rep := w.check()
		var fixes []string
		for _, f := range rep.Findings {
			if f.Check == "region-url" && strings.HasPrefix(f.Fix, "use ") {
				fixes = append(fixes, f.Fix)
			}
		}
		if want := []string{tc.fix, tc.fix, tc.fix}; !slices.Equal(fixes, want) {
			t.Errorf("region.url %s: fixes %q, want %q", tc.url, fixes, want)
		}
	}
}

// TestForcedMode: reconcile.mode is a problem only when detection read
// hooks that tell the region themselves; when it could not tell (the
// situation leasekeeper.toml advises setting reconcile.mode for), the
// forced mode is a note, never advice to remove it.
func TestForcedMode(t *testing.T) {
	tests := []struct {
		name  string
		setup func(w *world)
		want  string // severity of the mode finding
		words string // in its message
	}{
		{"forced replacement, dhcpd.config unset", func(w *world) {
			w.cfg.DHCPD.Config, w.cfg.Reconcile.Mode = "", "replacement"
		}, Note, "could not be read"},
		{"forced replacement, dhcpd.conf unreadable", func(w *world) {
			w.cfg.DHCPD.Config, w.cfg.Reconcile.Mode = filepath.Join(w.dir, "missing.conf"), "replacement"
		}, Note, "could not be read"},
		{"forced complement, dhcpd.config unset", func(w *world) {
			w.cfg.DHCPD.Config, w.cfg.Reconcile.Mode = "", "complement"
		}, Note, "could not be read"},
		{"forced replacement over MAAS's helper", func(w *world) {
			w.listen()
			w.cfg.Reconcile.Mode = "replacement"
		}, Problem, "hooks tell the region themselves"},
		{"forced hookless over MAAS's helper, received", func(w *world) {
			w.listen()
			w.cfg.Reconcile.Mode = "hookless"
		}, Problem, "hooks tell the region themselves"},
		// MAAS 3.6 after 3.6.5 starts no receiver for its helper
		// (src/maasagent/cmd/maas-agent/main.go on the 3.6 branch,
		// NewDHCPService commented out): hookless delivers every event,
		// and no first copy exists.
		{"forced hookless over MAAS's helper, nothing receives", func(w *world) {
			w.cfg.Reconcile.Mode = "hookless"
		}, OK, "the only copies"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.setup(w)
			got, rep := w.check()
			if !rep.Mode.Forced {
				t.Fatalf("mode not forced: %+v", rep.Mode)
			}
			f := find(rep, "mode", tc.want)
			if f == nil || !strings.Contains(f.Message, tc.words) {
				t.Fatalf("want a mode %s mentioning %q; got %q", tc.want, tc.words, got)
			}
			if tc.want == OK && rep.Problems != 0 {
				t.Errorf("%d problems besides the mode, which is right: %q", rep.Problems, got)
			}
			if tc.want != Problem && find(rep, "mode", Problem) != nil {
				t.Errorf("a mode problem besides the %s: %+v", tc.want, find(rep, "mode", Problem))
			}
			if tc.want != Problem && strings.Contains(f.Fix, "remove reconcile.mode") {
				t.Errorf("advises removing reconcile.mode: %q", f.Fix)
			}
		})
	}
}

// TestAgentAccess: MAAS writes dhcpd.conf readable by root only; the
// agent's user then cannot tell the mode, and check-maas says what to
// set.
func TestAgentAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: checks what another user can read")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	w := newWorld(t)
	w.listen()
	if err := os.Chmod(w.dhcpdIn, 0o640); err != nil {
		t.Fatal(err)
	}
	for d := w.dir; d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, 0o755); err != nil { // t.TempDir's are 0700
				t.Fatal(err)
			}
		}
	}
	// dhcpd creates its leases file 0664 less its umask (server/db.c,
	// new_lease_file), MAAS's unit chmods it 0664 (MAAS's
	// debian/maas-dhcp.maas-dhcpd.service); one the agent cannot read, it
	// cannot follow.
	// So too dhcpd -6's, followed with dhcpd.leases6; and its dhcpd6.conf
	// unread, the agent cannot tell dhcpd.leases6's mode, which no key
	// forces.
	w.cfg.DHCPD.Leases6 = filepath.Join(filepath.Dir(w.cfg.DHCPD.Leases), "dhcpd6.leases")
	w.cfg.DHCPD.Config6 = filepath.Join(filepath.Dir(w.cfg.DHCPD.Leases), "dhcpd6.conf")
	for _, l := range []string{w.cfg.DHCPD.Leases, w.cfg.DHCPD.Leases6, w.cfg.DHCPD.Config6} {
		if err := os.WriteFile(l, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.opts.AgentUser = "nobody"
	_, rep := w.check()
	for _, l := range []string{w.cfg.DHCPD.Leases, w.cfg.DHCPD.Leases6} {
		if f := findOf(rep, "agent-access", l); f == nil || f.Severity != Problem || !strings.Contains(f.Message, "cannot follow") {
			t.Errorf("want an agent-access problem for the leases file %s; got %+v", l, f)
		}
	}
	if f := findOf(rep, "agent-access", w.cfg.DHCPD.Config6); f == nil || f.Severity != Problem || !strings.Contains(f.Fix, "detected from dhcpd.config6 alone") {
		t.Errorf("want an agent-access problem for dhcpd.config6 %s, the file to let it read; got %+v", w.cfg.DHCPD.Config6, f)
	}
	w.cfg.DHCPD.Leases6, w.cfg.DHCPD.Config6 = "", ""
	if err := os.Chmod(w.cfg.DHCPD.Leases, 0o644); err != nil {
		t.Fatal(err)
	}
	_, rep = w.check()
	if f := findOf(rep, "agent-access", w.cfg.DHCPD.Leases); f != nil {
		t.Errorf("the leases file is 0644 now; got %+v", f)
	}
	var f *Finding
	for i, x := range rep.Findings {
		if x.Check == "agent-access" && strings.Contains(x.Message, "cannot read "+w.dhcpdIn+" (") {
			f = &rep.Findings[i]
		}
	}
	if f == nil || !strings.Contains(f.Message, "mode 0640") || !strings.Contains(f.Fix, `mode = "complement"`) {
		t.Fatalf("want an agent-access problem for %s with the mode to set; got %+v", w.dhcpdIn, rep.Findings)
	}
	// The key is the rack's, 0600: the agent's user cannot read it either,
	// unless systemd hands it a copy.
	if f := findOf(rep, "agent-access", w.pki.clientKy); f == nil || f.Severity != Problem || !strings.Contains(f.Fix, "LoadCredential=agent.key:") {
		t.Errorf("want an agent-access problem for the key %s with LoadCredential= as the fix; got %+v", w.pki.clientKy, f)
	}
	w.opts.Credentials = func() []string { return []string{"agent.key"} }
	_, rep = w.check()
	if f := findOf(rep, "agent-access", w.pki.clientKy); f == nil || f.Severity != OK {
		t.Errorf("with LoadCredential=agent.key: want ok for the key; got %+v", f)
	}
	// The region from a MAAS rack's rackd.conf, which MAAS keeps 0640
	// (src/provisioningserver/config.py default_file_mode): the agent's
	// user cannot read it, and stops; not so when the file sets the url.
	rackd := filepath.Join(w.dir, "rackd.conf")
	if err := os.WriteFile(rackd, []byte("maas_url: http://127.0.0.1:5240/MAAS\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	w.cfg.Rack, w.cfg.RackKeys = &config.MAASRack{Kind: "deb", RackdConf: rackd}, []string{"region.url", "region.other_urls"}
	_, rep = w.check()
	if f := findOf(rep, "agent-access", rackd); f == nil || f.Severity != Problem || !strings.Contains(f.Fix, "set [region] url") {
		t.Errorf("want an agent-access problem for %s, whence the region comes; got %+v", rackd, f)
	}
	w.cfg.RackKeys = nil
	_, rep = w.check()
	if f := findOf(rep, "agent-access", rackd); f != nil {
		t.Errorf("the file sets the region: want nothing said of %s; got %+v", rackd, f)
	}
	w.cfg.Rack = nil
	// The package's maas-rack.conf grants CAP_DAC_READ_SEARCH: the agent
	// reads every file above whatever its mode, and nothing is a problem.
	w.opts.Credentials = func() []string { return nil }
	w.opts.Capabilities = func() []string { return []string{"cap_net_raw", "cap_dac_read_search"} }
	if err := os.Chmod(w.cfg.DHCPD.Leases, 0o600); err != nil {
		t.Fatal(err)
	}
	_, rep = w.check()
	var ok bool
	for _, f := range rep.Findings {
		switch {
		case f.Check == "agent-access" && f.Severity != OK:
			t.Errorf("with CAP_DAC_READ_SEARCH: want no agent-access problem; got %+v", f)
		case f.Check == "agent-access":
			ok = strings.Contains(f.Message, "CAP_DAC_READ_SEARCH")
		}
	}
	if !ok {
		t.Errorf("with CAP_DAC_READ_SEARCH: want an ok finding naming it; got %+v", rep.Findings)
	}
	// A user this machine lacks (a typo, a broken install) checks
	// nothing, and says so; it was skipped in silence (a cold review).
	w.opts.AgentUser = "lk-no-such-user-4711"
	_, rep = w.check()
	var told int
	for _, f := range rep.Findings {
		if f.Check == "agent-access" {
			told++
			if f.Severity != Problem || !strings.Contains(f.Message, "no user lk-no-such-user-4711") || !strings.Contains(f.Fix, "--agent-user") {
				t.Errorf("an unknown agent user: want a problem naming it and --agent-user; got %+v", f)
			}
		}
	}
	if told != 1 {
		t.Errorf("an unknown agent user: want one agent-access finding; got %+v", rep.Findings)
	}
}

// findOf is the finding of check whose message names what.
func findOf(rep *Report, check, what string) *Finding {
	for i, f := range rep.Findings {
		if f.Check == check && strings.Contains(f.Message, "read "+what) {
			return &rep.Findings[i]
		}
	}
	return nil
}

// TestFailoverPeers: MAAS declares one failover peer per HA VLAN, each
// with its own role (src/maasserver/dhcp.py, make_failover_peer_config);
// the agent follows each address's own, which check-maas says, with a
// note when the pair channel orders them all with one partner rack's
// agent, and which agent orders which peers with pair.partners.
func TestFailoverPeers(t *testing.T) {
	peer := func(name, role, net string) string {
		return `failover peer "` + name + `" { ` + role + `; address ` + net + `.1; peer address ` + net + `.2; max-response-delay 60; max-unacked-updates 10; mclt 3600; split 255; }` + "\n" +
			"subnet " + net + ".0 netmask 255.255.255.0 { pool { failover peer \"" + name + "\"; range " + net + ".10 " + net + ".50; } }\n"
	}
	two := peer("failover-vlan-5001", "primary", "203.0.113") + peer("failover-vlan-5002", "secondary", "198.51.100")
	for _, tc := range []struct {
		name     string
		conf     string
		channel  bool
		partners []string
		want     []string // "severity check" findings, none of "failover" when empty
		says     string   // in the failover-channel or failover-partners finding
	}{
		{name: "one peer", conf: peer("failover-vlan-5001", "primary", "203.0.113")},
		{name: "a peer per VLAN", conf: two, want: []string{"ok failover"}},
		{name: "a peer per VLAN, the pair channel on", conf: two, channel: true,
			want: []string{"ok failover", "note failover-channel"}, says: "name those peers in pair.partners"},
		{name: "a peer per VLAN, a partner each", conf: two, channel: true, partners: []string{"failover-vlan-5002 :5254 rack-c:5253"},
			want: []string{"ok failover", "ok failover-channel"},
			says: "orders failover-vlan-5001 with the agent at 198.51.100.2:5253; failover-vlan-5002 with the agent at rack-c:5253."},
		{name: "a partner of no peer", conf: peer("failover-vlan-5001", "primary", "203.0.113"), channel: true, partners: []string{"failover-vlan-5009 :5254 rack-c:5253"},
			want: []string{"note failover-partners"}, says: `names failover peer "failover-vlan-5009" for the agent at rack-c:5253`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.listen()
			b, err := os.ReadFile(w.dhcpdIn)
			if err != nil {
				t.Fatal(err)
			}
			w.writeConf(string(b) + tc.conf)
			if tc.channel {
				w.cfg.Pair.Listen, w.cfg.Pair.Peer, w.cfg.Pair.Partners = "198.51.100.1:5253", "198.51.100.2:5253", tc.partners
			}
			got, rep := w.check()
			var fo []string
			for _, g := range got {
				if strings.Contains(g, " failover") {
					fo = append(fo, g)
				}
			}
			if diff := cmp.Diff(tc.want, fo); diff != "" {
				t.Fatalf("failover findings (-want +got):\n%s", diff)
			}
			if f := find(rep, "failover", OK); f != nil && !strings.Contains(f.Message, "failover-vlan-5002 (secondary)") {
				t.Errorf("the finding does not name the peers: %s", f.Message)
			}
			if tc.says != "" {
				var msgs []string
				for _, c := range []string{"failover-channel", "failover-partners"} {
					for _, s := range []string{OK, Note} {
						if f := find(rep, c, s); f != nil {
							msgs = append(msgs, f.Message)
						}
					}
				}
				if !strings.Contains(strings.Join(msgs, "\n"), tc.says) {
					t.Errorf("the channel's findings %q do not say %q", msgs, tc.says)
				}
			}
			if p := find(rep, "failover", Problem); p != nil {
				t.Errorf("a problem: %s", p.Message)
			}
		})
	}
}

// TestDHCPv6Finding: dhcpd.config6 set without dhcpd.leases6 is a
// problem (no DHCPv6 lease reaches the region: MAAS's dhcpd6.conf,
// src/maasserver/templates/dhcp/dhcpd6.conf.template, runs no hook), with
// the key to set; both set, a note of the mode the agent follows it in.
func TestDHCPv6Finding(t *testing.T) {
	d := &reconcile.Detection{Mode: reconcile.ModeHookless, Why: "dhcpd6.conf runs no hook"}
	for _, tc := range []struct {
		leases6, sev, want string
		d6                 *reconcile.Detection // nil: dhcpd.config6 not set
	}{
		{"", Problem, "dhcpd.leases6 is not", d},
		{"/var/lib/maas/dhcp/dhcpd6.leases", Note, "follows dhcpd.leases6 (/var/lib/maas/dhcp/dhcpd6.leases) in hookless mode", d},
		{"/var/lib/maas/dhcp/dhcpd6.leases", Problem, "dhcpd.config6 is not: the agent refuses this configuration", nil},
	} {
		c := config.Default()
		c.DHCPD.Leases6 = tc.leases6
		if tc.d6 != nil {
			c.DHCPD.Config6 = "/var/lib/maas/dhcpd6.conf"
		}
		var r Report
		r.dhcpv6(c, tc.d6)
		if len(r.Findings) != 1 || r.Findings[0].Severity != tc.sev || !strings.Contains(r.Findings[0].Message, tc.want) {
			t.Errorf("leases6 %q: %+v; want one %s saying %q", tc.leases6, r.Findings, tc.sev, tc.want)
		}
		if tc.sev == Problem && !strings.Contains(r.Findings[0].Fix, "6 to dhcpd -6's") {
			t.Errorf("the problem's fix %q does not name the key to set", r.Findings[0].Fix)
		}
	}
	var r Report
	r.dhcpv6(config.Default(), nil)
	if len(r.Findings) != 0 {
		t.Errorf("neither key set: want nothing said, got %+v", r.Findings)
	}
}

// TestConfigFindings: every problem the agent's validation finds is a
// config finding, but region.url's, which region-url tells.
func TestConfigFindings(t *testing.T) {
	w := newWorld(t)
	w.listen()
	w.cfg.Region.BatchMax, w.cfg.Log.Level, w.cfg.Region.URL = 0, "verbose", ""
	_, rep := w.check()
	var cfg []string
	for _, f := range rep.Findings {
		if f.Check == "config" {
			cfg = append(cfg, f.Message)
		}
	}
	if len(cfg) != 2 || !strings.Contains(cfg[0]+cfg[1], "region.batch_max") || !strings.Contains(cfg[0]+cfg[1], "log.level") {
		t.Errorf("config findings %q; want region.batch_max's and log.level's", cfg)
	}
	if find(rep, "region-url", Problem) == nil {
		t.Error("no region-url problem for the unset url")
	}
}

// TestConfigFileFindings: what reading the file found wrong is a config
// problem each, told with the rest; no file at all is a note, checked
// on the defaults the agent runs on.
func TestConfigFileFindings(t *testing.T) {
	w := newWorld(t)
	w.listen()
	_, ps, err := config.DecodePartial(strings.NewReader("[log]\nlevl = \"debug\"\n[region]\nbatch_max = \"x\"\n"), "lk.toml")
	if err != nil || ps == nil {
		t.Fatalf("decode: %v, problems %v", err, ps)
	}
	w.opts.FileProblems, w.opts.NoFile = ps, ""
	_, rep := w.check()
	var told []string
	for _, f := range rep.Findings {
		if f.Check == "config" && f.Severity == Problem {
			told = append(told, f.Message)
		}
	}
	if len(told) != 2 || !strings.Contains(told[0], "log.levl: unknown key") || !strings.Contains(told[1], "region.batch_max") {
		t.Errorf("config problems %q; want log.levl's and region.batch_max's", told)
	}
	w.opts.FileProblems, w.opts.NoFile = nil, "/etc/leasekeeper/leasekeeper.toml"
	_, rep = w.check()
	if f := find(rep, "config", Note); f == nil || !strings.Contains(f.Message, "no configuration file at /etc/leasekeeper/leasekeeper.toml") {
		t.Errorf("no file: want a config note; got %+v", rep.Findings)
	}
}

// TestSocketGroups: a socket group the machine lacks, or one the agent's
// user is not in (by /etc/group or the unit's SupplementaryGroups=),
// stops the agent at start (internal/sockgroup); check-maas says so
// before, with the fix. --print-config and the agent's start say the
// same (TestAgentPrintConfig).
func TestSocketGroups(t *testing.T) {
	w := newWorld(t)
	w.listen()
	w.opts.AgentUser = "nobody"
	w.cfg.Control.Group, w.cfg.Hook.SocketGroup = "lk-no-such-group-4711", "root"
	_, rep := w.check()
	var got []Finding
	for _, f := range rep.Findings {
		if f.Check == "socket-group" {
			got = append(got, f)
		}
	}
	if len(got) != 2 || got[0].Severity != Problem || !strings.Contains(got[0].Message, `control.group "lk-no-such-group-4711": no such group`) ||
		got[1].Severity != Problem || !strings.Contains(got[1].Message, "not a member of group root") || !strings.Contains(got[1].Fix, "SupplementaryGroups=root") {
		t.Errorf("socket-group findings %+v; want the unknown group and the group nobody is not in, each a problem", got)
	}
	w.opts.SupplementaryGroups = func() []string { return []string{"root"} }
	w.cfg.Control.Group = ""
	_, rep = w.check()
	if f := find(rep, "socket-group", OK); f == nil || !strings.Contains(f.Message, `hook.socket_group "root"`) || find(rep, "socket-group", Problem) != nil {
		t.Errorf("with SupplementaryGroups=root: want an ok finding and no problem; got %+v", rep.Findings)
	}
}
