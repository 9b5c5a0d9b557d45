#!/bin/sh
# leasekeeper on a node or container: release its DHCP leases at clean
# shutdown. Give this file to cloud-init as user-data (as it is, or as a
# text/x-shellscript part next to your own cloud-config; see README.md).
# It runs once per instance, late in boot, with the network up.
#
# Settings (edit here, or export them when running the script by hand):
#   LEASEKEEPER_URL     where to fetch a static leasekeeper binary from when
#                       this machine does not already have one (http, https
#                       or file URL; e.g. a file server on the rack).
#   LEASEKEEPER_SHA256  its expected SHA-256 (hex, either case); required
#                       with LEASEKEEPER_URL.
#   LEASEKEEPER_ROOT    install into this root file system (a container's
#                       rootfs, a mounted image) instead of this machine.
#                       Nothing inside it is run or written by this script:
#                       leasekeeper install-shutdown-unit --root copies
#                       itself in and writes the unit, every path resolved
#                       inside the root.
#   LEASEKEEPER_AT_REBOOT  "1": release at a reboot too (by default a
#                       rebooting machine keeps its addresses, asking for
#                       them again as it comes back).
set -eu

LEASEKEEPER_URL="${LEASEKEEPER_URL:-}"
LEASEKEEPER_SHA256="${LEASEKEEPER_SHA256:-}"
LEASEKEEPER_ROOT="${LEASEKEEPER_ROOT:-}"
LEASEKEEPER_AT_REBOOT="${LEASEKEEPER_AT_REBOOT:-}"
dest="/usr/local/sbin/leasekeeper"

log() { echo "leasekeeper-node: $*" >&2; }

case "$LEASEKEEPER_AT_REBOOT" in
"" | 0) set -- ;;
1) set -- --at-reboot ;;
*)
	log "LEASEKEEPER_AT_REBOOT is \"$LEASEKEEPER_AT_REBOOT\": want 1 (or nothing)"
	exit 1
	;;
esac

# fetch URL FILE: download and verify.
fetch() {
	if [ -z "$LEASEKEEPER_SHA256" ]; then
		log "LEASEKEEPER_SHA256 must be set with LEASEKEEPER_URL (the binary runs as root)"
		return 1
	fi
	case "$1" in
	file://*)
		# wget has no file scheme, and a node may have only wget.
		src="${1#file://}"
		src="${src#localhost}"
		if ! cp "$src" "$2"; then
			log "cannot copy $1"
			return 1
		fi
		;;
	*)
		if command -v curl >/dev/null 2>&1; then
			if ! curl -fsSL --retry 5 --max-time 120 -o "$2" "$1"; then
				log "cannot download $1 (curl's error above)"
				return 1
			fi
		elif command -v wget >/dev/null 2>&1; then
			# -nv, not -q: a failure says why.
			if ! wget -nv -T 120 -O "$2" "$1"; then
				log "cannot download $1 (wget's error above)"
				return 1
			fi
		else
			log "neither curl nor wget is installed; cannot fetch $1"
			return 1
		fi
		;;
	esac
	# sha256sum prints lower case; the setting may be either.
	got="$(sha256sum "$2" | cut -d' ' -f1)"
	want="$(printf '%s' "$LEASEKEEPER_SHA256" | tr 'A-F' 'a-f')"
	if [ "$got" != "$want" ]; then
		log "checksum mismatch for $1: got $got, want $want"
		return 1
	fi
	chmod 0755 "$2"
}

# The leasekeeper of this machine.
bin=""
for c in /usr/sbin/leasekeeper /usr/local/sbin/leasekeeper /usr/bin/leasekeeper /usr/local/bin/leasekeeper; do
	if [ -x "$c" ]; then
		bin="$c"
		break
	fi
done

if [ -n "$LEASEKEEPER_ROOT" ]; then
	tmp=""
	if [ -z "$bin" ]; then
		if [ -z "$LEASEKEEPER_URL" ]; then
			log "leasekeeper is not installed here and LEASEKEEPER_URL is not set; nothing done"
			exit 1
		fi
		tmp="$(mktemp)"
		trap 'rm -f "$tmp"' EXIT
		fetch "$LEASEKEEPER_URL" "$tmp" || exit 1
		bin="$tmp"
	fi
	"$bin" install-shutdown-unit --root "$LEASEKEEPER_ROOT" --copy-binary "$@"
	exit
fi

if [ -z "$bin" ]; then
	if [ -z "$LEASEKEEPER_URL" ]; then
		log "leasekeeper is not installed and LEASEKEEPER_URL is not set; nothing done"
		exit 1
	fi
	mkdir -p "$(dirname "$dest")"
	tmp="$dest.download"
	trap 'rm -f "$tmp"' EXIT
	fetch "$LEASEKEEPER_URL" "$tmp" || exit 1
	mv -f "$tmp" "$dest"
	trap - EXIT
	bin="$dest"
	log "installed $dest from $LEASEKEEPER_URL"
fi
exec "$bin" install-shutdown-unit --binary "$bin" "$@"
