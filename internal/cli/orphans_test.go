package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestOrphans: the list from the control socket, as a table and as JSON;
// --release asks for every listed address (or those given) and exits 1
// when one stays.
func TestOrphans(t *testing.T) {
	var calls []string
	sock := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path)
		switch {
		case r.Method == "GET" && r.URL.Path == "/orphans":
			w.Write([]byte(`[{"ip":"203.0.113.100","mac":"02:00:00:00:00:01","ends":"2026-12-01T12:00:00Z","state":"waiting","attempts":0,"next":null},` +
				`{"ip":"203.0.113.101","mac":"02:00:00:00:00:02","ends":"2026-12-01T12:00:00Z","state":"busy","reason":"answers an ARP probe","attempts":2,"next":"2026-12-01T12:01:00Z"}]`))
		case r.URL.Path == "/orphans/203.0.113.100/release":
			w.Write([]byte(`{"ip":"203.0.113.100","done":true,"result":"freed"}`))
		case r.URL.Path == "/orphans/203.0.113.101/release":
			w.Write([]byte(`{"ip":"203.0.113.101","done":false,"result":"busy","reason":"answers an ARP probe"}`))
		default:
			http.Error(w, "no orphaned address", 404)
		}
	}))
	out, stderr, code := run(t, "orphans", "--socket", sock)
	if code != 0 || !strings.Contains(out, "203.0.113.101  02:00:00:00:00:02  2026-12-01T12:00:00Z  busy") || !strings.Contains(out, "answers an ARP probe") {
		t.Errorf("list: exit %d %s\n%s", code, stderr, out)
	}
	out, _, code = run(t, "orphans", "--json", "--socket", sock)
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 || list[0]["mac"] != "02:00:00:00:00:01" {
		t.Errorf("--json: exit %d %v\n%s", code, err, out)
	}
	calls = nil
	out, stderr, code = run(t, "orphans", "--release", "--socket", sock)
	if code != 1 || !strings.Contains(out, "203.0.113.100\tfreed") || !strings.Contains(stderr, "203.0.113.101: not released now: busy") {
		t.Errorf("--release: exit %d %q %s", code, out, stderr)
	}
	if want := "GET /orphans,POST /orphans/203.0.113.100/release,POST /orphans/203.0.113.101/release"; strings.Join(calls, ",") != want {
		t.Errorf("calls %v", calls)
	}
	out, _, code = run(t, "orphans", "--release", "203.0.113.100", "--socket", sock)
	if code != 0 || out != "203.0.113.100\tfreed\t\n" {
		t.Errorf("--release IP: exit %d %q", code, out)
	}
	if _, stderr, code = run(t, "orphans", "--release", "203.0.113.7", "--socket", sock); code != 1 || !strings.Contains(stderr, "not an orphaned address the agent knows") {
		t.Errorf("--release unknown: exit %d %s", code, stderr)
	}
	if _, _, code = run(t, "orphans", "203.0.113.7", "--socket", sock); code != 2 {
		t.Errorf("IP without --release: exit %d, want 2", code)
	}
}
