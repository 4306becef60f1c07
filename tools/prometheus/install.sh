#!/usr/bin/env bash
# Install Debian's prometheus package (server + promtool) for the integration tests.
# Idempotent: does nothing when both binaries are already present.
set -euo pipefail

if [[ -x /usr/bin/prometheus && -x /usr/bin/promtool ]]; then
    echo "prometheus already installed: $(/usr/bin/prometheus --version 2>&1 | head -n1)"
    exit 0
fi

SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends: the tests only need the server and promtool, not node-exporter et al.
$SUDO apt-get install -y -qq --no-install-recommends prometheus

# The package's init scripts cannot start a daemon without systemd; the tests start their own server.
/usr/bin/prometheus --version 2>&1 | head -n1
/usr/bin/promtool --version 2>&1 | head -n1
