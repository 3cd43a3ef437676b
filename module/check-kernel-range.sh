#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# check-kernel-range.sh KVER: exit 0 if kernel KVER (`uname -r`) is of a
# series prism is tested on (kernel-range, beside this script), or if the
# user opted in to building for any kernel; else say why on stderr and
# exit 1. The Makefile stops there; dkms.conf marks the kernel excluded,
# so DKMS skips it (exit 77) and apt's kernel install completes, the
# kernel booting with its own schedulers.
#
# The opt-in, for a kernel prism was not tested on: PRISM_ANY_KERNEL=yes
# in the environment (make PRISM_ANY_KERNEL=1 works too), or in
# /etc/default/prism-iosched (a shell file: DKMS's runs from apt see no
# environment of yours), read when the environment does not set it.
set -eu
kver=${1:?usage: check-kernel-range.sh KVER}
me="prism-iosched"
here=$(dirname "$0")
# shellcheck source=kernel-range
. "$here/kernel-range"

defaults=${PRISM_DEFAULTS:-/etc/default/prism-iosched}
if [ -z "${PRISM_ANY_KERNEL:-}" ] && [ -r "$defaults" ]; then
	# shellcheck source=/dev/null
	. "$defaults"
fi

num() {
	echo "$1" | awk -F. '{ print $1 * 1000 + $2 }'
}

series=$(echo "$kver" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
if [ -z "$series" ]; then
	echo "$me: cannot tell the Linux series of kernel $kver" >&2
	exit 1
fi
if [ "$(num "$series")" -ge "$(num "$PRISM_OLDEST_SERIES")" ] &&
	[ "$(num "$series")" -le "$(num "$PRISM_NEWEST_SERIES")" ]; then
	exit 0
fi
case "${PRISM_ANY_KERNEL:-}" in
"" | 0 | no | n | false)
	;;
*)
	echo "$me: kernel $kver (Linux $series) is outside $PRISM_OLDEST_SERIES to" \
		"$PRISM_NEWEST_SERIES, the series prism is tested on; building anyway" \
		"(PRISM_ANY_KERNEL=$PRISM_ANY_KERNEL)" >&2
	exit 0
	;;
esac
cat >&2 <<MSG
$me: kernel $kver is Linux $series, outside $PRISM_OLDEST_SERIES to $PRISM_NEWEST_SERIES, the range of
$me:   series prism is tested on. Not building it (DKMS skips it; that kernel
$me:   boots with its own schedulers): the elevator API changes between
$me:   releases, so a build may fail, or build and misbehave.
$me: To build anyway: make PRISM_ANY_KERNEL=1, or for DKMS put
$me:   PRISM_ANY_KERNEL=yes in $defaults and run: dkms autoinstall -k $kver
MSG
exit 1
