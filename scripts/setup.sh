#!/usr/bin/env bash
# Install everything prism needs on a fresh Debian 12 machine (as root):
# QEMU and virtme-ng to boot test kernels, fio, the toolchain bits Kbuild
# uses, mmdebstrap, the packaging tools, PostgreSQL's binaries (no
# cluster), and this Python package in a virtual environment in the cache
# (scripts/venv.sh; `prism` in /usr/local/bin runs it, the system's
# python3 is left as it is); then the pinned kernels, each in a
# build root of its Debian release made with mmdebstrap (headers and
# linux-source installed there) with its image extracted from the .deb,
# all in ~/.cache/prism-7x ($PRISM_ROOTS), outside the repository and
# shared by every PRISM_CACHE (prism/host/kernels.py says how).
# No kernel is installed on the host: /boot, GRUB's default and
# /lib/modules stay as they were (tests/test_harness.py checks the
# kernel step).
# Safe to run again: what is there already is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "scripts/setup.sh: run as root (it installs packages with apt)" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# python3 (3.11 on Debian 12) and its venv module for the package; the
# rest for the VMs, the module build and packaging, and the workloads.
APT_PACKAGES=(python3 python3-venv qemu-system-x86 kmod udev fio gcc make perl xz-utils pahole dkms
	mmdebstrap
	dpkg-dev debhelper dh-dkms lintian
	busybox-static e2fsprogs util-linux procps gawk xfsprogs postgresql-15)

missing=()
for p in "${APT_PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	echo "setup: installing ${missing[*]}"
	# PostgreSQL is for the pgbench workloads, which make their own
	# database: no system cluster wanted (Debian would create and start one).
	if [[ " ${missing[*]} " == *" postgresql-15 "* ]] &&
		[ ! -e /etc/postgresql-common/createcluster.conf ]; then
		mkdir -p /etc/postgresql-common/createcluster.d
		echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/prism.conf
	fi
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

. scripts/venv.sh
if [ ! -x "$PRISM_VENV/bin/python" ]; then
	echo "setup: making the virtual environment $PRISM_VENV"
	python3 -m venv "$PRISM_VENV"
fi
echo "setup: installing the prism Python package into $PRISM_VENV (editable, from this checkout)"
"$PRISM_VENV/bin/python" -m pip install -q -e ".[test]"
# prism on PATH: the environment's bin first, where its vng is.
link=/usr/local/bin/prism
if [ -e "$link" ] && ! grep -q "^# prism-venv-wrapper" "$link" 2>/dev/null; then
	echo "setup: $link exists and is not setup's: leaving it; run $PRISM_VENV/bin/prism" >&2
else
	printf '#!/bin/sh\n# prism-venv-wrapper, written by scripts/setup.sh\nPATH="%s/bin:$PATH" exec "%s/bin/prism" "$@"\n' \
		"$PRISM_VENV" "$PRISM_VENV" >"$link"
	chmod 755 "$link"
	echo "setup: $link runs prism from $PRISM_VENV"
fi

echo "setup: fetching the pinned kernels"
PATH="$PRISM_VENV/bin:$PATH" "$PRISM_VENV/bin/prism" fetch --kernel all
