package systemd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest/lab"
)

// TestInstallLive installs the unit on a running systemd over D-Bus
// (daemon-reload, enable, start) and shows that the manager's shutdown
// runs the unit's ExecStop: the release happens at shutdown.
func TestInstallLive(t *testing.T) {
	m := lab.StartUserManager(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "released")
	// Stands in for leasekeeper: records how ExecStop called it.
	bin := filepath.Join(dir, "fake-leasekeeper")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\" >> "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := ShutdownUnit{Binary: bin, ReleaseArgs: []string{"--timeout=5s"}}
	if err := u.Validate(); err != nil {
		t.Skipf("temp dir not usable in a unit: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mgr, err := DialManager(ctx, m.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	in := Installer{Root: "/", UnitDir: strings.TrimPrefix(m.UnitDir, "/"), Unit: u, Enable: true, Manager: mgr}
	res, err := in.Install(ctx)
	if err != nil {
		t.Fatalf("install: %v\nsystemd log:\n%s", err, m.Log())
	}
	if !res.Written || !res.Enabled || !res.Started || len(res.Links) != 1 {
		t.Fatalf("install result %+v", res)
	}
	wantLink := filepath.Join(m.UnitDir, "multi-user.target.wants", ShutdownUnitName)
	if res.Links[0] != wantLink {
		t.Errorf("systemd made link %q, want %q", res.Links[0], wantLink)
	}
	state, err := mgr.conn.GetUnitPropertyContext(ctx, ShutdownUnitName, "ActiveState")
	if err != nil || state.Value.Value() != "active" {
		t.Fatalf("unit state %v %v", state, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("release ran at start")
	}

	// Again: nothing to write, nothing to enable, still started.
	res, err = in.Install(ctx)
	if err != nil || res.Written || len(res.Links) != 0 || !res.Started {
		t.Fatalf("second install: %+v %v", res, err)
	}
	// Without Enable the enable state is left as it was, and reported as
	// the manager sees it, not as "not enabled".
	noEnable := in
	noEnable.Enable = false
	res, err = noEnable.Install(ctx)
	if err != nil || res.Written || !res.Enabled || res.EnableState != "enabled" || res.Started {
		t.Fatalf("install without Enable: %+v %v", res, err)
	}

	m.Stop(t)
	got, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("ExecStop did not run at shutdown: %v\nsystemd log:\n%s", err, m.Log())
	}
	if string(got) != "release --only-at-shutdown --timeout=5s\n" {
		t.Fatalf("ExecStop ran %q", got)
	}
}

func TestDialManagerNoSystemd(t *testing.T) {
	// A socket path that does not exist falls back to the system bus; on
	// a machine without one the error says so, and no command's hint:
	// release has no --root, install-shutdown-unit adds that itself.
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := DialManager(ctx, filepath.Join(t.TempDir(), "nosock"))
	if err == nil || !strings.Contains(err.Error(), "connect to systemd") || strings.Contains(err.Error(), "--") {
		t.Fatalf("err = %v", err)
	}
}
