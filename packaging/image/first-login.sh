# shellcheck shell=sh
# The first root login has set a new password (it was expired): stop showing the first one at the prompt.
if [ "$(id -u)" = 0 ] && [ -e /etc/issue.d/sensor-first-password.issue ]; then
  rm -f /etc/issue.d/sensor-first-password.issue
fi
