package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/leasekeeper/leasekeeper/internal/safefile"
)

// DefaultPath is where the Debian package installs the config file.
const DefaultPath = "/etc/leasekeeper/leasekeeper.toml"

// MaxBatch bounds region.batch_max: the region handles a batch in one
// transaction, and one bad item fails all of it, so huge batches buy little
// and cost a lot when they must be split.
const MaxBatch = 10000

// Config is the agent's configuration. The toml tags are the file's
// section and key names; Keys lists them as "section.key".
type Config struct {
	DHCPD     DHCPD     `toml:"dhcpd"`
	Hook      Hook      `toml:"hook"`
	Region    Region    `toml:"region"`
	MAAS      MAAS      `toml:"maas"`
	State     State     `toml:"state"`
	Reconcile Reconcile `toml:"reconcile"`
	Metrics   Metrics   `toml:"metrics"`
	Control   Control   `toml:"control"`
	Release   Release   `toml:"release"`
	Pair      Pair      `toml:"pair"`
	Log       Log       `toml:"log"`

	// Rack is the MAAS rack whose values the keys RackKeys took, because
	// the file and the overrides left their groups unset (ParseOn); nil
	// when there is none.
	Rack     *MAASRack `toml:"-"`
	RackKeys []string  `toml:"-"`
}

// DHCPD says where dhcpd keeps its files. Empty optional paths switch the
// part that reads them off.
type DHCPD struct {
	Leases  string `toml:"leases"`   // required: the truth the agent converges to
	Config  string `toml:"config"`   // "" = do not read dhcpd.conf
	Leases6 string `toml:"leases6"`  // "" = DHCPv6 leases not followed; else a second reconciler follows it
	Config6 string `toml:"config6"`  // read for Leases6's mode (always auto) and by check-maas
	PIDFile string `toml:"pid_file"` // "" = do not watch dhcpd's pid file
}

// Hook is the socket leasekeeper-hook sends to and the spool it falls back to.
type Hook struct {
	Socket      string `toml:"socket"`
	SocketGroup string `toml:"socket_group"` // group name; "" = the agent's own group, socket open to all
	Spool       string `toml:"spool"`
	AllowedUIDs []int  `toml:"allowed_uids"` // empty = DefaultHookUIDs
}

// Region is the region controller's leases endpoint and how to reach it.
// The defaults are a MAAS 3.8+ deb rack's: its agent certificate, key and
// CA (MAASCertDir) and the name in the region's certificate ("maas").
type Region struct {
	URL string `toml:"url"`
	// OtherURLs are the same API on the region's other controllers (a
	// MAAS with several region controllers): the agent goes on with the
	// next when the one in use cannot be reached.
	OtherURLs  []string      `toml:"other_urls"`
	CAFile     string        `toml:"ca_file"` // "" = the system's roots
	CertFile   string        `toml:"cert_file"`
	KeyFile    string        `toml:"key_file"`
	ServerName string        `toml:"server_name"` // "" = the URL's host
	TokenFile  string        `toml:"token_file"`  // a bearer token; not MAAS's
	BatchMax   int           `toml:"batch_max"`
	Timeout    time.Duration `toml:"timeout"`
	// UnansweredHold: after a restart that left a request unanswered,
	// how long from that request's start nothing is sent (the region
	// may still be applying it; agent/deliver, inflight.go).
	UnansweredHold time.Duration `toml:"unanswered_hold"`
}

// MAAS is the region's public API 2.0, used to free an address MAAS
// still lists as observed after dhcpd dropped its lease because the
// address left every range (agent/orphans). Both keys or neither.
type MAAS struct {
	APIURL     string `toml:"api_url"`      // what `maas login` takes: http://REGION:5240/MAAS/
	APIKeyFile string `toml:"api_key_file"` // an administrator's API key, consumer:token:secret
	CAFile     string `toml:"ca_file"`      // PEM CA of an https api_url's certificate; "" = the system's roots
}

// MAASCertDir is where a deb-installed MAAS rack keeps the certificates
// its own agent talks to the region with (MAAS's
// provisioningserver/certificates.py and src/maasagent: agent.crt,
// agent.key and ca.pem from 3.8 on; cluster.pem, cluster.key and
// cacerts.pem in every version).
const MAASCertDir = "/var/lib/maas/certificates"

// MAASServerName is the one name in a MAAS region's certificate (CN
// maas-cluster, SAN DNS:maas: maasserver/start_up.py).
const MAASServerName = "maas"

// State is where the agent keeps what must survive a restart: the durable
// outbox, the lease table and the dead letters.
type State struct {
	Dir string `toml:"dir"`
}

// Reconcile tunes the leases-file reconciler.
type Reconcile struct {
	ExpiryGrace  time.Duration `toml:"expiry_grace"`
	PollInterval time.Duration `toml:"poll_interval"`
	// Mode is auto (detect from dhcpd.conf), replacement, complement or
	// hookless (ReconcileModes; agent/reconcile says what each means).
	Mode string `toml:"mode"`
}

// ReconcileModes are the values reconcile.mode accepts.
var ReconcileModes = []string{"auto", "replacement", "complement", "hookless"}

// Metrics is the HTTP listener for /metrics, /healthz, /status and the
// dead-letter endpoints.
type Metrics struct {
	Listen string `toml:"listen"` // host:port; "" disables the listener
}

// Control is the agent's control socket: a unix stream socket serving
// what changes or discloses the agent's state (dead letters, with the
// status and health the TCP listener also serves). Who may connect is
// decided by the socket file's owner, group and mode, checked by the
// kernel at connect() on the caller's full credentials: root, the agent's
// user, and Group's members when it is set.
type Control struct {
	Socket string `toml:"socket"` // "" disables the control socket
	Group  string `toml:"group"`  // group name; "" = root and the agent's user only
}

// Release gates POST /leases/{ip}/release on the metrics listener, which
// makes dhcpd free a lease on a client's behalf.
type Release struct {
	// TokenFile holds the bearer token a request must carry; "" disables
	// the endpoint. Mode 0600 or stricter (Parse checks it).
	TokenFile string `toml:"token_file"`
}

// Pair is the channel between the two agents of a dhcpd failover pair
// (agent/pair): before delivering, each asks the other whether it still
// holds older news of the same addresses, so that the two racks reach
// the region in one order. All of listen, peer and key_file, or none (no
// channel: each rack delivers on its own).
type Pair struct {
	Listen  string `toml:"listen"`   // host:port (UDP) this agent answers the peer on
	Peer    string `toml:"peer"`     // host:port of the other agent's listen
	KeyFile string `toml:"key_file"` // the shared secret: the same file on both racks, mode 0600/0640
	// HoldMax: the longest the agent's deliveries wait for a silent
	// peer agent before going on alone, and the longest one event waits
	// behind the peer's older news.
	HoldMax time.Duration `toml:"hold_max"`
	// Partners: where this rack's HA VLANs have different partner
	// racks, a channel to each other partner's agent, one string each:
	// "FAILOVER-PEER[,FAILOVER-PEER…] LISTEN PEER" (PartnerList). The
	// addresses whose subnet's pools use those failover peers are
	// ordered with that agent's news; every other address with Peer's.
	Partners []string `toml:"partners"`
}

// Partner is one more partner rack's agent of Pair.Partners.
type Partner struct {
	// FailoverPeers names the failover peers (dhcpd.conf's "failover
	// peer" names; MAAS's "failover-vlan-ID") this rack shares with the
	// partner.
	FailoverPeers []string
	Listen        string // host:port (UDP) this agent answers the partner's agent on
	Peer          string // host:port of the partner's agent (its pair.listen)
}

// PartnerList parses Partners.
func (p Pair) PartnerList() ([]Partner, error) {
	out := make([]Partner, 0, len(p.Partners))
	for _, s := range p.Partners {
		f := strings.Fields(s)
		if len(f) != 3 {
			return nil, fmt.Errorf("%q: want \"FAILOVER-PEER[,FAILOVER-PEER…] LISTEN PEER\", three fields, e.g. \"failover-vlan-5002 :5291 10.0.0.13:5290\" (with --set, an entry naming several failover peers goes in a TOML array, whose quotes keep its commas: --set 'pair.partners=[\"fo-1,fo-2 :5291 10.0.0.13:5290\"]')", s)
		}
		var peers []string
		for n := range strings.SplitSeq(f[0], ",") {
			if n == "" {
				return nil, fmt.Errorf("%q: an empty failover peer name in %q", s, f[0])
			}
			peers = append(peers, n)
		}
		out = append(out, Partner{FailoverPeers: peers, Listen: f[1], Peer: f[2]})
	}
	return out, nil
}

// On reports whether the pair channel is configured.
func (p Pair) On() bool { return p.Listen != "" }

// Log configures the agent's log.
type Log struct {
	Level  string `toml:"level"`  // trace, debug, info, warn, error
	Format string `toml:"format"` // json, console, "" = auto (see Log.Resolve)
}

// Default returns the configuration the agent runs with when the file sets
// nothing: Debian's paths, and a MAAS deb rack's region credentials.
// Region.URL has no default, so Default().Validate() fails until it is set.
func Default() *Config {
	return &Config{
		DHCPD: DHCPD{
			Leases:  "/var/lib/dhcp/dhcpd.leases",
			Config:  "/etc/dhcp/dhcpd.conf",
			PIDFile: "/run/dhcpd.pid",
		},
		Hook: Hook{
			Socket: "/run/leasekeeper/hook.sock",
			Spool:  "/var/spool/leasekeeper",
		},
		Region: Region{
			CAFile:         MAASCertDir + "/ca.pem",
			CertFile:       MAASCertDir + "/agent.crt",
			KeyFile:        MAASCertDir + "/agent.key",
			ServerName:     MAASServerName,
			BatchMax:       1000, // deliver.DefaultBatchMax: as MAAS's own agent batches
			Timeout:        10 * time.Second,
			UnansweredHold: 30 * time.Second,
		},
		State: State{Dir: "/var/lib/leasekeeper"},
		Reconcile: Reconcile{
			ExpiryGrace:  30 * time.Second,
			PollInterval: 10 * time.Second,
			Mode:         "auto",
		},
		Metrics: Metrics{Listen: "127.0.0.1:9742"},
		Control: Control{Socket: "/run/leasekeeper/control.sock"},
		Pair:    Pair{HoldMax: time.Minute},
		Log:     Log{Level: "info"},
	}
}

// DefaultOn is Default with the values of rack (nil: none) for every
// group of RackGroups: an agent run without a file on a MAAS rack. A
// rackd.conf that gave no region leaves region.url unset.
func DefaultOn(rack *MAASRack) *Config {
	c := Default()
	if rack != nil {
		c.Rack = rack
		c.RackKeys, _ = rack.apply(c, func(string) bool { return false })
	}
	return c
}

// Load reads the file at path over the defaults, applies overrides
// ("section.key=value", as from --set) in order, and validates the result.
func Load(path string, overrides ...string) (*Config, error) {
	f, err := safefile.Open(path, safefile.FollowLinks)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path, overrides...)
}

// Parse is Load on an open file; name is used in errors. Besides
// validating the values it reads release.token_file, maas.api_key_file
// and pair.key_file, when set, and
// refuses a token file that group or others can access or that holds no
// usable token: the agent must not start with a secret anyone can read.
func Parse(r io.Reader, name string, overrides ...string) (*Config, error) {
	return ParseOn(nil, r, name, overrides...)
}

// ParseOn is Parse on a host with a MAAS rack (nil: none): each group of
// RackGroups that neither the file nor an override sets takes the rack's
// values. A region the rack cannot give (rackd.conf unreadable) is told
// as region.url's problem.
func ParseOn(rack *MAASRack, r io.Reader, name string, overrides ...string) (*Config, error) {
	c, fileProblems, lines, err := decode(r, name)
	if err != nil {
		return nil, err
	}
	var ps Problems
	for _, o := range overrides {
		if err := c.Override(o); err != nil {
			ps = append(ps, asKeyError(err))
		}
	}
	if len(ps) > 0 {
		return nil, fmt.Errorf("--set: %w", ps)
	}
	rackErr := c.applyRack(rack, lines, overrides)
	if err := c.Validate(); err != nil || len(fileProblems) > 0 {
		// Every problem at once: the file's unknown keys and wrong types,
		// and the bad values Validate finds, but not in a section where
		// a wrong type (or a section that is not a table) left a default
		// in place of the file's value: Validate would blame that
		// default on the file, alone ("region.url: required" for
		// url = 5) or through the rules between the section's keys
		// (pair's three keys together). An unknown key sets nothing,
		// so its section's values are checked as the file has them.
		var vps Problems
		if err != nil && !errors.As(err, &vps) {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, p := range vps {
			switch {
			case p.Key != "region.url" || !errors.Is(p.Err, ErrRequired):
			case rackErr != nil:
				p.Err = fmt.Errorf("not set, and %w", rackErr)
			case !c.HasRegion():
				// No region at all, and no rack to take one from:
				// not configured yet, rather than configured wrong.
				p.Err = &noRegionError{p.Err}
			}
		}
		// A value the validation refuses is the override's when one set
		// its key; the file's own problems (unknown keys, wrong types)
		// are the file's, whatever the overrides say.
		all := append(Problems(nil), fileProblems...)
		var bad Problems
		for _, p := range vps {
			if !slices.ContainsFunc(fileProblems, func(f *KeyError) bool {
				return !errors.Is(f, ErrUnknownKey) && section(f.Key) == section(p.Key)
			}) {
				p.Line = lines[p.Key]
				bad = append(bad, p)
			}
		}
		fromOverrides(bad, overrides)
		return nil, fmt.Errorf("%s: %w", name, append(all, bad...))
	}
	secret := func(key string, err error) error {
		ke := &KeyError{Key: key, Err: &SecretFileError{err}, Line: lines[key]}
		return fmt.Errorf("%s: %w", name, fromOverrides(Problems{ke}, overrides))
	}
	if c.Release.TokenFile != "" {
		if _, err := ReadReleaseToken(c.Release.TokenFile); err != nil {
			return nil, secret("release.token_file", err)
		}
	}
	if c.MAAS.APIKeyFile != "" {
		if _, err := ReadMAASKey(c.MAAS.APIKeyFile); err != nil {
			return nil, secret("maas.api_key_file", err)
		}
	}
	if c.Pair.KeyFile != "" {
		if _, err := ReadPairKey(c.Pair.KeyFile); err != nil {
			return nil, secret("pair.key_file", err)
		}
	}
	return c, nil
}

// HasRegion reports whether the configuration names any region: url or
// other_urls (a MAAS rack's, once ParseOn has applied it).
func (c *Config) HasRegion() bool { return c.Region.URL != "" || len(c.Region.OtherURLs) > 0 }

// SocketGroup is a group the agent gives one of its sockets, and the
// key that names it.
type SocketGroup struct{ Key, Group string }

// SocketGroups are the groups the agent gives its sockets
// (control.group, hook.socket_group), those set only.
func (c *Config) SocketGroups() []SocketGroup {
	var out []SocketGroup
	for _, g := range []SocketGroup{{"control.group", c.Control.Group}, {"hook.socket_group", c.Hook.SocketGroup}} {
		if g.Group != "" {
			out = append(out, g)
		}
	}
	return out
}

// ErrNoRegion is wrapped by region.url's problem when the configuration
// names no region at all (neither url nor other_urls) and no MAAS rack
// gives one: an agent installed and not configured yet, which the agent
// command tells apart from a configuration in error (its exit status 79).
var ErrNoRegion = errors.New("no region at all")

// noRegionError is ErrRequired's problem for region.url that is also
// ErrNoRegion.
type noRegionError struct{ err error }

func (e *noRegionError) Error() string { return e.err.Error() }
func (e *noRegionError) Unwrap() []error {
	return []error{e.err, ErrNoRegion}
}

// SecretFileError is a secret file the configuration names (a token, an
// API key, the pair's key) that cannot be used: missing, unreadable, too
// open or malformed. Unlike the configuration's own text, such a file
// may be put right without touching the configuration (copied to the
// second rack after the first start), so the agent's exit status for it
// is the one a restart may mend.
type SecretFileError struct{ Err error }

func (e *SecretFileError) Error() string { return e.Err.Error() }
func (e *SecretFileError) Unwrap() error { return e.Err }

// MaxFileSize bounds a configuration file (Decode); the shipped one,
// comments and all, is about 14 KiB.
const MaxFileSize = 1 << 20

// Decode reads a TOML file over the defaults without validating the
// values' meaning: it fails on syntax errors, unknown sections and keys and
// values of the wrong type. Use it for reading a file that may be
// incomplete (leasekeeper status only wants metrics.listen); Parse for
// running with it.
//
// The TOML library converts each key's value into its field (decodeKey),
// one key at a time: decoding into the whole struct would stop at the
// first wrong type and match names regardless of case ("[Region]").
func Decode(r io.Reader, name string) (*Config, error) {
	c, ps, _, err := decode(r, name)
	if err != nil {
		return nil, err
	}
	if len(ps) > 0 {
		return nil, fmt.Errorf("%s: %w", name, ps)
	}
	return c, nil
}

// DecodePartial is Decode that keeps what it could read: c holds the
// file's value of every key that is right (the defaults elsewhere) and
// problems what is wrong (nil when nothing is); err is a file that
// cannot be read as TOML at all. The operator commands use it to reach
// an agent still running on the file it read before an edit that broke
// the file (its reload refused it).
func DecodePartial(r io.Reader, name string) (c *Config, problems, err error) {
	return DecodePartialOn(nil, r, name)
}

// DecodePartialOn is DecodePartial on a host with a MAAS rack (nil:
// none), whose values the groups the file leaves unset take (ParseOn).
func DecodePartialOn(rack *MAASRack, r io.Reader, name string) (c *Config, problems, err error) {
	c, ps, lines, err := decode(r, name)
	if err != nil {
		return nil, nil, err
	}
	c.applyRack(rack, lines, nil)
	if len(ps) > 0 {
		return c, fmt.Errorf("%s: %w", name, ps), nil
	}
	return c, nil, nil
}

// applyRack gives c the values of rack (nil: none) for each group of
// RackGroups whose keys neither the file (lines: the keys it has) nor an
// override sets, and records which (Rack, RackKeys). A region.url or
// other_urls set empty is no region: the shipped file's url = "" leaves
// the region to the rack. It returns why the region group, left to the
// rack, got no value.
func (c *Config) applyRack(rack *MAASRack, lines map[string]int, overrides []string) error {
	if rack == nil {
		return nil
	}
	empty := map[string]bool{"region.url": c.Region.URL == "", "region.other_urls": len(c.Region.OtherURLs) == 0}
	set := func(key string) bool {
		if empty[key] {
			return false
		}
		if _, ok := lines[key]; ok {
			return true
		}
		return slices.ContainsFunc(overrides, func(o string) bool { return overrideKey(o) == key })
	}
	keys, err := rack.apply(c, set)
	c.Rack, c.RackKeys = rack, keys
	return err
}

// section is a key's section: "region" for "region.url" and "region".
func section(key string) string {
	s, _, _ := strings.Cut(key, ".")
	return s
}

// decode is Decode, returning the problems of the file's keys apart from
// the configuration, which holds the defaults where they are, and the
// line of each key's value in the file ("section.key" and sections;
// problems found later are told with it): err is a file that cannot be
// read as TOML at all.
func decode(r io.Reader, name string) (*Config, Problems, map[string]int, error) {
	// Read whole first, and no more than a configuration can be: a
	// device or a wrong path (/dev/zero, a log) given as the file is
	// refused, not read until memory runs out.
	b, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > MaxFileSize {
		return nil, nil, nil, fmt.Errorf("%s: larger than %d KiB: not a leasekeeper configuration", name, MaxFileSize>>10)
	}
	var file map[string]toml.Primitive
	md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(&file)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, nil, nil, fmt.Errorf("%s:%d: %s%s", name, pe.Position.Line, pe.Message, bareWordHint(b, pe.Position.Line))
		}
		return nil, nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	c := Default()
	var ps Problems
	lines := map[string]int{}
	bad := func(key string, err error) { ps = append(ps, &KeyError{Key: key, Err: err, Line: lines[key]}) }
	sections := map[string]map[string]toml.Primitive{}
	skip := map[string]bool{} // sections and keys already reported, to skip their children
	for _, k := range md.Keys() {
		sec := k[0]
		if skip[sec] {
			continue
		}
		keys, seen := sections[sec]
		if !seen { // first met as [sec], or as sec.key = … before any [sec]
			lines[sec] = lineOf(&md, file[sec])
			if !slices.Contains(names(""), sec) {
				bad(sec, unknownErr(sec, "sections", names("")))
				skip[sec] = true
				continue
			}
			// A table made by a dotted key alone has no type. (The library
			// decodes a string into a map without complaint: check first.)
			if t := md.Type(sec); (t != "Hash" && t != "") || md.PrimitiveDecode(file[sec], &keys) != nil {
				bad(sec, fmt.Errorf("is a section; write it as [%s]", sec))
				skip[sec] = true
				continue
			}
			sections[sec] = keys
		}
		if len(k) == 1 || skip[sec+"."+k[1]] {
			continue // the section itself, or a deeper key of a value already handled
		}
		// A deeper key met first ([region.tls], or tls.verify = … in
		// [region]) stands for its section.key, as a table.
		key := sec + "." + k[1]
		skip[key] = true
		lines[key] = lineOf(&md, keys[k[1]]) // 0 for a table a dotted key made (tls.verify = …)
		if f, ok := c.field(key); !ok {
			bad(key, unknownErr(k[1], "keys of ["+sec+"]", names(sec)))
		} else if err := decodeKey(&md, k[1], keys[k[1]], f, b); err != nil {
			bad(key, err)
		}
	}
	if len(c.Region.OtherURLs) == 0 {
		c.Region.OtherURLs = nil // "other_urls = []" is the default's none
	}
	return c, ps, lines, nil
}

// ErrUnknownKey is wrapped by the error for a section or key the agent
// does not know.
var ErrUnknownKey = errors.New("unknown key")

// KeyError is a problem with one key ("section.key", or a section name).
type KeyError struct {
	Key string
	Err error
	// Line is the line of the key's value in the file, or of the
	// section's header; 0 when the value is not the file's (a default,
	// an override).
	Line int
}

func (e *KeyError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %v", e.Line, e.Key, e.Err)
	}
	return e.Key + ": " + e.Err.Error()
}
func (e *KeyError) Unwrap() error { return e.Err }

// fromOverrides names, in err's problems, the override that set each key
// it set (the last one of that key): its value is not in the file, where
// an operator would look for it (--set, or --log-level: "log.level=…").
func fromOverrides(err error, overrides []string) error {
	var ps Problems
	if len(overrides) == 0 || !errors.As(err, &ps) {
		return err
	}
	set := map[string]string{}
	for _, o := range overrides {
		set[overrideKey(o)] = o
	}
	for _, p := range ps {
		if o, ok := set[p.Key]; ok {
			p.Key += " (from the command line: " + o + ")"
			p.Line = 0
		}
	}
	return err
}

// Problems is every problem found in one file or set of overrides.
type Problems []*KeyError

func (ps Problems) Error() string {
	if len(ps) == 1 {
		return ps[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(ps))
	for _, p := range ps {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As see each problem.
func (ps Problems) Unwrap() []error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errs
}

func asKeyError(err error) *KeyError {
	var ke *KeyError
	if errors.As(err, &ke) {
		return ke
	}
	return &KeyError{Key: "?", Err: err}
}

// Keys returns every key of the file as "section.key", in file order.
func Keys() []string {
	var keys []string
	for _, f := range Default().fields() {
		keys = append(keys, f.key)
	}
	return keys
}

// Set sets one key from its command-line form: strings as they are,
// durations in Go syntax ("30s"), integers in decimal, lists
// comma-separated ("0,108"; "https://r1:5242/…,https://r2:5242/…"), with
// or without brackets, or for a list of strings a TOML array
// (["https://r1:5242/…", "https://r2:5242/…"], whose items may hold
// commas); "" and "[]" are the empty list. It checks the value's form
// only; call Validate when done.
func (c *Config) Set(key, value string) error {
	f, ok := c.field(key)
	if !ok {
		if best := nearMiss(key, Keys()); best != "" {
			return &KeyError{Key: key, Err: fmt.Errorf("%w (did you mean %q?)", ErrUnknownKey, best)}
		}
		return &KeyError{Key: key, Err: fmt.Errorf("%w (leasekeeper agent --print-reference shows every key)", ErrUnknownKey)}
	}
	if err := setString(f, value); err != nil {
		return &KeyError{Key: key, Err: err}
	}
	return nil
}

// Override applies one "section.key=value" string, as --set gives it.
func (c *Config) Override(kv string) error {
	_, value, ok := strings.Cut(kv, "=")
	if !ok {
		return &KeyError{Key: kv, Err: errors.New(`want section.key=value`)}
	}
	return c.Set(overrideKey(kv), value)
}

// overrideKey is the "section.key" an override ("section.key=value") sets.
func overrideKey(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return strings.TrimSpace(k)
}

// Diff returns the keys whose values differ between c and d, in file
// order: what a reload changed.
func Diff(c, d *Config) []string {
	var keys []string
	df := d.fields()
	for i, f := range c.fields() {
		if !reflect.DeepEqual(f.v.Interface(), df[i].v.Interface()) {
			keys = append(keys, f.key)
		}
	}
	return keys
}

// WriteTOML writes c as a config file that Parse reads back to c.
func (c *Config) WriteTOML(w io.Writer) error {
	prev := ""
	for _, f := range c.fields() {
		sec, name, _ := strings.Cut(f.key, ".")
		if sec != prev {
			if prev != "" {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "[%s]\n", sec)
			prev = sec
		}
		v := fmt.Sprint(f.v.Interface()) // a duration as 1m30s
		switch {
		case f.v.Kind() == reflect.String || f.v.Type() == durationType:
			v = tomlQuote(v)
		case f.v.Kind() == reflect.Slice:
			items := make([]string, f.v.Len())
			for i := range items {
				e := f.v.Index(i)
				if items[i] = fmt.Sprint(e.Interface()); e.Kind() == reflect.String {
					items[i] = tomlQuote(items[i])
				}
			}
			v = "[" + strings.Join(items, ", ") + "]"
		}
		if _, err := fmt.Fprintf(w, "%s = %s\n", name, v); err != nil {
			return err
		}
	}
	return nil
}

// tomlQuote writes s as a TOML basic string: Go's quoting escapes some
// characters as TOML does not (\a, \v, \xNN), which no TOML reader
// takes back.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// keyField is one key of the file and the field of a Config it sets.
type keyField struct {
	key string // "section.key"
	v   reflect.Value
}

// fields returns every key of c with its settable field, in file order.
func (c *Config) fields() []keyField {
	var fs []keyField
	cv := reflect.ValueOf(c).Elem()
	for i := range cv.NumField() {
		if tagName(cv.Type().Field(i)) == "-" {
			continue // not a section of the file
		}
		sec := cv.Field(i)
		for j := range sec.NumField() {
			key := tagName(cv.Type().Field(i)) + "." + tagName(sec.Type().Field(j))
			fs = append(fs, keyField{key, sec.Field(j)})
		}
	}
	return fs
}

// field returns the settable field of "section.key".
func (c *Config) field(key string) (reflect.Value, bool) {
	for _, f := range c.fields() {
		if f.key == key {
			return f.v, true
		}
	}
	return reflect.Value{}, false
}

// names returns the names of the sections (sec "") or of one section's
// keys, in file order.
func names(sec string) []string {
	var ns []string
	for _, k := range Keys() {
		s, name, _ := strings.Cut(k, ".")
		if sec == "" && !slices.Contains(ns, s) {
			ns = append(ns, s)
		} else if sec != "" && s == sec {
			ns = append(ns, name)
		}
	}
	return ns
}

func tagName(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
	return name
}

var durationType = reflect.TypeFor[time.Duration]()

// decodeKey sets f, the field of the key name, from its TOML value p,
// converted by the TOML library; but a duration must be a string, read as
// --set reads it: the library would take an integer as nanoseconds
// (expiry_grace = 30 would be 30ns). file is the file's text, for showing
// a wrong value as written.
func decodeKey(md *toml.MetaData, name string, p toml.Primitive, f reflect.Value, file []byte) error {
	if f.Type() == durationType {
		var s string
		if md.PrimitiveDecode(p, &s) != nil {
			return wrongType(md, name, p, f.Type(), file)
		}
		return setString(f, s)
	}
	if md.PrimitiveDecode(p, f.Addr().Interface()) != nil {
		return wrongType(md, name, p, f.Type(), file)
	}
	if f.Kind() == reflect.Slice && f.Len() == 0 {
		f.SetZero() // [] is nil, like the default
	}
	return nil
}

// wrongType says that the value p of the key name is not of type t,
// showing it as written.
func wrongType(md *toml.MetaData, name string, p toml.Primitive, t reflect.Type, file []byte) error {
	var v any
	md.PrimitiveDecode(p, &v)
	switch {
	case t == durationType:
		return fmt.Errorf("%s is not a duration: write it as a string such as \"30s\"", tomlValue(v))
	case t.Kind() == reflect.String:
		return fmt.Errorf("%s is not a string", tomlValue(v))
	case t.Kind() == reflect.Int:
		// TOML reads 1e3 and 1000.0 as floats, which the library does
		// not convert to an integer even when whole: say what to write
		// (shown as decoded, 1e3 would read "1000 is not an integer").
		if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			w := asWritten(md, p, file)
			if w == "" {
				w = strconv.FormatFloat(f, 'f', 1, 64)
			}
			return fmt.Errorf("%s is a float, not an integer: write %d", w, int64(f))
		}
		return fmt.Errorf("%s is not an integer", tomlValue(v))
	}
	if t.Kind() != reflect.Slice {
		return fmt.Errorf("%s is not a %s", tomlValue(v), t)
	}
	// A list: say of what, and which item is not one.
	var what string
	var is func(any) bool
	switch t.Elem().Kind() {
	case reflect.Int:
		what, is = "a list of integers", func(x any) bool { _, ok := x.(int64); return ok }
	case reflect.String:
		what, is = "a list of strings", func(x any) bool { _, ok := x.(string); return ok }
		if s, ok := v.(string); ok { // one URL where a list of them goes
			return fmt.Errorf("%s is not %s: write it as a list: %s = [%s]", tomlValue(v), what, name, tomlQuote(s))
		}
	default:
		return fmt.Errorf("%s is not a list of %s", tomlValue(v), t.Elem())
	}
	list, _ := v.([]any)
	for _, x := range list {
		if !is(x) {
			return fmt.Errorf("%s is not %s (%s)", tomlValue(v), what, tomlValue(x))
		}
	}
	return fmt.Errorf("%s is not %s", tomlValue(v), what)
}

// position returns where p's value is in the file, or false when the
// TOML library does not say. The library gives a value's position only in
// its own errors: decoding into an Unmarshaler that always fails makes it
// report one.
func position(md *toml.MetaData, p toml.Primitive) (toml.Position, bool) {
	var pe toml.ParseError
	if !errors.As(md.PrimitiveDecode(p, &positionOnly{}), &pe) {
		return toml.Position{}, false
	}
	return pe.Position, true
}

// lineOf returns the line of p's value in the file, or 0 when the TOML
// library does not say.
func lineOf(md *toml.MetaData, p toml.Primitive) int {
	pos, _ := position(md, p)
	return pos.Line
}

// asWritten returns the text of p's value as the file spells it ("1e3",
// "1_000.0"), or "" when the TOML library does not say where it is.
func asWritten(md *toml.MetaData, p toml.Primitive, file []byte) string {
	pos, ok := position(md, p)
	if !ok {
		return ""
	}
	start, n := pos.Start, pos.Len
	if start < 0 || n <= 0 || start+n > len(file) {
		return ""
	}
	return string(file[start : start+n])
}

// positionOnly is the Unmarshaler asWritten decodes into.
type positionOnly struct{}

func (positionOnly) UnmarshalTOML(any) error { return errors.New("position only") }

// setString sets f from its command-line form.
func setString(f reflect.Value, s string) error {
	switch {
	case f.Type() == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a duration (Go syntax: \"10s\", \"1m30s\", \"500ms\")", s)
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(s)
	case f.Kind() == reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			if f, ferr := strconv.ParseFloat(strings.TrimSpace(s), 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
				return fmt.Errorf("%q is not an integer: write %d", s, int64(f))
			}
			return fmt.Errorf("%q is not an integer", s)
		}
		f.SetInt(int64(n))
	case f.Type() == reflect.TypeFor[[]int]():
		var ns []int
		for _, p := range commaItems(s) {
			n, err := strconv.Atoi(p)
			if err != nil {
				return fmt.Errorf("%q is not a comma-separated list of integers", s)
			}
			ns = append(ns, n)
		}
		f.Set(reflect.ValueOf(ns))
	case f.Type() == reflect.TypeFor[[]string]():
		items, err := stringList(s)
		if err != nil {
			return err
		}
		f.Set(reflect.ValueOf(items))
	default:
		// A field type added to Config without a form here: the
		// caller's error names the key; the file can still set it.
		return fmt.Errorf("cannot be set from the command line (a %s): set it in the file", f.Type())
	}
	return nil
}

// stringList reads a list of strings from its command-line form (Set):
// a TOML array when it holds a quote, else comma-separated values with
// or without brackets, as a list of integers is written, whose empty
// items are dropped as there; nil is the empty list.
func stringList(s string) ([]string, error) {
	t := strings.TrimSpace(s)
	if strings.ContainsAny(t, `"'`) {
		if !strings.HasPrefix(t, "[") {
			t = "[" + t + "]" // "a", "b": the array's brackets left out
		}
		var v struct {
			V []string `toml:"v"`
		}
		md, err := toml.Decode("v = "+t, &v)
		if err != nil || len(md.Undecoded()) > 0 {
			return nil, fmt.Errorf(`%q is not a list of strings: write a TOML array (["a", "b"]) or comma-separated values (a,b)`, s)
		}
		if len(v.V) == 0 {
			return nil, nil
		}
		return v.V, nil
	}
	return commaItems(t), nil
}

// bareWord is a key set to a word without quotes: level = info.
var bareWord = regexp.MustCompile(`^\s*([A-Za-z0-9_-]+)\s*=\s*([A-Za-z_][A-Za-z0-9_.:/@-]*)\s*(#.*)?$`)

// bareWordHint is what to say of a parse error at line n (from 1) of b
// where that line sets a key to a word without quotes: the TOML parser's
// own message for level = info is about a newline it expected after
// "inf" (a cold review).
func bareWordHint(b []byte, n int) string {
	lines := strings.Split(string(b), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	m := bareWord.FindStringSubmatch(lines[n-1])
	if m == nil || m[2] == "true" || m[2] == "false" {
		return ""
	}
	return fmt.Sprintf(" (a string takes quotes: %s = %q)", m[1], m[2])
}

// commaItems is a list's comma-separated command-line form (Set), with
// or without brackets, as its items, trimmed; empty items are dropped.
func commaItems(s string) []string {
	t := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
	var items []string
	for p := range strings.SplitSeq(t, ",") {
		if p = strings.TrimSpace(p); p != "" {
			items = append(items, p)
		}
	}
	return items
}

// tomlValue shows a decoded value the way it was written.
func tomlValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case []any:
		s := make([]string, len(x))
		for i, e := range x {
			s[i] = tomlValue(e)
		}
		return "[" + strings.Join(s, ", ") + "]"
	default:
		return fmt.Sprint(x)
	}
}

// unknownErr says a name is unknown, suggesting a near miss among known.
func unknownErr(name, what string, known []string) error {
	if best := nearMiss(name, known); best != "" {
		return fmt.Errorf("%w (did you mean %q?)", ErrUnknownKey, best)
	}
	slices.Sort(known)
	return fmt.Errorf("%w (%s: %s)", ErrUnknownKey, what, strings.Join(known, ", "))
}

// nearMiss is the name of known closest to name, within two edits, or "".
func nearMiss(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of two short ASCII names.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
