package cli

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
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
		copyBinary, atReboot bool
		releaseTimeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "install-shutdown-unit [--root DIR] [--no-enable] [--binary PATH] [--force] [--at-reboot]",
		Short: "Install the unit that releases this machine's DHCP leases at clean shutdown",
		Long: `Install ` + systemd.ShutdownUnitName + `, a oneshot unit that does nothing at
start and runs "leasekeeper release" when it is stopped. It is ordered
after network.target and the network services (systemd-networkd,
NetworkManager, ifupdown's networking, dhcpcd), so at shutdown systemd stops it —
releasing the leases — before the network goes down, and before
network-online.target, so that what runs once the network is online
(remote file systems, container runtimes) has stopped by then. It does
not wait for network-online.target at boot. A stop that is no shutdown (systemctl
stop, isolate) releases nothing, and neither does a reboot, unless
--at-reboot: the machine comes back and asks for its addresses again.

On a running system (no --root) the unit is written to
/etc/systemd/system, then systemd is asked over D-Bus to reload, enable
and start it (start matters: only a started unit is stopped at this
boot's shutdown). It talks to systemd's private socket, so no dbus-daemon
is needed.

With --root DIR the unit is installed into a container rootfs or a
mounted image: the unit file and the multi-user.target.wants symlink are
written directly, nothing is started, D-Bus is not used. Every path is
resolved inside DIR; a symlink leading out of it is an error. An empty
--root (an unset variable) is a usage error, not the running system.

leasekeeper itself must be on the target: --binary names its path there
(default: this executable on a running system; with --root the first of
` + fmt.Sprint(binaryCandidates) + ` that exists in DIR).
--copy-binary copies this executable to ` + copiedBinary + ` in DIR first.
The binary must be an executable regular file (with --root: in DIR,
its symbolic links followed as DIR's own system will follow them), else
nothing is installed: the unit's ExecStop would fail unseen at every
shutdown. On a running system a binary under /tmp, /var/tmp, /run or
/dev/shm, or this executable deleted or replaced since it started, is
warned about.

Running it again changes nothing. A unit file of the same name that
install-shutdown-unit did not write is refused unless --force; a refusal
is found before anything is copied or written. With --no-enable the unit
is written but not enabled; an existing enable link is left in place,
and the enable state is reported as systemd has it.

Exit status: 0 when the unit is in place (written, or already up to
date), 1 when it is not (a refusal, a --root with no systemd in it,
--copy-binary into a root whose systemd is built for another machine, a
--binary that is not an executable file, a file that cannot be written,
systemd refusing to enable it), 2 on
a usage error (an empty --root).`,
		Example: `  # on a node (from cloud-init, use the script part
  # packaging/cloud-init/leasekeeper-node.sh, not runcmd: a user-data
  # runcmd replaces MAAS's own)
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
			if cmd.Flags().Changed("root") && root == "" {
				// An unset $ROOT in a script: installing on the
				// running system instead would be a surprise.
				return usageError{errors.New("--root is empty: name the root file system (leave --root out for the running system)")}
			}
			if cmd.Flags().Changed("release-timeout") && releaseTimeout <= 0 {
				return usageError{fmt.Errorf("--release-timeout %v: must be positive (leave it out for release's own)", releaseTimeout)}
			}
			if releaseTimeout > 0 {
				in.Unit.ReleaseArgs = []string{"--timeout=" + releaseTimeout.String()}
				in.Unit.StopTimeout = releaseTimeout + 10*time.Second
			}
			if atReboot {
				in.Unit.ReleaseArgs = append(in.Unit.ReleaseArgs, "--at-reboot")
			}
			if root == "" {
				return installLive(cmd, env, in, binary, copyBinary, socket)
			}
			return installInRoot(cmd, in, root, binary, copyBinary)
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", "", "install into this root file system (container rootfs, image) instead of the running system")
	f.BoolVar(&noEnable, "no-enable", false, "write the unit but do not enable (or start) it")
	f.BoolVar(&force, "force", false, "replace a unit file of the same name that leasekeeper did not write")
	f.StringVar(&binary, "binary", "", "path of leasekeeper on the target machine, for ExecStop")
	f.BoolVar(&copyBinary, "copy-binary", false, "with --root: copy this executable into the root at "+copiedBinary)
	f.BoolVar(&atReboot, "at-reboot", false, "release at a reboot too (passed to release; by default a rebooting machine keeps its addresses)")
	f.DurationVar(&releaseTimeout, "release-timeout", 0, "passed to release as --timeout (default: release's own); the unit's stop timeout is 10s more")
	f.StringVar(&socket, "systemd-socket", "", "systemd's private D-Bus socket (default "+systemd.PrivateSocket+", else the system bus)")
	_ = f.MarkHidden("systemd-socket")
	return cmd
}

// installInRoot installs the unit into the root file system root.
func installInRoot(cmd *cobra.Command, in systemd.Installer, root, binary string, copyBinary bool) (err error) {
	out := cmd.OutOrStdout()
	in.Root = root
	if copyBinary {
		if binary != "" && binary != copiedBinary {
			return usageError{errors.New("--copy-binary installs to " + copiedBinary + "; do not combine it with another --binary")}
		}
		binary = copiedBinary
	}
	if binary != "" {
		in.Unit.Binary = binary
		if err := in.Unit.Validate(); err != nil {
			return usageError{err}
		}
	}
	// Whatever would make the install refuse is found before the
	// binary is copied in (19 MB, and left behind otherwise).
	systemdAt, err := checkSystemdIn(root)
	if err != nil {
		return err
	}
	if copyBinary {
		if err := checkMachineIn(root, systemdAt); err != nil {
			return err
		}
	}
	if err := in.Check(); err != nil {
		return err
	}
	var res systemd.InstallResult
	if copyBinary {
		var created bool
		if created, err = copySelf(root, copiedBinary); err != nil {
			return err
		}
		if created {
			// A failure from here on (the root changed since Check)
			// takes the copy away again, unless the unit written now
			// names it. One that replaced an earlier copy stays: a
			// unit written before may name it.
			defer func() {
				if err != nil && !res.Written {
					removeIn(root, copiedBinary)
				}
			}()
		}
		fmt.Fprintf(out, "copied leasekeeper to %s in %s\n", copiedBinary, root)
	}
	if binary == "" {
		if binary, err = findBinaryIn(root); err != nil {
			return err
		}
		in.Unit.Binary = binary
	}
	if err := checkBinaryIn(root, binary); err != nil {
		return err
	}
	res, err = in.Install(cmd.Context())
	reportInstall(out, root, res, in, err)
	return err
}

// installLive installs the unit on the running system, over D-Bus.
func installLive(cmd *cobra.Command, env *Env, in systemd.Installer, binary string, copyBinary bool, socket string) error {
	if copyBinary {
		return usageError{errors.New("--copy-binary needs --root")}
	}
	self, err := selfPath()
	if binary == "" {
		if err != nil {
			return err
		}
		binary = self
	}
	in.Unit.Binary = binary
	if err := in.Unit.Validate(); err != nil {
		return usageError{err}
	}
	if err := checkBinary(binary); err != nil {
		return err
	}
	for _, w := range binaryWarnings(binary, self, "/proc/self/exe") {
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: %s\n", w)
	}

	ctx, cancel := context.WithTimeout(cmd.Context(), installTimeout)
	defer cancel()
	mgr, err := systemd.DialManager(ctx, socket)
	if err != nil {
		return fmt.Errorf("%w (is systemd running? for an image or a container's rootfs use --root)", err)
	}
	defer mgr.Close()
	in.Manager = mgr
	res, err := in.Install(ctx)
	reportInstall(cmd.OutOrStdout(), "", res, in, err)
	return err
}

// reportInstall says what Install did. After an error it says only what
// was done (written, linked, started), nothing about a state it did not
// reach.
func reportInstall(out io.Writer, root string, res systemd.InstallResult, in systemd.Installer, err error) {
	if res.Path == "" {
		return
	}
	where := ""
	if root != "" {
		where = " in " + root
	}
	switch {
	case res.Written:
		fmt.Fprintf(out, "wrote %s%s (ExecStop: %s release)\n", res.Path, where, in.Unit.Binary)
	case err == nil:
		fmt.Fprintf(out, "%s%s is up to date\n", res.Path, where)
	}
	for _, l := range res.Links {
		fmt.Fprintf(out, "enabled: %s\n", l)
	}
	if res.Started {
		fmt.Fprintf(out, "started %s: its stop at shutdown releases the leases\n", systemd.ShutdownUnitName)
	}
	if err != nil {
		return
	}
	live := root == ""
	switch {
	case !in.Enable && live && res.EnableState == "":
		fmt.Fprintln(out, "not enabling (--no-enable); its enable state is left as it was")
	case !in.Enable && res.Enabled:
		fmt.Fprintln(out, "not enabling (--no-enable); it was already enabled and stays so")
	case !in.Enable && live:
		fmt.Fprintf(out, "not enabled (--no-enable; systemd reports it %s)\n", res.EnableState)
	case !in.Enable:
		fmt.Fprintln(out, "not enabled (--no-enable)")
	case res.Enabled && len(res.Links) == 0:
		fmt.Fprintln(out, "already enabled")
	}
	if !live && res.Enabled {
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
		if fi, err := statInRoot(r, c); err == nil && executable(fi) == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("leasekeeper is not installed in %s (looked for %v): install it there, use --copy-binary, or name its path with --binary", root, binaryCandidates)
}

// systemdPaths are where a root file system's systemd lies (merged /usr,
// or /lib its own).
var systemdPaths = []string{"usr/lib/systemd/systemd", "lib/systemd/systemd"}

// checkSystemdIn refuses a root with no systemd in it: a path given
// wrong, an image not mounted there yet (the files would be hidden under
// it), a system that boots without systemd. The unit would never run,
// and nothing would say so (a cold review: it installed into an empty
// directory and reported success).
func checkSystemdIn(root string) (systemdAt string, err error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("root: %w", err)
	}
	defer r.Close()
	for _, p := range systemdPaths {
		if fi, err := statInRoot(r, p); err == nil && executable(fi) == nil {
			return "/" + p, nil
		}
	}
	return "", fmt.Errorf("--root %s has no systemd (neither /%s nor /%s in it): the unit would never run there; name the root file system of a systemd system, mounted", root, systemdPaths[0], systemdPaths[1])
}

// checkMachineIn refuses to copy this executable into a root whose
// systemd (at systemdAt) is built for another machine (an arm64 image
// made on an amd64 host): the copy would not run there, at every
// shutdown, silently (a cold review). A systemd or an executable that
// is not ELF is not compared.
func checkMachineIn(root, systemdAt string) error {
	self, err := selfPath()
	if err != nil {
		return err
	}
	me, err := elf.Open(self)
	if err != nil {
		return nil
	}
	defer me.Close()
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	defer r.Close()
	rel, err := resolveInRoot(r, systemdAt)
	if err != nil {
		return nil
	}
	f, err := r.Open(rel)
	if err != nil {
		return nil
	}
	defer f.Close()
	theirs, err := elf.NewFile(f)
	if err != nil {
		return nil
	}
	if theirs.Machine != me.Machine || theirs.Class != me.Class {
		return fmt.Errorf("--copy-binary: this leasekeeper is built for %s (%s), and %s in %s for %s (%s): the copy would not run there; copy a leasekeeper built for that machine into the root and name it with --binary",
			me.Machine, me.Class, systemdAt, root, theirs.Machine, theirs.Class)
	}
	return nil
}

// checkBinaryIn refuses a unit whose ExecStop names no executable file
// in root: the "-" on ExecStop would hide the failure at every shutdown.
// The path is resolved as the root's own system will resolve it.
func checkBinaryIn(root, binary string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	defer r.Close()
	fi, err := statInRoot(r, binary)
	if err == nil {
		err = executable(fi)
	}
	if err != nil {
		return fmt.Errorf("--binary %s in %s: %w; the unit would release nothing at shutdown, silently (install leasekeeper there, use --copy-binary, or name its path in the root with --binary)", binary, root, unwrapPath(err))
	}
	return nil
}

// checkBinary is checkBinaryIn for the running system.
func checkBinary(binary string) error {
	fi, err := os.Stat(binary)
	if err == nil {
		err = executable(fi)
	}
	if err != nil {
		return fmt.Errorf("--binary %s: %w; the unit would release nothing at shutdown, silently", binary, unwrapPath(err))
	}
	return nil
}

// executable refuses what ExecStop cannot run.
func executable(fi fs.FileInfo) error {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("not executable (mode %04o)", fi.Mode().Perm())
	}
	return nil
}

// unwrapPath drops a PathError's operation and path: the caller names
// the path as the user wrote it.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, fs.ErrNotExist) {
			return errors.New("no such file")
		}
		return pe.Err
	}
	return err
}

// volatileDirs are cleaned at boot or by tmpfiles, or are memory: a
// binary there is gone by some later shutdown.
var volatileDirs = []string{"/tmp", "/var/tmp", "/run", "/dev/shm"}

// binaryWarnings are what is odd, not wrong, about a live install's
// binary: a place it will not stay in, or (when it is this executable,
// self) a file deleted or replaced since this process started, as
// procExe (/proc/self/exe) shows.
func binaryWarnings(binary, self, procExe string) []string {
	var out []string
	paths := []string{binary}
	if r, err := filepath.EvalSymlinks(binary); err == nil && r != binary {
		paths = append(paths, r)
	}
	for _, p := range paths {
		for _, d := range volatileDirs {
			if strings.HasPrefix(p, d+"/") {
				out = append(out, fmt.Sprintf("the unit runs %s, which is under %s: once it is removed (a reboot, a tmp cleaner) the unit releases nothing and its failure is not shown; install leasekeeper to a lasting place (e.g. %s) and name it with --binary", binary, d, copiedBinary))
				return out
			}
		}
	}
	if binary == self {
		if l, err := os.Readlink(procExe); err == nil && strings.HasSuffix(l, " (deleted)") {
			out = append(out, fmt.Sprintf("this leasekeeper's executable was deleted or replaced since it started: the unit runs whatever is at %s at shutdown", binary))
		}
	}
	return out
}

// statInRoot is Stat of the absolute path p as a system running in r
// resolves it: symbolic links are followed, an absolute one from r's
// top, and ".." stops there. (os.Root refuses absolute links, which
// images have: /usr/sbin/leasekeeper -> /opt/leasekeeper/leasekeeper.)
func statInRoot(r *os.Root, p string) (fs.FileInfo, error) {
	rel, err := resolveInRoot(r, p)
	if err != nil {
		return nil, err
	}
	return r.Lstat(rel)
}

// resolveInRoot is the path, relative to r and with no link in it, that
// the absolute path p names as a system running in r resolves it
// (statInRoot).
func resolveInRoot(r *os.Root, p string) (string, error) {
	const maxLinks = 40 // the kernel's limit
	todo := strings.Split(p, "/")
	done, links := ".", 0 // done: resolved so far, no links in it
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, c)
		fi, err := r.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", &fs.PathError{Op: "stat", Path: p, Err: syscall.ELOOP}
		}
		target, err := r.Readlink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			done = "."
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
}

// removeIn removes name (absolute, inside root), ignoring errors: it
// undoes a copy on the way out of a failure already reported.
func removeIn(root, name string) {
	if r, err := os.OpenRoot(root); err == nil {
		_ = r.Remove(name[1:])
		r.Close()
	}
}

// copySelf copies the running executable into root at dst (inside
// root). created reports that nothing was at dst before.
func copySelf(root, dst string) (created bool, err error) {
	self, err := selfPath()
	if err != nil {
		return false, err
	}
	src, err := os.Open(self)
	if err != nil {
		return false, err
	}
	defer src.Close()
	r, err := os.OpenRoot(root)
	if err != nil {
		return false, fmt.Errorf("root: %w", err)
	}
	defer r.Close()
	rel := dst[1:]
	if _, err := r.Lstat(rel); errors.Is(err, fs.ErrNotExist) {
		created = true
	}
	if err := r.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return false, fmt.Errorf("create %s in %s: %w", path.Dir(dst), root, err)
	}
	tmp := rel + ".leasekeeper-tmp"
	if err := r.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("copy to %s in %s: %w", dst, root, err)
	}
	// O_EXCL: a symlink planted at the temporary name is not followed.
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return false, fmt.Errorf("copy to %s in %s: %w", dst, root, err)
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
		return false, fmt.Errorf("copy to %s in %s: %w", dst, root, err)
	}
	return created, nil
}
