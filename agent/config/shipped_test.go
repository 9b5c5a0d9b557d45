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
// shipped it means the same as an empty file and the agent refuses it until
// the region is set. Each commented-out block of it ("#[section]" and the
// "#key = value" lines after it), uncommented, is a valid setting whose
// values are the ones the reference file documents.
func TestConffile(t *testing.T) {
	b, c := readDefaults(t, conffile)
	needsRegionOnly(t, c, conffile)
	ref, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	docs := keyDocs(string(ref))

	var blocks [][]string
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "#["):
			blocks = append(blocks, []string{l[1:]})
		case strings.HasPrefix(l, "#") && strings.Contains(l, " = ") && !strings.HasPrefix(l, "# "):
			if len(blocks) == 0 {
				t.Errorf("%s:%d: %q is under no commented-out [section]", conffile, i+1, l)
				continue
			}
			blocks[len(blocks)-1] = append(blocks[len(blocks)-1], l[1:])
		default:
			if len(blocks) > 0 && len(blocks[len(blocks)-1]) == 1 {
				t.Errorf("%s: commented-out %s sets nothing", conffile, blocks[len(blocks)-1][0])
			}
		}
	}
	if len(blocks) != 2 {
		t.Errorf("%s: %d commented-out blocks, want 2 (MAAS deb and snap)", conffile, len(blocks))
	}
	for _, blk := range blocks {
		text := string(b) + "\n" + strings.Join(blk, "\n") + "\n"
		got, err := Decode(strings.NewReader(text), conffile)
		if err != nil {
			t.Errorf("%s uncommented: %v", blk[0], err)
			continue
		}
		if cmp.Equal(Default(), got) {
			t.Errorf("%s uncommented changes nothing", blk[0])
		}
		section := strings.Trim(blk[0], "[]")
		for _, kv := range blk[1:] {
			k, v, _ := strings.Cut(kv, " = ")
			if !strings.Contains(docs[section+"."+k], v) {
				t.Errorf("%s: %s: value %s is not one %s documents for %s.%s", conffile, kv, v, shipped, section, k)
			}
		}
	}
}

// keyDocs maps each key of a documented TOML file ("section.key") to the
// comment above it.
func keyDocs(doc string) map[string]string {
	out := map[string]string{}
	section, comment := "", ""
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(l, "["):
			section, comment = strings.Trim(l, "[]"), ""
		case strings.HasPrefix(l, "#"):
			comment += l + "\n"
		case strings.Contains(l, " = "):
			k, _, _ := strings.Cut(l, " = ")
			out[section+"."+k] = comment
			comment = ""
		default:
			comment = ""
		}
	}
	return out
}
