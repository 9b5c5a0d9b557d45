#!/bin/sh
# leasekeeper on a node or container: release its DHCP leases at clean
# shutdown. Give this file to cloud-init as user-data (as it is, or as a
# text/x-shellscript part next to your own cloud-config; see README.md).
# It runs once per instance, late in boot, with the network up.
#
# Settings (edit here, or export them when running the script by hand):
#   LEASEKEEPER_URL     where to fetch a static leasekeeper binary from when
#                       the image does not already have one (http, https
#                       or file URL; e.g. a file server on the rack).
#   LEASEKEEPER_SHA256  its expected SHA-256; required with LEASEKEEPER_URL.
#   LEASEKEEPER_ROOT    install into this root file system instead of the
#                       running system (image building, tests).
set -eu

LEASEKEEPER_URL="${LEASEKEEPER_URL:-}"
LEASEKEEPER_SHA256="${LEASEKEEPER_SHA256:-}"
LEASEKEEPER_ROOT="${LEASEKEEPER_ROOT:-}"
dest="/usr/local/sbin/leasekeeper"

log() { echo "leasekeeper-node: $*" >&2; }

# The leasekeeper that will run at shutdown, as a path on the target.
target_bin=""
for c in /usr/sbin/leasekeeper /usr/local/sbin/leasekeeper /usr/bin/leasekeeper /usr/local/bin/leasekeeper; do
	if [ -x "$LEASEKEEPER_ROOT$c" ]; then
		target_bin="$c"
		break
	fi
done

if [ -z "$target_bin" ]; then
	if [ -z "$LEASEKEEPER_URL" ]; then
		log "leasekeeper is not installed and LEASEKEEPER_URL is not set; nothing done"
		exit 1
	fi
	if [ -z "$LEASEKEEPER_SHA256" ]; then
		log "LEASEKEEPER_SHA256 must be set with LEASEKEEPER_URL (the binary runs as root)"
		exit 1
	fi
	mkdir -p "$LEASEKEEPER_ROOT$(dirname "$dest")"
	tmp="$LEASEKEEPER_ROOT$dest.download"
	trap 'rm -f "$tmp"' EXIT
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --retry 5 --max-time 120 -o "$tmp" "$LEASEKEEPER_URL"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -T 120 -O "$tmp" "$LEASEKEEPER_URL"
	else
		log "neither curl nor wget is installed; cannot fetch $LEASEKEEPER_URL"
		exit 1
	fi
	got="$(sha256sum "$tmp" | cut -d' ' -f1)"
	if [ "$got" != "$LEASEKEEPER_SHA256" ]; then
		log "checksum mismatch for $LEASEKEEPER_URL: got $got, want $LEASEKEEPER_SHA256"
		exit 1
	fi
	chmod 0755 "$tmp"
	mv -f "$tmp" "$LEASEKEEPER_ROOT$dest"
	trap - EXIT
	target_bin="$dest"
	log "installed $dest from $LEASEKEEPER_URL"
fi

# Run the binary that is on this machine. Installing into another root
# runs it from there too: a static build runs anywhere.
if [ -n "$LEASEKEEPER_ROOT" ]; then
	exec "$LEASEKEEPER_ROOT$target_bin" install-shutdown-unit --root "$LEASEKEEPER_ROOT" --binary "$target_bin"
fi
exec "$target_bin" install-shutdown-unit --binary "$target_bin"
