#!/bin/sh
# Usage: make_deb.sh BUNDLE_DIR VERSION OUT_DIR
# Packs the PyInstaller bundle as a .deb with Debian's own tools: the bundle in
# /opt/fireside, /usr/bin/fireside, a menu entry with the hicolor icons that opens .gguf
# files, and their MIME type (shared-mime-info's and desktop-file-utils' dpkg triggers
# update the desktop's databases, so no maintainer script is needed). Depends comes
# from dpkg-shlibdeps over every ELF file in the bundle, so it lists exactly the system
# libraries the bundle does not carry (Qt's xcb platform, EGL, fontconfig, glibc...).
set -eu
BUNDLE=$(cd "$1" && pwd)
VERSION=$2
OUT=$(mkdir -p "$3" && cd "$3" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ARCH=$(dpkg --print-architecture)
STAGE=$ROOT/build/deb/fireside
PKG=$STAGE/pkg

rm -rf "$STAGE"
mkdir -p "$PKG/DEBIAN" "$PKG/opt" "$PKG/usr/bin" "$PKG/usr/share/applications" \
    "$PKG/usr/share/icons/hicolor/scalable/apps" "$PKG/usr/share/doc/fireside" \
    "$PKG/usr/share/mime/packages"
cp -a "$BUNDLE" "$PKG/opt/fireside"
install -m 755 "$HERE/fireside.sh" "$PKG/usr/bin/fireside"
install -m 644 "$ROOT/resources/fireside.desktop" "$PKG/usr/share/applications/fireside.desktop"
install -m 644 "$ROOT/resources/fireside.svg" "$PKG/usr/share/icons/hicolor/scalable/apps/fireside.svg"
install -m 644 "$HERE/fireside-gguf.xml" "$PKG/usr/share/mime/packages/fireside.xml"
for png in "$ROOT"/resources/icons/fireside-*.png; do
    size=$(basename "$png" .png | sed 's/^fireside-//')
    mkdir -p "$PKG/usr/share/icons/hicolor/${size}x${size}/apps"
    install -m 644 "$png" "$PKG/usr/share/icons/hicolor/${size}x${size}/apps/fireside.png"
done
cat >"$PKG/usr/share/doc/fireside/copyright" <<EOF
Fireside is released under the MIT license. It ships the SmolLM2-135M-Instruct model
(Apache-2.0), Python, Qt 6 (LGPL-3.0), llama.cpp and the other libraries named in
Help > About; their license texts are in /opt/fireside/_internal/resources/licenses.
EOF
if command -v desktop-file-validate >/dev/null 2>&1; then
    desktop-file-validate "$PKG/usr/share/applications/fireside.desktop"
fi

# dpkg-shlibdeps wants a source package's debian/control; it reads only this stub.
mkdir -p "$STAGE/debian"
printf 'Source: fireside\n\nPackage: fireside\nArchitecture: any\n' >"$STAGE/debian/control"
# Folders with bundled libraries: what is found there is private, not a dependency.
LIBDIRS=$(find "$PKG/opt/fireside" -name '*.so*' -type f -exec dirname {} \; | sort -u \
    | sed 's/^/-l/' | tr '\n' ' ')
# llama.cpp's Vulkan backend is left out: the app runs without it (on the CPU) where the
# system has no Vulkan loader, so that is recommended rather than depended on.
ELFS=$(find "$PKG/opt/fireside" -type f \( -name '*.so*' -o -perm -u+x \) \
    ! -name 'libggml-vulkan*' -exec sh -c 'head -c 4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
VULKAN=$(find "$PKG/opt/fireside" -type f -name 'libggml-vulkan*' | head -n 1)
# shellcheck disable=SC2086 # word splitting of the lists is intended
(cd "$STAGE" && dpkg-shlibdeps -O --ignore-missing-info $LIBDIRS $ELFS) \
    >"$STAGE/substvars" 2>"$STAGE/shlibdeps.log" || {
    cat "$STAGE/shlibdeps.log" >&2
    echo "dpkg-shlibdeps failed: packaging/linux/build-deps.sh installs what it needs" >&2
    exit 1
}
DEPENDS=$(sed -n 's/^shlibs:Depends=//p' "$STAGE/substvars")

{
    cat <<EOF
Package: fireside
Version: $VERSION
Architecture: $ARCH
Maintainer: ${DEB_MAINTAINER:-Fireside developers <fireside@users.noreply.invalid>}
Installed-Size: $(du -sk "$PKG" --exclude=DEBIAN | cut -f1)
Depends: $DEPENDS
EOF
    [ -z "$VULKAN" ] || echo "Recommends: libvulkan1"
    cat <<EOF
Section: utils
Priority: optional
Description: private desktop chat for local language models
 Fireside chats with language models in GGUF format on your own computer: no
 account, no telemetry, no downloads while it runs. It finds the models already
 on your disk and ships SmolLM2-135M-Instruct, so it answers on first launch.
EOF
} >"$PKG/DEBIAN/control"

DEB=$OUT/fireside_${VERSION}_$ARCH.deb
dpkg-deb --root-owner-group -Zxz --build "$PKG" "$DEB" >/dev/null
echo "$DEB"
