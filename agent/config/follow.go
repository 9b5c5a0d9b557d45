package config

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/safefile"
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
// exist: the certificates in use are followed by content as the files
// keys name). dhcpd -6's leases file changes at every lease, so only its
// existence is followed.
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
					add(filepath.Join(d, f), false)
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
	// What stat said: the content is read again only when it changed,
	// or when it may have changed unseen (sure).
	dev, ino, size, mtime, ctime int64
	// The content: its SHA-256 (of the first maxFollowed bytes), or, for
	// a file the agent may stat but not read (a key systemd hands over
	// with LoadCredential=), or that is no regular file, what stat said
	// instead.
	sum [sha256.Size]byte
	// read is when the content was read.
	read time.Time
}

// racyWindow: a file whose last change (ctime) was this close to when
// its content was read, or after it, is read again at the next look even
// if stat says the same: a write in the same tick of the kernel's clock
// as the read leaves mtime and ctime as they were (file systems without
// fine-grained timestamps stamp a tick of 1 to 4 ms; git's "racily
// clean" index entries are the same problem).
const racyWindow = time.Second

// sure reports whether the content p read is still the file's, stat
// saying the same as st: its last change well before the read.
func (p fileState) sure(st fileState) bool {
	return p.content && p.exists && p.dev == st.dev && p.ino == st.ino && p.size == st.size &&
		p.mtime == st.mtime && p.ctime == st.ctime && p.read.Sub(time.Unix(0, p.ctime)) >= racyWindow
}

// maxFollowed bounds what Look reads of a file: the files followed are a
// few kilobytes.
const maxFollowed = 1 << 20

// Look says what each source is now (now is the clock's time). A file
// whose stat is what it was in prev, and that had not changed for a
// while when prev read it (racyWindow), is not read again.
func Look(prev Files, srcs []Source, now time.Time) Files {
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
			if p, ok := prev[s.Path]; ok && p.sure(st) {
				st.sum, st.read = p.sum, p.read
			} else {
				st.sum, st.read = sumOf(s.Path, st), now
			}
		}
		out[s.Path] = st
	}
	return out
}

// sumOf is the content's SHA-256, or for a file that cannot be read, or
// is no regular file, its stat's. It opens as safefile does: a FIFO does
// not block it, a terminal does not become the agent's.
func sumOf(path string, st fileState) [sha256.Size]byte {
	h := sha256.New()
	f, err := safefile.Open(path, safefile.FollowLinks)
	if err == nil {
		_, err = io.Copy(h, io.LimitReader(f, maxFollowed))
		f.Close()
	}
	if err != nil {
		h.Reset()
		h.Write([]byte("unreadable\x00"))
		binary.Write(h, binary.LittleEndian, [...]int64{st.dev, st.ino, st.size, st.mtime, st.ctime}) //nolint:errcheck // a hash takes every write
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
		// A source followed by content only since b (a certificate
		// set now in use) has no sum in a to compare.
		if okA && okB && (x.exists != y.exists || s.Content && x.content && y.content && x.sum != y.sum) {
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
	// Start is the files as they were when the configuration was read
	// (Look, right after); nil: as Run first finds them.
	Start Files
}

// settleMax bounds how many looks a change waits to stop changing.
const settleMax = 5

// Run follows the files until ctx ends, then returns ctx's error.
func (w Watcher) Run(ctx context.Context, changed chan<- []string) error {
	if w.Interval <= 0 {
		return errors.New("config: Watcher.Interval must be positive")
	}
	// The files' times are the kernel's wall clock: so is Look's.
	start := w.Start
	if start == nil {
		start = Look(nil, w.Sources(), time.Now())
	}
	f := newFollowing(start)
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		srcs := w.Sources()
		if paths := f.step(Look(f.last, srcs, time.Now()), srcs); len(paths) > 0 {
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
	paths := Changed(f.base, now, srcs)
	switch {
	case len(paths) == 0:
		// Nothing changed, or it changed back: new sources join.
		f.base, f.waited = now, 0
	case f.waited > 0 && len(Changed(f.last, now, srcs)) == 0 || f.waited >= settleMax:
		f.base, f.waited = now, 0
		return paths
	default:
		f.waited++
	}
	return nil
}
