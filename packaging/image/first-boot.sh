#!/bin/sh
# sensor-first-boot.service: runs once per machine, as root, before the appliance starts.
# Everything secret is made here, on this machine: two machines booted from one ISO never share keys.
#  - the OS console password (root) is random, shown on the local consoles only (/etc/issue), and must be
#    changed at first login; there is no network login at all (no SSH server in the image);
#  - the appliance itself then generates its CA, server certificate and admin token on its first start;
#  - optional systemd credentials from the VM manager or cloud (SMBIOS type 11, qemu fw_cfg):
#      sensor.config       a complete /etc/sensor-appliance/config.yaml (names agents use, ports)
#      sensor.admin-token  the admin token to use instead of a generated one (into the root-only env file)
set -eu
creds=${CREDENTIALS_DIRECTORY:-/nonexistent}  # LoadCredential= in the unit
conf=/etc/sensor-appliance

if [ -r "$creds/sensor.config" ]; then
  install -m 0644 "$creds/sensor.config" "$conf/config.yaml"
  echo "sensor-first-boot: config.yaml from the sensor.config credential"
fi
if [ -r "$creds/sensor.admin-token" ]; then
  umask 077
  token=$(tr -cd 'A-Za-z0-9_.-' < "$creds/sensor.admin-token")
  grep -v '^SENSOR_ADMIN_TOKEN=' "$conf/environment" > "$conf/environment.new" 2>/dev/null || true
  echo "SENSOR_ADMIN_TOKEN=$token" >> "$conf/environment.new"
  chmod 0600 "$conf/environment.new"
  mv "$conf/environment.new" "$conf/environment"
  echo "sensor-first-boot: admin token from the sensor.admin-token credential"
fi

# head closes the pipe after 16 characters: tr's write error then is expected, not news.
password=$(tr -dc 'A-HJ-NP-Za-km-z2-9' < /dev/urandom 2>/dev/null | head -c 16)
echo "root:$password" | chpasswd
chage -d 0 root  # expired: the first login must set a new one
# Shown by the local login prompts only, until root first logs in (profile.d removes it).
mkdir -p /etc/issue.d
cat > /etc/issue.d/sensor-first-password.issue <<ISSUE
First console login: root / $password   (you must change it at once; shown until then)
Then read /usr/share/doc/sensor-appliance/FIRST-LOGIN.txt: admin token, CA, enrolling agents.

ISSUE
touch /var/lib/sensor-appliance/.first-boot-done
