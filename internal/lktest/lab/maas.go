package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/lktest"
)

// maasHelperPython is where the stand-in's interpreter must be.
const maasHelperPython = "/usr/bin/python3"

// maasHelperScript stands in for MAAS's maas-dhcp-helper (package-files/
// usr/sbin/maas-dhcp-helper in canonical/maas): a Python script whose
// notify sends one JSON datagram to MAAS's dhcpd.sock (--socket), with
// the keys MAAS's helper sends, and fails when nothing receives it. It is
// written for the lab, not copied from MAAS.
const maasHelperScript = `#!` + maasHelperPython + `
"""Lab stand-in for MAAS's maas-dhcp-helper: notify sends the event to
MAAS's dhcpd.sock (the --socket argument) as one JSON datagram."""
import json, socket, sys, time

def main(argv):
    if not argv or argv[0] != "notify":
        print("usage: maas-dhcp-helper notify --action A --mac M --ip-family F --ip IP [...] --socket PATH", file=sys.stderr)
        return 2
    opts, rest = {}, argv[1:]
    for i in range(0, len(rest) - 1, 2):
        opts[rest[i]] = rest[i + 1]
    event = {"action": opts["--action"], "mac": opts["--mac"], "ip_family": opts["--ip-family"],
             "ip": opts["--ip"], "timestamp": int(time.time())}
    if event["action"] == "commit":
        event["lease_time"] = int(opts.get("--lease-time", "0"))
        if opts.get("--hostname", "").strip():
            event["hostname"] = opts["--hostname"]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.connect(opts.get("--socket", "/var/lib/maas/dhcpd.sock"))
    sock.send(json.dumps(event).encode())
    return 0

sys.exit(main(sys.argv[1:]))
`

// MAASHelper writes a stand-in for MAAS's maas-dhcp-helper into dir and
// returns its path: a Python script that sends each event to the socket
// its --socket names, as MAAS's does. It skips the test without
// /usr/bin/python3.
func MAASHelper(t testing.TB, dir string) string {
	t.Helper()
	if _, err := os.Stat(maasHelperPython); err != nil {
		t.Skipf("lab: the MAAS helper stand-in needs %s: %v", maasHelperPython, err)
	}
	p := filepath.Join(dir, "maas-dhcp-helper")
	if err := os.WriteFile(p, []byte(maasHelperScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// MAASSnippet is MAAS's "Notify MAAS" blocks (maasserver/templates/dhcp/
// dhcpd.conf.template, MAAS 3.5 to 3.8) as MAAS renders them: helper
// notify with MAAS's arguments and --socket sock. The shipped snippet
// (packaging/dhcpd/leasekeeper.conf) is those blocks running
// leasekeeper-hook without --socket, so it is the source.
func MAASSnippet(t testing.TB, helper, sock string) string {
	t.Helper()
	const rel = "packaging/dhcpd/leasekeeper.conf"
	raw, err := os.ReadFile(filepath.Join(lktest.ModuleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	if n := strings.Count(s, hookCall); n != 3 {
		t.Fatalf("%s: %d execute calls of the form %s, want 3: update lab.MAASSnippet", rel, n, hookCall)
	}
	s = strings.ReplaceAll(s, hookCall, fmt.Sprintf("%q, \"notify\",", helper))
	// MAAS passes --socket last in each execute().
	for _, action := range []string{"commit", "expiry", "release"} {
		before := s
		s = replaceExecuteEnd(s, action, fmt.Sprintf(", \"--socket\", %q);", sock))
		if s == before {
			t.Fatalf("%s: no execute() for %s: update lab.MAASSnippet", rel, action)
		}
	}
	return s + "\n"
}

// replaceExecuteEnd puts tail in place of the ");" that ends the
// execute() of the on-block for action.
func replaceExecuteEnd(s, action, tail string) string {
	start := strings.Index(s, "\non "+action+" {")
	if start < 0 {
		return s
	}
	open := strings.Index(s[start:], "execute(")
	if open < 0 {
		return s
	}
	depth, inStr := 0, false
	for i := start + open + len("execute"); i < len(s); i++ {
		switch c := s[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '(':
			depth++
		case c == ')':
			if depth--; depth == 0 && strings.HasPrefix(s[i:], ");") {
				return s[:i] + tail + s[i+2:]
			}
		}
	}
	return s
}
