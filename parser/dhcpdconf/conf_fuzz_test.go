package dhcpdconf

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasekeeper/leasekeeper/parser"
)

// confFuzzOuter names the file that wraps a fuzz input in an include; the
// input itself is read as confFuzzMain either way.
const (
	confFuzzBase  = "/fuzz"
	confFuzzMain  = "main.conf"
	confFuzzOuter = ".outer-7f3a.conf"
)

// confFuzzFiles are the includes a fuzz input may name.
var confFuzzFiles = map[string]string{
	"r.conf":    "range 203.0.113.50 203.0.113.60;\n",
	"r6.conf":   "range6 2001:db8::50 2001:db8::60;\n",
	"host.conf": "host inc { hardware ethernet 1:2:3:4:5:6; fixed-address 203.0.113.9; }\n",
	"sub.conf":  "subnet 203.0.113.0 netmask 255.255.255.0 { range 203.0.113.1; }\n",
	"loop.conf": "include \"loop.conf\";\n",
	"bad.conf":  "}\n",
}

// FuzzParseConfig checks, beyond "no panic":
//   - every Range is well formed: valid ends of its family with
//     First <= Last, inside its subnet where dhcpd requires it, in a
//     subnet that was declared, naming a declared failover peer;
//   - the same input with CRLF line ends gives the same result;
//   - the same input read through an include gives the same result, and
//     its error is the direct error behind the include's position.
func FuzzParseConfig(f *testing.F) {
	fixtures, _ := filepath.Glob(filepath.Join("testdata", "conf", "*.conf"))
	incs, _ := filepath.Glob(filepath.Join("testdata", "conf", "inc", "*.conf"))
	for _, file := range append(fixtures, incs...) {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, tc := range append(append([]confCase{}, confValidCases...), confErrorCases...) {
		f.Add([]byte(tc.src))
	}
	f.Add([]byte(`subnet 203.0.113.0 netmask 255.255.255.0 { include "r.conf"; pool { include "host.conf"; range 203.0.113.2; } }`))
	f.Add([]byte(`subnet6 2001:db8::/64 { include "r6.conf"; } include "sub.conf"; include "loop.conf";`))

	f.Fuzz(func(t *testing.T, src []byte) {
		files := make(map[string]string, len(confFuzzFiles)+2)
		for k, v := range confFuzzFiles {
			files[k] = v
		}
		files[confFuzzMain] = string(src)
		files[confFuzzOuter] = `include "` + confFuzzMain + `";` + "\n"
		parse := func(name string, b []byte) (*Config, error) {
			return Parse(bytes.NewReader(b), Options{
				BaseDir: confFuzzBase,
				Open:    confOpenMap(confFuzzBase, files),
				Name:    filepath.Join(confFuzzBase, name),
			})
		}

		cfg, err := parse(confFuzzMain, src)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Config returned with error %v", err)
			}
		} else {
			confCheckConfig(t, cfg)
		}

		if !bytes.Contains(src, []byte("\r")) {
			crlf, crlfErr := parse(confFuzzMain, bytes.ReplaceAll(src, []byte("\n"), []byte("\r\n")))
			confSameResult(t, "CRLF", cfg, err, crlf, crlfErr, "")
		}

		if !bytes.Contains(src, []byte(confFuzzOuter)) {
			outer, outerErr := parse(confFuzzOuter, []byte(files[confFuzzOuter]))
			prefix := filepath.Join(confFuzzBase, confFuzzOuter) + `:1: include "` + confFuzzMain + `": `
			confSameResult(t, "through an include", cfg, err, outer, outerErr, prefix)
		}
	})
}

func confSameResult(t *testing.T, how string, want *Config, wantErr error, got *Config, gotErr error, errPrefix string) {
	t.Helper()
	switch {
	case (wantErr == nil) != (gotErr == nil):
		t.Fatalf("%s: error %v, want %v", how, gotErr, wantErr)
	case wantErr != nil:
		if gotErr.Error() != errPrefix+wantErr.Error() {
			t.Fatalf("%s: error\n%q, want\n%q", how, gotErr, errPrefix+wantErr.Error())
		}
	default:
		if diff := cmp.Diff(want, got, confCmpOpts); diff != "" {
			t.Fatalf("%s: Config differs (-direct +%s):\n%s", how, how, diff)
		}
	}
}

func confCheckConfig(t *testing.T, cfg *Config) {
	t.Helper()
	subnets := make(map[netip.Prefix]bool)
	for _, s := range cfg.Subnets {
		if !s.Prefix.IsValid() || s.Prefix.Masked() != s.Prefix {
			t.Fatalf("subnet %v: not a masked prefix", s.Prefix)
		}
		subnets[s.Prefix] = true
	}
	peers := make(map[string]bool)
	for _, p := range cfg.FailoverPeers {
		if peers[p.Name] {
			t.Fatalf("failover peer %q declared twice", p.Name)
		}
		peers[p.Name] = true
		if p.Role != "" && p.Role != "primary" && p.Role != "secondary" {
			t.Fatalf("failover peer %q: role %q", p.Name, p.Role)
		}
	}
	for _, r := range cfg.Ranges {
		fam := r.First.Is4()
		if !r.First.IsValid() || !r.Last.IsValid() || r.Last.Less(r.First) {
			t.Fatalf("range %+v: bad bounds", r)
		}
		if r.First.Is4() != r.Last.Is4() || (r.Family == parser.IPv4) != fam || (r.Family == parser.IPv6) == fam ||
			r.Subnet.Addr().Is4() != fam {
			t.Fatalf("range %+v: mixed families", r)
		}
		if !subnets[r.Subnet] {
			t.Fatalf("range %+v: subnet not declared", r)
		}
		switch r.Kind {
		case RangeKindRange, RangeKindRange6Prefix:
			// dhcpd checks both ends, except for "range6 LOW temporary",
			// a /64 it does not confine to the subnet6.
			lastIn := r.Subnet.Contains(r.Last) || (r.Temporary && r.Subnet.Bits() > 64)
			if !r.Subnet.Contains(r.First) || !lastIn || r.PrefixLen != 0 {
				t.Fatalf("range %+v: not inside its subnet", r)
			}
			if r.Kind == RangeKindRange6Prefix && r.Family != parser.IPv6 {
				t.Fatalf("range %+v: range6 prefix not IPv6", r)
			}
		case RangeKindPrefix6:
			for _, a := range []netip.Addr{r.First, r.Last} {
				if p := netip.PrefixFrom(a, r.PrefixLen); r.PrefixLen < 1 || r.PrefixLen > 127 || p.Masked() != p {
					t.Fatalf("range %+v: prefix6 bound not aligned", r)
				}
			}
		default:
			t.Fatalf("range %+v: kind", r)
		}
		if r.Failover != "" && !peers[r.Failover] {
			t.Fatalf("range %+v: undeclared failover peer", r)
		}
		if r.Pool < 0 || (r.Family == parser.IPv4 && r.Temporary) || (r.Family == parser.IPv6 && r.DynamicBootp) {
			t.Fatalf("range %+v: flags", r)
		}
	}
	for _, h := range cfg.Hosts {
		if h.Name == "" {
			t.Fatalf("host without a name: %+v", h)
		}
	}
	if _, err := json.Marshal(cfg); err != nil {
		t.Fatalf("json: %v", err)
	}
}
