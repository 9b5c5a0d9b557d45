package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// Manager is what installing needs of a running systemd: the live half of
// install-shutdown-unit. DBusManager is the real one.
type Manager interface {
	// Reload makes the manager re-read unit files (daemon-reload).
	Reload(ctx context.Context) error
	// Enable enables a unit file by name, returning the links it made.
	Enable(ctx context.Context, name string) ([]string, error)
	// Start starts a unit and waits for its job to finish.
	Start(ctx context.Context, name string) error
	// UnitFileState is the unit file's enablement as systemctl
	// is-enabled prints it: "enabled", "disabled", …
	UnitFileState(ctx context.Context, name string) (string, error)
}

// DefaultUnitDir is where administrators' units live, relative to the root.
const DefaultUnitDir = "etc/systemd/system"

// wantedBy is the target the shutdown unit is enabled for.
const wantedBy = "multi-user.target"

// Installer writes the clean-shutdown unit into a root file system and
// enables it: offline (a container rootfs or image: the wants symlink is
// made directly) or, with a Manager, on the running system (daemon-reload,
// enable and start over D-Bus, so it also stops at this boot's shutdown).
//
// Every path is resolved inside Root: a rootfs whose symlinks point
// outside it makes Install fail rather than write on the host.
type Installer struct {
	Root    string // file system root; "/" for the running system
	UnitDir string // relative to Root; DefaultUnitDir when empty
	Unit    ShutdownUnit
	Enable  bool // enable (and, with a Manager, start) the unit
	Force   bool // overwrite a unit file this package did not write
	Manager Manager
}

// InstallResult says what Install did; every field describes the state
// after it, whether or not this run changed it.
type InstallResult struct {
	Path    string   // the unit file, as seen from inside the root
	Written bool     // false when the file already had this content
	Links   []string // enable links made by this run
	// Enabled: offline, an enable link exists; live, the unit was
	// enabled by this run or (without Enable) the manager reports it
	// enabled.
	Enabled bool
	// EnableState is, live without Enable, the unit file's state as the
	// manager reports it ("enabled", "disabled", …): the state left as
	// it was. "" otherwise, or when the manager could not say.
	EnableState string
	Started     bool // the unit was started (live only)
}

// ErrForeignUnit is returned when a unit file of the same name exists and
// was not written by install-shutdown-unit.
var ErrForeignUnit = errors.New("a unit file of that name exists and was not written by leasekeeper (use --force to replace it)")

// Install writes the unit and enables it as configured. Running it again
// with the same settings changes nothing.
func (in Installer) Install(ctx context.Context) (InstallResult, error) {
	var res InstallResult
	text, err := in.Unit.Render()
	if err != nil {
		return res, err
	}
	root, dir, err := in.open()
	if err != nil {
		return res, err
	}
	defer root.Close()

	name := path.Join(dir, ShutdownUnitName)
	res.Path = "/" + name
	res.Written, err = writeUnit(root, name, text, in.Force)
	if err != nil {
		return res, err
	}
	if in.Manager == nil {
		if in.Enable {
			link := path.Join(dir, wantedBy+".wants", ShutdownUnitName)
			made, err := ensureLink(root, link, "/"+name)
			if err != nil {
				return res, err
			}
			if made {
				res.Links = append(res.Links, "/"+link)
			}
		}
		res.Enabled = linkPointsAt(root, path.Join(dir, wantedBy+".wants", ShutdownUnitName), "/"+name)
		return res, nil
	}

	if res.Written {
		if err := in.Manager.Reload(ctx); err != nil {
			return res, fmt.Errorf("daemon-reload: %w", err)
		}
	}
	if !in.Enable {
		// Left as it was: report what that is, not what was asked. Not
		// knowing is no reason to fail an install that is done.
		if st, err := in.Manager.UnitFileState(ctx, ShutdownUnitName); err == nil {
			res.EnableState = st
			res.Enabled = st == "enabled" || st == "enabled-runtime"
		}
		return res, nil
	}
	res.Links, err = in.Manager.Enable(ctx, ShutdownUnitName)
	if err != nil {
		return res, fmt.Errorf("enable %s: %w", ShutdownUnitName, err)
	}
	res.Enabled = true
	if len(res.Links) > 0 {
		// As systemctl enable does: the manager learns of the new
		// dependency.
		if err := in.Manager.Reload(ctx); err != nil {
			return res, fmt.Errorf("daemon-reload after enable: %w", err)
		}
	}
	if err := in.Manager.Start(ctx, ShutdownUnitName); err != nil {
		return res, fmt.Errorf("start %s: %w", ShutdownUnitName, err)
	}
	res.Started = true
	return res, nil
}

// Check reports, writing nothing, what would make Install fail: the root
// cannot be opened, the unit directory cannot be reached inside it (a
// symbolic link leading out, a file in the way) or is on a read-only
// file system, a unit file of that name is foreign and Force is not
// set, or (offline, with Enable) the enable link's place is taken.
// Callers with work of their own to do first (copying the binary into
// the root) call it before, so that a refusal leaves nothing behind.
// The unit's Binary may still be unknown.
func (in Installer) Check() error {
	root, dir, err := in.open()
	if err != nil {
		return err
	}
	defer root.Close()
	// The nearest part of dir that exists must be a directory inside
	// the root, on a writable file system; the rest is made by Install.
	for d := dir; ; d = path.Dir(d) {
		fi, err := root.Stat(d)
		if errors.Is(err, fs.ErrNotExist) && d != "." {
			continue
		}
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err == nil {
			err = writable(root, d)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path.Join("/", d), err)
		}
		break
	}
	// No text to compare with: only whether a file there is ours.
	if _, err := unitUpToDate(root, path.Join(dir, ShutdownUnitName), nil, in.Force); err != nil {
		return err
	}
	if in.Manager == nil && in.Enable {
		_, err = linkState(root, path.Join(dir, wantedBy+".wants", ShutdownUnitName), "/"+path.Join(dir, ShutdownUnitName))
	}
	return err
}

// writable refuses a directory on a read-only mount (where even root
// cannot write).
func writable(root *os.Root, dir string) error {
	f, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		return unix.EROFS
	}
	return nil
}

// open opens the root; it returns the unit directory relative to it.
func (in Installer) open() (root *os.Root, dir string, err error) {
	dir = in.UnitDir
	if dir == "" {
		dir = DefaultUnitDir
	}
	if path.IsAbs(dir) {
		return nil, "", fmt.Errorf("unit dir %q: must be relative to the root", dir)
	}
	root, err = os.OpenRoot(in.Root)
	if err != nil {
		return nil, "", fmt.Errorf("root: %w", err)
	}
	return root, dir, nil
}

// unitUpToDate reports whether name already holds text (nil: never),
// and refuses a file without our marker unless force is set.
func unitUpToDate(root *os.Root, name string, text []byte, force bool) (bool, error) {
	old, err := root.ReadFile(name)
	switch {
	case err == nil:
		if text != nil && bytes.Equal(old, text) {
			return true, nil
		}
		if !writtenByUs(old) && !force {
			return false, fmt.Errorf("/%s: %w", name, ErrForeignUnit)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return false, fmt.Errorf("read /%s: %w", name, err)
	}
	return false, nil
}

// writeUnit writes text to name atomically (temporary file, rename),
// unless the file already holds it. It refuses to replace a file without
// our marker unless force is set.
func writeUnit(root *os.Root, name string, text []byte, force bool) (bool, error) {
	if same, err := unitUpToDate(root, name, text, force); same || err != nil {
		return false, err
	}
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return false, fmt.Errorf("create /%s: %w", path.Dir(name), err)
	}
	tmp := name + ".leasekeeper-tmp"
	if err := writeNew(root, tmp, text); err != nil {
		_ = root.Remove(tmp)
		return false, fmt.Errorf("write /%s: %w", tmp, err)
	}
	// The umask may have taken bits away: make it exactly 0644.
	if err := root.Chmod(tmp, 0o644); err != nil {
		_ = root.Remove(tmp)
		return false, fmt.Errorf("chmod /%s: %w", tmp, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return false, fmt.Errorf("install /%s: %w", name, err)
	}
	return true, nil
}

// writeNew creates name afresh (a leftover, or a symlink planted in its
// place, is removed first and never followed) and writes b to it.
func writeNew(root *os.Root, name string, b []byte) error {
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ensureLink makes link a symlink to target, as systemctl enable does
// (absolute target). An existing link to target is left alone; anything
// else at that path is an error, never replaced.
func ensureLink(root *os.Root, link, target string) (bool, error) {
	if there, err := linkState(root, link, target); there || err != nil {
		return false, err
	}
	if err := root.MkdirAll(path.Dir(link), 0o755); err != nil {
		return false, fmt.Errorf("create /%s: %w", path.Dir(link), err)
	}
	if err := root.Symlink(target, link); err != nil {
		return false, fmt.Errorf("enable: %w", err)
	}
	return true, nil
}

// linkState reports whether link is a symlink to target, and refuses
// anything else at that path.
func linkState(root *os.Root, link, target string) (bool, error) {
	got, err := root.Readlink(link)
	switch {
	case err == nil:
		if got == target {
			return true, nil
		}
		return false, fmt.Errorf("/%s exists and points at %s, not %s; remove it first", link, got, target)
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("/%s: %w", link, err)
}

func linkPointsAt(root *os.Root, link, target string) bool {
	got, err := root.Readlink(link)
	return err == nil && got == target
}
