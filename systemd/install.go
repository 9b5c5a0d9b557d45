package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
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
	Enabled bool     // an enable link exists (offline) or was requested (live)
	Started bool     // the unit was started (live only)
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
	dir := in.UnitDir
	if dir == "" {
		dir = DefaultUnitDir
	}
	if path.IsAbs(dir) {
		return res, fmt.Errorf("unit dir %q: must be relative to the root", dir)
	}
	root, err := os.OpenRoot(in.Root)
	if err != nil {
		return res, fmt.Errorf("root: %w", err)
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

// writeUnit writes text to name atomically (temporary file, rename),
// unless the file already holds it. It refuses to replace a file without
// our marker unless force is set.
func writeUnit(root *os.Root, name string, text []byte, force bool) (bool, error) {
	old, err := root.ReadFile(name)
	switch {
	case err == nil:
		if bytes.Equal(old, text) {
			return false, nil
		}
		if !writtenByUs(old) && !force {
			return false, fmt.Errorf("/%s: %w", name, ErrForeignUnit)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return false, fmt.Errorf("read /%s: %w", name, err)
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
	got, err := root.Readlink(link)
	switch {
	case err == nil:
		if got == target {
			return false, nil
		}
		return false, fmt.Errorf("/%s exists and points at %s, not %s; remove it first", link, got, target)
	case errors.Is(err, fs.ErrNotExist):
	default:
		return false, fmt.Errorf("/%s: %w", link, err)
	}
	if err := root.MkdirAll(path.Dir(link), 0o755); err != nil {
		return false, fmt.Errorf("create /%s: %w", path.Dir(link), err)
	}
	if err := root.Symlink(target, link); err != nil {
		return false, fmt.Errorf("enable: %w", err)
	}
	return true, nil
}

func linkPointsAt(root *os.Root, link, target string) bool {
	got, err := root.Readlink(link)
	return err == nil && got == target
}
