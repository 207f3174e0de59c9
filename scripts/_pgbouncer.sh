# shellcheck shell=bash
# Sourced by scripts/test: make sure the pooler tests have a PgBouncer to start.
#
# tests/integration/test_pooler.py runs Debian's `pgbouncer` (/usr/sbin/pgbouncer, or
# $AWA_PGBOUNCER) in transaction mode in front of the test server. When none is installed
# and this runs as root with apt-get, it installs the package once (the package's own
# service is not started: the tests run their own process on a free port). Otherwise it
# says so, and the pooler tests skip with the same reason.
# AWA_INSTALL_PGBOUNCER=0 turns the install off.

awa_ensure_pgbouncer() {
    local path="${AWA_PGBOUNCER:-/usr/sbin/pgbouncer}"
    if [ -x "$path" ] || command -v pgbouncer >/dev/null 2>&1; then
        return 0
    fi
    if [ "${AWA_INSTALL_PGBOUNCER:-1}" = "0" ]; then
        echo "==> no pgbouncer at $path (AWA_INSTALL_PGBOUNCER=0): pooler tests will skip" >&2
        return 0
    fi
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "==> no pgbouncer at $path and no root apt-get to install it: pooler tests" \
            "will skip (install pgbouncer and set AWA_PGBOUNCER to run them)" >&2
        return 0
    fi
    echo "==> installing Debian's pgbouncer for the pooler tests" >&2
    local log="${TMPDIR:-/tmp}/awa-pgbouncer-install.log"
    if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
        --no-install-recommends pgbouncer; } >"$log" 2>&1; then
        echo "==> installing pgbouncer failed (log: $log): pooler tests will skip" >&2
    fi
    return 0
}
