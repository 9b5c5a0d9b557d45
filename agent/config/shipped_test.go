package config

import (
	"os"
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
	b, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(strings.NewReader(string(b)), shipped)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), c); diff != "" {
		t.Errorf("shipped values differ from Default() (-default +shipped):\n%s", diff)
	}

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

	// As shipped the agent refuses to start until the region is set.
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "region.url: required") {
		t.Errorf("shipped config validates without a region: %v", err)
	}
	// On a MAAS rack the address is all there is to set.
	for _, kv := range []string{"region.url=https://region.example:5242/MAAS/a/v3internal/leases"} {
		if err := c.Override(kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Validate(); err != nil {
		t.Errorf("shipped config with a region: %v", err)
	}
}
