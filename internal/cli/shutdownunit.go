package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/systemd"
)

// binaryCandidates are where leasekeeper is looked for inside a rootfs,
// in order, when --binary is not given.
var binaryCandidates = []string{
	"/usr/sbin/leasekeeper",
	"/usr/local/sbin/leasekeeper",
	"/usr/bin/leasekeeper",
	"/usr/local/bin/leasekeeper",
}

// copiedBinary is where --copy-binary puts leasekeeper inside a rootfs.
const copiedBinary = "/usr/local/sbin/leasekeeper"

// installTimeout bounds the D-Bus calls on a running system.
const installTimeout = 60 * time.Second

func newInstallShutdownUnitCmd(env *Env) *cobra.Command {
	var (
		root, binary, socket string
		noEnable, force      bool
		copyBinary           bool
		releaseTimeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "install-shutdown-unit [--root DIR] [--no-enable] [--binary PATH] [--force]",
		Short: "Install the unit that releases this machine's DHCP leases at clean shutdown",
		Long: `Install ` + systemd.ShutdownUnitName + `, a oneshot unit that does nothing at
start and runs "leasekeeper release" when it is stopped. It is ordered
after the network services (systemd-networkd, NetworkManager, ifupdown's
networking, network-online.target), so at shutdown systemd stops it —
releasing the leases — before the network goes down.

On a running system (no --root) the unit is written to
/etc/systemd/system, then systemd is asked over D-Bus to reload, enable
and start it (start matters: only a started unit is stopped at this
boot's shutdown). It talks to systemd's private socket, so no dbus-daemon
is needed.

With --root DIR the unit is installed into a container rootfs or a
mounted image: the unit file and the multi-user.target.wants symlink are
written directly, nothing is started, D-Bus is not used. Every path is
resolved inside DIR; a symlink leading out of it is an error.

leasekeeper itself must be on the target: --binary names its path there
(default: this executable on a running system; with --root the first of
` + fmt.Sprint(binaryCandidates) + ` that exists in DIR).
--copy-binary copies this executable to ` + copiedBinary + ` in DIR first.

Running it again changes nothing. A unit file of the same name that
install-shutdown-unit did not write is refused unless --force. With
--no-enable the unit is written but not enabled; an existing enable link
is left in place.`,
		Example: `  # on a node, e.g. from cloud-init runcmd:
  leasekeeper install-shutdown-unit

  # into a container image's rootfs, copying the binary in:
  leasekeeper install-shutdown-unit --root /var/lib/machines/web1 --copy-binary`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := systemd.Installer{
				Root:   "/",
				Enable: !noEnable,
				Force:  force,
			}
			if cmd.Flags().Changed("release-timeout") && releaseTimeout <= 0 {
				return usageError{fmt.Errorf("--release-timeout %v: must be positive (leave it out for release's own)", releaseTimeout)}
			}
			if releaseTimeout > 0 {
				in.Unit.ReleaseArgs = []string{"--timeout=" + releaseTimeout.String()}
				in.Unit.StopTimeout = releaseTimeout + 10*time.Second
			}
			out := cmd.OutOrStdout()
			var err error
			if root != "" {
				in.Root = root
				if copyBinary {
					if binary != "" && binary != copiedBinary {
						return usageError{errors.New("--copy-binary installs to " + copiedBinary + "; do not combine it with another --binary")}
					}
					if err := copySelf(root, copiedBinary); err != nil {
						return err
					}
					fmt.Fprintf(out, "copied leasekeeper to %s in %s\n", copiedBinary, root)
					binary = copiedBinary
				}
				if binary == "" {
					if binary, err = findBinaryIn(root); err != nil {
						return err
					}
				}
			} else {
				if copyBinary {
					return usageError{errors.New("--copy-binary needs --root")}
				}
				if binary == "" {
					if binary, err = selfPath(); err != nil {
						return err
					}
				}
			}
			in.Unit.Binary = binary
			if err := in.Unit.Validate(); err != nil {
				return usageError{err}
			}

			ctx, cancel := context.WithTimeout(cmd.Context(), installTimeout)
			defer cancel()
			if root == "" {
				mgr, err := systemd.DialManager(ctx, socket)
				if err != nil {
					return err
				}
				defer mgr.Close()
				in.Manager = mgr
			}
			res, err := in.Install(ctx)
			reportInstall(out, root, res, in)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", "", "install into this root file system (container rootfs, image) instead of the running system")
	f.BoolVar(&noEnable, "no-enable", false, "write the unit but do not enable (or start) it")
	f.BoolVar(&force, "force", false, "replace a unit file of the same name that leasekeeper did not write")
	f.StringVar(&binary, "binary", "", "path of leasekeeper on the target machine, for ExecStop")
	f.BoolVar(&copyBinary, "copy-binary", false, "with --root: copy this executable into the root at "+copiedBinary)
	f.DurationVar(&releaseTimeout, "release-timeout", 0, "passed to release as --timeout (default: release's own); the unit's stop timeout is 10s more")
	f.StringVar(&socket, "systemd-socket", "", "systemd's private D-Bus socket (default "+systemd.PrivateSocket+", else the system bus)")
	_ = f.MarkHidden("systemd-socket")
	return cmd
}

func reportInstall(out io.Writer, root string, res systemd.InstallResult, in systemd.Installer) {
	if res.Path == "" {
		return
	}
	where := ""
	if root != "" {
		where = " in " + root
	}
	if res.Written {
		fmt.Fprintf(out, "wrote %s%s (ExecStop: %s release)\n", res.Path, where, in.Unit.Binary)
	} else {
		fmt.Fprintf(out, "%s%s is up to date\n", res.Path, where)
	}
	for _, l := range res.Links {
		fmt.Fprintf(out, "enabled: %s\n", l)
	}
	switch {
	case !in.Enable && res.Enabled:
		fmt.Fprintln(out, "not enabling (--no-enable); it was already enabled and stays so")
	case !in.Enable:
		fmt.Fprintln(out, "not enabled (--no-enable)")
	case res.Enabled && len(res.Links) == 0:
		fmt.Fprintln(out, "already enabled")
	}
	if res.Started {
		fmt.Fprintf(out, "started %s: its stop at shutdown releases the leases\n", systemd.ShutdownUnitName)
	} else if root != "" && res.Enabled {
		fmt.Fprintln(out, "it starts at the root's next boot")
	}
}

func selfPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot tell where this leasekeeper is (use --binary): %w", err)
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p, nil
}

func findBinaryIn(root string) (string, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("root: %w", err)
	}
	defer r.Close()
	for _, c := range binaryCandidates {
		if fi, err := r.Stat(c[1:]); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("leasekeeper is not installed in %s (looked for %v): install it there, use --copy-binary, or name its path with --binary", root, binaryCandidates)
}

// copySelf copies the running executable into root at dst (inside root).
func copySelf(root, dst string) error {
	self, err := selfPath()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	defer r.Close()
	rel := dst[1:]
	if err := r.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return fmt.Errorf("create %s in %s: %w", path.Dir(dst), root, err)
	}
	tmp := rel + ".leasekeeper-tmp"
	if err := r.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("copy to %s in %s: %w", dst, root, err)
	}
	// O_EXCL: a symlink planted at the temporary name is not followed.
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return fmt.Errorf("copy to %s in %s: %w", dst, root, err)
	}
	_, err = io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Chmod(tmp, 0o755)
	}
	if err == nil {
		err = r.Rename(tmp, rel)
	}
	if err != nil {
		_ = r.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%s exists: %w", dst, err)
		}
		return fmt.Errorf("copy to %s in %s: %w", dst, root, err)
	}
	return nil
}
