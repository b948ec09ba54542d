#!/usr/bin/env bash
# The README's screenshot of the HTML report: the quickstart diagnosis with --html, rendered by
# headless Chromium (Debian's package `chromium`). Run from the repository root.
set -eu
cargo run -q -- bisect --config configs/quickstart.toml --html docs/quickstart-report.html
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1440,1900 \
    --screenshot=docs/quickstart-report.png "file://$PWD/docs/quickstart-report.html"
