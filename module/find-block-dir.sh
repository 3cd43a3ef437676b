#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# find-block-dir.sh KVER DEST: print the path of block/ from the Linux
# source that kernel KVER (a Debian kernel, `uname -r`) was built from,
# extracting it into DEST when needed. prism's module needs the private
# elevator headers in block/, which no headers package ships, and they
# must be of the kernel's exact version: a different release can lay out
# struct request or the elevator API differently.
#
# Where the source comes from, first found:
#   $PRISM_BLOCK_DIR            block/ you extracted yourself (used as is)
#   linux-source-X.Y installed  /usr/src/linux-source-X.Y.tar.xz, if the
#                               package's version is the kernel's
#   $PRISM_SOURCE_DIR/linux-source-X.Y_<version>_all.deb
#                               the package file itself, not installed
#                               (default directory: /usr/src)
#
# find-block-dir.sh --check KVER: only say (exit status 0 or 1, the reason
# on stderr) whether a source is there, extracting nothing; dkms.conf
# uses it to skip, rather than fail, a kernel whose source is missing.
set -eu

check=""
if [ "${1:-}" = "--check" ]; then
	check=1
	shift
fi
kver=${1:?usage: find-block-dir.sh [--check] KVER DEST}
dest=${2:-}
me="prism-iosched"

if [ -n "${PRISM_BLOCK_DIR:-}" ]; then
	if [ ! -f "$PRISM_BLOCK_DIR/elevator.h" ]; then
		echo "$me: PRISM_BLOCK_DIR=$PRISM_BLOCK_DIR has no elevator.h" >&2
		exit 1
	fi
	[ -n "$check" ] || echo "$PRISM_BLOCK_DIR"
	exit 0
fi
if [ -z "$check" ] && [ -z "$dest" ]; then
	echo "usage: find-block-dir.sh [--check] KVER DEST" >&2
	exit 2
fi

# X.Y of the kernel, and the Debian version of the package it came in.
series=$(echo "$kver" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
version=$(dpkg-query -W -f='${Version}' "linux-headers-$kver" 2>/dev/null ||
	dpkg-query -W -f='${Version}' "linux-image-$kver" 2>/dev/null || true)
if [ -z "$series" ] || [ -z "$version" ]; then
	echo "$me: cannot tell which Debian package kernel $kver comes from" \
		"(linux-headers-$kver is not installed); set PRISM_BLOCK_DIR to block/" \
		"of its exact source" >&2
	exit 1
fi
pkg="linux-source-$series"

if [ -z "$check" ] && [ -f "$dest/.version" ] &&
	[ "$(cat "$dest/.version")" = "$version" ] && [ -f "$dest/block/elevator.h" ]; then
	echo "$dest/block"
	exit 0
fi

tarball=""
deb="${PRISM_SOURCE_DIR:-/usr/src}/${pkg}_$(echo "$version" | sed 's/:/%3a/')_all.deb"
have=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
if [ "$have" = "$version" ] && [ -f "/usr/src/$pkg.tar.xz" ]; then
	tarball="/usr/src/$pkg.tar.xz"
elif [ -f "$deb" ]; then
	tarball="deb"
else
	echo "$me: building for $kver needs $pkg version $version" \
		"(installed: ${have:-none}): apt-get install $pkg=$version," \
		"or put ${pkg}_${version}_all.deb in \$PRISM_SOURCE_DIR" >&2
	exit 1
fi
[ -z "$check" ] || exit 0

rm -rf "$dest"
mkdir -p "$dest"
if [ "$tarball" = deb ]; then
	dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/$pkg.tar.xz" | xz -d |
		tar -x -C "$dest" --strip-components=1 "$pkg/Makefile" "$pkg/block"
else
	xz -dc "$tarball" |
		tar -x -C "$dest" --strip-components=1 "$pkg/Makefile" "$pkg/block"
fi
if [ ! -f "$dest/block/elevator.h" ]; then
	echo "$me: no block/elevator.h in the $pkg $version source" >&2
	exit 1
fi
echo "$version" >"$dest/.version"
echo "$dest/block"
