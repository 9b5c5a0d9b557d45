package config

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

const shipped = "../../packaging/leasekeeper.toml"

// TestShippedConfig keeps packaging/leasekeeper.toml honest: it sets every
// key of Config (so every key is documented there), each to its default,
// and each key is preceded by a comment.
func TestShippedConfig(t *testing.T) {
	b, c := readDefaults(t, shipped)

	var raw map[string]any
	md, err := toml.Decode(string(b), &raw)
	if err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	for _, k := range md.Keys() {
		if len(k) == 2 {
			inFile[k[0]+"."+k[1]] = true
		}
	}
	for _, k := range Keys() {
		if !inFile[k] {
			t.Errorf("%s: key of Config missing from %s", k, shipped)
		}
	}

	// Every key line follows a comment line or another key line of the same
	// group (cert_file and key_file share one comment).
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") {
			continue
		}
		prev := lines[i-1]
		if !strings.HasPrefix(prev, "#") && (prev == "" || strings.HasPrefix(prev, "[")) {
			t.Errorf("%s:%d: %q has no comment above it", shipped, i+1, l)
		}
	}

	// As shipped the agent refuses to start until the region is set; on a
	// MAAS rack the address is all there is to set.
	needsRegionOnly(t, c, shipped)
}

// readDefaults reads a shipped configuration file and checks that it
// decodes to the defaults.
func readDefaults(t *testing.T, path string) ([]byte, *Config) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(strings.NewReader(string(b)), path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), c); diff != "" {
		t.Errorf("%s: values differ from Default() (-default +file):\n%s", path, diff)
	}
	return b, c
}

// needsRegionOnly checks that c is refused for want of a region, and
// accepted with one.
func needsRegionOnly(t *testing.T, c *Config, path string) {
	t.Helper()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "region.url: required") {
		t.Errorf("%s validates without a region: %v", path, err)
	}
	if err := c.Override("region.url=https://region.example:5242/MAAS/a/v3internal/leases"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("%s with a region: %v", path, err)
	}
}

const conffile = "../../packaging/etc/leasekeeper/leasekeeper.toml"

// TestConffile keeps the package's /etc/leasekeeper/leasekeeper.toml (a
// conffile: kept short so that upgrades rarely ask about it) honest. As
// shipped it means the same as an empty file: the agent refuses it until
// the region is set, and on a MAAS rack every group of RackGroups takes
// the rack's values (its url = "" is no region).
func TestConffile(t *testing.T) {
	b, c := readDefaults(t, conffile)
	needsRegionOnly(t, c, conffile)
	rack := &MAASRack{Kind: "deb", RegionURLs: []string{"https://r:5242/MAAS/a/v3internal/leases"},
		DHCPD: DHCPD{Leases: "/var/lib/maas/dhcp/dhcpd.leases"}, CertFile: "/c", KeyFile: "/k", CAFile: "/a"}
	got, err := ParseOn(rack, bytes.NewReader(b), conffile)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat(RackGroups...); !slices.Equal(got.RackKeys, want) {
		t.Errorf("on a MAAS rack it leaves the rack %q, want %q", got.RackKeys, want)
	}
}
