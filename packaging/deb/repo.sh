#!/bin/bash
# The signed apt repository that carries updates.
#   repo.sh --key                 make the archive signing key once (var/packaging/gnupg, mode 0700) and export
#                                 its public half to var/packaging/archive-keyring.gpg (shipped for Signed-By)
#   repo.sh REPODIR DEB...        add the packages to a flat repository and sign its index (InRelease, Release.gpg)
# Every build signs with the same key, so machines installed from an older build trust the newer one.
# The private key never leaves var/packaging/gnupg (git-ignored): back it up, or machines stop getting updates.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
keys=${PACKAGING_KEYS:-$root/var/packaging}
export GNUPGHOME=$keys/gnupg
uid="Sensor appliance archive <appliance@localhost>"
# gpg starts an agent per key directory: stop it when done.
trap 'gpgconf --kill gpg-agent 2>/dev/null || true' EXIT

make_key() {
  install -d -m 0700 "$GNUPGHOME"
  if ! gpg --batch --list-secret-keys "$uid" >/dev/null 2>&1; then
    gpg --batch --quiet --passphrase '' --quick-gen-key "$uid" ed25519 sign never 2>/dev/null
  fi
  gpg --batch --yes --export "$uid" > "$keys/archive-keyring.gpg.tmp"
  mv "$keys/archive-keyring.gpg.tmp" "$keys/archive-keyring.gpg"
}

if [ "${1:-}" = --key ]; then make_key; exit 0; fi
repo=${1:?usage: repo.sh --key | repo.sh REPODIR DEB...}
shift
[ "$#" -gt 0 ] || { echo "repo.sh: no .deb given" >&2; exit 1; }
make_key
mkdir -p "$repo"
cp "$@" "$repo/"
cd "$repo"
apt-ftparchive packages . > Packages
gzip -9nkf Packages
apt-ftparchive -o APT::FTPArchive::Release::Origin=sensor-appliance \
  -o APT::FTPArchive::Release::Label=sensor-appliance release . > Release
rm -f InRelease Release.gpg
gpg --batch --yes --local-user "$uid" --clearsign -o InRelease Release
gpg --batch --yes --local-user "$uid" --armor --detach-sign -o Release.gpg Release
echo "signed $(grep -c '^Package:' Packages) package(s) in $repo"
