package systemd

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

// ShutdownUnitName is the clean-shutdown unit's name.
const ShutdownUnitName = "leasekeeper-release.service"

// unitMarker is the first line of every unit this package writes; a file
// without it was written by someone else and is not overwritten unless
// forced.
const unitMarker = "# Written by leasekeeper install-shutdown-unit."

// networkUnits are the services that bring the network up on the
// distributions nodes and containers run. The shutdown unit is ordered
// after each of them and after network.target, so at shutdown systemd
// stops it — running its ExecStop — before any of them takes the network
// down (units ordered after network.target stop before the network goes
// down: systemd.special(7)). Ordering against a unit that does not exist,
// or is not started, is harmless; nothing here pulls one in.
//
// The unit is ordered before network-online.target (onlineTarget), not
// after it: at shutdown it then stops only once every unit that runs
// after the network is online has stopped (remote file systems, an NFS
// client, a service that waits for network-online), so none of them is
// still using the address when dhcpd frees it, and dhcpd's ping before
// offering it again finds nobody (a node that answers gets the lease
// abandoned). A service ordered only after network.target has no order
// against this unit and may still be stopping then. After= would cost at boot: multi-user.target, which wants
// this unit, gets ordered after it too, so the boot would wait for
// network-online (a wait-online timeout, with a cable unplugged)
// whenever something else pulls it in. Before= only has the target,
// when something pulls it in, wait for this unit's ExecStart, /bin/true.
var networkUnits = []string{
	"network.target",
	"systemd-networkd.service",
	"NetworkManager.service",
	"networking.service",
	"dhcpcd.service",
	"systemd-resolved.service",
}

// onlineTarget is what the unit is ordered before (networkUnits says why).
const onlineTarget = "network-online.target"

// ShutdownUnit describes the clean-shutdown unit.
type ShutdownUnit struct {
	// Binary is the absolute path of leasekeeper on the machine the unit
	// runs on (inside the rootfs, for an image).
	Binary string
	// ReleaseArgs follow "release --only-at-shutdown" on the ExecStop
	// line.
	ReleaseArgs []string
	// StopTimeout bounds the release at shutdown (TimeoutStopSec).
	StopTimeout time.Duration
}

// DefaultStopTimeout leaves the release command's own bound room to run
// and never holds a shutdown for long.
const DefaultStopTimeout = 30 * time.Second

// execWordOK reports whether s can be written as one word of an Exec line
// without quoting: systemd splits on whitespace and expands %, $ and \.
func execWordOK(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("/._+-=:,@", r):
		default:
			return false
		}
	}
	return true
}

// Validate reports what is wrong with u, if anything.
func (u ShutdownUnit) Validate() error {
	if !strings.HasPrefix(u.Binary, "/") {
		return fmt.Errorf("binary %q: must be an absolute path", u.Binary)
	}
	if !execWordOK(u.Binary) {
		return fmt.Errorf("binary %q: only letters, digits and /._+-=:,@ are allowed in the path", u.Binary)
	}
	for _, a := range u.ReleaseArgs {
		if !execWordOK(a) {
			return fmt.Errorf("release argument %q: only letters, digits and /._+-=:,@ are allowed", a)
		}
	}
	if u.StopTimeout < 0 {
		return errors.New("stop timeout must not be negative")
	}
	return nil
}

// Sections returns the unit as go-systemd sections, in file order.
func (u ShutdownUnit) Sections() []*unit.UnitSection {
	timeout := u.StopTimeout
	if timeout == 0 {
		timeout = DefaultStopTimeout
	}
	// --only-at-shutdown: a stop that is not a shutdown (systemctl stop or
	// restart of this unit, isolate rescue.target) must not give away
	// addresses the machine goes on using.
	exec := strings.Join(append([]string{u.Binary, "release", "--only-at-shutdown"}, u.ReleaseArgs...), " ")
	entries := []*unit.UnitEntry{
		{Name: "Description", Value: "Release this machine's DHCP leases at clean shutdown (leasekeeper)"},
		{Name: "Documentation", Value: "man:leasekeeper(8)"},
	}
	for _, n := range networkUnits {
		entries = append(entries, &unit.UnitEntry{Name: "After", Value: n})
	}
	entries = append(entries, &unit.UnitEntry{Name: "Before", Value: onlineTarget})
	return []*unit.UnitSection{
		{Section: "Unit", Entries: entries},
		{Section: "Service", Entries: []*unit.UnitEntry{
			{Name: "Type", Value: "oneshot"},
			{Name: "RemainAfterExit", Value: "yes"},
			{Name: "ExecStart", Value: "/bin/true"},
			// "-": a failed release is logged, never fails the shutdown.
			{Name: "ExecStop", Value: "-" + exec},
			{Name: "TimeoutStopSec", Value: fmt.Sprintf("%ds", int((timeout+time.Second-1)/time.Second))},
		}},
		{Section: "Install", Entries: []*unit.UnitEntry{
			{Name: "WantedBy", Value: "multi-user.target"},
		}},
	}
}

// Render returns the unit file's text.
func (u ShutdownUnit) Render() ([]byte, error) {
	if err := u.Validate(); err != nil {
		return nil, err
	}
	body, err := io.ReadAll(unit.SerializeSections(u.Sections()))
	if err != nil {
		return nil, err
	}
	head := unitMarker + "\n" +
		"# Re-run it to change this file; it refuses to overwrite a file without this line.\n" +
		"# At shutdown systemd stops this unit before the network services it is\n" +
		"# ordered after, so ExecStop releases the leases while the network is up,\n" +
		"# and after what runs once the network is online, which no longer uses it.\n"
	return append([]byte(head), body...), nil
}

// writtenByUs reports whether a unit file's content carries our marker.
func writtenByUs(b []byte) bool {
	line, _, _ := strings.Cut(string(b), "\n")
	return line == unitMarker
}
