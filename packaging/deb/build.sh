#!/bin/bash
# packaging/deb/build.sh OUTDIR: build sensor-appliance_<version>_<arch>.deb with dpkg-deb.
#   The application runs from a virtual environment at its final path, /opt/sensor-appliance/venv,
#   made with Debian's own /usr/bin/python3 (the interpreter the package depends on), holding the
#   pinned runtime dependencies from requirements.txt, the C fast path compiled for that interpreter,
#   the shipped rules, the Linux agent in the /static payload, the built console (console/dist) and every
#   unit in systemd/ that runs this package's interpreter (a unit added there later ships without edits here).
# Environment: DEB_REVISION (default 1) makes a newer build of the same source (0.1.0-2 > 0.1.0-1);
#   REPO_KEYRING (default var/packaging/archive-keyring.gpg, from repo.sh) is shipped for Signed-By.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
python=/usr/bin/python3
name=sensor-appliance
prefix=/opt/$name
arch=$(dpkg --print-architecture)
upstream=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml")
version="$upstream-${DEB_REVISION:-1}"
pyver=$($python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
agent="$root/var/static/agents/linux-$arch/sensor-agent"
keyring=${REPO_KEYRING:-$root/var/packaging/archive-keyring.gpg}

fail() { echo "build.sh: $*" >&2; exit 1; }
[ -x "$python" ] || fail "$python is missing: install python3 python3-venv python3-dev (Debian)"
[ -f "$root/appliance/generated/sensor_pb2.py" ] || fail "generated code missing: run make gen agents-gen"
[ -x "$agent" ] || fail "$agent is missing: run make agents"
[ -f "$root/console/dist/index.html" ] || fail "console/dist is not built: run make console"
[ -s "$keyring" ] || fail "$keyring is missing: run packaging/deb/repo.sh --key first (make deb does)"

stage=$(mktemp -d "$out/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
venv="$stage$prefix/venv"

# 1. The virtual environment, built where it will live and then moved: only paths written into
#    text files (script shebangs, activate, pyvenv.cfg) and bytecode name the build path; both are fixed below.
$python -m venv "$venv"
grep -vE '^(pyinstaller|pytest|pytest-timeout|grpcio-tools)==|^-r ' "$root/requirements.txt" > "$stage/runtime-requirements.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile -r "$stage/runtime-requirements.txt" 2>&1 \
  | { grep -v '^WARNING: Location' || true; }
# The C fast path, compiled against Debian's python3 headers (pyproject ext-modules).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile --no-deps --no-build-isolation "$root" 2>&1 \
  | { grep -v '^WARNING: Location' || true; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The wheel carries the .py files; data files (detection models, the built console) come from the tree.
(cd "$root" && find appliance agents \( -name __pycache__ -o -name node_modules \) -prune -o -type f \
  ! -name '*.so' ! -name '*.c' ! -name '.*' -print0 | xargs -0 cp --parents -t "$site")
# The enrollment script templates, where appliance/app.py looks for them (beside the package).
cp -r "$root/installer" "$site/installer"
"$venv/bin/python" -c 'import appliance.native.fastpath, appliance.native.dpi, appliance.app' || fail "the packaged venv does not import the appliance"
rm -rf "$site"/sensor_appliance-*.dist-info/direct_url.json
grep -rlI --null "$stage" "$venv/bin" "$venv/pyvenv.cfg" | xargs -0 -r sed -i "s|$stage||g"
find "$venv" -name __pycache__ -type d -prune -exec rm -rf {} +
# Bytecode compiled now, naming the final paths: /opt is read-only to the service (ProtectSystem=strict).
"$venv/bin/python" -m compileall -q -j0 -s "$stage" -p / "$venv/lib" >/dev/null

# 2. Rules, the agent payload, the console if it is built, the units, config, docs.
install -d "$stage$prefix/rules" "$stage$prefix/static/agents/linux-$arch"
install -m 0644 "$root"/rules/*.yaml "$stage$prefix/rules/"
install -m 0755 "$agent" "$stage$prefix/static/agents/linux-$arch/sensor-agent"
install -d "$stage$prefix/console"
cp -r "$root/console/dist" "$stage$prefix/console/dist"
install -d "$stage/lib/systemd/system"
# The package's units are the ones whose ExecStart runs its venv (not the agent's, the concierge's or the
# image-only first-boot unit); the maintainer scripts get the same list.
units=$(grep -l "^ExecStart=$prefix/venv/" "$root"/systemd/*.service | xargs -n1 basename | sort | tr '\n' ' ')
units=${units% }
for unit in $units; do install -m 0644 "$root/systemd/$unit" "$stage/lib/systemd/system/"; done
install -D -m 0644 "$here/config.yaml" "$stage/etc/$name/config.yaml"
install -D -m 0644 "$here/sysctl.conf" "$stage/usr/lib/sysctl.d/60-$name.conf"
install -D -m 0644 "$keyring" "$stage/usr/share/keyrings/$name-archive-keyring.gpg"
install -D -m 0644 "$here/FIRST-LOGIN.txt" "$stage/usr/share/doc/$name/FIRST-LOGIN.txt"
install -m 0644 "$root/README.md" "$stage/usr/share/doc/$name/README.md"

# 3. Control files: dependencies are what the venv was built against.
rm -f "$stage/runtime-requirements.txt"
install -d "$stage/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: $name
Version: $version
Architecture: $arch
Maintainer: Sensor appliance maintainers <appliance@localhost>
Installed-Size: $size
Depends: python$pyver, libc6, systemd, init-system-helpers, passwd, ca-certificates
Section: net
Priority: optional
Description: network security appliance (detection server, REST API, agent payload)
 Agents stream packet metadata over mutual-TLS gRPC; the appliance finds data
 exfiltration and command-and-control traffic and raises alerts.
CONTROL
echo "/etc/$name/config.yaml" > "$stage/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  sed "s|@UNITS@|$units|" "$here/$script" > "$stage/DEBIAN/$script"
  chmod 0755 "$stage/DEBIAN/$script"
done
deb="$out/${name}_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zzstd --build "$stage" "$deb" >/dev/null
echo "$deb"
