#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# find-block-dir.sh KVER DEST: print the path of block/ from the Linux
# source that kernel KVER (a Debian or Ubuntu kernel, `uname -r`) was
# built from, extracting it into DEST when needed. prism's module needs
# the private elevator headers in block/, which no headers package ships,
# and they must be of the kernel's exact version: a different release can
# lay out struct request or the elevator API differently.
#
# Where the source comes from, first found:
#   $PRISM_BLOCK_DIR            block/ you extracted yourself (used as is)
#   the kernel's source package, installed at the kernel's version:
#     Debian linux-source-X.Y     /usr/src/linux-source-X.Y.tar.xz
#     Ubuntu linux-source-X.Y.Z   /usr/src/linux-source-X.Y.Z/linux-source-X.Y.Z.tar.bz2
#   $PRISM_SOURCE_DIR/PACKAGE_<version>_all.deb
#                               that package's file, not installed
#                               (default directory: /usr/src)
# The version is that of the kernel's package, linux-image-KVER (or
# linux-headers-KVER). A missing source is named with the command that
# installs it: `apt-get install linux-source-X.Y=VERSION` (Ubuntu's name
# where /etc/os-release says Ubuntu or a derivative).
#
# find-block-dir.sh --check KVER: only say (exit status 0 or 1, the reason
# on stderr) whether a source is there, extracting nothing; dkms.conf
# uses it to skip, rather than fail, a kernel whose source is missing.
#
# find-block-dir.sh --installed: for each installed kernel (one with
# /lib/modules/KVER/build) of the series prism is tested on
# (check-kernel-range.sh) that has no prism yet (no prism-iosched.ko in
# its updates/ or updates/dkms/), print KVER on stdout if its source is
# there, else the --check message, with the command, on stderr. The
# package's postinst runs it at install, and from its dpkg trigger (a
# package put files under /usr/src, as linux-source does) to build for
# the kernels whose source has arrived.
#
# PRISM_ROOT: a directory standing for / (/usr/src, /lib/modules,
# /etc/os-release), for tests; dpkg-query still answers for the system.
set -eu

mode=build
case "${1:-}" in
--check) mode=check; shift ;;
--installed) mode=installed; shift ;;
esac
me="prism-iosched"
root=${PRISM_ROOT:-}

if [ "$mode" = installed ]; then
	here=$(dirname "$0")
	missing=""
	for build in "$root"/lib/modules/*/build; do
		[ -e "$build" ] || continue
		k=$(basename "$(dirname "$build")")
		"$here/check-kernel-range.sh" "$k" 2>/dev/null || continue
		for ko in "$root/lib/modules/$k"/updates/prism-iosched.ko* \
			"$root/lib/modules/$k"/updates/dkms/prism-iosched.ko*; do
			[ -e "$ko" ] && continue 2
		done
		if "$here/find-block-dir.sh" --check "$k"; then
			echo "$k"
		else
			missing=1
		fi
	done
	if [ -n "$missing" ]; then
		echo "$me: DKMS builds prism for each kernel above once its source is" \
			"installed (the package's dpkg trigger runs it), or by hand:" \
			"dkms autoinstall -k KVER" >&2
	fi
	exit 0
fi

usage="usage: find-block-dir.sh [--check] KVER DEST | --installed"
kver=${1:?$usage}
dest=${2:-}

if [ -n "${PRISM_BLOCK_DIR:-}" ]; then
	if [ ! -f "$PRISM_BLOCK_DIR/elevator.h" ]; then
		echo "$me: PRISM_BLOCK_DIR=$PRISM_BLOCK_DIR has no elevator.h" >&2
		exit 1
	fi
	[ "$mode" = check ] || echo "$PRISM_BLOCK_DIR"
	exit 0
fi
if [ "$mode" = build ] && [ -z "$dest" ]; then
	echo "$usage" >&2
	exit 2
fi

# installed_version PKG: PKG's version if dpkg has it installed, else "".
installed_version() {
	dpkg-query -W -f='${db:Status-Abbrev}${Version}\n' "$1" 2>/dev/null |
		sed -n 's/^ii *//p'
}

# X.Y of the kernel, and the version of the package it came in.
series=$(echo "$kver" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
version=$(installed_version "linux-image-$kver")
[ -n "$version" ] || version=$(installed_version "linux-headers-$kver")
if [ -z "$series" ] || [ -z "$version" ]; then
	echo "$me: cannot tell which Debian package kernel $kver comes from" \
		"(neither linux-image-$kver nor linux-headers-$kver is installed); set" \
		"PRISM_BLOCK_DIR to block/ of its exact source" >&2
	exit 1
fi
# Extracted before (make's .src-KVER): the source package may be gone.
if [ "$mode" = build ] && [ -f "$dest/.version" ] &&
	[ "$(cat "$dest/.version")" = "$version" ] && [ -f "$dest/block/elevator.h" ]; then
	echo "$dest/block"
	exit 0
fi
# Ubuntu names the source by the upstream part of the version (6.8.0 of
# 6.8.0-49.49), and Debian by the series.
upstream=$(echo "$version" | sed 's/^[0-9]*://; s/-[^-]*$//')
debdir=${PRISM_SOURCE_DIR:-$root/usr/src}
debver=$(echo "$version" | sed 's/:/%3a/')

# found PKG MEMBER UNZIP: whether PKG of the kernel's version is here,
# installed (its tarball /usr/src/MEMBER) or as a .deb in $debdir; if so,
# set pkg, member, unzip and tarball (the tarball's path, or "deb").
found() {
	if [ "$(installed_version "$1")" = "$version" ] && [ -f "$root/usr/src/$2" ]; then
		tarball="$root/usr/src/$2"
	elif [ -f "$debdir/${1}_${debver}_all.deb" ]; then
		tarball=deb
	else
		return 1
	fi
	pkg=$1 member=$2 unzip=$3
}

if ! found "linux-source-$series" "linux-source-$series.tar.xz" xz &&
	! found "linux-source-$upstream" \
		"linux-source-$upstream/linux-source-$upstream.tar.bz2" bzip2; then
	pkg="linux-source-$series" member="$pkg.tar.xz"
	if sed -n 's/^ID\(_LIKE\)\{0,1\}=//p' "$root/etc/os-release" 2>/dev/null |
		tr -d '"' | tr ' ' '\n' | grep -qx ubuntu; then
		pkg="linux-source-$upstream" member="$pkg/$pkg.tar.bz2"
	fi
	have=$(installed_version "$pkg")
	if [ -z "$have" ]; then
		echo "$me: building for $kver needs $pkg version $version" \
			"(installed: none): apt-get install $pkg=$version" >&2
	elif [ "$have" = "$version" ]; then
		echo "$me: building for $kver needs $pkg version $version, installed" \
			"but without $root/usr/src/$member: apt-get install --reinstall" \
			"$pkg=$version" >&2
	else
		# One version of a package at a time: a second kernel of the
		# series finds its source as a .deb beside the installed one.
		echo "$me: building for $kver needs $pkg version $version" \
			"(installed: $have, another kernel's): apt-get install $pkg=$version," \
			"or keep $have and put the .deb in $debdir: cd $debdir &&" \
			"apt-get download $pkg=$version && dkms autoinstall -k $kver" >&2
	fi
	exit 1
fi
[ "$mode" = build ] || exit 0

rm -rf "$dest"
mkdir -p "$dest"
if [ "$tarball" = deb ]; then
	dpkg-deb --fsys-tarfile "$debdir/${pkg}_${debver}_all.deb" |
		tar -xO "./usr/src/$member" | "$unzip" -dc |
		tar -x -C "$dest" --strip-components=1 "$pkg/Makefile" "$pkg/block"
else
	"$unzip" -dc "$tarball" |
		tar -x -C "$dest" --strip-components=1 "$pkg/Makefile" "$pkg/block"
fi
if [ ! -f "$dest/block/elevator.h" ]; then
	echo "$me: no block/elevator.h in the $pkg $version source" >&2
	exit 1
fi
echo "$version" >"$dest/.version"
echo "$dest/block"
