package rack

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
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
// leases file is active and held by opts.MAC (and can be told: a
// statement after the address's last block that the parser had to skip
// is refused as ErrUnreadable), then writes a DHCPRELEASE on the
// interface dhcpd serves and, unless opts.NoVerify, waits until the
// leases file shows the lease released (ErrUnconfirmed otherwise),
// reading only what dhcpd appends after the first read. It never takes
// longer than opts.Timeout, the first read of the file included.
func Release(ctx context.Context, opts Options) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	start := opts.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	res := Result{IP: opts.IP, MAC: opts.MAC}

	leases := newLeaseReader(opts.LeasesPath, opts.IP, nil)
	defer leases.close()
	lease, err := leases.current(ctx, opts)
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
	err = waitReleased(ctx, opts, lease, leases, &res)
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

// current reads the leases file, waiting (within ctx) while it ends
// inside a statement that dhcpd may be writing, and returns the
// address's current lease if dhcpd would release it for opts.MAC. It
// refuses (ErrUnreadable) rather than fall back to an older block when a
// statement after the address's last block could not be read.
func (r *leaseReader) current(ctx context.Context, opts Options) (*parser.Lease, error) {
	if err := r.sync(ctx); err != nil {
		return nil, err
	}
	why := r.unreadable()
	for why != "" && len(r.hiding) == 0 && ctx.Err() == nil { // torn: wait for the rest
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
			if err := r.sync(ctx); err != nil && ctx.Err() == nil {
				return nil, err
			}
			why = r.unreadable()
		}
	}
	if why != "" {
		return nil, &RefusedError{IP: opts.IP, MAC: opts.MAC, Reason: ErrUnreadable, Detail: why, Lease: r.lease}
	}
	t := parser.NewTable()
	if r.lease != nil {
		t.Apply(r.lease)
	}
	l, err := CheckLease(t, opts.IP, opts.MAC, opts.Now())
	if re := (*RefusedError)(nil); errors.As(err, &re) && errors.Is(err, ErrNoLease) {
		re.Detail = opts.LeasesPath // which file: the default may not be this rack's
	}
	return l, err
}

// waitReleased follows the leases file, reading only what dhcpd appends
// (the whole file again only after a rewrite), until the address's block
// shows before released, or ctx ends.
func waitReleased(ctx context.Context, opts Options, before *parser.Lease, r *leaseReader, res *Result) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var readErr error
	for {
		select {
		case <-ctx.Done():
			err := fmt.Errorf("sent a DHCPRELEASE for %s on %s, but %w in %s within %v: see dhcpd's log (is it serving %s? a DHCPRELEASE line ending \"(not found)\" means it did not match the lease)",
				opts.IP, res.Interface, ErrUnconfirmed, opts.LeasesPath, opts.Timeout, res.Interface)
			if why := r.unreadable(); why != "" {
				err = fmt.Errorf("%w; and the file could not be read after the address's last block: %s", err, why)
			}
			if readErr != nil {
				err = fmt.Errorf("%w; last read: %v", err, readErr)
			}
			return err
		case <-t.C:
		}
		if err := r.sync(ctx); err != nil {
			if ctx.Err() == nil {
				readErr = err
			}
			continue
		}
		readErr = nil
		at := parser.TimeOf(opts.Now())
		if released(before, r.lease, at) {
			res.Verified, res.State = true, r.lease.Binding(at)
			return nil
		}
	}
}
