// Package e2e tests the agent's delivery path end to end, with the real
// programs: `leasekeeper agent` built from ./cmd/leasekeeper and run as a
// process with its own configuration, leasekeeper-hook built from ./hook
// and exec'd the way dhcpd's execute() runs it, and the region stub
// (internal/lktest/regionstub) serving the region API over TLS with client
// certificates. The tests kill, starve and feed the agent garbage and then
// compare what the region accepted with what the hooks were given.
//
// The package has no code of its own: everything is in _test.go files.
// TestMain builds both binaries into a temporary directory (with -race
// when the tests are built with -race, so the agent is checked too; its
// log is searched for data race reports). Tests that need root (running a
// hook as nobody, mounting a tmpfs) skip without it.
//
// The benchmarks (bench_test.go) measure ingest (hook datagrams into the
// durable outbox), latency (hook exec to the region) and the drain after
// an outage; scripts/bench-agent runs them and prints the figures.
package e2e
