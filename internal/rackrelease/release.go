package rackrelease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/parser"
)

// Defaults for Options.
const (
	DefaultLeasesPath = "/var/lib/dhcp/dhcpd.leases"
	DefaultTimeout    = 5 * time.Second
	// pollEvery is how often the leases file is checked while verifying.
	pollEvery = 50 * time.Millisecond
)

// ErrUnconfirmed is returned (wrapped) when the release was sent but the
// leases file did not show it released within the time allowed.
var ErrUnconfirmed = errors.New("dhcpd did not record the release")

// Options is one release on behalf of a client.
type Options struct {
	IP  netip.Addr       // the lease's address (IPv4)
	MAC net.HardwareAddr // the client's MAC; must be the lease's
	// Server is dhcpd's address on Interface. Default: the interface's
	// address in IP's subnet.
	Server netip.Addr
	// Interface is the interface dhcpd serves IP's clients on. Default:
	// the one whose subnet holds IP.
	Interface string
	// LeasesPath is dhcpd's leases file (DefaultLeasesPath when "").
	LeasesPath string
	// Timeout bounds the whole operation, verification included
	// (DefaultTimeout when 0).
	Timeout time.Duration
	// NoVerify returns once the frame is sent, without waiting for dhcpd
	// to record the release.
	NoVerify bool
	// DryRun checks the lease and chooses the interface, but sends nothing.
	DryRun bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Result is what Release did.
type Result struct {
	IP        netip.Addr
	MAC       net.HardwareAddr
	Hostname  string
	Ends      parser.Time // the lease's end before the release (null for never)
	Interface string
	Server    netip.Addr
	Sent      bool
	// Verified is set when the leases file showed the lease released;
	// State is then the binding state dhcpd wrote (free, or released with
	// a failover peer).
	Verified bool
	State    parser.State
	Took     time.Duration
}

// Release makes the local dhcpd release opts.IP: it refuses (a
// *RefusedError, nothing sent) unless the address's current lease in the
// leases file is active and held by opts.MAC, then writes a DHCPRELEASE
// on the interface dhcpd serves and, unless opts.NoVerify, waits until
// the leases file shows the lease released (ErrUnconfirmed otherwise).
// It never takes longer than opts.Timeout.
func Release(ctx context.Context, opts Options) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	start := opts.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	res := Result{IP: opts.IP, MAC: opts.MAC}

	snap, err := readLeases(opts.LeasesPath)
	if err != nil {
		return res, err
	}
	lease, err := CheckLease(snap.leases.Table, opts.IP, opts.MAC, opts.Now())
	if err != nil {
		return res, err
	}
	res.Hostname, res.Ends = lease.ClientHostname, lease.Ends

	ifs, err := systemInterfaces()
	if err != nil {
		return res, err
	}
	ifc, server, err := pickInterface(ifs, opts.IP, opts.Interface, opts.Server)
	if err != nil {
		return res, err
	}
	res.Interface, res.Server = ifc.Name, server
	f := Frame{IfaceMAC: ifc.MAC, Server: server, IP: opts.IP, MAC: opts.MAC, ClientID: lease.UID}
	if _, err := rand.Read(f.XID[:]); err != nil {
		return res, err
	}
	frame, err := f.Bytes()
	if err != nil {
		return res, err
	}
	if opts.DryRun {
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if err := sendFrame(ifc.Name, ifc.Index, frame); err != nil {
		return res, err
	}
	res.Sent = true
	if opts.NoVerify {
		res.Took = opts.Now().Sub(start)
		return res, nil
	}
	err = waitReleased(ctx, opts, lease, snap, &res)
	res.Took = opts.Now().Sub(start)
	return res, err
}

func (o *Options) defaults() error {
	if !o.IP.Is4() {
		return fmt.Errorf("address %v: IPv4 only (dhcpd -6 has no DHCPRELEASE of this kind)", o.IP)
	}
	if len(o.MAC) != 6 {
		return fmt.Errorf("MAC %v: want a 6-byte Ethernet address", o.MAC)
	}
	if o.Server.IsValid() && !o.Server.Is4() {
		return fmt.Errorf("server %v: IPv4 only", o.Server)
	}
	if o.LeasesPath == "" {
		o.LeasesPath = DefaultLeasesPath
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// snapshot is one read of the leases file and the identity it was read at.
type snapshot struct {
	leases    *parser.Leases
	dev, ino  uint64
	size      int64
	modTimeNs int64
}

func (s *snapshot) same(fi os.FileInfo) bool {
	dev, ino := fileID(fi)
	return dev == s.dev && ino == s.ino && fi.Size() == s.size && fi.ModTime().UnixNano() == s.modTimeNs
}

func fileID(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino
	}
	return 0, 0
}

func readLeases(path string) (*snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dhcpd's leases file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	ls, err := parser.ParseLeases(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &snapshot{leases: ls, size: fi.Size(), modTimeNs: fi.ModTime().UnixNano()}
	s.dev, s.ino = fileID(fi)
	return s, nil
}

// waitReleased polls the leases file until its block for the address
// shows before released, or ctx ends.
func waitReleased(ctx context.Context, opts Options, before *parser.Lease, last *snapshot, res *Result) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("sent a DHCPRELEASE for %s on %s, but %w in %s within %v: see dhcpd's log (is it serving %s? a DHCPRELEASE line ending \"(not found)\" means it did not match the lease)",
				opts.IP, res.Interface, ErrUnconfirmed, opts.LeasesPath, opts.Timeout, res.Interface)
		case <-t.C:
		}
		fi, err := os.Stat(opts.LeasesPath)
		if err != nil || last.same(fi) {
			continue // between unlink and rename in a rewrite, or unchanged
		}
		s, err := readLeases(opts.LeasesPath)
		if err != nil {
			continue
		}
		last = s
		now, _ := s.leases.Lookup(netip.PrefixFrom(opts.IP, 32))
		if released(before, now, parser.TimeOf(opts.Now())) {
			res.Verified, res.State = true, now.Binding(parser.TimeOf(opts.Now()))
			return nil
		}
	}
}
