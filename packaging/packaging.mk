# Packaging (issue 13): `make deb`, `make repo`, `make image`. Included from the top-level Makefile.
# Building needs these Debian packages (never needed to run the appliance); the tests build too, so
# `make test` installs them as well.
PACKAGING_APT_PACKAGES := python3-venv python3-dev debootstrap dpkg-dev gnupg apt-utils squashfs-tools \
  grub-pc-bin grub-efi-amd64-bin xorriso mtools qemu-system-x86 ovmf
TEST_APT_PACKAGES += $(PACKAGING_APT_PACKAGES)
DEB_DIR := build/deb
REPO_DIR := var/packaging/repo
IMAGE := build/image/sensor-appliance.iso

.PHONY: deb repo image packaging-sysdeps
packaging-sysdeps: sysdeps
	$(call apt_ensure,$(PACKAGING_APT_PACKAGES))

# One .deb in build/deb/, signed for Signed-By with the archive key (made once under var/packaging/).
deb: $(GEN) $(AGENTS_GEN) agents $(CONSOLE_DIST) | packaging-sysdeps
	packaging/deb/repo.sh --key
	rm -f $(DEB_DIR)/*.deb
	packaging/deb/build.sh $(DEB_DIR)

# The signed apt repository machines upgrade from (serve var/packaging/repo over HTTP(S)).
repo: deb
	packaging/deb/repo.sh $(REPO_DIR) $(DEB_DIR)/*.deb

# A hybrid BIOS/UEFI ISO of minimal Debian with the package installed.
image: deb
	packaging/image/build.sh $(DEB_DIR)/*.deb $(IMAGE)
