package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// DefaultGlobs are where the node's DHCP clients keep their leases.
var DefaultGlobs = []string{
	"/var/lib/dhcp/dhclient*.leases",           // ISC dhclient (Debian, Ubuntu)
	"/var/lib/dhclient/dhclient*.leases",       // ISC dhclient (Red Hat family)
	"/run/systemd/netif/leases/*",              // systemd-networkd, by ifindex
	"/var/lib/NetworkManager/internal-*.lease", // NetworkManager's internal client
	"/var/lib/NetworkManager/dhclient-*.lease", // NetworkManager's dhclient backend
	"/var/lib/dhcpcd/*.lease",                  // dhcpcd (Debian's ifupdown from 13, Arch, Alpine)
	"/var/lib/dhcpcd5/*.lease",                 // dhcpcd 6 as dhcpcd5 (older Raspberry Pi OS)
}

// DefaultDhclientConf is where dhclient reads the client identifier it
// sends.
const DefaultDhclientConf = "/etc/dhcp/dhclient.conf"

// DefaultTimeout bounds a whole run.
const DefaultTimeout = 5 * time.Second

// Options configure Run.
type Options struct {
	Interfaces []string // only these interfaces; all when empty
	// LeaseFiles are read instead of Globs when not empty; their format
	// is detected from their content.
	LeaseFiles []string
	Globs      []string // default DefaultGlobs
	// DhclientConf is the dhclient.conf for dhclient leases: "" for
	// DefaultDhclientConf (or NetworkManager's own, next to its lease
	// files), "-" for none. One named here that is missing is warned
	// about; the default may well be missing.
	DhclientConf string
	DryRun       bool
	// AtShutdown says the machine is shutting down (the shutdown unit's
	// release): the addresses released are about to go, so releasing
	// them while still configured is no cause for a warning.
	AtShutdown bool
	Timeout    time.Duration // default DefaultTimeout
	Now        func() time.Time
	Stdout     io.Writer // the per-interface report
	Stderr     io.Writer // warnings: odd files, addresses released while in use
}

// Result counts what Run did. Released are releases whose leaving the
// node was seen (the next hop's neighbour entry resolved); Unconfirmed
// were sent where nothing could show that (a link without ARP).
type Result struct {
	Actions                                []Action
	Released, Unconfirmed, Skipped, Failed int
}

// ErrFailed is wrapped by Run's error when a release could not be sent
// or a named lease file could not be used.
var ErrFailed = errors.New("release failed")

// ErrNoSuchInterface is wrapped by Run's error when an interface in
// Options.Interfaces does not exist: nothing is done.
var ErrNoSuchInterface = errors.New("no such interface on this node")

// Run finds the node's DHCPv4 leases, sends a DHCPRELEASE for each
// current one (or, with DryRun, prints what it would send) and reports
// per interface. All sends together take at most Timeout. Leases that
// are not released are reported with the reason. Unreadable or odd
// lease files found by the globs are warned about and skipped; named
// ones (LeaseFiles) also make the run fail at the end, after the
// others have been released, and so does a named file that holds no
// lease for the interfaces asked for (or for any it can tell).
// Releasing an address still configured on its interface is warned
// about, unless AtShutdown.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	ifaces, err := localInterfaces()
	if err != nil {
		return Result{}, err
	}
	for _, name := range o.Interfaces {
		if _, ok := ifaces[name]; !ok {
			return Result{}, fmt.Errorf("--interface %s: %w", name, ErrNoSuchInterface)
		}
	}
	sources, looked, bad := o.readSources()
	unmatched := 0 // named files with no lease for the interfaces asked for
	for _, s := range sources {
		if s.Named && len(s.Leases) > 0 && !slices.ContainsFunc(s.Leases, func(l Lease) bool {
			name := leaseIface(s, l)
			return name != "" && (len(o.Interfaces) == 0 || slices.Contains(o.Interfaces, name))
		}) {
			unmatched++
		}
	}
	failures := func() []error {
		var out []error
		if bad > 0 {
			out = append(out, fmt.Errorf("%w: %d named lease file(s) unusable", ErrFailed, bad))
		}
		if unmatched > 0 {
			out = append(out, fmt.Errorf("%w: %d named lease file(s) with no lease for the interface(s) asked for (see the skipped lines)", ErrFailed, unmatched))
		}
		return out
	}

	actions := Plan(sources, ifaces, o.Interfaces, o.Now())
	res := Result{Actions: actions}
	if len(actions) == 0 {
		where := strings.Join(looked, ", ")
		if len(o.Interfaces) > 0 {
			fmt.Fprintf(o.Stdout, "no DHCPv4 leases found for %s (looked in %s)\n", strings.Join(o.Interfaces, ", "), where)
		} else {
			fmt.Fprintf(o.Stdout, "no DHCPv4 leases found (looked in %s)\n", where)
		}
		return res, errors.Join(failures()...)
	}

	errs := make([]error, len(actions))
	sents := make([]Sent, len(actions))
	descs := make([]string, len(actions))
	var wg sync.WaitGroup
	for i, a := range actions {
		if a.Verdict != Release {
			continue
		}
		xid, err := dhcpv4.GenerateTransactionID()
		if err != nil {
			errs[i] = err
			continue
		}
		p, err := Packet(a.Lease, a.MAC, a.ClientID, xid)
		if err != nil {
			errs[i] = err
			continue
		}
		descs[i] = Describe(p)
		if o.DryRun {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sents[i], errs[i] = send(ctx, a, p.ToBytes())
		}()
	}
	wg.Wait()

	for i, a := range actions {
		from := fmt.Sprintf("%s lease in %s", a.Format, a.Source)
		switch {
		case a.Verdict != Release:
			res.Skipped++
			fmt.Fprintf(o.Stdout, "%s: skipped %s: %s (%s)\n", orUnknown(a.Iface), a.Lease.Address, a.Reason, from)
		case errs[i] != nil:
			res.Failed++
			fmt.Fprintf(o.Stdout, "%s: FAILED to release %s to server %s%s: %v (%s)\n", a.Iface, a.Lease.Address, a.Lease.Server, via(sents[i]), errs[i], from)
		case o.DryRun:
			fmt.Fprintf(o.Stdout, "%s: would release %s: %s, from %s:68 to %s:67 (%s)\n", a.Iface, a.Lease.Address, descs[i], a.Lease.Address, a.Lease.Server, from)
		case !sents[i].Confirmed:
			res.Unconfirmed++
			fmt.Fprintf(o.Stdout, "%s: sent, not confirmed: release of %s to server %s%s: %s (%s)\n", a.Iface, a.Lease.Address, a.Lease.Server, via(sents[i]), sents[i].NotConfirmed, from)
		default:
			res.Released++
			fmt.Fprintf(o.Stdout, "%s: released %s to server %s%s (%s)\n", a.Iface, a.Lease.Address, a.Lease.Server, via(sents[i]), from)
		}
	}
	for _, name := range o.Interfaces {
		if !slices.ContainsFunc(actions, func(a Action) bool { return a.Iface == name }) {
			fmt.Fprintf(o.Stdout, "%s: no DHCPv4 lease found\n", name)
		}
	}
	if !o.DryRun && !o.AtShutdown {
		// Plan releases only addresses still configured (a DHCPRELEASE
		// comes from the address it gives back), so on a running node
		// every release gives away an address in use, unless the
		// client removed it since.
		for i, a := range actions {
			if a.Verdict == Release && errs[i] == nil && stillConfigured(a.Iface, a.Lease.Address) {
				fmt.Fprintf(o.Stderr, "leasekeeper: warning: %s is still configured on %s: dhcpd may give it to another client while this node still uses it (remove the address or stop the DHCP client first; at shutdown the shutdown unit runs release at the right time)\n", a.Lease.Address, a.Iface)
			}
		}
	}
	var out []error
	if res.Failed > 0 {
		out = append(out, fmt.Errorf("%w: %d of %d release(s) not sent", ErrFailed, res.Failed, res.Failed+res.Released+res.Unconfirmed))
	}
	return res, errors.Join(append(out, failures()...)...)
}

// stillConfigured reports whether addr is an address of the interface
// name now.
func stillConfigured(name string, addr netip.Addr) bool {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return false
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == addr {
				return true
			}
		}
	}
	return false
}

// via names the interface a release left through when it is not the
// lease's own.
func via(s Sent) string {
	if s.Via == "" {
		return ""
	}
	return " via " + s.Via + ", the route to the server"
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown interface)"
	}
	return s
}

// readSources reads the named lease files, or those the globs find.
// It returns what it looked at (for the "no leases" message) and how
// many named files were unusable. Problems are warned about on Stderr.
func (o Options) readSources() (sources []Source, looked []string, bad int) {
	named := len(o.LeaseFiles) > 0
	paths := o.LeaseFiles
	if !named {
		globs := o.Globs
		if globs == nil {
			globs = DefaultGlobs
		}
		looked = globs
		for _, g := range globs {
			m, err := filepath.Glob(g)
			if err != nil {
				fmt.Fprintf(o.Stderr, "leasekeeper: warning: %s: %v\n", g, err)
				continue
			}
			for _, p := range m {
				// A dot-file is a client's file being written, not a
				// lease (networkd saves through a ".#…" temporary
				// file, which "*" matches too: fopen_temporary).
				if !strings.HasPrefix(filepath.Base(p), ".") {
					paths = append(paths, p)
				}
			}
		}
	} else {
		looked = o.LeaseFiles
	}
	conf := o.DhclientConf
	if conf == "" {
		conf = DefaultDhclientConf
	}
	confIDs := map[string]map[string]ConfClientID{} // by conf path, read once
	clientIDs := func(path string) map[string]ConfClientID {
		if path == "-" {
			return nil
		}
		if ids, ok := confIDs[path]; ok {
			return ids
		}
		var ids map[string]ConfClientID
		f, _, err := openRegular(path)
		if err == nil {
			ids, err = ParseDhclientConf(f)
			f.Close()
		}
		// The default dhclient.conf may well be missing; one named
		// (DhclientConf) is expected to be there.
		if err != nil && (!errors.Is(err, os.ErrNotExist) || path == o.DhclientConf) {
			fmt.Fprintf(o.Stderr, "leasekeeper: warning: %s: %v (client identifiers from it not used)\n", path, err)
		}
		confIDs[path] = ids
		return ids
	}
	for _, p := range paths {
		// A file named on the command line with a single --interface
		// is that interface's, whatever its name says: a networkd file
		// copied from elsewhere is named by an index of another
		// namespace, or of another boot.
		given := ""
		if named && len(o.Interfaces) == 1 {
			given = o.Interfaces[0]
		}
		s, err := readSource(p, given)
		if err == nil && s.Iface == "" && len(o.Interfaces) == 1 && s.Format != FormatDhclient {
			s.Iface = o.Interfaces[0]
		}
		if err != nil {
			fmt.Fprintf(o.Stderr, "leasekeeper: warning: %s: %v\n", p, err)
			if named {
				bad++
			}
			if s == nil || len(s.Leases) == 0 {
				continue
			}
		}
		if s.Format == FormatDhclient {
			c := conf
			if nm := nmDhclientConf(p); nm != "" && o.DhclientConf == "" {
				c = nm
			}
			s.ClientIDs = clientIDs(c)
		}
		s.Named = named
		sources = append(sources, *s)
	}
	return sources, looked, bad
}

// readSource reads and parses one lease file. A torn dhclient file
// returns its complete leases and the error. iface, when not "", is the
// interface of a file whose format does not record one, instead of the
// one its name gives. A dhcpcd lease is stamped with the file's time
// (Lease.Written: of one interface's files, the newest is its lease).
func readSource(path, iface string) (*Source, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	format, leases, perr := Parse(f)
	if format == FormatDhcpcd {
		for i := range leases {
			leases[i].Written = fi.ModTime()
		}
	}
	s := &Source{Path: path, Format: format, Leases: Current(leases)}
	switch {
	case format == FormatDhclient:
	case iface != "":
		s.Iface = iface
	case format == FormatDhcpcd:
		s.Iface = dhcpcdIface(filepath.Base(path), func(name string) bool {
			_, err := net.InterfaceByName(name)
			return err == nil
		})
	default:
		name, err := ifaceFromName(path)
		if err != nil {
			return nil, err
		}
		s.Iface = name
	}
	if perr != nil {
		return s, fmt.Errorf("%s lease file: %w", format, perr)
	}
	return s, nil
}

// openRegular opens a regular file for reading and refuses anything
// else without waiting: opening a FIFO blocks until a writer comes
// (shutdown would hang on it), and opening a device can act on it.
// Symbolic links are resolved first; the target is checked with lstat
// before the open, so a device or FIFO is never opened at all; the open
// itself (O_NONBLOCK, O_NOFOLLOW) cannot block or follow a symbolic link
// put there since, and fstat checks what was opened.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	// Symbolic links are followed to their end (configuration management
	// links dhclient.conf; operators link lease files), and what they
	// lead to must be a regular file like any other.
	name := path
	if r, err := filepath.EvalSymlinks(path); err == nil {
		path = r
	}
	f, fi, err := openRegularNoFollow(path)
	var pe *os.PathError
	if errors.As(err, &pe) {
		pe.Path = name
	}
	return f, fi, err
}

func openRegularNoFollow(path string) (*os.File, os.FileInfo, error) {
	fi, err := os.Lstat(path)
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: pe.Err}
	}
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, notRegular(fi.Mode())
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, nil, notRegular(os.ModeSymlink)
		}
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	err = syscall.Fstat(fd, &st)
	switch {
	case err != nil:
		err = &os.PathError{Op: "fstat", Path: path, Err: err}
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		err = errors.New("not a regular file (it changed while being opened)")
	default:
		// Reads of a regular file never wait; clear the flag before
		// os.NewFile, which would otherwise treat the descriptor as
		// one for the poller.
		err = syscall.SetNonblock(fd, false)
	}
	if err != nil {
		syscall.Close(fd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	if fi, err = f.Stat(); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

func notRegular(m os.FileMode) error {
	what := "of type " + m.Type().String()
	switch {
	case m&os.ModeNamedPipe != 0:
		what = "a FIFO"
	case m&os.ModeSymlink != 0:
		what = "a symbolic link, not followed"
	case m.IsDir():
		what = "a directory"
	case m&os.ModeSocket != 0:
		what = "a socket"
	case m&os.ModeCharDevice != 0:
		what = "a character device"
	case m&os.ModeDevice != 0:
		what = "a block device"
	}
	return fmt.Errorf("not a regular file (%s)", what)
}

// ifaceFromName is the interface a networkd or NetworkManager lease
// file's name gives: networkd names it by interface index, NetworkManager
// as internal-UUID-IFACE.lease (or dhclient-UUID-IFACE.lease).
func ifaceFromName(path string) (string, error) {
	base := filepath.Base(path)
	if n, err := strconv.Atoi(base); err == nil && n > 0 {
		ifc, err := net.InterfaceByIndex(n)
		if err != nil {
			return "", fmt.Errorf("named after interface index %d, which does not exist (any more)", n)
		}
		return ifc.Name, nil
	}
	return nmIface(base), nil
}

// nmIface returns IFACE from NetworkManager's PREFIX-UUID-IFACE.lease
// names, "" for other names.
func nmIface(base string) string {
	rest, ok := strings.CutSuffix(base, ".lease")
	if !ok {
		return ""
	}
	for _, p := range []string{"internal-", "dhclient-"} {
		if r, ok := strings.CutPrefix(rest, p); ok {
			// A UUID is 36 characters: 8-4-4-4-12.
			if len(r) > 37 && r[36] == '-' && strings.Count(r[:36], "-") == 4 {
				return r[37:]
			}
		}
	}
	return ""
}

// nmDhclientConf is the dhclient.conf NetworkManager writes for the
// interface of one of its dhclient lease files, "" if none exists.
func nmDhclientConf(leasePath string) string {
	base := filepath.Base(leasePath)
	if !strings.HasPrefix(base, "dhclient-") {
		return ""
	}
	iface := nmIface(base)
	if iface == "" {
		return ""
	}
	for _, name := range []string{"dhclient-" + iface + ".conf", "dhclient4-" + iface + ".conf"} {
		p := filepath.Join(filepath.Dir(leasePath), name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// localInterfaces returns the node's interfaces with their MACs and
// IPv4 addresses.
func localInterfaces() (map[string]Iface, error) {
	list, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	out := make(map[string]Iface, len(list))
	for _, ni := range list {
		ifc := Iface{Name: ni.Name, MAC: ni.HardwareAddr}
		addrs, err := ni.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ni.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok || !ip.Unmap().Is4() {
				continue
			}
			ones, _ := ipn.Mask.Size()
			ifc.Prefixes = append(ifc.Prefixes, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out[ni.Name] = ifc
	}
	return out, nil
}
