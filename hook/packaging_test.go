package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

const installedHook = "/usr/sbin/leasekeeper-hook"

func readSnippet(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "packaging", "dhcpd", name))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"`+installedHook+`"`); n != 3 {
		t.Fatalf("%s runs %s %d times, want 3 (commit, expiry, release)", name, installedHook, n)
	}
	return string(b)
}

// TestPackagingSnippets has dhcpd itself read the snippets inside a
// configuration (-T reads the configuration and a leases file, touches
// no network): the v4 one as MAAS would include it, the v6 one with a
// leases file holding an address whose on expiry / on release and
// variables are the ones the snippet leaves behind.
func TestPackagingSnippets(t *testing.T) {
	v4 := readSnippet(t, "leasekeeper.conf")
	v6 := readSnippet(t, "leasekeeper6.conf")
	for _, want := range []string{
		`set clht = pick-first-value(option host-name, "(none)");`,
		`"--lease-time", cllt, "--hostname", clht);`,
		`set clhw = binary-to-ascii(16, 8, ":", substring(hardware, 1, 6));`,
	} {
		if !strings.Contains(v4, want) {
			t.Errorf("leasekeeper.conf lacks MAAS's %q", want)
		}
	}
	v4conf := "ping-check false;\nauthoritative;\n" + v4 +
		"subnet 203.0.113.0 netmask 255.255.255.0 {\n  range 203.0.113.100 203.0.113.150;\n}\n"
	c, err := lab.CheckLeaseFile(t, lab.DhcpdConfig{Conf: v4conf, Family: 4})
	if err != nil || len(c.Problems) > 0 {
		t.Errorf("dhcpd -4 rejects leasekeeper.conf: %v %q", err, c.Problems)
	}
	// The check does catch a broken snippet (not a misspelt expression,
	// though: dhcpd reads an unknown name as a variable, unset at run
	// time, which only TestLabHook would notice).
	if _, err := lab.CheckLeaseFile(t, lab.DhcpdConfig{Conf: strings.Replace(v4conf, "substring(hardware, 1, 6));", "substring(hardware, 1, 6);", 1)}); err == nil {
		t.Error("dhcpd -4 -T accepted an unbalanced parenthesis")
	}

	v6conf := "default-lease-time 7200;\n" + v6 +
		"subnet6 2001:db8:1::/64 {\n  range6 2001:db8:1::100 2001:db8:1::1ff;\n}\n"
	leases6 := `ia-na "\001\000\000\000\000\001\000\001*;L]\002\000\000\012\013\014" {
  cltt 0 2026/11/29 12:00:00;
  iaaddr 2001:db8:1::100 {
    binding state active;
    preferred-life 4500;
    max-life 7200;
    ends 4 2036/11/27 12:00:00;
    set clip = "2001:db8:1:0:0:0:0:100";
    set clhw = "0:1:0:1:2a:3b:4c:5d:2:0:0:a:b:c";
    on expiry {` + block(t, v6, "on expiry") + `}
    on release {` + block(t, v6, "on release") + `}
  }
}
`
	c, err = lab.CheckLeaseFile(t, lab.DhcpdConfig{Conf: v6conf, Leases: leases6, Family: 6})
	if err != nil || len(c.Problems) > 0 || !strings.Contains(c.Output, "Wrote 1 NA") {
		t.Errorf("dhcpd -6 rejects leasekeeper6.conf or its leases: %v %q\n%s", err, c.Problems, c.Output)
	}
	if _, err := lab.CheckLeaseFile(t, lab.DhcpdConfig{Conf: strings.Replace(v6conf, "dhcp6.ia-na", "dhcp6.ia-nax", 1), Family: 6}); err == nil {
		t.Error("dhcpd -6 -T accepted a misspelt option")
	}
}

// block returns the body of the first "NAME {" block in s.
func block(t *testing.T, s, name string) string {
	t.Helper()
	i := strings.Index(s, "\n"+name+" {")
	if i < 0 {
		t.Fatalf("no %q block", name)
	}
	body := s[i+len(name)+3:]
	j := strings.Index(body, "\n}")
	if j < 0 {
		t.Fatalf("unterminated %q block", name)
	}
	return body[:j+1]
}

// TestLabHook is the end-to-end run: real dhcpd with the
// packaging snippet running the built hook, a real dhclient that obtains
// a lease, releases it, obtains another and lets it expire. The agent's
// socket receives commit, release, commit, expiry in that order; with no
// agent listening the same four events wait in the spool.
//
// The socket and spool reach the hook through dhcpd's environment
// (execute() passes it on), so the snippet runs exactly as shipped but
// for the program's path.
func TestLabHook(t *testing.T) {
	lab.Require(t, "dhcpd", "dhclient")
	snippet := strings.ReplaceAll(readSnippet(t, "leasekeeper.conf"), `"`+installedHook+`"`, `"`+hookBin+`"`)
	for _, listening := range []bool{true, false} {
		name := "agent listening"
		if !listening {
			name = "agent absent"
		}
		t.Run(name, func(t *testing.T) {
			dir := shortDir(t)
			sock, spool := filepath.Join(dir, "hook.sock"), filepath.Join(dir, "spool")
			t.Setenv(envSocket, sock)
			t.Setenv(envSpool, spool)
			var conn *net.UnixConn
			if listening {
				var err error
				conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
			}

			l := lab.New(t)
			// dhcpd grants 5 s; the client is killed right after its
			// second lease, before it renews, so that lease expires.
			d := l.StartDhcpd(t, lab.DhcpdConfig{Conf: "ping-check false;\nauthoritative;\n" +
				"default-lease-time 5;\nmax-lease-time 5;\n" + snippet +
				l.SubnetConf("  range 203.0.113.100 203.0.113.150;")})
			c := l.AddClient("c1")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			ip1, err := c.Dhclient(ctx)
			if err != nil {
				t.Fatalf("Dhclient: %v\ndhcpd:\n%s", err, d.Logs())
			}
			if err := c.Release(ctx); err != nil {
				t.Fatalf("Release: %v\ndhcpd:\n%s", err, d.Logs())
			}
			ip2, err := c.Dhclient(ctx)
			if err != nil {
				t.Fatalf("second Dhclient: %v\ndhcpd:\n%s", err, d.Logs())
			}
			if err := c.Kill(); err != nil {
				t.Fatal(err)
			}
			mac, lt, host := "02:00:00:00:00:01", ptr[uint32](5), ptr("c1")
			want := []datagram{
				{Action: "commit", MAC: mac, IPFamily: "ipv4", IP: ip1.String(), LeaseTime: lt, Hostname: host},
				{Action: "release", MAC: mac, IPFamily: "ipv4", IP: ip1.String()},
				{Action: "commit", MAC: mac, IPFamily: "ipv4", IP: ip2.String(), LeaseTime: lt, Hostname: host},
				{Action: "expiry", MAC: mac, IPFamily: "ipv4", IP: ip2.String()},
			}

			var raw [][]byte
			deadline := time.Now().Add(30 * time.Second)
			for !hasExpiry(t, raw) && time.Now().Before(deadline) {
				if listening {
					buf := make([]byte, 64<<10)
					conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
					if n, err := conn.Read(buf); err == nil {
						raw = append(raw, buf[:n])
					}
				} else {
					raw = raw[:0]
					for _, l := range spoolLines(t, spool) {
						raw = append(raw, []byte(l))
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			got := collapseRenewals(t, raw)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events (-want +got)\n%s\ndhcpd:\n%s", diff, d.Logs())
			}
			if !listening && fileExists(sock) {
				t.Errorf("socket %s appeared", sock)
			}
			if listening && fileExists(filepath.Join(spool, spoolFile)) {
				t.Errorf("spooled although the agent listened: %q", spoolLines(t, spool))
			}
			if strings.Contains(d.Logs(), "execute: ") {
				t.Errorf("dhcpd logged a failed hook:\n%s", d.Logs())
			}
		})
	}
}

func hasExpiry(t *testing.T, raw [][]byte) bool {
	for _, b := range raw {
		if decode(t, b).Action == "expiry" {
			return true
		}
	}
	return false
}

// collapseRenewals decodes the events, checks their timestamps and pids,
// and drops a commit that repeats the one before it (a renewal, should
// the machine be slow enough for dhclient to reach T1).
func collapseRenewals(t *testing.T, raw [][]byte) []datagram {
	t.Helper()
	var out []datagram
	var lastNS int64
	for _, b := range raw {
		d := decode(t, b)
		if d.TimestampNS <= lastNS || d.PID <= 0 {
			t.Errorf("event %s: timestamp_ns not increasing or no pid", b)
		}
		lastNS = d.TimestampNS
		d.Timestamp, d.TimestampNS, d.PID = 0, 0, 0
		if n := len(out); n > 0 && d.Action == "commit" && cmp.Equal(out[n-1], d) {
			t.Logf("renewal: %s", b)
			continue
		}
		out = append(out, d)
	}
	return out
}
