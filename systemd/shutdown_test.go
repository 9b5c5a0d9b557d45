package systemd

import (
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// TestShutdownOf: what the guard reads from the manager's state and its
// queued jobs. Before systemd 246 the state says "starting" while any
// boot job still runs, even once a shutdown is asked for (src/core/
// manager.c, manager_state, fixed by systemd PR #15330): the final
// target's start job tells the shutdown then. A reboot is told from a
// poweroff by that target.
func TestShutdownOf(t *testing.T) {
	job := func(unit, typ string) sddbus.JobStatus { return sddbus.JobStatus{Unit: unit, JobType: typ} }
	for _, tc := range []struct {
		name             string
		state            string
		jobs             []sddbus.JobStatus
		stopping, reboot bool
		target           string
	}{
		{"running", "running", nil, false, false, ""},
		{"a unit stopped by hand", "running", []sddbus.JobStatus{job("leasekeeper-release.service", "stop")}, false, false, ""},
		{"poweroff", "stopping", []sddbus.JobStatus{job("poweroff.target", "start"), job("shutdown.target", "start"), job("systemd-poweroff.service", "start")}, true, false, "poweroff.target"},
		{"reboot", "stopping", []sddbus.JobStatus{job("shutdown.target", "start"), job("reboot.target", "start"), job("systemd-reboot.service", "start")}, true, true, "reboot.target"},
		{"kexec", "stopping", []sddbus.JobStatus{job("kexec.target", "start")}, true, true, "kexec.target"},
		{"soft reboot", "stopping", []sddbus.JobStatus{job("soft-reboot.target", "start")}, true, true, "soft-reboot.target"},
		{"poweroff while booting, systemd 245", "starting", []sddbus.JobStatus{job("cloud-final.service", "start"), job("poweroff.target", "start")}, true, false, "poweroff.target"},
		{"stopping, jobs unread", "stopping", nil, true, false, ""},
		{"a user manager exiting", "stopping", []sddbus.JobStatus{job("exit.target", "start"), job("shutdown.target", "start")}, true, false, "exit.target"},
		{"a stop job for a final target is none", "running", []sddbus.JobStatus{job("reboot.target", "stop")}, false, false, ""},
	} {
		got := shutdownOf(tc.state, tc.jobs)
		if got.Stopping() != tc.stopping || got.Reboot() != tc.reboot || got.Target != tc.target {
			t.Errorf("%s: %+v: stopping %v, reboot %v; want %v, %v, target %q", tc.name, got, got.Stopping(), got.Reboot(), tc.stopping, tc.reboot, tc.target)
		}
	}
}
