#!/usr/bin/env bash
# Make sure Prometheus and promtool are installed for the import tests (tests/prom_server.py
# starts its own server on a free port over a TSDB it builds). Where they are missing and this
# runs as root with apt-get, installs Debian's prometheus package (~10 s); otherwise says so and
# exits 0: those tests then skip (fail in CI).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "prom-up: installing Prometheus from Debian's packages"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
    fi
    # the package may start a system server: the tests start their own
    if command -v service >/dev/null 2>&1; then service prometheus stop >/dev/null 2>&1 || true; fi
    exit 0
fi
echo "prom-up: prometheus/promtool are not installed (Debian: apt-get install prometheus);" \
     "the Prometheus import tests will be skipped"
