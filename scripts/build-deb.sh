#!/usr/bin/env bash
# Build the Debian package prism-iosched-dkms (the module's source for
# DKMS, the udev rules, prism-status and prism-cgroup-weight) into
# OUTDIR, then check it with lintian:
#   scripts/build-deb.sh [OUTDIR]        (default: dist/)
#   apt install ./dist/prism-iosched-dkms_VERSION_all.deb
# Needs debhelper and dh-dkms (apt-get install debhelper dh-dkms; lintian
# for the check).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
for tool in dpkg-buildpackage dh dh_dkms; do
	if ! command -v "$tool" >/dev/null; then
		echo "build-deb: $tool not found (apt-get install dpkg-dev debhelper dh-dkms)" >&2
		exit 1
	fi
done
version=$(cat module/VERSION)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/prism-iosched-$version"
mkdir -p "$src"
# tools/prism-status stands alone (the harness imports it as prism.common.status).
cp -r module packaging tools "$src/"
cp -r packaging/debian "$src/debian"
cp module/dkms.conf "$src/debian/prism-iosched-dkms.dkms"
# Not a Debian upload: the distribution is UNRELEASED (as dch writes it for
# a package not yet uploaded) and the contact, the Maintainer field's, an
# address in the reserved .invalid domain (RFC 6761): the project has no
# public address or tracker to name.
maintainer=$(sed -n 's/^Maintainer: //p' packaging/debian/control)
cat >"$src/debian/changelog" <<CHANGES
prism-iosched ($version) UNRELEASED; urgency=medium

  * Built from the prism repository (module/VERSION $version).

 -- $maintainer  $(date -R)
CHANGES
(cd "$src" && dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1) || {
	tail -40 "$work/build.log" >&2
	exit 1
}
mkdir -p "$out"
deb="prism-iosched-dkms_${version}_all.deb"
cp "$work/$deb" "$out/"
echo "build-deb: $out/$deb"
if command -v lintian >/dev/null; then
	# Errors fail the build; warnings are printed.
	lintian --fail-on error "$out/$deb"
fi
