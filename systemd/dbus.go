package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// PrivateSocket is the running system manager's own D-Bus socket: it
// needs no dbus-daemon (root only), so it works early in boot and in
// minimal containers.
const PrivateSocket = "/run/systemd/private"

// DBusManager is a Manager talking to a running systemd over D-Bus.
type DBusManager struct {
	conn *sddbus.Conn
}

// DialManager connects to systemd. socket names a manager's private
// socket (PrivateSocket when empty); when that socket does not exist the
// system bus is used instead.
func DialManager(ctx context.Context, socket string) (*DBusManager, error) {
	if socket == "" {
		socket = PrivateSocket
	}
	var (
		conn *sddbus.Conn
		err  error
	)
	if _, serr := os.Stat(socket); serr == nil {
		conn, err = sddbus.NewConnection(func() (*dbus.Conn, error) {
			c, err := dbus.Dial("unix:path="+socket, dbus.WithContext(ctx))
			if err != nil {
				return nil, err
			}
			if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		})
	} else {
		conn, err = sddbus.NewSystemConnectionContext(ctx)
	}
	if err != nil {
		// No hint of what to do instead: that depends on the command
		// (install-shutdown-unit has --root, release does not).
		return nil, fmt.Errorf("connect to systemd: %w", err)
	}
	return &DBusManager{conn: conn}, nil
}

// Close ends the connection.
func (m *DBusManager) Close() { m.conn.Close() }

// Reload is systemctl daemon-reload.
func (m *DBusManager) Reload(ctx context.Context) error { return m.conn.ReloadContext(ctx) }

// Enable is systemctl enable NAME.
func (m *DBusManager) Enable(ctx context.Context, name string) ([]string, error) {
	_, changes, err := m.conn.EnableUnitFilesContext(ctx, []string{name}, false, false)
	if err != nil {
		return nil, err
	}
	var links []string
	for _, c := range changes {
		if c.Type == "symlink" {
			links = append(links, c.Filename)
		}
	}
	return links, nil
}

// UnitFileState is systemctl is-enabled NAME: "enabled", "disabled",
// "static", "masked", …
func (m *DBusManager) UnitFileState(ctx context.Context, name string) (string, error) {
	p, err := m.conn.GetUnitPropertyContext(ctx, name, "UnitFileState")
	if err != nil {
		return "", err
	}
	s, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("UnitFileState of %s is %s, not a string", name, p.Value.Signature())
	}
	return s, nil
}

// Start is systemctl start NAME: it waits for the job's result.
func (m *DBusManager) Start(ctx context.Context, name string) error {
	return m.job(ctx, "start", name, m.conn.StartUnitContext)
}

// Stop is systemctl stop NAME: it waits for the job's result.
func (m *DBusManager) Stop(ctx context.Context, name string) error {
	return m.job(ctx, "stop", name, m.conn.StopUnitContext)
}

// job queues a start or stop job for name and waits for its result.
func (m *DBusManager) job(ctx context.Context, verb, name string,
	queue func(context.Context, string, string, chan<- string) (int, error)) error {
	done := make(chan string, 1)
	if _, err := queue(ctx, name, "replace", done); err != nil {
		return err
	}
	select {
	case result := <-done:
		if result != "done" {
			return fmt.Errorf("job %s", result)
		}
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New(verb+" job did not finish"), ctx.Err())
	}
}

// SystemState is the manager's state as systemctl is-system-running
// prints it: "running", "degraded", "stopping" (shutting down, or for a
// user manager, exiting), …
func (m *DBusManager) SystemState(ctx context.Context) (string, error) {
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := m.conn.GetManagerProperty("SystemState")
		if err == nil {
			v, err = strconv.Unquote(v)
		}
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Shutdown is what the manager is doing, as release's shutdown guard
// asks it.
type Shutdown struct {
	State string // SystemState: "running", "stopping", "starting", …
	// Target is the special target a queued start job leads the manager
	// to: "poweroff.target", "reboot.target", "exit.target" (a user
	// manager), …; "" when there is none, or the jobs could not be read.
	Target string
	// JobsErr is why the jobs could not be read (nil when they were):
	// then neither a reboot nor, before systemd 246, a shutdown asked
	// for during boot can be told.
	JobsErr error
}

// Stopping reports whether the machine is shutting down, rebooting or
// halting (a user manager: exiting). Before systemd 246 the state says
// "starting" while any boot job still runs, even once a shutdown was
// asked for (manager_state checked for boot jobs first): the queued job
// for the final target tells then.
func (s Shutdown) Stopping() bool { return s.State == "stopping" || s.Target != "" }

// Reboot reports whether the machine comes back: a reboot, kexec or
// soft reboot.
func (s Shutdown) Reboot() bool {
	switch s.Target {
	case "reboot.target", "kexec.target", "soft-reboot.target":
		return true
	}
	return false
}

// finalTargets are the special targets a shutdown's start job leads
// to, those that bring the machine back first (systemd.special(7)).
var finalTargets = []string{"reboot.target", "kexec.target", "soft-reboot.target", "poweroff.target", "halt.target", "exit.target", "shutdown.target"}

// shutdownOf reads state and the manager's jobs as a Shutdown.
func shutdownOf(state string, jobs []sddbus.JobStatus) Shutdown {
	out := Shutdown{State: state}
	best := len(finalTargets)
	for _, j := range jobs {
		if j.JobType != "start" {
			continue
		}
		if i := slices.Index(finalTargets, j.Unit); i >= 0 && i < best {
			best, out.Target = i, j.Unit
		}
	}
	return out
}

// ShuttingDown reads the manager's state and its queued jobs. Jobs that
// cannot be read leave Target empty and JobsErr set: a shutdown is still
// told by the state.
func (m *DBusManager) ShuttingDown(ctx context.Context) (Shutdown, error) {
	s, err := m.SystemState(ctx)
	if err != nil {
		return Shutdown{State: s}, err
	}
	jobs, err := m.conn.ListJobsContext(ctx)
	if err != nil {
		return Shutdown{State: s, JobsErr: err}, nil
	}
	return shutdownOf(s, jobs), nil
}
