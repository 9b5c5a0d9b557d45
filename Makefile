# leasekeeper — see README.md. Every target works on a fresh Debian machine
# as root; `test`, `bench` and `demo` install the Debian packages they need.

SHELL   := /bin/bash
GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags '$(LDFLAGS)'

.PHONY: all build test test-deps vet bench bench-hook demo chaos fuzz clean deb deb-deps test-deb

all: build

build:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/leasekeeper ./cmd/leasekeeper
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o bin/leasekeeper-hook ./hook

# Test dependencies: real dhcpd, dhclient, dhcpd-pools and perfdhcp for the
# lab tests. Without root the script only reports what is missing, and the
# tests that need it skip with a reason.
# Prometheus's promtool (from Debian's package, not installed) checks and
# tests the shipped alerting rules; as root a failed fetch stops here,
# otherwise the test skips without it.
test-deps:
	scripts/install-deps isc-dhcp-server isc-dhcp-client dhcpcd-base dhcpd-pools kea-admin iproute2 systemd cloud-init curl wget python3 gcc libc6-dev strace
	scripts/fetch-promtool bin/tools

vet:
	$(GO) vet ./...

test: test-deps vet
	PROMTOOL=$(wildcard $(CURDIR)/bin/tools/promtool) $(GO) test -race -count=1 -timeout 15m ./...

# Long fuzzing runs (FUZZTIME per target, default 10m).
FUZZTIME ?= 10m
fuzz:
	$(GO) test ./parser -run '^$$' -fuzz '^FuzzDecodeLeases$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./parser/dhcpdconf -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./hook -run '^$$' -fuzz '^FuzzEvent$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./agent/event -run '^$$' -fuzz '^FuzzParseDatagram$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./hook -run '^$$' -fuzz '^FuzzParseIP$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./hook -run '^$$' -fuzz '^FuzzClean$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./release -run '^$$' -fuzz '^FuzzParseDhclient$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./release -run '^$$' -fuzz '^FuzzParseNetworkd$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./agent/hooksock -run '^$$' -fuzz '^FuzzDatagram$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x
	$(GO) test ./agent/hooksock -run '^$$' -fuzz '^FuzzSpoolReader$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x

# Every figure of issue 16's table (hookless cost, hook vs an empty Go
# program, ingest, latency, region back after an outage), the median of
# RUNS (3) runs each, as one table next to its targets; also written to
# bin/bench.json. About 21 minutes (scripts/bench). The older, more
# detailed drivers run on their own: scripts/bench-pools (parser vs
# dhcpd-pools), scripts/bench-agent, scripts/bench-reconcile.
bench: test-deps build
	GO=$(GO) scripts/bench

# Real dhcpd in network namespaces, two clients, the agent and a region
# stub: commit, release, expiry, then a range shrink whose dropped lease
# gets its expiry synthesised at its own end time. About 30 s.
# What each hook costs dhcpd (real dhcpd + perfdhcp in namespaces): none,
# /bin/true, an empty Go program, leasekeeper-hook listening and spooling.
# PIN=1 keeps perfdhcp off dhcpd's CPUs.
bench-hook: test-deps build
	HOOK=bin/leasekeeper-hook scripts/bench-hook

demo: test-deps
	scripts/demo

# Chaos: real dhcpd, dhclients and perfdhcp in namespaces, the packaged
# hook blocks, the agent under a socket holder and the region stub, with
# faults randomly mixed and overlapping for DURATION; then an oracle
# checks the region's records against every leases file dhcpd wrote
# (nothing lost, nothing false, per-IP order) and exits 1 on a violation.
# SEED repeats a run's choices (0: a fresh one, printed). Needs root.
# FAULTS names the fault kinds to mix (comma-separated; "" = all).
DURATION ?= 10m
SEED     ?= 0
FAULTS   ?=
# PAIR=1 runs a failover pair instead: two racks (dhcpd peers as MAAS
# configures them, an agent each), one region; rack deaths and returns,
# range changes on both peers; the oracle judges both files merged.
PAIR     ?=
# VLANS=2 (with PAIR=1) adds a second HA VLAN between the two racks,
# declared first, with the roles the other way round, as MAAS may write
# it: each agent must follow the clients' VLAN's failover peer.
VLANS    ?=
# TIMERS=maas (with PAIR=1) gives the failover peers MAAS's own timers
# (max-response-delay 60, mclt 3600, no auto-partner-down) instead of the
# lab's shorter ones: a survivor stays communications-interrupted, as on
# a MAAS rack whose partner nobody declared down.
TIMERS   ?=
# RACKS=3 (with PAIR=1) adds a third rack, the primary of a second HA VLAN
# (relayed clients) whose secondary is the pair's primary: that rack's
# agent orders each VLAN's news with a different partner (pair.partners).
RACKS    ?=
# JUDGE=DIR judges a kept run's directory again with this tree's oracle
# (its judge.json) and runs nothing: for a change to the oracle. With
# IP=ADDR it also prints that address's truth and the region's items.
JUDGE    ?=
IP       ?=
# LOG=debug runs the agents at that log level (default info), so that a
# kept run's logs can trace a violation.
LOG      ?=
ifneq ($(JUDGE),)
chaos:
	$(GO) run ./tools/chaos -judge $(JUDGE) $(if $(IP),-ip $(IP))
else
chaos: test-deps build
	$(GO) run ./tools/chaos -agent bin/leasekeeper -hook bin/leasekeeper-hook -duration $(DURATION) -seed $(SEED) -faults "$(FAULTS)" $(if $(PAIR),-pair) $(if $(filter 2,$(VLANS)),-pair-vlans) $(if $(filter maas,$(TIMERS)),-maas-timers) $(if $(filter 3,$(RACKS)),-pair-partners) $(if $(LOG),-log-level $(LOG))
endif

# The Debian package (debian/, packaging/): bin/deb/leasekeeper_*.deb, built
# with dpkg-buildpackage in a copy of the tree and checked by lintian (no
# errors, no warnings).
deb-deps:
	scripts/install-deps build-essential debhelper dpkg-dev fakeroot lintian man-db

deb: deb-deps
	GO=$(GO) scripts/build-deb

# Installs that .deb on this machine, checks what it installed (files,
# owners, modes, user, units, AppArmor, the hook), then purges it and
# checks nothing is left. Needs root; purges even when a check fails.
test-deb: deb test-deps
	scripts/install-deps apparmor systemd
	GO=$(GO) scripts/test-deb bin/deb/leasekeeper_*.deb

clean:
	rm -rf bin
