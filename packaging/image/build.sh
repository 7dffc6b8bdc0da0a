#!/bin/bash
# packaging/image/build.sh DEB OUT.iso: a hybrid BIOS/UEFI live ISO of minimal Debian with the package.
#   debootstrap (cached tarball) + the .deb + systemd-networkd DHCP + serial console + first-boot step,
#   squashed (mksquashfs) and made bootable by grub-mkrescue (GRUB for BIOS and for UEFI, one menu, 3 s).
# Nothing secret is in the image: the CA, admin token and console password are made at first boot.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
deb=$(realpath "${1:?usage: build.sh DEB OUT.iso}")
iso=$(realpath -m "${2:?usage: build.sh DEB OUT.iso}")
base=${IMAGE_BASE_TAR:-$root/var/cache/debootstrap/bookworm-image.tar}
mkdir -p "$(dirname "$iso")"
work=$(mktemp -d "$(dirname "$iso")/.image.XXXXXX")
trap 'rm -rf "$work"' EXIT
fs=$work/root

"$root/packaging/base-root.sh" "$base" "linux-image-amd64,live-boot,systemd-sysv,udev,kmod,initramfs-tools,zstd"
mkdir "$fs"
tar -C "$fs" --numeric-owner -xpf "$base"

# The package, installed the way a user installs it.
cp "$deb" "$fs/tmp/"
chroot "$fs" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg -i "/tmp/$(basename "$deb")" >"$work/dpkg.log" 2>&1 \
  || { cat "$work/dpkg.log" >&2; exit 1; }
rm "$fs/tmp/$(basename "$deb")"
install -m 0755 "$here/first-boot.sh" "$fs/opt/sensor-appliance/first-boot.sh"
install -m 0644 "$root/systemd/sensor-first-boot.service" "$fs/lib/systemd/system/"
install -m 0644 "$here/first-login.sh" "$fs/etc/profile.d/sensor-first-login.sh"

# Wired interfaces by DHCP; nothing else listens (no SSH: no network login at all); serial console.
install -D -m 0644 "$here/20-wired.network" "$fs/etc/systemd/network/20-wired.network"
echo sensor-appliance > "$fs/etc/hostname"
# live-boot writes an ifupdown stanza at boot; networkd does the work, the file only has to be writable.
mkdir -p "$fs/etc/network"
printf '127.0.0.1 localhost\n127.0.1.1 sensor-appliance\n' > "$fs/etc/hosts"
chroot "$fs" systemctl enable systemd-networkd.service sensor-first-boot.service >/dev/null 2>&1
chroot "$fs" systemctl disable systemd-networkd-wait-online.service >/dev/null 2>&1 || true
chroot "$fs" passwd -l root >/dev/null  # locked until first boot sets a random, expired password
# Per machine, never baked: machine id (empty: systemd makes one at boot), keys, state.
: > "$fs/etc/machine-id"
rm -f "$fs/var/lib/dbus/machine-id"
if find "$fs/var/lib/sensor-appliance" -mindepth 1 -not -path '*/static*' | grep -q .; then
  echo "image: state found in /var/lib/sensor-appliance before first boot" >&2; exit 1
fi
rm -rf "$fs/var/cache/apt/archives/"*.deb "$fs/var/lib/apt/lists/"* "$fs/var/log/"*.log

# The initramfs with live-boot's hooks (finds the squashfs on the CD), then the medium.
mkdir -p "$work/iso/live" "$work/iso/boot/grub"
unshare --mount --fork sh -c "mount -t proc proc '$fs/proc' && chroot '$fs' update-initramfs -u -k all" >/dev/null 2>&1
kernels=("$fs"/boot/vmlinuz-*)
initrds=("$fs"/boot/initrd.img-*)
cp "${kernels[-1]}" "$work/iso/live/vmlinuz"
cp "${initrds[-1]}" "$work/iso/live/initrd.img"
mksquashfs "$fs" "$work/iso/live/filesystem.squashfs" -comp zstd -e boot -noappend -quiet >/dev/null
install -m 0644 "$here/grub.cfg" "$work/iso/boot/grub/grub.cfg"
grub-mkrescue -o "$iso" "$work/iso" -- -volid SENSOR_APPLIANCE >/dev/null 2>&1
echo "$iso"
