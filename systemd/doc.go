// Package systemd is the agent's side of the service manager: sd_notify
// (READY, STATUS, RELOADING, STOPPING) and the watchdog, through
// go-systemd's daemon package. Unit rendering and installation (the
// node's clean-shutdown unit) will live here too.
//
// Everything is a no-op when the process was not started by systemd with
// a notify socket (NOTIFY_SOCKET unset), so the agent runs the same way in
// a terminal, in tests and under Type=notify.
package systemd
