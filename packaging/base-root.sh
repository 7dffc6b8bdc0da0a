#!/bin/bash
# packaging/base-root.sh OUT.tar [EXTRA_PACKAGES]: a debootstrap'd Debian root, cached as a tarball.
# The package test and the image build start from it; a rerun with the same inputs reuses the tarball.
set -euo pipefail
out=$1
extra=${2:-}
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ -s "$out" ]; then exit 0; fi
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.root.XXXXXX")
trap 'rm -rf "$work"' EXIT
# minbase: dpkg, apt and the essentials; python3 and systemd are what the package runs on.
debootstrap --variant=minbase --include="python3,systemd,ca-certificates${extra:+,$extra}" \
  "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*_Packages
tar -C "$work/root" --numeric-owner -cf "$out.tmp" .
mv "$out.tmp" "$out"
