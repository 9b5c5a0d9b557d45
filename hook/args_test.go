package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func notifyArgs(extra ...string) []string {
	return append([]string{"notify", "--action", "commit", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5"}, extra...)
}

func TestParseArgs(t *testing.T) {
	base := config{
		event:  event{action: "commit", mac: "2:0:0:a:b:c", family: "ipv4", ip: "203.0.113.5"},
		socket: defaultSocket,
		spool:  defaultSpool,
	}
	with := func(f func(*config)) config {
		c := base
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) (string, bool)
		want config
	}{
		{"maas commit", []string{"notify", "--action", "commit", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5",
			"--lease-time", "600", "--hostname", "c1", "--socket", "/var/lib/maas/dhcpd.sock"}, env(),
			with(func(c *config) { c.leaseTime, c.hostname, c.socket = 600, "c1", "/var/lib/maas/dhcpd.sock" })},
		{"maas expiry", []string{"notify", "--action", "expiry", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5"}, env(),
			with(func(c *config) { c.action = "expiry" })},
		{"release", notifyArgs("--action", "release"), env(), with(func(c *config) { c.action = "release" })},
		{"equals form", []string{"notify", "--action=commit", "--mac=02:00:00:0A:0B:0C", "--ip-family=ipv4", "--ip=203.0.113.5",
			"--lease-time=0", "--hostname=a=b", "--spool=/tmp/s"}, env(),
			with(func(c *config) { c.mac, c.hostname, c.spool = "02:00:00:0A:0B:0C", "a=b", "/tmp/s" })},
		{"empty value with equals", notifyArgs("--hostname="), env(), base},
		{"order free", []string{"notify", "--ip", "203.0.113.5", "--ip-family", "ipv4", "--mac", "2-0-0-a-b-c", "--action", "commit"}, env(),
			with(func(c *config) { c.mac = "2-0-0-a-b-c" })},
		{"last wins", notifyArgs("--ip", "203.0.113.9"), env(), with(func(c *config) { c.ip = "203.0.113.9" })},
		{"hostname that looks like a flag", notifyArgs("--hostname", "--socket"), env(), with(func(c *config) { c.hostname = "--socket" })},
		{"hostname -h", notifyArgs("--hostname", "-h"), env(), with(func(c *config) { c.hostname = "-h" })},
		{"env", notifyArgs(), env(envSocket, "/e/sock", envSpool, "/e/spool"),
			with(func(c *config) { c.socket, c.spool = "/e/sock", "/e/spool" })},
		{"flags beat env", notifyArgs("--socket", "/f/sock", "--spool", "/f/spool"), env(envSocket, "/e/sock", envSpool, "/e/spool"),
			with(func(c *config) { c.socket, c.spool = "/f/sock", "/f/spool" })},
		{"empty env is unset", notifyArgs(), env(envSocket, "", envSpool, ""), base},
		{"max lease time", notifyArgs("--lease-time", "4294967295"), env(), with(func(c *config) { c.leaseTime = 4294967295 })},
		// The MAC and the address are normalised when encoded (TestAppendEvent).
		{"ipv6", []string{"notify", "--action", "commit", "--mac", "0:1:0:1:2a:3b:4c:5d:2:0:0:a:b:c", "--ip-family", "ipv6",
			"--ip", "2001:db8:0:0:0:0:0:5"}, env(),
			with(func(c *config) {
				c.family, c.ip, c.mac = "ipv6", "2001:db8:0:0:0:0:0:5", "0:1:0:1:2a:3b:4c:5d:2:0:0:a:b:c"
			})},
		{"no mac", notifyArgs("--mac", ""), env(), with(func(c *config) { c.mac = "" })},
		// A flag a newer dhcpd.conf passes is skipped with its value.
		{"unknown flag", notifyArgs("--client-id", "1:2:3", "--hostname", "c1"), env(),
			with(func(c *config) { c.hostname, c.ignored = "c1", "--client-id" })},
		{"unknown flag with equals", notifyArgs("--client-id=1:2:3"), env(), with(func(c *config) { c.ignored = "--client-id" })},
		{"unknown flag's value that looks like a flag", notifyArgs("--client-id", "--ip=203.0.113.99", "--future", "--socket=/tmp/evil.sock"), env(),
			with(func(c *config) { c.ignored = "--client-id" })},
		{"unknown flag's value --help", notifyArgs("--client-id", "--help"), env(), with(func(c *config) { c.ignored = "--client-id" })},
		{"unknown flag last", notifyArgs("--future"), env(), with(func(c *config) { c.ignored = "--future" })},
		{"the first unknown flag is named", notifyArgs("--one", "1", "--two", "2"), env(), with(func(c *config) { c.ignored = "--one" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got config
			err := parseArgs(&got, tc.args, tc.env)
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(config{}, event{})); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
		})
	}
}

func TestParseArgsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) (string, bool)
		want string // in the error
	}{
		{"no command", nil, env(), "missing command"},
		{"other command", []string{"renew", "x"}, env(), `unknown command "renew": want notify or clean`},
		{"missing action", []string{"notify", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4", "--ip", "203.0.113.5"}, env(), "missing --action"},
		{"missing ip", []string{"notify", "--action", "commit", "--mac", "2:0:0:a:b:c", "--ip-family", "ipv4"}, env(), "missing --ip"},
		{"bad action", notifyArgs("--action", "renew"), env(), `--action "renew"`},
		{"action case", notifyArgs("--action", "COMMIT"), env(), `--action "COMMIT"`},
		{"bad family", notifyArgs("--ip-family", "inet"), env(), `--ip-family "inet"`},
		{"v6 address as v4", notifyArgs("--ip", "2001:db8::5"), env(), "not an IPv4 address"},
		{"v4 address as v6", notifyArgs("--ip-family", "ipv6"), env(), "not an IPv6 address"},
		{"v4-mapped as v6", notifyArgs("--ip-family", "ipv6", "--ip", "::ffff:203.0.113.5"), env(), "not an IPv6 address"},
		{"zone", notifyArgs("--ip-family", "ipv6", "--ip", "fe80::1%eth0"), env(), "not an IP address"},
		{"truncated v4", notifyArgs("--ip", "203.0.113"), env(), "not an IP address"},
		{"leading zero v4", notifyArgs("--ip", "203.0.113.05"), env(), "not an IP address"},
		{"empty ip", notifyArgs("--ip", ""), env(), "not an IP address"},
		{"mac three digits", notifyArgs("--mac", "2:0:0:a:b:ccc"), env(), `--mac "2:0:0:a:b:ccc"`},
		{"mac not hex", notifyArgs("--mac", "2:0:0:a:b:g"), env(), "--mac"},
		{"mac mixed separators", notifyArgs("--mac", "2:0:0-a:b:c"), env(), "--mac"},
		{"mac trailing separator", notifyArgs("--mac", "2:0:0:a:b:c:"), env(), "--mac"},
		{"mac empty group", notifyArgs("--mac", "2::0:a:b:c"), env(), "--mac"},
		{"mac too long", notifyArgs("--mac", strings.Repeat("a:", 130)+"a"), env(), "--mac"},
		{"lease time negative", notifyArgs("--lease-time", "-1"), env(), `--lease-time "-1"`},
		{"lease time plus", notifyArgs("--lease-time", "+5"), env(), "--lease-time"},
		{"lease time text", notifyArgs("--lease-time", "600s"), env(), "--lease-time"},
		{"lease time empty", notifyArgs("--lease-time", ""), env(), "--lease-time"},
		{"lease time huge", notifyArgs("--lease-time", "4294967296"), env(), "--lease-time"},
		{"lease time enormous", notifyArgs("--lease-time", "99999999999999999999999"), env(), "--lease-time"},
		{"single dash", notifyArgs("-action", "commit"), env(), `unexpected argument "-action"`},
		{"positional", notifyArgs("extra"), env(), `unexpected argument "extra"`},
		{"bare double dash", notifyArgs("--"), env(), `unexpected argument "--"`},
		{"value missing", notifyArgs("--hostname"), env(), "--hostname needs a value"},
		{"relative socket", notifyArgs("--socket", "hook.sock"), env(), `--socket "hook.sock": want an absolute path`},
		{"relative env spool", notifyArgs(), env(envSpool, "spool"), `$LEASEKEEPER_SPOOL "spool"`},
		{"empty socket flag", notifyArgs("--socket", ""), env(), `--socket ""`},
		{"socket path too long", notifyArgs("--socket", "/"+strings.Repeat("s", 107)), env(), "longer than 107 bytes"},
		{"hostile value quoted", notifyArgs("--action", "x\ny\x00z"), env(), `--action "x\ny\x00z"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseArgs(new(config), tc.args, tc.env)
			if err == nil {
				t.Fatalf("parseArgs(%q) succeeded", tc.args)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"notify", "--help"}, {"notify", "--action", "commit", "-h"}} {
		if err := parseArgs(new(config), args, env()); err != errHelp {
			t.Errorf("parseArgs(%q) = %v, want errHelp", args, err)
		}
	}
	if err := parseArgs(new(config), []string{"--version"}, env()); err != errVersion {
		t.Errorf("--version: %v", err)
	}
}

func TestNormaliseMAC(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"2:0:0:a:b:c", "02:00:00:0a:0b:0c"},
		{"02:00:00:0A:0B:0C", "02:00:00:0a:0b:0c"},
		{"a-b-c-d-e-f", "0a:0b:0c:0d:0e:0f"},
		{"ff", "ff"},
		{"", ""},
		{strings.Repeat("1:", 129) + "1", strings.Repeat("01:", 129) + "01"},
	} {
		got, ok := normaliseMAC(tc.in)
		if !ok || got != tc.want {
			t.Errorf("normaliseMAC(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	for _, in := range []string{":", "a:", ":a", "a::b", "abc", "0x1", "a b", "a:b-c", "g", "aa:bb:cc:dd:ee:fff", strings.Repeat("1:", 130) + "1"} {
		if got, ok := normaliseMAC(in); ok {
			t.Errorf("normaliseMAC(%q) = %q, want rejected", in, got)
		}
	}
}
