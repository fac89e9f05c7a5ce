#!/bin/sh
# What building the .deb needs on a Debian/Ubuntu host: dpkg-shlibdeps (dpkg-dev) and
# every library the bundled Qt links to, since dpkg-shlibdeps derives the package's
# Depends from the installed libraries. Installs only what is missing, as root.
set -e
command -v apt-get >/dev/null 2>&1 || exit 0
PACKAGES="dpkg-dev desktop-file-utils libegl1 libgl1 libfontconfig1 libfreetype6 libglib2.0-0
 libdbus-1-3 libxkbcommon0 libxkbcommon-x11-0 libx11-6 libx11-xcb1 libxcb1 libxcb-cursor0
 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 libxcb-render-util0
 libxcb-render0 libxcb-shape0 libxcb-shm0 libxcb-sync1 libxcb-util1 libxcb-xfixes0
 libxcb-xkb1 libwayland-client0 libwayland-cursor0 libwayland-egl1 libgomp1 zlib1g"
MISSING=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || MISSING="$MISSING $p"
done
[ -z "$MISSING" ] && exit 0
[ "$(id -u)" = 0 ] || { echo "Building the .deb needs:$MISSING (run as root to install)"; exit 1; }
echo "Installing build packages:$MISSING"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
