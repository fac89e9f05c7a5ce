#!/bin/sh
# /usr/bin/fireside: starts the bundle in /opt/fireside.
# Qt warns under the C locale, which is what a bare environment (ssh without LANG,
# cron, env -i) gives: use UTF-8 there, and leave any real locale alone.
case "${LC_ALL:-${LC_CTYPE:-${LANG:-}}}" in
    "" | C | POSIX) LC_ALL=C.UTF-8; export LC_ALL ;;
esac
exec /opt/fireside/fireside "$@"
