# shellcheck shell=bash
# Sourced by scripts/test: make sure the browser tests have a Chromium to drive.
#
# The browser tests use the system's Chromium (Debian's `chromium` package at
# /usr/bin/chromium, or $AWA_CHROMIUM); Playwright itself never downloads a browser.
# When none is installed and this runs as root with apt-get, it installs the package once.
# Otherwise it says so, and the browser tests skip with the same reason.
# AWA_INSTALL_CHROMIUM=0 turns the install off.

awa_ensure_chromium() {
    export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
    local path="${AWA_CHROMIUM:-/usr/bin/chromium}"
    if [ -x "$path" ] || command -v chromium >/dev/null 2>&1; then
        return 0
    fi
    if [ "${AWA_INSTALL_CHROMIUM:-1}" = "0" ]; then
        echo "==> no Chromium at $path (AWA_INSTALL_CHROMIUM=0): browser tests will skip" >&2
        return 0
    fi
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "==> no Chromium at $path and no root apt-get to install it: browser tests" \
            "will skip (install a Chromium and set AWA_CHROMIUM to run them)" >&2
        return 0
    fi
    echo "==> installing Debian's chromium for the browser tests" >&2
    local log="${TMPDIR:-/tmp}/awa-chromium-install.log"
    if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; } \
        >"$log" 2>&1; then
        echo "==> installing chromium failed (log: $log): browser tests will skip" >&2
    fi
    return 0
}
