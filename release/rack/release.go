package rack

import (
	"bytes"
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
	// DefaultProbeWait: long enough for a host's kernel to answer three
	// probes, short against Timeout.
	DefaultProbeWait = time.Second
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
	// Timeout bounds the whole operation, verification included, but
	// the probe, which has ProbeWait of its own (DefaultTimeout when 0).
	Timeout time.Duration
	// NoVerify returns once the frame is sent, without waiting for dhcpd
	// to record the release.
	NoVerify bool
	// DryRun checks the lease, chooses the interface and probes the
	// address, but sends no release.
	DryRun bool
	// NoProbe sends the release without asking first whether anything
	// still holds the address. By default Release sends an RFC 5227 ARP
	// probe for it on the chosen interface (ProbeWait long, three
	// probes): a host that answers holds the address, so the client is
	// not gone, and Release refuses (ErrInUse). An address in no subnet
	// of that interface (a relayed one) cannot be probed from here, and
	// goes unprobed (Result.Probe says so).
	NoProbe bool
	// ProbeWait is how long the probe listens (DefaultProbeWait when 0).
	ProbeWait time.Duration
	// Prober is the probe (nil: an ARP probe through a packet socket):
	// the hardware address of a host that claims ip on the interface
	// ifindex, whose own address is hw; nil when none did within wait.
	Prober func(ctx context.Context, ifindex int, hw net.HardwareAddr, ip netip.Addr, wait time.Duration) (net.HardwareAddr, error)
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
	// Probe says what the probe before the release found: "nobody
	// answered", or why there was none.
	Probe string
	Sent  bool
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
// longer than opts.Timeout, the first read of the file included, and the
// probe's opts.ProbeWait.
func Release(ctx context.Context, opts Options) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	start := opts.Now()
	budget := opts.Timeout
	if !opts.NoProbe {
		budget += opts.ProbeWait
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
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
	if res.Probe, err = probe(ctx, opts, ifc); err != nil {
		return res, err
	}
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

// probe asks, unless opts.NoProbe, whether anything holds opts.IP on ifc
// (see Options.NoProbe) and says what it found; a host that answers is a
// *RefusedError with ErrInUse.
func probe(ctx context.Context, opts Options, ifc ifaceInfo) (string, error) {
	if opts.NoProbe {
		return "not probed (asked not to)", nil
	}
	onLink := false
	for _, p := range ifc.Addrs {
		if p.Addr() == opts.IP {
			return "", &RefusedError{IP: opts.IP, MAC: opts.MAC, Reason: ErrInUse, Detail: "it is this rack's own address on " + ifc.Name}
		}
		onLink = onLink || p.Contains(opts.IP)
	}
	if !onLink {
		return fmt.Sprintf("not probed: %s is in no subnet of %s (a relayed subnet), so no ARP probe from here can reach it", opts.IP, ifc.Name), nil
	}
	by, err := opts.Prober(ctx, ifc.Index, ifc.MAC, opts.IP, opts.ProbeWait)
	switch {
	case err != nil && opts.DryRun:
		// A dry run asks for no privilege: say what stopped the probe.
		return fmt.Sprintf("not probed: %v", err), nil
	case err != nil:
		return "", fmt.Errorf("ARP probe of %s on %s before the release: %w (nothing sent)", opts.IP, ifc.Name, err)
	case by == nil:
		return fmt.Sprintf("nobody answered an ARP probe on %s within %s", ifc.Name, opts.ProbeWait), nil
	case bytes.Equal(by, opts.MAC):
		return "", &RefusedError{IP: opts.IP, MAC: opts.MAC, Reason: ErrInUse, Detail: fmt.Sprintf("the client itself answered an ARP probe on %s: it is not gone", ifc.Name)}
	}
	return "", &RefusedError{IP: opts.IP, MAC: opts.MAC, Reason: ErrInUse, Detail: fmt.Sprintf("%s answered an ARP probe on %s: another host holds the address", by, ifc.Name)}
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
	if o.ProbeWait <= 0 {
		o.ProbeWait = DefaultProbeWait
	}
	if o.Prober == nil {
		o.Prober = askARP
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
