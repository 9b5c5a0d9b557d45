package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/maasapi"
)

// ErrRequired is wrapped by the error for a key that must be set.
var ErrRequired = errors.New("required")

// maxSocketPath is the longest path a unix socket can be bound to
// (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// Log levels and formats the agent accepts.
var (
	levels  = []string{"trace", "debug", "info", "warn", "error"}
	formats = []string{"", "json", "console"}
)

// Validate checks every value and the rules between them, and returns all
// problems found as Problems (nil when there are none).
func (c *Config) Validate() error {
	var ps Problems
	bad := func(key string, err error) { ps = append(ps, &KeyError{Key: key, Err: err}) }
	badf := func(key, format string, args ...any) { bad(key, fmt.Errorf(format, args...)) }
	path := func(key, p string, required bool) {
		switch {
		case p == "" && required:
			bad(key, ErrRequired)
		case p != "" && !filepath.IsAbs(p):
			badf(key, "%q is not an absolute path", p)
		}
	}

	path("dhcpd.leases", c.DHCPD.Leases, true)
	path("dhcpd.config", c.DHCPD.Config, false)
	path("dhcpd.leases6", c.DHCPD.Leases6, false)
	path("dhcpd.config6", c.DHCPD.Config6, false)
	if c.DHCPD.Leases6 != "" && filepath.Clean(c.DHCPD.Leases6) == filepath.Clean(c.DHCPD.Leases) {
		badf("dhcpd.leases6", "%q is dhcpd.leases too: dhcpd -6 writes a leases file of its own (-lf), which this key names", c.DHCPD.Leases6)
	}
	if c.DHCPD.Leases6 != "" && c.DHCPD.Config6 == "" {
		// Its mode is detected from it alone: unset, complement, and no
		// DHCPv6 lease would reach the region from a MAAS rack.
		badf("dhcpd.config6", "must be set with dhcpd.leases6: the mode dhcpd.leases6 is followed in is detected from dhcpd -6's configuration (MAAS deb: \"/var/lib/maas/dhcpd6.conf\")")
	}
	path("dhcpd.pid_file", c.DHCPD.PIDFile, false)

	path("hook.socket", c.Hook.Socket, true)
	if len(c.Hook.Socket) > maxSocketPath {
		badf("hook.socket", "%q is longer than %d bytes, the limit for a unix socket path", c.Hook.Socket, maxSocketPath)
	}
	if g := c.Hook.SocketGroup; g != "" && !validGroup(g) {
		badf("hook.socket_group", "%q is not a group name", g)
	}
	path("hook.spool", c.Hook.Spool, true)
	for _, uid := range c.Hook.AllowedUIDs {
		if uid < 0 || uid > maxUID {
			badf("hook.allowed_uids", "%d is not a uid (0..%d)", uid, maxUID)
		}
	}

	c.validateRegion(bad, badf, path)

	path("maas.api_key_file", c.MAAS.APIKeyFile, false)
	path("maas.ca_file", c.MAAS.CAFile, false)
	if u := c.MAAS.APIURL; u != "" {
		if _, err := maasapi.BaseURL(u); err != nil {
			bad("maas.api_url", err)
		} else if c.MAAS.CAFile != "" && !strings.HasPrefix(strings.ToLower(u), "https:") {
			badf("maas.ca_file", "set for an api_url without TLS (%s): a MAAS with TLS answers at https://REGION:5443/MAAS/", u)
		}
	}
	if c.MAAS.CAFile != "" && c.MAAS.APIURL == "" {
		badf("maas.ca_file", "set without maas.api_url: it says whom to trust at an https api_url")
	}
	if (c.MAAS.APIURL == "") != (c.MAAS.APIKeyFile == "") {
		badf("maas.api_key_file", "set maas.api_url and maas.api_key_file together, or neither")
	}

	path("state.dir", c.State.Dir, true)

	if g := c.Reconcile.ExpiryGrace; g < 0 {
		badf("reconcile.expiry_grace", "%s is negative", g)
	} else if g > maxExpiryGrace {
		badf("reconcile.expiry_grace", "%s is longer than 1h: a hook reports within seconds, and every event the file fills in waits this long", g)
	} else if g%time.Second != 0 {
		// The reconciler counts the grace in whole seconds, as
		// dhcpd.leases dates events: "500ms" would act as "0s".
		badf("reconcile.expiry_grace", "%s is not a whole number of seconds (dhcpd.leases dates in seconds): write %q or %q", g, g.Truncate(time.Second).String(), (g.Truncate(time.Second) + time.Second).String())
	}
	if p := c.Reconcile.PollInterval; p < 10*time.Millisecond {
		badf("reconcile.poll_interval", "%s is shorter than 10ms", p)
	} else if p > maxPollInterval {
		badf("reconcile.poll_interval", "%s is longer than 1h: a missed change notification would go unnoticed that long", p)
	}
	if !oneOf(c.Reconcile.Mode, ReconcileModes) {
		badf("reconcile.mode", "%q is not one of %s", c.Reconcile.Mode, strings.Join(ReconcileModes, ", "))
	}

	if l := c.Metrics.Listen; l != "" {
		if err := checkListen(l); err != nil {
			bad("metrics.listen", err)
		}
	}

	path("control.socket", c.Control.Socket, false)
	if len(c.Control.Socket) > maxSocketPath {
		badf("control.socket", "%q is longer than %d bytes, the limit for a unix socket path", c.Control.Socket, maxSocketPath)
	}
	if c.Control.Socket != "" && c.Control.Socket == c.Hook.Socket {
		badf("control.socket", "%q is also hook.socket", c.Control.Socket)
	}
	if g := c.Control.Group; g != "" && !validGroup(g) {
		badf("control.group", "%q is not a group name", g)
	}

	path("release.token_file", c.Release.TokenFile, false)

	c.validatePair(bad, badf, path)

	if !oneOf(c.Log.Level, levels) {
		badf("log.level", "%q is not one of %s", c.Log.Level, strings.Join(levels, ", "))
	}
	if !oneOf(c.Log.Format, formats) {
		badf("log.format", "%q is not json, console or \"\" (automatic)", c.Log.Format)
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}

// validatePair checks [pair]: the three keys together or none, listen
// and peer host:port (peer's host may be a name), hold_max positive and
// at most maxHoldMax.
func (c *Config) validatePair(bad func(string, error), badf func(string, string, ...any), path func(string, string, bool)) {
	p := c.Pair
	path("pair.key_file", p.KeyFile, false)
	n := 0
	for _, v := range []string{p.Listen, p.Peer, p.KeyFile} {
		if v != "" {
			n++
		}
	}
	if n != 0 && n != 3 {
		badf("pair.listen", "set pair.listen, pair.peer and pair.key_file together, or none")
	}
	if p.Listen != "" {
		if err := checkListen(p.Listen); err != nil {
			bad("pair.listen", err)
		}
	}
	if p.Peer != "" {
		if err := checkPeer(p.Peer); err != nil {
			bad("pair.peer", err)
		}
	}
	c.validatePartners(badf)
	if p.HoldMax <= 0 {
		badf("pair.hold_max", "%s is not positive", p.HoldMax)
	} else if p.HoldMax > maxHoldMax {
		badf("pair.hold_max", "%s is longer than 1h: when the peer rack dies, every delivery waits this long", p.HoldMax)
	}
}

// validatePartners checks pair.partners: each of the form PartnerList
// reads, only with the channel on, every failover peer named once, every
// listen address its own.
func (c *Config) validatePartners(badf func(string, string, ...any)) {
	p := c.Pair
	if len(p.Partners) == 0 {
		return
	}
	if !p.On() {
		badf("pair.partners", "needs pair.listen, pair.peer and pair.key_file: the partner rack of the other failover peers is pair.peer's")
	}
	ps, err := p.PartnerList()
	if err != nil {
		badf("pair.partners", "%v", err)
		return
	}
	named := map[string]bool{}
	listens := map[string]string{p.Listen: "pair.listen"}
	agents := map[string]bool{p.Peer: true}
	for _, pt := range ps {
		if agents[pt.Peer] {
			// The partner's agent has one channel back, to one port.
			badf("pair.partners", "the agent at %s is named twice (pair.peer, or another entry): one channel a partner rack, with every failover peer it shares with this rack", pt.Peer)
		}
		agents[pt.Peer] = true
		for _, n := range pt.FailoverPeers {
			if named[n] {
				badf("pair.partners", "failover peer %q named twice: each failover peer has one partner rack", n)
			}
			named[n] = true
		}
		if err := checkListen(pt.Listen); err != nil {
			badf("pair.partners", "listen %v", err)
		} else if other, dup := listens[pt.Listen]; dup {
			badf("pair.partners", "listen %q is %s's too: each partner's agent is answered on a port of its own", pt.Listen, other)
		}
		listens[pt.Listen] = fmt.Sprintf("the partner at %s", pt.Peer)
		if err := checkPeer(pt.Peer); err != nil {
			badf("pair.partners", "peer %v", err)
		}
	}
}

// checkPeer checks a peer agent's host:port (the host may be a name).
func checkPeer(peer string) error {
	if host, port, err := net.SplitHostPort(peer); err != nil || host == "" {
		return fmt.Errorf("%q is not host:port", peer)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not 1-65535", peer, port)
	}
	return nil
}

// Upper bounds of durations no rack needs longer: a typo ("87600h" for
// "60s"), accepted, would hold the agent's news for years.
const (
	// maxExpiryGrace: a hook reports within seconds of dhcpd's write;
	// the grace delays every event the file fills in, and the expiry
	// of a lease a restart dropped, by as long.
	maxExpiryGrace = time.Hour
	// maxPollInterval: the poll is the safety net for missed inotify
	// events and the pace a torn file is read again at.
	maxPollInterval = time.Hour
	// maxHoldMax: when the peer rack dies, every delivery waits this
	// long for it before going on alone.
	maxHoldMax = time.Hour
)

// maxUID is the largest uid; 4294967295 is (uid_t)-1, "no user".
const maxUID = 1<<32 - 2

// validateRegion checks [region]. An https url needs credentials: a
// client certificate (cert_file and key_file, mutual TLS: MAAS's only
// kind) and/or a bearer token (token_file, for a region other than
// MAAS). Plain http is accepted only to a loopback address — for tests
// and a local stub — and there the TLS keys are not used and credentials
// are optional. The files themselves are read by the agent at start (and
// by --print-config): agent.CheckRegion.
func (c *Config) validateRegion(bad func(string, error), badf func(string, string, ...any), path func(string, string, bool)) {
	r := &c.Region
	path("region.ca_file", r.CAFile, false)
	path("region.cert_file", r.CertFile, false)
	path("region.key_file", r.KeyFile, false)
	path("region.token_file", r.TokenFile, false)
	if r.ServerName != "" && !validServerName(r.ServerName) {
		badf("region.server_name", "%q is not a host name or address (MAAS: %q)", r.ServerName, MAASServerName)
	}
	if r.BatchMax < 1 || r.BatchMax > MaxBatch {
		badf("region.batch_max", "%d is not between 1 and %d", r.BatchMax, MaxBatch)
	}
	if r.Timeout <= 0 || r.Timeout > 10*time.Minute {
		badf("region.timeout", "%s is not between 0s (excluded) and 10m", r.Timeout)
	}
	if r.UnansweredHold < time.Second || r.UnansweredHold > 10*time.Minute {
		badf("region.unanswered_hold", "%s is not between 1s and 10m", r.UnansweredHold)
	}

	u, err := RegionURL(r.URL)
	if err != nil {
		bad("region.url", err)
	}
	seen := map[string]bool{}
	if u != nil {
		seen[EndpointKey(u)] = true
	}
	for _, o := range r.OtherURLs {
		ou, err := RegionURL(o)
		switch {
		case err != nil:
			bad("region.other_urls", err)
		case seen[EndpointKey(ou)]:
			badf("region.other_urls", "%q is named twice (region.url and region.other_urls together list each controller once)", o)
		case u != nil && ou.Scheme != u.Scheme:
			badf("region.other_urls", "%q: every controller's URL has region.url's scheme (%s)", o, u.Scheme)
		}
		if err == nil {
			seen[EndpointKey(ou)] = true
		}
	}
	if u == nil || u.Scheme != "https" {
		return
	}
	switch {
	case r.CertFile != "" && r.KeyFile == "":
		badf("region.key_file", "%v: region.cert_file is set", ErrRequired)
	case r.KeyFile != "" && r.CertFile == "":
		badf("region.cert_file", "%v: region.key_file is set", ErrRequired)
	case r.CertFile == "" && r.TokenFile == "":
		badf("region", "no credentials: set region.cert_file and region.key_file (MAAS: the rack's certificate and key), or region.token_file")
	}
}

// RegionURL checks region.url, the one place the agent sends leases to,
// and returns it parsed: an absolute https URL, or plain http to a
// loopback host (tests, a local stub), without credentials. Validate
// checks region.url with it, and agent/deliver again with the same. On
// error the URL is still returned when it parsed as an absolute URL.
func RegionURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: the region's leases endpoint, e.g. https://region.example:5242/MAAS/a/v3internal/leases", ErrRequired)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%q is not an absolute URL", raw)
	}
	switch {
	case u.User != nil: // first: the other messages show the URL
		return u, errors.New("must not carry credentials; use a client certificate (region.cert_file, region.key_file)")
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return u, fmt.Errorf("%q: plain http is only allowed to a loopback address (tests); use https", raw)
	case u.Scheme != "https" && u.Scheme != "http":
		return u, fmt.Errorf("%q: scheme must be https", raw)
	}
	return u, nil
}

// EndpointKey is u as one endpoint, however written: the host's case, a
// default port left out or written, and an IP address's spelling make
// no other controller.
func EndpointKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	}
	k := u.Scheme + "://" + net.JoinHostPort(host, port) + u.EscapedPath()
	if u.RawQuery != "" {
		k += "?" + u.RawQuery
	}
	return k
}

// validServerName accepts a DNS name or an IP address: what a TLS server
// certificate names. Not a URL, not host:port.
func validServerName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// loopbackHost reports whether a URL's host is this machine's loopback
// (localhost or a loopback address), the only place plain http may go.
func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

// checkListen accepts host:port with a numeric port; an empty host means
// every address.
func checkListen(l string) error {
	host, port, err := net.SplitHostPort(l)
	if err != nil {
		return fmt.Errorf("%q is not host:port", l)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number 0..65535", l, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: %q is not a host", l, host)
	}
	return nil
}

// validGroup accepts a group name as Debian's adduser does by default
// (NAME_REGEX, relaxed: upper case and dots are allowed by useradd, so
// they are here). Not a number: the hook socket looks the group up by name.
func validGroup(g string) bool {
	if len(g) > 32 {
		return false
	}
	for i, r := range g {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case i > 0 && (r >= '0' && r <= '9' || r == '-' || r == '.'):
		case i > 0 && i == len(g)-1 && r == '$':
		default:
			return false
		}
	}
	return true
}

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// HookUIDs returns the uids allowed to send to the hook socket:
// hook.allowed_uids when set, else DefaultHookUIDs(lookup). Call it on a
// validated Config (every uid in range).
func (c *Config) HookUIDs(lookup func(name string) (uid int, ok bool)) []uint32 {
	if len(c.Hook.AllowedUIDs) == 0 {
		return DefaultHookUIDs(lookup)
	}
	uids := make([]uint32, len(c.Hook.AllowedUIDs))
	for i, u := range c.Hook.AllowedUIDs {
		uids[i] = uint32(u)
	}
	return uids
}

// DefaultHookUIDs is root plus the user "dhcpd" when it exists. Debian's
// isc-dhcp-server runs dhcpd as root (its init script passes no -user),
// so its hooks run as root; MAAS's maas-dhcpd units start dhcpd with
// "-user dhcpd -group dhcpd", so there they run as dhcpd.
func DefaultHookUIDs(lookup func(name string) (uid int, ok bool)) []uint32 {
	uids := []uint32{0}
	if lookup != nil {
		if uid, ok := lookup("dhcpd"); ok && uid > 0 && uid <= maxUID {
			uids = append(uids, uint32(uid))
		}
	}
	return uids
}

// OutboxPath is the durable outbox's file in state.dir; the agent opens
// it, and `leasekeeper deadletter` when the agent is not running.
func (s State) OutboxPath() string { return filepath.Join(s.Dir, "outbox.db") }

// SystemUID looks a user up in the system's user database (for HookUIDs).
func SystemUID(name string) (int, bool) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, false
	}
	uid, err := strconv.Atoi(u.Uid)
	return uid, err == nil
}

// Resolve returns the log format to use: the configured one, or when
// "" (automatic) json under systemd's journal (JOURNAL_STREAM is set, as
// systemd does for a service whose stderr is the journal) or when stderr
// is not a terminal, console on a terminal.
func (l Log) Resolve(journal, stderrIsTTY bool) string {
	switch {
	case l.Format != "":
		return l.Format
	case journal || !stderrIsTTY:
		return "json"
	default:
		return "console"
	}
}
