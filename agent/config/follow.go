package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// A Source is a file a configuration was built from besides its own file:
// its content matters (Content), or only whether it exists.
type Source struct {
	Path    string
	Content bool
}

// Sources is what cfg was built from besides its own file, which the
// running agent follows (Watcher): the files the keys a reload puts in
// force name — the region's CA, certificate, key and token, the release
// token, MAAS's API key and CA — and, on a MAAS rack, what FindMAASRack
// read: rackd.conf and the snap's mode (content), the install's marker,
// every certificate name it looked for and dhcpd -6's files (whether they
// exist; a certificate's content too). dhcpd -6's leases file changes at
// every lease, so only its existence is followed.
func Sources(cfg *Config) []Source {
	var out []Source
	add := func(p string, content bool) {
		if p == "" {
			return
		}
		if i := slices.IndexFunc(out, func(s Source) bool { return s.Path == p }); i >= 0 {
			out[i].Content = out[i].Content || content
			return
		}
		out = append(out, Source{p, content})
	}
	for _, p := range Credentials(cfg) {
		add(p, true)
	}
	if r := cfg.Rack; r != nil {
		add(r.RackdConf, true)
		add(r.layout.modeFile, true)
		add(r.layout.installed, false)
		for _, d := range r.layout.certDirs {
			for _, s := range certSets {
				for _, f := range []string{s.cert, s.key, s.ca} {
					add(filepath.Join(d, f), true)
				}
			}
		}
		add(r.layout.dhcpd.Leases6, false)
		add(r.layout.dhcpd.Config6, false)
	}
	return out
}

// Credentials are the files cfg names under keys a reload puts in force
// (the agent reads them again at a reload): region.ca_file, cert_file,
// key_file and token_file, release.token_file, maas.api_key_file and
// maas.ca_file, those set.
func Credentials(cfg *Config) []string {
	var out []string
	for _, p := range []string{cfg.Region.CAFile, cfg.Region.CertFile, cfg.Region.KeyFile, cfg.Region.TokenFile,
		cfg.Release.TokenFile, cfg.MAAS.APIKeyFile, cfg.MAAS.CAFile} {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Files is what Look saw of each source, by path.
type Files map[string]fileState

type fileState struct {
	content bool
	exists  bool
	// What stat said: the content is read again only when it changed.
	dev, ino, size, mtime, ctime int64
	// The content: its SHA-256 (of the first maxFollowed bytes), or, for
	// a file the agent may stat but not read (a key systemd hands over
	// with LoadCredential=), what stat said instead.
	sum [sha256.Size]byte
}

// maxFollowed bounds what Look reads of a file: the files followed are a
// few kilobytes.
const maxFollowed = 1 << 20

// Look says what each source is now. A file whose stat is what it was in
// prev is not read again.
func Look(prev Files, srcs []Source) Files {
	out := make(Files, len(srcs))
	for _, s := range srcs {
		st := fileState{content: s.Content}
		var fi syscall.Stat_t
		if err := syscall.Stat(s.Path, &fi); err == nil {
			st.exists = true
			st.dev, st.ino, st.size = int64(fi.Dev), int64(fi.Ino), fi.Size
			st.mtime, st.ctime = fi.Mtim.Nano(), fi.Ctim.Nano()
		}
		if st.exists && s.Content {
			if p, ok := prev[s.Path]; ok && p.content && p.exists && p.dev == st.dev && p.ino == st.ino &&
				p.size == st.size && p.mtime == st.mtime && p.ctime == st.ctime {
				st.sum = p.sum
			} else {
				st.sum = sumOf(s.Path, st)
			}
		}
		out[s.Path] = st
	}
	return out
}

// sumOf is the content's SHA-256, or for a file that cannot be read its
// stat's.
func sumOf(path string, st fileState) [sha256.Size]byte {
	h := sha256.New()
	f, err := os.Open(path)
	if err == nil {
		_, err = io.Copy(h, io.LimitReader(f, maxFollowed))
		f.Close()
	}
	if err != nil {
		h.Reset()
		var b [48]byte
		for i, v := range []int64{st.dev, st.ino, st.size, st.mtime, st.ctime} {
			for j := range 8 {
				b[i*8+j] = byte(v >> (8 * j))
			}
		}
		h.Write([]byte("unreadable\x00"))
		h.Write(b[:40])
	}
	var s [sha256.Size]byte
	h.Sum(s[:0])
	return s
}

// Changed is the paths whose file is not what it was, in a's order of
// b's sources: it appeared, went away or (for a content source) holds
// other bytes. A path in only one of them is no change.
func Changed(a, b Files, srcs []Source) []string {
	var out []string
	for _, s := range srcs {
		x, okA := a[s.Path]
		y, okB := b[s.Path]
		if okA && okB && (x.exists != y.exists || s.Content && x.sum != y.sum) {
			out = append(out, s.Path)
		}
	}
	return out
}

// A Watcher follows the files a running configuration was built from
// besides its own (Sources): it looks at them every Interval, and once a
// change has held for a look (a writer of several files, a certificate
// and then its key, is done), sends the paths that changed since the
// last report, or the start, on Run's channel. Sources is asked at every
// look, so that a reloaded configuration's files are followed; a file
// new to the list is taken as it is then. Paths are looked at, not
// watched: a rename onto a file (how MAAS writes rackd.conf and its
// certificates: atomic_write in src/provisioningserver/utils/fs.py), a
// directory that appears later or a symbolic link moved (the snap's
// current) are all seen, and a file that stays the same costs a stat.
type Watcher struct {
	Interval time.Duration
	Sources  func() []Source
}

// settleMax bounds how many looks a change waits to stop changing.
const settleMax = 5

// Run follows the files until ctx ends, then returns ctx's error.
func (w Watcher) Run(ctx context.Context, changed chan<- []string) error {
	if w.Interval <= 0 {
		return errors.New("config: Watcher.Interval must be positive")
	}
	f := newFollowing(Look(nil, w.Sources()))
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		srcs := w.Sources()
		if paths := f.step(Look(f.last, srcs), srcs); len(paths) > 0 {
			select {
			case changed <- paths:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// following is Watcher's state between looks: what was last reported
// (or the start), the latest look, and how many looks a change has
// waited to hold.
type following struct {
	base, last Files
	waited     int
}

func newFollowing(start Files) *following { return &following{base: start, last: start} }

// step takes a look and returns the paths to report: those changed since
// the last report, once the look finds them as the one before did, or
// after settleMax looks of a change that does not hold still.
func (f *following) step(now Files, srcs []Source) []string {
	defer func() { f.last = now }()
	switch {
	case len(Changed(f.base, now, srcs)) == 0:
		// Nothing changed, or it changed back: new sources join.
		f.base, f.waited = now, 0
	case f.waited > 0 && len(Changed(f.last, now, srcs)) == 0 || f.waited >= settleMax:
		paths := Changed(f.base, now, srcs)
		f.base, f.waited = now, 0
		return paths
	default:
		f.waited++
	}
	return nil
}
