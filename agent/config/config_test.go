package config

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// valid is the smallest file the agent runs with: on a MAAS rack, the
// region's address (the credentials default to the rack's own).
const valid = `
[region]
url = "https://region.example:5242/MAAS/a/v3internal/leases"
`

func TestParseValid(t *testing.T) {
	c, err := Parse(strings.NewReader(valid), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Region.URL = "https://region.example:5242/MAAS/a/v3internal/leases"
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseEveryKey(t *testing.T) {
	const file = `
[dhcpd]
leases = "/var/lib/maas/dhcp/dhcpd.leases"
config = ""
leases6 = "/var/lib/maas/dhcp/dhcpd6.leases"
config6 = "/var/lib/maas/dhcpd6.conf"
pid_file = ""
[hook]
socket = "/run/lk/h.sock"
socket_group = "dhcpd"
spool = "/var/spool/lk"
allowed_uids = [0, 108]
[region]
url = "https://10.0.0.1:5242/MAAS/a/v3internal/leases"
other_urls = ["https://10.0.0.2:5242/MAAS/a/v3internal/leases"]
ca_file = "/etc/lk/ca.pem"
cert_file = "/etc/lk/c.pem"
key_file = "/etc/lk/k.pem"
server_name = "region.internal"
token_file = "/etc/lk/token"
batch_max = 10000
timeout = "1m30s"
[state]
dir = "/srv/lk"
[reconcile]
expiry_grace = "0s"
poll_interval = "500ms"
[metrics]
listen = ""
[control]
socket = "/run/lk/control.sock"
group = "adm"
[pair]
listen = "198.51.100.2:5251"
peer = "rack-b.example:5251"
key_file = "/etc/lk/pair.key"
hold_max = "1m"
partners = ["failover-vlan-5002,failover-vlan-5003 198.51.100.2:5252 rack-c.example:5251"]
[log]
level = "debug"
format = "console"
`
	c, err := Decode(strings.NewReader(file), "t")
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		DHCPD: DHCPD{Leases: "/var/lib/maas/dhcp/dhcpd.leases", Leases6: "/var/lib/maas/dhcp/dhcpd6.leases",
			Config6: "/var/lib/maas/dhcpd6.conf"},
		Hook: Hook{Socket: "/run/lk/h.sock", SocketGroup: "dhcpd", Spool: "/var/spool/lk", AllowedUIDs: []int{0, 108}},
		Region: Region{URL: "https://10.0.0.1:5242/MAAS/a/v3internal/leases", OtherURLs: []string{"https://10.0.0.2:5242/MAAS/a/v3internal/leases"}, CAFile: "/etc/lk/ca.pem",
			CertFile: "/etc/lk/c.pem", KeyFile: "/etc/lk/k.pem", ServerName: "region.internal", TokenFile: "/etc/lk/token",
			BatchMax: 10000, Timeout: 90 * time.Second, UnansweredHold: 30 * time.Second},
		State:     State{Dir: "/srv/lk"},
		Reconcile: Reconcile{ExpiryGrace: 0, PollInterval: 500 * time.Millisecond, Mode: "auto"},
		Control:   Control{Socket: "/run/lk/control.sock", Group: "adm"},
		Pair: Pair{Listen: "198.51.100.2:5251", Peer: "rack-b.example:5251", KeyFile: "/etc/lk/pair.key", HoldMax: time.Minute,
			Partners: []string{"failover-vlan-5002,failover-vlan-5003 198.51.100.2:5252 rack-c.example:5251"}},
		Log: Log{Level: "debug", Format: "console"},
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// pairOn is a [pair] with the channel on, for cases of its other keys.
const pairOn = "[pair]\nlisten = \":5251\"\npeer = \"rack-b:5251\"\nkey_file = \"/k\"\n"

// TestErrors has a case for every error Decode and Validate report: the
// message must name the key and say what is wrong.
func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		file string // appended to valid unless it sets [region] itself
		want []string
	}{
		{"syntax", "[region\n", []string{"t.toml:", "expected '.' or ']'"}},
		// A word without quotes: the parser's own message does not say
		// so (for "info", it read "inf" and wanted a newline).
		{"syntax, a bare word", "[log]\nlevel = info\n", []string{"t.toml:2:", `(a string takes quotes: level = "info")`}},
		{"syntax, a bare word and a comment", "[reconcile]\nmode = auto # the default\n", []string{"t.toml:2:", `(a string takes quotes: mode = "auto")`}},
		{"unknown section", "[regoin]\nurl = \"x\"", []string{`regoin: unknown key (did you mean "region"?)`}},
		{"unknown section far", "[zzzzzzzz]\n", []string{"zzzzzzzz: unknown key (sections: control, dhcpd, hook, log,"}},
		{"unknown key", "[reconcile]\nexpiry_grase = \"1s\"", []string{`reconcile.expiry_grase: unknown key (did you mean "expiry_grace"?)`}},
		{"unknown nested", "[region.tls]\nverify = false", []string{"region.tls: unknown key"}},
		{"top-level key", "listen = \"x\"", []string{"listen: unknown key"}},
		{"section as value", "log = \"debug\"", []string{"log: is a section; write it as [log]"}},
		{"array of tables", "[[log]]\nlevel = \"info\"", []string{"log: is a section"}},
		{"duration syntax", "[reconcile]\npoll_interval = \"5x\"", []string{`reconcile.poll_interval: "5x" is not a duration`}},
		{"duration integer", "[reconcile]\nexpiry_grace = 30", []string{`reconcile.expiry_grace: 30 is not a duration: write it as a string such as "30s"`}},
		{"string type", "[metrics]\nlisten = 9742", []string{"metrics.listen: 9742 is not a string"}},
		{"int type", "[region]\nbatch_max = \"100\"", []string{`region.batch_max: "100" is not an integer`}},
		{"float", "[region]\nbatch_max = 1.5", []string{"region.batch_max: 1.5 is not an integer"}},
		{"float whole", "[region]\nbatch_max = 1e3", []string{"region.batch_max: 1e3 is a float, not an integer: write 1000"}},
		{"float point", "[region]\nbatch_max   =  1_000.0 # comment", []string{"region.batch_max: 1_000.0 is a float, not an integer: write 1000"}},
		{"float as written", "[region]\nurl = \"https://region/leases\"\nbatch_max = 5E+2\ntimeout = \"5s\"", []string{"region.batch_max: 5E+2 is a float, not an integer: write 500"}},
		{"list type", "[hook]\nallowed_uids = 0", []string{"hook.allowed_uids: 0 is not a list of integers"}},
		{"list element", "[hook]\nallowed_uids = [0, \"dhcpd\"]", []string{`hook.allowed_uids: [0, "dhcpd"] is not a list of integers ("dhcpd")`}},
		{"string for a list of strings", "[region]\nurl = \"https://r1:5242/leases\"\nother_urls = \"https://r2:5242/leases\"", []string{`region.other_urls: "https://r2:5242/leases" is not a list of strings: write it as a list: other_urls = ["https://r2:5242/leases"]`}},
		{"list of strings element", "[region]\nurl = \"https://r1/leases\"\nother_urls = [\"https://r2/leases\", 5]", []string{`region.other_urls: ["https://r2/leases", 5] is not a list of strings (5)`}},
		{"list of strings type", "[region]\nurl = \"https://r1/leases\"\nother_urls = 5", []string{"region.other_urls: 5 is not a list of strings"}},
		{"table as value", "[region]\nurl = { a = 1 }", []string{"region.url: a table is not a string"}},
		{"relative path", "[dhcpd]\nleases = \"dhcpd.leases\"", []string{`dhcpd.leases: "dhcpd.leases" is not an absolute path`}},
		{"relative optional", "[dhcpd]\nconfig6 = \"x/y\"", []string{`dhcpd.config6: "x/y" is not an absolute path`}},
		{"leases6 is leases", "[dhcpd]\nleases = \"/var/lib/dhcp/dhcpd.leases\"\nleases6 = \"/var/lib/dhcp//dhcpd.leases\"\nconfig6 = \"/etc/dhcp/dhcpd6.conf\"", []string{`dhcpd.leases6: "/var/lib/dhcp//dhcpd.leases" is dhcpd.leases too`}},
		{"leases6 without config6", "[dhcpd]\nleases6 = \"/var/lib/dhcp/dhcpd6.leases\"", []string{"dhcpd.config6: must be set with dhcpd.leases6"}},
		{"leases required", "[dhcpd]\nleases = \"\"", []string{"dhcpd.leases: required"}},
		{"socket required", "[hook]\nsocket = \"\"", []string{"hook.socket: required"}},
		{"socket too long", "[hook]\nsocket = \"/" + strings.Repeat("s", 107) + "\"", []string{"hook.socket:", "longer than 107 bytes"}},
		{"spool relative", "[hook]\nspool = \"spool\"", []string{"hook.spool:", "not an absolute path"}},
		{"bad group", "[hook]\nsocket_group = \"dh cp\"", []string{`hook.socket_group: "dh cp" is not a group name`}},
		{"group number", "[hook]\nsocket_group = \"108\"", []string{`hook.socket_group: "108" is not a group name`}},
		{"negative uid", "[hook]\nallowed_uids = [-1]", []string{"hook.allowed_uids: -1 is not a uid"}},
		{"huge uid", "[hook]\nallowed_uids = [4294967295]", []string{"hook.allowed_uids: 4294967295 is not a uid"}},
		{"state required", "[state]\ndir = \"\"", []string{"state.dir: required"}},
		{"batch zero", "[region]\nbatch_max = 0", []string{"region.batch_max: 0 is not between 1 and 10000"}},
		{"batch huge", "[region]\nbatch_max = 10001", []string{"region.batch_max: 10001 is not between 1 and 10000"}},
		{"timeout zero", "[region]\ntimeout = \"0s\"", []string{"region.timeout: 0s is not between"}},
		{"timeout long", "[region]\ntimeout = \"11m\"", []string{"region.timeout: 11m0s is not between"}},
		{"grace negative", "[reconcile]\nexpiry_grace = \"-1s\"", []string{"reconcile.expiry_grace: -1s is negative"}},
		{"grace long", "[reconcile]\nexpiry_grace = \"87600h\"", []string{"reconcile.expiry_grace: 87600h0m0s is longer than 1h"}},
		{"grace just over", "[reconcile]\nexpiry_grace = \"3601s\"", []string{"reconcile.expiry_grace: 1h0m1s is longer than 1h"}},
		{"grace fraction", "[reconcile]\nexpiry_grace = \"1500ms\"", []string{`reconcile.expiry_grace: 1.5s is not a whole number of seconds (dhcpd.leases dates in seconds): write "1s" or "2s"`}},
		{"poll too short", "[reconcile]\npoll_interval = \"1ms\"", []string{"reconcile.poll_interval: 1ms is shorter than 10ms"}},
		{"poll too long", "[reconcile]\npoll_interval = \"87600h\"", []string{"reconcile.poll_interval: 87600h0m0s is longer than 1h"}},
		{"mode", "[reconcile]\nmode = \"replace\"", []string{`reconcile.mode: "replace" is not one of auto, replacement, complement, hookless`}},
		{"listen no port", "[metrics]\nlisten = \"127.0.0.1\"", []string{`metrics.listen: "127.0.0.1" is not host:port`}},
		{"listen bad port", "[metrics]\nlisten = \"127.0.0.1:http\"", []string{`metrics.listen: "127.0.0.1:http": port "http" is not a number`}},
		{"listen port range", "[metrics]\nlisten = \":65536\"", []string{`port "65536" is not a number`}},
		{"pair partly", "[pair]\nlisten = \":5251\"", []string{"pair.listen: set pair.listen, pair.peer and pair.key_file together, or none"}},
		{"pair peer port", "[pair]\nlisten = \":5251\"\npeer = \"rack-b\"\nkey_file = \"/k\"", []string{`pair.peer: "rack-b" is not host:port`}},
		{"pair peer port range", "[pair]\nlisten = \":5251\"\npeer = \"rack-b:0\"\nkey_file = \"/k\"", []string{`pair.peer: "rack-b:0": port "0" is not 1-65535`}},
		{"pair key relative", "[pair]\nlisten = \":5251\"\npeer = \"rack-b:5251\"\nkey_file = \"k\"", []string{`pair.key_file: "k" is not an absolute path`}},
		{"pair hold", "[pair]\nhold_max = \"0s\"", []string{"pair.hold_max: 0s is not positive"}},
		{"partners without pair", "[pair]\npartners = [\"fo-2 :5252 rack-c:5251\"]", []string{"pair.partners: needs pair.listen, pair.peer and pair.key_file"}},
		{"partners fields", pairOn + "partners = [\"fo-2 rack-c:5251\"]", []string{`pair.partners: "fo-2 rack-c:5251": want "FAILOVER-PEER[,FAILOVER-PEER…] LISTEN PEER", three fields`, `with --set, an entry naming several failover peers goes in a TOML array`}},
		{"partners empty name", pairOn + "partners = [\"fo-2,,fo-3 :5252 rack-c:5251\"]", []string{`pair.partners: "fo-2,,fo-3 :5252 rack-c:5251": an empty failover peer name in "fo-2,,fo-3"`}},
		{"partners peer twice", pairOn + "partners = [\"fo-2 :5252 rack-c:5251\", \"fo-3,fo-2 :5253 rack-d:5251\"]", []string{`pair.partners: failover peer "fo-2" named twice`}},
		{"partners listen of pair", pairOn + "partners = [\"fo-2 :5251 rack-c:5251\"]", []string{`pair.partners: listen ":5251" is pair.listen's too`}},
		{"partners listen twice", pairOn + "partners = [\"fo-2 :5252 rack-c:5251\", \"fo-3 :5252 rack-d:5251\"]", []string{`pair.partners: listen ":5252" is the partner at rack-c:5251's too`}},
		{"partners agent twice", pairOn + "partners = [\"fo-2 :5252 rack-b:5251\"]", []string{`pair.partners: the agent at rack-b:5251 is named twice`}},
		{"partners listen bad", pairOn + "partners = [\"fo-2 5252 rack-c:5251\"]", []string{`pair.partners: listen "5252" is not host:port`}},
		{"partners peer bad", pairOn + "partners = [\"fo-2 :5252 rack-c:0\"]", []string{`pair.partners: peer "rack-c:0": port "0" is not 1-65535`}},
		{"pair hold long", "[pair]\nhold_max = \"87600h\"", []string{"pair.hold_max: 87600h0m0s is longer than 1h"}},
		{"log level", "[log]\nlevel = \"verbose\"", []string{`log.level: "verbose" is not one of trace, debug, info, warn, error`}},
		{"log format", "[log]\nformat = \"text\"", []string{`log.format: "text" is not json, console`}},
		// [region] cases replace the valid region.
		{"url required", "[region]\ntoken_file = \"/t\"", []string{"region.url: required"}},
		{"url relative", "[region]\nurl = \"region/leases\"\ntoken_file = \"/t\"", []string{`region.url: "region/leases" is not an absolute URL`}},
		{"url scheme", "[region]\nurl = \"ftp://region/leases\"\ntoken_file = \"/t\"", []string{`region.url: "ftp://region/leases": scheme must be https`}},
		{"http not loopback", "[region]\nurl = \"http://region.example/leases\"", []string{"region.url:", "plain http is only allowed to a loopback address"}},
		{"url userinfo", "[region]\nurl = \"https://u:p@region/leases\"\ntoken_file = \"/t\"", []string{"region.url: must not carry credentials"}},
		{"no credentials", "[region]\nurl = \"https://region/leases\"\ncert_file = \"\"\nkey_file = \"\"", []string{"region: no credentials: set region.cert_file and region.key_file"}},
		{"cert without key", "[region]\nurl = \"https://region/leases\"\ncert_file = \"/c\"\nkey_file = \"\"", []string{"region.key_file: required: region.cert_file is set"}},
		{"key without cert", "[region]\nurl = \"https://region/leases\"\ncert_file = \"\"\nkey_file = \"/k\"", []string{"region.cert_file: required: region.key_file is set"}},
		{"server_name with port", "[region]\nurl = \"https://region/leases\"\nserver_name = \"maas:5242\"", []string{`region.server_name: "maas:5242" is not a host name or address (MAAS: "maas")`}},
		{"server_name a URL", "[region]\nurl = \"https://region/leases\"\nserver_name = \"https://maas\"", []string{`region.server_name: "https://maas" is not a host name`}},
		{"token relative", "[region]\nurl = \"https://region/leases\"\ntoken_file = \"token\"", []string{`region.token_file: "token" is not an absolute path`}},
		{"several", "[log]\nlevel = \"x\"\nformat = \"y\"", []string{"t.toml: 2 problems:\n  line 2: log.level:", "\n  line 3: log.format:"}},
		{"several unknown", "[log]\nlevl = \"x\"\nfromat = \"y\"", []string{"2 problems:", "log.levl: unknown key", "log.fromat: unknown key"}},
		{"several types", "[log]\nlevel = 1\nformat = 2\n[hook]\nspool = []", []string{"3 problems:", "log.level: 1 is not a string", "log.format: 2 is not a string", "hook.spool: [] is not a string"}},
		{"case matters", "[Region]\nurl = \"x\"", []string{`Region: unknown key (did you mean "region"?)`}},
		{"key case matters", "[log]\nLevel = \"debug\"", []string{`log.Level: unknown key (did you mean "level"?)`}},
		{"dotted unknown", "[log]\ntls.verify = false", []string{"log.tls: unknown key"}},
		{"dotted under a key", "[log]\nlevel.x = \"debug\"", []string{"log.level: a table is not a string"}},
		{"dotted unknown section", "a.b.c = 1", []string{"a: unknown key"}},
		{"url without host", "[region]\nurl = \"https://:5242/leases\"", []string{`region.url: "https://:5242/leases" is not an absolute URL`}},
		{"other_urls relative", "[region]\nurl = \"https://r1/leases\"\nother_urls = [\"r2/leases\"]\ntoken_file = \"/t\"", []string{`region.other_urls: "r2/leases" is not an absolute URL`}},
		{"other_urls repeats url", "[region]\nurl = \"https://r1/leases\"\nother_urls = [\"https://r1/leases\"]\ntoken_file = \"/t\"", []string{`region.other_urls: "https://r1/leases" is named twice`}},
		{"other_urls repeats url, written otherwise", "[region]\nurl = \"https://R1/leases\"\nother_urls = [\"https://r1:443/leases\"]\ntoken_file = \"/t\"", []string{`region.other_urls: "https://r1:443/leases" is named twice`}},
		{"other_urls repeats url, an IPv6 address written otherwise", "[region]\nurl = \"https://[2001:db8:0::1]:5242/leases\"\nother_urls = [\"https://[2001:DB8::1]:5242/leases\"]\ntoken_file = \"/t\"", []string{`region.other_urls: "https://[2001:DB8::1]:5242/leases" is named twice`}},
		{"other_urls scheme", "[region]\nurl = \"https://r1/leases\"\nother_urls = [\"http://127.0.0.1/leases\"]\ntoken_file = \"/t\"", []string{`region.other_urls: "http://127.0.0.1/leases": every controller's URL has region.url's scheme (https)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if !strings.Contains(file, "[region]") {
				file += "\n" + valid
			}
			c, err := Parse(strings.NewReader(file), "t.toml")
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if !strings.HasPrefix(tc.name, "syntax") {
				var ke *KeyError
				if !errors.As(err, &ke) {
					t.Errorf("error %q has no *KeyError", err)
				}
			}
		})
	}
}

func TestValidAccepted(t *testing.T) {
	tests := []struct{ name, file string }{
		{"http loopback v4", "[region]\nurl = \"http://127.0.0.1:8080/leases\""},
		{"http loopback v6", "[region]\nurl = \"http://[::1]:8080/leases\"\ntoken_file = \"/t\""},
		{"http localhost", "[region]\nurl = \"http://localhost:8080/leases\""},
		{"mtls", "[region]\nurl = \"https://region/leases\"\ncert_file = \"/c\"\nkey_file = \"/k\"\nca_file = \"/ca\""},
		{"token only (not MAAS)", "[region]\nurl = \"https://region/leases\"\ncert_file = \"\"\nkey_file = \"\"\ntoken_file = \"/t\""},
		{"certificate and token", "[region]\nurl = \"https://region/leases\"\ntoken_file = \"/t\""},
		{"server_name empty: the URL's host", "[region]\nurl = \"https://region/leases\"\nserver_name = \"\""},
		{"server_name an address", "[region]\nurl = \"https://region/leases\"\nserver_name = \"10.0.0.1\""},
		{"http with TLS keys: unused", "[region]\nurl = \"http://127.0.0.1:8080/leases\"\ncert_file = \"/c\"\nkey_file = \"/k\"\nca_file = \"/ca\""},
		{"group with dash", valid + "[hook]\nsocket_group = \"maas-dhcp\""},
		{"metrics disabled", valid + "[metrics]\nlisten = \"\""},
		{"metrics any address", valid + "[metrics]\nlisten = \":9742\""},
		{"metrics v6", valid + "[metrics]\nlisten = \"[::1]:0\""},
		{"uids empty", valid + "[hook]\nallowed_uids = []"},
		{"every level", valid + "[log]\nlevel = \"trace\"\nformat = \"json\""},
		{"dotted keys", "region.url = \"https://region/leases\"\nlog.level = \"debug\""},
		{"inline table", "region = { url = \"https://region/leases\" }"},
		{"upper bounds", valid + "[reconcile]\nexpiry_grace = \"1h\"\npoll_interval = \"1h\"\n[pair]\nhold_max = \"1h\""},
		{"empty file has no region", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.file), "t")
			if tc.file == "" {
				if err == nil || !strings.Contains(err.Error(), "region.url: required") {
					t.Errorf("empty file: err %v, want region.url: required", err)
				}
				return
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
}

// TestURLSecretNotShown: a password in region.url is refused without
// being repeated in the message (the error goes to the journal).
func TestURLSecretNotShown(t *testing.T) {
	for _, u := range []string{"https://u:s3cret@region/leases", "http://u:s3cret@region/leases", "ftp://u:s3cret@region/leases"} {
		_, err := Parse(strings.NewReader("[region]\nurl = \""+u+"\"\n"), "t")
		if err == nil || !strings.Contains(err.Error(), "region.url: must not carry credentials") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestSet(t *testing.T) {
	c := Default()
	for _, kv := range []string{
		"region.url=https://r.example/leases?x=1",
		"region.token_file=/etc/t",
		"region.timeout=2m",
		"region.batch_max= 50",
		"hook.allowed_uids=0, 108",
		"log.level=debug",
		"metrics.listen=",
	} {
		if err := c.Override(kv); err != nil {
			t.Fatalf("%s: %v", kv, err)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Region.URL = "https://r.example/leases?x=1"
	want.Region.TokenFile = "/etc/t"
	want.Region.Timeout = 2 * time.Minute
	want.Region.BatchMax = 50
	want.Hook.AllowedUIDs = []int{0, 108}
	want.Log.Level = "debug"
	want.Metrics.Listen = ""
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := c.Set("hook.allowed_uids", "[]"); err != nil || len(c.Hook.AllowedUIDs) != 0 {
		t.Errorf("allowed_uids=[]: %v, %v", err, c.Hook.AllowedUIDs)
	}

	for _, tc := range []struct{ kv, want string }{
		{"region.timeout=5x", `region.timeout: "5x" is not a duration`},
		{"region.batch_max=many", `region.batch_max: "many" is not an integer`},
		{"region.batch_max=1e3", `region.batch_max: "1e3" is not an integer: write 1000`},
		{"hook.allowed_uids=0,root", `hook.allowed_uids: "0,root" is not a comma-separated list of integers`},
		{`region.other_urls=["https://r2/leases`, `region.other_urls: "[\"https://r2/leases" is not a list of strings: write a TOML array (["a", "b"]) or comma-separated values (a,b)`},
		{`region.other_urls=["https://r2/leases", 5]`, `region.other_urls: "[\"https://r2/leases\", 5]" is not a list of strings`},
		{"region.tiemout=5s", "region.tiemout: unknown key"},
		{"timeout=5s", "timeout: unknown key"},
		{"region.url", "region.url: want section.key=value"},
	} {
		err := Default().Override(tc.kv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.kv, err, tc.want)
		}
	}
}

// TestSetList: a list's command-line forms, for integers and strings
// alike: comma-separated, with or without brackets, and for strings a
// TOML array; "" and "[]" clear the list.
func TestSetList(t *testing.T) {
	const r1, r2 = "https://r1:5242/MAAS/a/v3internal/leases", "https://r2:5242/MAAS/a/v3internal/leases"
	tests := []struct {
		name, key, value string
		want             any
	}{
		{"uids comma-separated", "hook.allowed_uids", "0, 108", []int{0, 108}},
		{"uids bracketed", "hook.allowed_uids", "[0, 108]", []int{0, 108}},
		{"uids empty", "hook.allowed_uids", "", []int(nil)},
		{"urls TOML array", "region.other_urls", `["` + r1 + `", "` + r2 + `"]`, []string{r1, r2}},
		{"urls TOML array, literal strings", "region.other_urls", `['` + r1 + `']`, []string{r1}},
		{"urls quoted, no brackets", "region.other_urls", `"` + r1 + `", "` + r2 + `"`, []string{r1, r2}},
		{"urls TOML array, a comma in an item", "region.other_urls", `["https://r1/leases?a=1,2"]`, []string{"https://r1/leases?a=1,2"}},
		{"urls comma-separated", "region.other_urls", r1 + ", " + r2 + ",", []string{r1, r2}},
		{"urls bracketed", "region.other_urls", "[" + r1 + "," + r2 + "]", []string{r1, r2}},
		{"urls one", "region.other_urls", r2, []string{r2}},
		{"urls empty", "region.other_urls", "", []string(nil)},
		{"urls empty brackets", "region.other_urls", " [] ", []string(nil)},
		{"urls empty TOML array", "region.other_urls", `[ ]`, []string(nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Hook.AllowedUIDs, c.Region.OtherURLs = []int{1}, []string{"https://old/leases"} // to be replaced
			if err := c.Override(tc.key + "=" + tc.value); err != nil {
				t.Fatal(err)
			}
			f, _ := c.field(tc.key)
			if diff := cmp.Diff(tc.want, f.Interface()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSetUnsupportedType: a field type setString has no form for is an
// error, which Set prefixes with the key, not a panic.
func TestSetUnsupportedType(t *testing.T) {
	for _, v := range []any{new(bool), new([]bool), new(map[string]string)} {
		f := reflect.ValueOf(v).Elem()
		if err := setString(f, "x"); err == nil || !strings.Contains(err.Error(), "cannot be set from the command line") {
			t.Errorf("%s: error %v", f.Type(), err)
		}
	}
}

// TestParseAllAtOnce: a file's problems are told at once, in order (the
// file's unknown keys and wrong types, then the bad values); a section
// with a wrong type is not also blamed for the default left in its place,
// but one with an unknown key is checked all the same.
func TestParseAllAtOnce(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string // the problems' keys
	}{
		{"wrong type, bad value elsewhere", valid + "timeout = 5\n[log]\nlevel = \"loud\"\n", []string{"region.timeout", "log.level"}},
		// region.url's type is wrong: not also "region.url: required".
		{"wrong type alone", "[region]\nurl = 5\n", []string{"region.url"}},
		{"section not a table", "region = 5\n", []string{"region"}},
		{"unknown key and bad values in its section", "[region]\nretries = 3\nurl = \"ftp://r1/leases\"\nbatch_max = 0\ntimeout = \"0s\"\n",
			[]string{"region.retries", "region.batch_max", "region.timeout", "region.url"}},
		{"unknown table and a bad value in its section", valid + "batch_max = 0\n[region.tls]\nverify = false\n", []string{"region.tls", "region.batch_max"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.file), "t")
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("err %v; want Problems", err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.Key)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("keys (-want +got):\n%s\nerr: %v", diff, err)
			}
		})
	}
}

func TestParseOverrides(t *testing.T) {
	// The file alone is incomplete; --set completes it.
	c, err := Parse(strings.NewReader("[log]\nlevel = \"warn\""), "t",
		"region.url=http://127.0.0.1:1/leases", "log.level=error")
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "error" || c.Region.URL != "http://127.0.0.1:1/leases" {
		t.Errorf("got %+v", c)
	}
	_, err = Parse(strings.NewReader(valid), "t", "region.batch_max=x", "region.timeout=y")
	if err == nil || !strings.Contains(err.Error(), "--set: 2 problems:") {
		t.Errorf("err %v", err)
	}
	// A value the file does not hold is blamed on its override.
	_, err = Parse(strings.NewReader(valid), "t", "log.level=warn", "log.level=x")
	if err == nil || err.Error() != `t: log.level (from the command line: log.level=x): "x" is not one of trace, debug, info, warn, error` {
		t.Errorf("err %v", err)
	}
	// An unknown key: a near miss is suggested, else where keys are listed.
	_, err = Parse(strings.NewReader(valid), "t", "region.tiemout=5s")
	if err == nil || !strings.Contains(err.Error(), `region.tiemout: unknown key (did you mean "region.timeout"?)`) {
		t.Errorf("err %v", err)
	}
	_, err = Parse(strings.NewReader(valid), "t", "nothing.near=1")
	if err == nil || !strings.Contains(err.Error(), "nothing.near: unknown key (leasekeeper agent --print-reference shows every key)") {
		t.Errorf("err %v", err)
	}
}

// TestProblemLines: each problem names the line of its value in the
// file (or of its section's header), so an operator goes straight to it;
// a value the file does not hold (a default, an override, a table a
// dotted key made) is told without one.
func TestProblemLines(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing-token")
	tests := []struct {
		name, file string
		overrides  []string
		want       string
	}{
		{"wrong type", "[dhcpd]\n\nleases = 5\n", nil, "line 3: dhcpd.leases: 5 is not a string"},
		{"unknown key", "[log]\nlevel = \"info\"\nlevle = \"x\"\n", nil, `line 3: log.levle: unknown key`},
		{"unknown section", "# top\n[regoin]\nurl = \"x\"\n", nil, `line 2: regoin: unknown key`},
		{"array", "[hook]\nallowed_uids = [\n  \"x\",\n]\n", nil, "line 2: hook.allowed_uids: "},
		{"bad value", "[region]\nurl = \"https://r:5242/MAAS/a/v3internal/leases\"\n\nbatch_max = 0\n", nil, "line 4: region.batch_max: 0 is not between"},
		{"required, not in the file", "[log]\nlevel = \"info\"\n", nil, "t.toml: region.url: required"},
		{"dotted table", "[region]\nurl = \"https://r:5242/MAAS/a/v3internal/leases\"\ntls.verify = 1\n", nil, "t.toml: region.tls: unknown key"},
		{"override", "[region]\nurl = \"https://r:5242/MAAS/a/v3internal/leases\"\nbatch_max = 10\n", []string{"region.batch_max=0"}, "t.toml: region.batch_max (from the command line: region.batch_max=0): 0 is not between"},
		// The file's wrong type stays the file's when --set also names
		// the key (the override's value would be valid).
		{"wrong type, key also overridden", "[region]\nurl = \"https://r:5242/MAAS/a/v3internal/leases\"\nbatch_max = \"ten\"\n", []string{"region.batch_max=10"}, "t.toml: line 3: region.batch_max: \"ten\" is not an integer"},
		{"secret file", "[region]\nurl = \"https://r:5242/MAAS/a/v3internal/leases\"\n[release]\n\ntoken_file = \"" + missing + "\"\n", nil, "t.toml: line 5: release.token_file: open " + missing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.file), "t.toml", tc.overrides...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nlacks %q", err, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lk.toml")
	if err := os.WriteFile(path, []byte(valid+"[log]\nlevel = \"nope\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": line 5: log.level:") {
		t.Errorf("err %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestDiff(t *testing.T) {
	a, b := Default(), Default()
	if d := Diff(a, b); d != nil {
		t.Errorf("equal configs differ in %v", d)
	}
	b.Log.Level = "debug"
	b.Region.Timeout = time.Second
	b.Hook.AllowedUIDs = []int{0}
	if diff := cmp.Diff([]string{"hook.allowed_uids", "region.timeout", "log.level"}, Diff(a, b)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// allowed_uids = [] reads as the default, nil: reloading it changes nothing.
	a.Region.URL = "https://region.example:5242/MAAS/a/v3internal/leases"
	c, err := Parse(strings.NewReader(valid+"[hook]\nallowed_uids = []\n"), "t")
	if err != nil || Diff(a, c) != nil {
		t.Errorf("allowed_uids = []: %v, differs in %v", err, Diff(a, c))
	}
}

func TestWriteTOMLRoundTrip(t *testing.T) {
	c := Default()
	c.Region.URL = "https://r/\"quoted\""
	c.Region.TokenFile = "/t"
	c.Hook.AllowedUIDs = []int{0, 108}
	// A list of strings was written unquoted ([https://b/x, …]), which
	// no TOML reader takes back.
	c.Region.OtherURLs = []string{"https://r2:5242/MAAS/a/v3internal/leases", "https://r3/\"q\""}
	// Go's quoting writes \a, \v and \xNN, which TOML does not read.
	c.Hook.Spool = "/var/spool/\a\v\x01\x7fé\\\t"
	c.Reconcile.PollInterval = 1500 * time.Millisecond
	var b strings.Builder
	if err := c.WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(strings.NewReader(b.String()), "written")
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestKeys(t *testing.T) {
	keys := Keys()
	if len(keys) != 37 || keys[0] != "dhcpd.leases" || keys[len(keys)-1] != "log.format" {
		t.Errorf("Keys() = %v", keys)
	}
	// Every field has a tag: an untagged field would be unreachable from
	// the file.
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		if tagName(ct.Field(i)) == "-" {
			continue // Rack, RackKeys: what ParseOn found, not the file's
		}
		st := ct.Field(i).Type
		for j := range st.NumField() {
			if tagName(st.Field(j)) == "" {
				t.Errorf("%s.%s has no toml tag", ct.Field(i).Name, st.Field(j).Name)
			}
		}
	}
}

// TestReleaseTokenFile: release.token_file is off by default; when set,
// Parse refuses a token file that others can access or its group write
// (the token frees any lease) or that holds no token, naming the key.
func TestReleaseTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok := strings.Repeat("s3cret", 6) // MinReleaseToken or more
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // not subject to the umask
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path string
		want       string // in the error; "" = accepted
	}{
		{name: "0600", path: file("ok", tok+"\n", 0o600)},
		{name: "0400", path: file("ro", tok, 0o400)},
		{name: "0640: the agent's group may read it", path: file("group-readable", tok+"\n", 0o640)},
		{name: "0644", path: file("world", tok+"\n", 0o644), want: "release.token_file: " + dir + "/world has mode 0644: others can access it, or its group can write it; chmod 600 it, or 640 with the agent's group"},
		{name: "0620", path: file("group-writable", tok+"\n", 0o620), want: "has mode 0620: others can access it"},
		{name: "0604", path: file("other-readable", tok+"\n", 0o604), want: "has mode 0604"},
		{name: "short", path: file("short", "s3cret\n", 0o600), want: "a token of 6 characters, at least 32: it frees any lease"},
		{name: "empty", path: file("empty", " \n", 0o600), want: "release.token_file: " + dir + "/empty is empty"},
		{name: "space inside", path: file("spaced", "two words\n", 0o600), want: "white space or control characters"},
		{name: "two lines", path: file("lines", "one\ntwo\n", 0o600), want: "holds 2 lines: one token is wanted, on one line"},
		{name: "missing", path: filepath.Join(dir, "none"), want: "release.token_file: open " + dir + "/none: no such file or directory"},
		{name: "directory", path: dir, want: "is not a regular file"},
		{name: "relative", path: "release.token", want: `release.token_file: "release.token" is not an absolute path`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(valid+"[release]\ntoken_file = \""+tc.path+"\"\n"), "t.toml")
			if tc.want == "" {
				if err != nil || c.Release.TokenFile != tc.path {
					t.Fatalf("Parse = %+v, %v", c, err)
				}
				return
			}
			var ke *KeyError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ke) || ke.Key != "release.token_file" {
				t.Errorf("error %v, want a release.token_file error saying %q", err, tc.want)
			}
		})
	}
	if c, err := Parse(strings.NewReader(valid), "t.toml"); err != nil || c.Release.TokenFile != "" {
		t.Errorf("default: %+v, %v; want token_file \"\" (endpoint disabled)", c, err)
	}
}

func TestHookUIDs(t *testing.T) {
	lookup := func(uid int, ok bool) func(string) (int, bool) {
		return func(name string) (int, bool) {
			if name != "dhcpd" {
				t.Errorf("looked up %q", name)
			}
			return uid, ok
		}
	}
	c := Default()
	if diff := cmp.Diff([]uint32{0, 108}, c.HookUIDs(lookup(108, true))); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]uint32{0}, c.HookUIDs(lookup(0, false))); diff != "" {
		t.Error(diff)
	}
	c.Hook.AllowedUIDs = []int{108}
	if diff := cmp.Diff([]uint32{108}, c.HookUIDs(lookup(5, true))); diff != "" {
		t.Error(diff)
	}
	if uid, ok := SystemUID("root"); !ok || uid != 0 {
		t.Errorf("SystemUID(root) = %d, %v", uid, ok)
	}
}

func TestLogResolve(t *testing.T) {
	tests := []struct {
		format       string
		journal, tty bool
		want         string
	}{
		{"", true, false, "json"},
		{"", true, true, "json"},
		{"", false, false, "json"},
		{"", false, true, "console"},
		{"console", true, false, "console"},
		{"json", false, true, "json"},
	}
	for _, tc := range tests {
		if got := (Log{Format: tc.format}).Resolve(tc.journal, tc.tty); got != tc.want {
			t.Errorf("%+v: got %s", tc, got)
		}
	}
}

// TestTokenUnreadableByAgentUser: a root-only token file, as an operator
// would make it, read by the agent as the package runs it (another user):
// the error says what to do. The reader is this test binary run as nobody.
func TestTokenUnreadableByAgentUser(t *testing.T) {
	if os.Getenv("LK_TOKEN_CHILD") != "" {
		return // the child's part is TestReadTokenChild
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the reader as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	tok := filepath.Join(dir, "release.token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "config.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^TestReadTokenChild$", "-test.v")
	cmd.Env = append(os.Environ(), "LK_TOKEN_CHILD="+tok)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "permission denied: the agent runs as uid 65534; give the file to its group, mode 0640") {
		t.Errorf("the agent's user reading a root-only token:\n%s", out)
	}
}

func TestReadTokenChild(t *testing.T) {
	p := os.Getenv("LK_TOKEN_CHILD")
	if p == "" {
		t.Skip("run by TestTokenUnreadableByAgentUser")
	}
	_, err := ReadToken(p)
	t.Log(err)
}

func TestMAASKeys(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "maas.key")
	if err := os.WriteFile(keyFile, []byte("ck:tk:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "[dhcpd]\nleases = \"/l\"\n[region]\nurl = \"https://r:5242/MAAS/a/v3internal/leases\"\n"
	for _, c := range []struct {
		name, maas string
		want       string // "" = valid
	}{
		{"neither", "", ""},
		{"both", "api_url = \"http://r:5240/MAAS/\"\napi_key_file = \"" + keyFile + "\"\n", ""},
		{"url alone", "api_url = \"http://r:5240/MAAS/\"\n", "together"},
		{"key alone", "api_key_file = \"" + keyFile + "\"\n", "together"},
		{"bad url", "api_url = \"ftp://r/\"\napi_key_file = \"" + keyFile + "\"\n", "maas.api_url"},
		{"unknown key", "api_token = \"x\"\n", "maas.api_token"},
		{"ca for TLS", "api_url = \"https://r:5443/MAAS/\"\napi_key_file = \"" + keyFile + "\"\nca_file = \"/etc/leasekeeper/maas-ca.pem\"\n", ""},
		{"ca without TLS", "api_url = \"http://r:5240/MAAS/\"\napi_key_file = \"" + keyFile + "\"\nca_file = \"/etc/leasekeeper/maas-ca.pem\"\n", "maas.ca_file: set for an api_url without TLS"},
		{"ca alone", "ca_file = \"/etc/leasekeeper/maas-ca.pem\"\n", "maas.ca_file: set without maas.api_url"},
		{"ca relative", "api_url = \"https://r:5443/MAAS/\"\napi_key_file = \"" + keyFile + "\"\nca_file = \"maas-ca.pem\"\n", "not an absolute path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(base+"[maas]\n"+c.maas), "test.toml")
			if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"ok", "c:t:s\n", 0o600, ""},
		{"group may read", "c:t:s", 0o640, ""},
		{"others may read", "c:t:s", 0o604, "others can access"},
		{"two parts", "c:t", 0o600, "consumer_key:token_key:token_secret"},
		{"empty part", "c::s", 0o600, "consumer_key:token_key:token_secret"},
		// `maas apikey --username NAME > file` with two keys.
		{"two keys", "c:t:s\nd:u:v\n", 0o600, "holds 2 lines: one token is wanted, on one line (`maas apikey --username NAME` prints every key"},
	} {
		t.Run("file/"+c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(p, []byte(c.content), c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, c.mode); err != nil {
				t.Fatal(err)
			}
			k, err := ReadMAASKey(p)
			if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if err == nil && (k.Consumer != "c" || k.Token != "t" || k.Secret != "s") {
				t.Errorf("key %+v", k)
			}
		})
	}
}

// TestPairKeyFile: pair.key_file follows a token file's rules (the key
// signs the channel between the pair's agents) and must be long enough.
func TestPairKeyFile(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("k", MinPairKey)
	tests := []struct {
		name, path string
		want       string // in the error; "" = accepted
	}{
		{name: "0600", path: file("ok", long+"\n", 0o600)},
		{name: "short", path: file("short", "s3cret\n", 0o600), want: "pair.key_file: " + dir + "/short: a key of 6 characters, at least 32"},
		{name: "0644", path: file("world", long, 0o644), want: "has mode 0644"},
		{name: "missing", path: filepath.Join(dir, "none"), want: "no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(valid+"[pair]\nlisten = \":5251\"\npeer = \"198.51.100.3:5251\"\nkey_file = \""+tc.path+"\"\n"), "t.toml")
			if tc.want == "" {
				if err != nil || !c.Pair.On() {
					t.Fatalf("Parse = %+v, %v", c, err)
				}
				if k, err := ReadPairKey(tc.path); err != nil || string(k) != long {
					t.Errorf("ReadPairKey = %q, %v", k, err)
				}
				return
			}
			var ke *KeyError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ke) || ke.Key != "pair.key_file" {
				t.Errorf("error %v, want a pair.key_file error saying %q", err, tc.want)
			}
		})
	}
}
