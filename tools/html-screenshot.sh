#!/usr/bin/env bash
# The README's screenshot of the HTML report (docs/quickstart-report.html, written by
# tools/readme-report.sh), rendered by headless Chromium (Debian's package `chromium`).
# Run from the repository root.
set -eu
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1440,1900 \
    --screenshot=docs/quickstart-report.png "file://$PWD/docs/quickstart-report.html"
