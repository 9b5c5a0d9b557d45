package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/orphans"
	"github.com/leasekeeper/leasekeeper/internal/sockgroup"
)

// TestControlSocketWho: the control socket serves dead letters to root,
// and to another user only when control.group names a group of theirs;
// the kernel refuses everyone else at connect. The callers are real
// processes of another user (setpriv), talking HTTP over the socket
// (curl --unix-socket).
func TestControlSocketWho(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs clients as another user")
	}
	for _, bin := range []string{"setpriv", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed", bin)
		}
	}
	// The other user is nobody (65534), its group nogroup (65534), as on
	// Debian; another system names them otherwise.
	if g, err := user.LookupGroup("nogroup"); err != nil || g.Gid != "65534" {
		t.Skipf("no group nogroup with gid 65534 here (%v)", err)
	}
	for _, tc := range []struct {
		name, group string
		nobody      bool // may nobody (uid 65534, gid 65534 = nogroup) list them?
		mode        os.FileMode
	}{
		{"no group", "", false, 0o600},
		{"nobody's group", "nogroup", true, 0o660},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A directory anyone may traverse: only the socket's own
			// owner, group and mode decide.
			dir := t.TempDir()
			for _, d := range []string{filepath.Dir(dir), dir} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cfg := testConfig()
			cfg.Control.Socket = filepath.Join(dir, "control.sock")
			cfg.Control.Group = tc.group
			a := newAgent(t, cfg)
			a.SetDeadLetters(&fakeDead{})
			start(t, a)
			<-a.Ready()
			if fi, err := os.Stat(cfg.Control.Socket); err != nil || fi.Mode().Perm() != tc.mode {
				t.Fatalf("socket: %v %v, want mode %v", fi, err, tc.mode)
			}
			curl := func(asNobody bool, args ...string) (string, error) {
				argv := append([]string{"curl", "-sS", "--fail-with-body", "--max-time", "5", "--unix-socket", cfg.Control.Socket}, args...)
				if asNobody {
					argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, argv...)
				}
				out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
				return string(out), err
			}
			if out, err := curl(false, "http://control/deadletters"); err != nil || strings.TrimSpace(out) != "[]" {
				t.Errorf("root: %v %s", err, out)
			}
			for _, req := range [][]string{
				{"http://control/deadletters"},
				{"-X", "DELETE", "http://control/deadletters/1"},
			} {
				out, err := curl(true, req...)
				switch {
				case tc.nobody && err != nil && !strings.Contains(out, "no dead letter"):
					t.Errorf("nobody, in control.group, %v: %v %s", req, err, out)
				case !tc.nobody && (err == nil || !strings.Contains(out, "Couldn't connect")):
					t.Errorf("nobody, not allowed, %v: %v %s; want the connect refused", req, err, out)
				}
			}
		})
	}
}

// TestSocketGroupNotMember: control.group names a group the agent's
// user is not in (the packaged agent runs as leasekeeper, without
// CAP_CHOWN): the agent says so before it binds anything, in an error
// the agent's command exits 78 with (not restarted: TestExitConfig);
// a member gets its socket in that group. The agent is this test binary
// run as nobody (setpriv), with and without the group root among its
// supplementary groups; the group is root's, which every system has.
func TestSocketGroupNotMember(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the agent as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed")
	}
	// The binary and the socket's directory where nobody reaches them.
	dir, err := os.MkdirTemp("", "leasekeeper-control-group-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agent.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(run, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(run, "control.sock")
	for _, tc := range []struct {
		name   string
		groups string // setpriv's supplementary groups
		exit   int
		want   string
	}{
		{"not a member", "--clear-groups", 3, `the agent runs as uid 65534`},
		{"a member", "--groups=0", 0, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", tc.groups, bin)
			cmd.Env = append(os.Environ(), listenControlEnv+"="+sock+" root")
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			got := string(out)
			if code != tc.exit || !strings.Contains(got, tc.want) {
				t.Fatalf("exit %d, %q; want exit %d, %q", code, got, tc.exit, tc.want)
			}
			if tc.exit != 0 {
				if !strings.Contains(got, "not a member of group root (gid 0)") || !strings.Contains(got, "SupplementaryGroups=root") {
					t.Errorf("%q does not say how to mend it", got)
				}
				if _, err := os.Lstat(sock); err == nil {
					t.Error("a socket was left behind")
				}
			}
		})
	}
}

// listenControlEnv makes this test binary an agent's control socket
// (TestMain): "PATH GROUP" binds it as listenControl does, prints what
// came of it (the socket's group and mode, or the error), and exits 0,
// 3 for a *sockgroup.NotMemberError, or 1.
const listenControlEnv = "LEASEKEEPER_TEST_LISTEN_CONTROL"

func listenControlAs(spec string) int {
	path, group, _ := strings.Cut(spec, " ")
	ln, err := listenControl(path, group)
	var nm *sockgroup.NotMemberError
	switch {
	case errors.As(err, &nm):
		fmt.Println(err)
		return 3
	case err != nil:
		fmt.Println(err)
		return 1
	}
	defer ln.Close()
	defer os.Remove(path)
	fi, err := os.Lstat(path)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Gid != 0 || fi.Mode().Perm() != 0o660 {
		fmt.Printf("socket gid %d mode %v, want gid 0 mode 0660\n", st.Gid, fi.Mode().Perm())
		return 1
	}
	fmt.Println("ok")
	return 0
}

// TestHostGuard: /status and the release answer only requests that name
// this machine; /metrics and /healthz answer any name (a remote
// Prometheus scrapes by the rack's FQDN).
func TestHostGuard(t *testing.T) {
	names := []string{"localhost", "rack1"}
	for host, want := range map[string]bool{
		"127.0.0.1:9742":        true,
		"[::1]:9742":            true,
		"203.0.113.5":           true,
		"localhost:9742":        true,
		"LOCALHOST.":            true,
		"status.localhost:9742": true,
		"rack1:9742":            true,
		"rack1.evil.example":    false,
		"evil.example:9742":     false,
		"localhost.evil":        false,
		"":                      false,
	} {
		if got := localHost(host, names); got != want {
			t.Errorf("Host %q: %v, want %v", host, got, want)
		}
	}
	a := newAgent(t, testConfig())
	h := a.handler()
	for _, tc := range []struct {
		path, host string
		code       int
	}{
		{"/status", "evil.example:9742", 421},
		{"/status", "127.0.0.1:9742", 200},
		{"/metrics", "rack1.maas.example:9742", 200},
		{"/healthz", "rack1.maas.example:9742", 503}, // not ready: but answered
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		r.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("%s with Host %s: %d, want %d", tc.path, tc.host, w.Code, tc.code)
		}
	}
}

// fakeOrphans is an Orphans with fixed jobs; ReleaseNow frees the first.
type fakeOrphans struct{ jobs []orphans.Job }

func (f *fakeOrphans) Jobs() []orphans.Job { return f.jobs }
func (f *fakeOrphans) ReleaseNow(_ context.Context, ip netip.Addr) (orphans.Outcome, error) {
	for i, j := range f.jobs {
		if j.IP == ip {
			if i == 0 {
				return orphans.Outcome{Done: true, Result: "freed"}, nil
			}
			return orphans.Outcome{Result: "busy", Reason: "answers an ARP probe"}, nil
		}
	}
	return orphans.Outcome{}, fmt.Errorf("no orphaned address %s", ip)
}

// TestControlOrphans: GET /orphans lists the held addresses with their
// MACs (the control socket's callers may see them), POST
// /orphans/{ip}/release runs the checked release and says how it went.
func TestControlOrphans(t *testing.T) {
	a := newAgent(t, testConfig())
	ends := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a.SetOrphans(&fakeOrphans{jobs: []orphans.Job{
		{IP: netip.MustParseAddr("203.0.113.100"), MAC: "02:00:00:00:00:01", Ends: ends.Unix(), State: "waiting"},
		{IP: netip.MustParseAddr("203.0.113.101"), MAC: "02:00:00:00:00:02", Ends: ends.Unix(), State: "busy", Reason: "answers", Attempts: 2},
	}})
	h := a.controlHandler()
	call := func(method, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w.Code, w.Body.String()
	}
	code, body := call("GET", "/orphans")
	var list []OrphanItem
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 2 ||
		list[0].MAC != "02:00:00:00:00:01" || !list[0].Ends.Equal(ends) || list[1].State != "busy" || list[1].Attempts != 2 {
		t.Fatalf("GET /orphans: %d %v %s", code, err, body)
	}
	for _, tc := range []struct {
		ip     string
		code   int
		result string
	}{
		{"203.0.113.100", 200, "freed"},
		{"203.0.113.101", 200, "busy"},
		{"203.0.113.7", 404, ""},
		{"x", 400, ""},
	} {
		code, body := call("POST", "/orphans/"+tc.ip+"/release")
		var out OrphanRelease
		if code != tc.code || (code == 200 && (json.Unmarshal([]byte(body), &out) != nil || out.Result != tc.result)) {
			t.Errorf("release %s: %d %s, want %d %s", tc.ip, code, body, tc.code, tc.result)
		}
	}
	// Not on the TCP listener.
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/orphans", nil)
	r.Host = "127.0.0.1"
	a.handler().ServeHTTP(w, r)
	if w.Code != 404 && w.Code != 405 {
		t.Errorf("TCP GET /orphans: %d, want not served", w.Code)
	}
}
