// Package systemd is leasekeeper's side of the service manager.
//
//   - notify.go: sd_notify (READY, STATUS, RELOADING, STOPPING) and the
//     watchdog for the agent, through go-systemd's daemon package. Every
//     call is a no-op when NOTIFY_SOCKET is unset, so the agent runs the
//     same in a terminal, in tests and under Type=notify.
//   - unit.go, install.go, dbus.go: the node's clean-shutdown unit
//     (leasekeeper-release.service) that `leasekeeper
//     install-shutdown-unit` renders, writes and enables, on a running
//     system over D-Bus or into a root directory.
package systemd
