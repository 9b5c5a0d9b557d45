package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/agent/event"
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
	// maas-rack-controller's rackd: the deb is installed.
	if err := os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/rackd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := regionstub.LoadOrCreatePKI(filepath.Join(root, "var/lib/maas/certificates")); err != nil {
		t.Fatal(err)
	}
	return root
}

// regionAt is a region stub at addr, MAAS's port on a loopback address of
// its own, with pki (nil: one of its own); the test is skipped when the
// address is taken (a MAAS region listening on every address?).
func regionAt(t *testing.T, addr string, pki *regionstub.PKI) *regionstub.Server {
	t.Helper()
	stub, err := regionstub.Start(regionstub.Options{Addr: addr, PKI: pki})
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skip(addr + " is taken on this host (a MAAS region listening on every address?)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	return stub
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
	// A rack not registered yet: no certificates.
	if err := os.RemoveAll(filepath.Join(root, "var/lib/maas/certificates")); err != nil {
		t.Fatal(err)
	}
	out, _, code := runIn(t, root, "check-maas", "--config", writeFile(t, "lk3.toml", ""), "--agent-user", "", "--timeout", "1s")
	for _, want := range []string{
		"certificates: this MAAS rack has no certificates yet: is it registered?",
		"register the rack with its region (maas-rack register on a deb rack, maas init rack on the snap)",
	} {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

// TestAgentDeliversOnMAASRack runs the agent on a MAAS deb rack's files
// with the package's configuration file as shipped: it follows MAAS's
// dhcpd.leases and delivers its lease to the region rackd.conf's
// maas_url names, on port 5242 over mutual TLS with the rack's
// certificate (a region stub on a loopback address of its own); a reload
// after maas_url changed follows it.
func TestAgentDeliversOnMAASRack(t *testing.T) {
	stub := regionAt(t, "127.0.0.3:5242", nil)
	root := maasDebRack(t, "http://127.0.0.3:5240/MAAS")
	certs := filepath.Join(root, "var/lib/maas/certificates")
	if _, err := stub.WriteRackFiles(certs, "rack-1"); err != nil {
		t.Fatal(err)
	}
	writeAt := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// MAAS's dhcpd.conf, here without hooks: every event from the file.
	writeAt("var/lib/maas/dhcpd.conf", "subnet 203.0.113.0 netmask 255.255.255.0 {\n  range 203.0.113.10 203.0.113.20;\n}\n")
	lease := func(ip, mac string) string {
		now, end := time.Now().UTC().Format("0 2006/01/02 15:04:05"), time.Now().Add(time.Hour).UTC().Format("0 2006/01/02 15:04:05")
		return fmt.Sprintf("lease %s {\n  starts %s;\n  ends %s;\n  cltt %s;\n  binding state active;\n  next binding state free;\n  hardware ethernet %s;\n}\n", ip, now, end, now, mac)
	}
	leases := filepath.Join(root, "var/lib/maas/dhcp/dhcpd.leases")
	writeAt("var/lib/maas/dhcp/dhcpd.leases", lease("203.0.113.11", "02:00:00:00:00:11"))

	shipped, err := os.ReadFile("../../packaging/etc/leasekeeper/leasekeeper.toml")
	if err != nil {
		t.Fatal(err)
	}
	own := agentFiles(t.TempDir())
	path := writeFile(t, "lk.toml", string(shipped)+"\n"+own)
	a := startAgent(t, root, path)
	logs := &a.logs
	logs.waitFor(t, `"maas_rack":"deb"`)
	logs.waitFor(t, `"message":"following dhcpd.leases"`)
	// The file at the first start is the baseline; dhcpd's next commit:
	f, err := os.OpenFile(leases, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(lease("203.0.113.12", "02:00:00:00:00:12")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := stub.WaitFunc(wctx, func(items []event.RegionItem) bool {
		return slices.ContainsFunc(items, func(it event.RegionItem) bool { return it.IP == "203.0.113.12" && it.Action == "commit" })
	}); err != nil {
		t.Fatalf("the lease did not reach the region: %v\n%s", err, logs.String())
	}
	if b := stub.Batches(); b[0].ClientCN != "rack-1" {
		t.Errorf("delivered with certificate %q, want the rack's", b[0].ClientCN)
	}
	// leasekeeper status says where the agent's region came from.
	out, stderr, _ := runIn(t, root, "status", "--config", path)
	if want := "maas rack      MAAS deb rack (" + root + "/etc/maas/rackd.conf): the region from its maas_url (https://127.0.0.3:5242/MAAS/a/v3internal/leases)"; !strings.Contains(out, want) {
		t.Errorf("status lacks %q:\n%s%s", want, out, stderr)
	}

	// The rack registered again with another region (the same CA here,
	// as for a region of one MAAS): MAAS rewrites rackd.conf (a rename:
	// atomic_write, src/provisioningserver/utils/fs.py), and the agent
	// follows it without a SIGHUP. An edit of the agent's own file that
	// no SIGHUP loaded yet stays out until one does.
	stub2 := regionAt(t, "127.0.0.4:5242", stub.PKI())
	edited := strings.Replace(string(shipped), `url = ""`, "url = \"\"\nbatch_max = 7", 1) + "\n" + own
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	renameOnto := func(p string, b []byte) {
		t.Helper()
		if err := os.WriteFile(p+".tmp", b, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
	renameOnto(filepath.Join(root, "etc/maas/rackd.conf"), []byte("maas_url: [http://127.0.0.4:5240/MAAS]\n"))
	logs.waitFor(t, `"files":["`+root+`/etc/maas/rackd.conf"]`)
	logs.waitFor(t, `"changed":["region.url"]`)
	commit := func(to *regionstub.Server, ip, mac string) regionstub.Batch {
		t.Helper()
		f, err := os.OpenFile(leases, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(lease(ip, mac)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		has := func(it event.RegionItem) bool { return it.IP == ip && it.Action == "commit" }
		if err := to.WaitFunc(wctx, func(items []event.RegionItem) bool { return slices.ContainsFunc(items, has) }); err != nil {
			t.Fatalf("the lease of %s did not reach the region rackd.conf names now: %v\n%s", ip, err, logs.String())
		}
		bs := to.Batches()
		return bs[slices.IndexFunc(bs, func(b regionstub.Batch) bool { return slices.ContainsFunc(b.Items, has) })]
	}
	commit(stub2, "203.0.113.13", "02:00:00:00:00:13")

	// The rack's certificate renewed, written as MAAS writes it
	// (store_maas_agent_cert_tuple, src/provisioningserver/
	// certificates.py: the key, then the certificate, each renamed onto
	// its file): the next request presents the new one.
	fresh, err := stub.WriteRackFiles(t.TempDir(), "rack-2")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{fresh.ClientKey, "agent.key"}, {fresh.ClientCert, "agent.crt"}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		renameOnto(filepath.Join(certs, p[1]), b)
	}
	logs.waitFor(t, `"changed":[]`)
	if b := commit(stub2, "203.0.113.14", "02:00:00:00:00:14"); b.ClientCN != "rack-2" {
		t.Errorf("after the renewal delivered with certificate %q, want the renewed one (rack-2)\n%s", b.ClientCN, logs.String())
	}
	if strings.Contains(logs.String(), "region.batch_max") {
		t.Fatalf("following rackd.conf and the certificates applied the file's edit too:\n%s", logs.String())
	}
	a.sigs <- syscall.SIGHUP
	logs.waitFor(t, `"changed":["region.batch_max"]`)

	a.stop(stopSignal{syscall.SIGTERM})
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("runAgent: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("runAgent did not return after SIGTERM")
	}
}

// TestAgentAwaitsRegistration: on a MAAS rack not registered yet (no
// certificates: MAAS writes them when the rack registers,
// store_maas_agent_cert_tuple in src/provisioningserver/certificates.py,
// called from rpc/clusterservice.py's registration) the agent starts and
// says why it delivers nothing (status: region config, with the hint);
// dhcpd's events wait in the outbox, and go once MAAS writes the
// certificates, without a restart. --print-config accepts it too (the
// package's postinst starts the agent on what --print-config accepts).
func TestAgentAwaitsRegistration(t *testing.T) {
	stub := regionAt(t, "127.0.0.3:5242", nil)
	root := maasDebRack(t, "http://127.0.0.3:5240/MAAS")
	certs := filepath.Join(root, "var/lib/maas/certificates")
	if err := os.RemoveAll(certs); err != nil {
		t.Fatal(err)
	}
	leases := filepath.Join(root, "var/lib/maas/dhcp/dhcpd.leases")
	for p, s := range map[string]string{
		filepath.Join(root, "var/lib/maas/dhcpd.conf"): "subnet 203.0.113.0 netmask 255.255.255.0 {\n  range 203.0.113.10 203.0.113.20;\n}\n",
		leases: "",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shipped, err := os.ReadFile("../../packaging/etc/leasekeeper/leasekeeper.toml")
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "lk.toml", string(shipped)+"\n"+agentFiles(t.TempDir()))
	if out, stderr, code := runIn(t, root, "agent", "--config", path, "--print-config"); code != 0 || !strings.Contains(out, "none there yet: is the rack registered?") {
		t.Fatalf("--print-config on a rack not registered: exit %d, want 0 naming it:\n%s%s", code, out, stderr)
	}
	a := startAgent(t, root, path)
	a.logs.waitFor(t, `"message":"ready"`)
	a.logs.waitFor(t, `not delivering yet: this MAAS rack has no certificates yet: is it registered?`)
	out, stderr, code := runIn(t, root, "status", "--json", "--config", path)
	if code != ExitAttention || !strings.Contains(out, `"state": "waiting"`) || !strings.Contains(out, "MAAS writes them (to "+certs+") when the rack registers") {
		t.Errorf("status before the registration: exit %d, want %d with the region's state waiting and why:\n%s%s", code, ExitAttention, out, stderr)
	}
	out, _, _ = runIn(t, root, "status", "--config", path)
	if want := "WAITING for "; !strings.Contains(out, want) || !strings.Contains(out, certs+"/ca.pem does not exist") {
		t.Errorf("status before the registration lacks %q and the missing file:\n%s", want, out)
	}

	// dhcpd commits a lease: it waits in the outbox.
	now, end := time.Now().UTC().Format("0 2006/01/02 15:04:05"), time.Now().Add(time.Hour).UTC().Format("0 2006/01/02 15:04:05")
	f, err := os.OpenFile(leases, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "lease 203.0.113.11 {\n  starts %s;\n  ends %s;\n  cltt %s;\n  binding state active;\n  next binding state free;\n  hardware ethernet 02:00:00:00:00:11;\n}\n", now, end, now)
	f.Close()
	queued := func() bool {
		out, _, _ := runIn(t, root, "status", "--json", "--config", path)
		return strings.Contains(out, `"queue_depth": 1,`)
	}
	for deadline := time.Now().Add(10 * time.Second); !queued(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the lease was not queued:\n%s", a.logs.String())
		}
	}
	if n := len(stub.Requests()); n != 0 {
		t.Fatalf("%d requests reached the region before the rack had certificates", n)
	}

	// The rack registers: MAAS writes its certificates.
	if _, err := stub.WriteRackFiles(certs, "rack-1"); err != nil {
		t.Fatal(err)
	}
	a.logs.waitFor(t, "the region's credential files are there now: delivering")
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := stub.WaitFunc(wctx, func(items []event.RegionItem) bool {
		return slices.ContainsFunc(items, func(it event.RegionItem) bool { return it.IP == "203.0.113.11" && it.Action == "commit" })
	}); err != nil {
		t.Fatalf("the lease did not reach the region once the rack had its certificates: %v\n%s", err, a.logs.String())
	}
	if b := stub.Batches(); b[0].ClientCN != "rack-1" {
		t.Errorf("delivered with certificate %q, want the rack's", b[0].ClientCN)
	}
}

// TestAgentFollowsDHCPv6: MAAS enabling DHCPv6 on a rack makes dhcpd -6's
// files: its dhcpd6.conf, then the leases file, which maas-dhcpd6.service
// touches before it starts dhcpd -6 (ConditionPathExists=
// /var/lib/maas/dhcpd6.conf; debian/maas-dhcp.maas-dhcpd6.service in
// MAAS 3.x). The
// agent follows that the rack's [dhcpd] now has them, and, since another
// leases file to follow takes a restart, says so: in the log, and in
// status (restart_pending, exit 3) until it restarts.
func TestAgentFollowsDHCPv6(t *testing.T) {
	// No region is reached: nothing is delivered (the file at the first
	// start is the baseline), and the region is on loopback.
	root := maasDebRack(t, "http://127.0.0.1:5240/MAAS")
	for _, p := range []string{"var/lib/maas/dhcpd.conf", "var/lib/maas/dhcp/dhcpd.leases"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shipped, err := os.ReadFile("../../packaging/etc/leasekeeper/leasekeeper.toml")
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "lk.toml", string(shipped)+"\n"+agentFiles(t.TempDir()))
	a := startAgent(t, root, path)
	a.logs.waitFor(t, `"message":"ready"`)
	if out, stderr, code := runIn(t, root, "status", "--json", "--config", path); code != 0 || strings.Contains(out, "restart_pending") {
		t.Fatalf("before DHCPv6: exit %d, want 0 without restart_pending:\n%s%s", code, out, stderr)
	}

	for _, p := range []string{"var/lib/maas/dhcpd6.conf", "var/lib/maas/dhcp/dhcpd6.leases"} {
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a.logs.waitFor(t, `"keys":["dhcpd.leases6","dhcpd.config6"]`)
	out, stderr, code := runIn(t, root, "status", "--json", "--config", path)
	if code != ExitAttention || !strings.Contains(out, `"restart_pending": [
    "dhcpd.leases6",
    "dhcpd.config6"
  ]`) || !strings.Contains(stderr, "a restart is needed for dhcpd.leases6, dhcpd.config6") {
		t.Errorf("status --json after DHCPv6: exit %d, want %d with restart_pending:\n%s%s", code, ExitAttention, out, stderr)
	}
	out, _, _ = runIn(t, root, "status", "--config", path)
	if want := "restart needed  dhcpd.leases6, dhcpd.config6 changed since the start and take effect at a restart (systemctl restart leasekeeper)"; !strings.Contains(out, want) {
		t.Errorf("status lacks %q:\n%s", want, out)
	}
}

// TestAgentUnconfigured: an agent whose region was never set (the
// shipped file, no MAAS rack) exits 79, which the packaged unit counts as
// a clean exit (SuccessExitStatus=79): inactive at every boot, not
// failed. Every other problem is 78, a failed unit: with the region unset
// too, a rackd.conf that cannot be read, and --print-config.
func TestAgentUnconfigured(t *testing.T) {
	shipped := "../../packaging/etc/leasekeeper/leasekeeper.toml"
	unreadable := maasDebRack(t, "x")
	if err := os.Remove(filepath.Join(unreadable, "etc/maas/rackd.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(unreadable, "etc/maas/rackd.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	also := writeFile(t, "also.toml", "[log]\nlevel = \"loud\"\n")
	half := writeFile(t, "half.toml", "[region]\nother_urls = [\"https://r2:5242/MAAS/a/v3internal/leases\"]\n")
	wrong := writeFile(t, "wrong.toml", "[region]\nurl = 5\n")
	for _, tc := range []struct {
		name, root, config string
		args               []string
		code               int
		says               string
	}{
		{"the shipped file, no rack", "", shipped, nil, ExitUnconfigured, "region.url: required"},
		{"the shipped file, rackd.conf unreadable", unreadable, shipped, nil, ExitConfig, "region.url: not set, and MAAS's"},
		{"another problem besides", "", also, nil, ExitConfig, "log.level"},
		{"url of the wrong type", "", wrong, nil, ExitConfig, "region.url"},
		{"other_urls without url: half a region", "", half, nil, ExitConfig, "region.url: required"},
		{"other_urls without url, on a rack", maasDebRack(t, "http://127.0.0.1:5240/MAAS"), half, nil, ExitConfig, "region.url: required"},
		{"--print-config", "", shipped, []string{"--print-config"}, ExitConfig, "region.url: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tc.root
			if root == "" {
				root = t.TempDir()
			}
			notified := fakeSystemd(t)
			_, stderr, code := runIn(t, root, append([]string{"agent", "--config", tc.config}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.says) {
				t.Fatalf("exit %d, want %d saying %q: %s", code, tc.code, tc.says, stderr)
			}
			got := notified()
			if code != ExitUnconfigured {
				if len(got) > 0 {
					t.Errorf("told systemd %q before failing", got)
				}
				return
			}
			if !strings.Contains(stderr, "the agent does not run until the region is set") {
				t.Errorf("stderr %q", stderr)
			}
			// A Type=notify service that exits before READY=1 fails,
			// whatever SuccessExitStatus= says (systemd's
			// src/core/service.c, service_sigchld_event: protocol):
			// READY=1 goes first, with the reason, and the barrier
			// before the exit.
			if len(got) != 2 || !strings.HasPrefix(got[0], "READY=1\nSTATUS=not configured: ") || got[1] != "BARRIER=1" {
				t.Errorf("told systemd %q, want READY=1 with the reason, then BARRIER=1", got)
			}
		})
	}
}

// fakeSystemd points NOTIFY_SOCKET at a socket of the test's that reads
// what a service tells systemd and, as systemd does, closes the pipe a
// BARRIER=1 carries; notified returns what came, in order.
func fakeSystemd(t *testing.T) (notified func() []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "lk-notify-") // a socket path must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", path)
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, oob := make([]byte, 4096), make([]byte, 64)
		for {
			n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, string(buf[:n]))
			mu.Unlock()
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) > 0 {
				fds, _ := unix.ParseUnixRights(&msgs[0])
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
	}()
	return func() []string {
		c.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// TestStatusUnconfigured: status that cannot reach the agent says why
// when the configuration names no region (the agent exited 79), and
// not otherwise.
func TestStatusUnconfigured(t *testing.T) {
	dir := t.TempDir()
	// A port nothing listens on: one the kernel gave and took back.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	base := fmt.Sprintf("[control]\nsocket = %q\n[metrics]\nlisten = %q\n", filepath.Join(dir, "absent.sock"), closed)
	for _, tc := range []struct {
		name, region string
		hint         bool
	}{
		{"no region", "", true},
		{"a region", "[region]\nurl = \"https://r:5242/MAAS/a/v3internal/leases\"\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeFile(t, "lk.toml", base+tc.region)
			_, stderr, code := run(t, "status", "--config", cfg)
			if code != 1 || !strings.Contains(stderr, "cannot reach the agent at "+closed) {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got := strings.Contains(stderr, "sets no region (region.url), nor does a MAAS rack here give one: the agent does not run until one is"); got != tc.hint {
				t.Errorf("hint %t, want %t: %s", got, tc.hint, stderr)
			}
		})
	}
}
