#!/usr/bin/env bash
# Install Debian's Chromium for the HTML report test (tests/analytics/reports/test_report_html.py), if it is not there yet.
# The test drives `chromium --headless` directly (--dump-dom, --screenshot, --log-net-log): no chromedriver,
# no Python browser package. Needs root (apt-get); prints the browser's version at the end.
set -euo pipefail

find_browser() {
    command -v chromium || command -v chromium-browser || true
}

if [[ -z "$(find_browser)" ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "tools/chromium/install.sh: chromium is missing and installing it needs root (apt-get)" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # fonts-dejavu-core: the page's text font (the plots' text is drawn as SVG paths and needs none).
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
browser=$(find_browser)
if [[ -z "$browser" ]]; then
    echo "tools/chromium/install.sh: chromium still not found after apt-get" >&2
    exit 1
fi
"$browser" --version 2>/dev/null | grep -v '^\[' || true
