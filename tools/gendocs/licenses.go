package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unicode"
)

// thirdPartyLicenses returns the license texts of every module linked into
// the binaries (their build information lists them) and of the Go
// standard library, each under a header naming the module and version.
// A module without a license file in the module cache is an error: the
// package must not ship code whose license it cannot show.
func thirdPartyLicenses(bins []string, getenv func(string) string) ([]byte, error) {
	modcache := getenv("GOMODCACHE")
	if modcache == "" {
		out, err := exec.Command(goCmd(getenv), "env", "GOMODCACHE").Output()
		if err != nil {
			return nil, fmt.Errorf("go env GOMODCACHE: %w", err)
		}
		modcache = strings.TrimSpace(string(out))
	}
	type mod struct{ path, version string }
	seen := map[mod]bool{}
	var goVersion string
	for _, bin := range bins {
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		goVersion = bi.GoVersion
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			seen[mod{d.Path, d.Version}] = true
		}
	}
	mods := make([]mod, 0, len(seen))
	for m := range seen {
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].path < mods[j].path })

	var b bytes.Buffer
	b.WriteString("The leasekeeper binaries are statically linked with the following Go\nmodules and the Go standard library. Their licenses follow.\n")
	goroot := getenv("GOROOT")
	if goroot == "" {
		goroot = runtime.GOROOT()
	}
	if err := appendLicense(&b, "Go standard library "+goVersion, goroot); err != nil {
		return nil, err
	}
	for _, m := range mods {
		dir := filepath.Join(modcache, escapeModulePath(m.path)+"@"+m.version)
		if err := appendLicense(&b, m.path+" "+m.version, dir); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// appendLicense appends the license files (LICENSE*, COPYING*, NOTICE*)
// at the top of dir.
func appendLicense(b *bytes.Buffer, name, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	found := false
	for _, e := range entries {
		upper := strings.ToUpper(e.Name())
		if e.IsDir() || !(strings.HasPrefix(upper, "LICENSE") || strings.HasPrefix(upper, "LICENCE") ||
			strings.HasPrefix(upper, "COPYING") || strings.HasPrefix(upper, "NOTICE")) {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "\n%s\n%s (%s)\n%s\n\n", strings.Repeat("=", 72), name, e.Name(), strings.Repeat("=", 72))
		b.Write(bytes.TrimRight(text, "\n"))
		b.WriteByte('\n')
		found = true
	}
	if !found {
		return fmt.Errorf("%s: no license file in %s", name, dir)
	}
	return nil
}

// escapeModulePath is the module cache's spelling of a module path: each
// upper-case letter becomes '!' and its lower-case form.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func goCmd(getenv func(string) string) string {
	if g := getenv("GO"); g != "" {
		return g
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}
