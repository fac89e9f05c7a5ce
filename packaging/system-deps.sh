#!/bin/sh
# System libraries Qt needs on a bare Debian/Ubuntu machine (a desktop already has them).
# Installs only what is missing, and only when it can (root with apt-get).
set -e
command -v apt-get >/dev/null 2>&1 || exit 0
[ "$(id -u)" = 0 ] || { echo "Skipping system packages (not root)."; exit 0; }
# strace: the test suite proves with it that Fireside opens no network connection.
PACKAGES="libegl1 libgl1 libfontconfig1 libxkbcommon0 libglib2.0-0 libdbus-1-3 fonts-dejavu-core strace"
MISSING=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || MISSING="$MISSING $p"
done
[ -z "$MISSING" ] && exit 0
echo "Installing system packages:$MISSING"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
