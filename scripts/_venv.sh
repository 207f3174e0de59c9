# shellcheck shell=bash
# Sourced by scripts/test and scripts/demo: make sure .venv exists and holds this checkout.
#
#   awa_ensure_venv [EXTRAS] [GROUP]   e.g. awa_ensure_venv "" dev   or   awa_ensure_venv embedded
#
# Creates .venv with python >= 3.11 when missing, upgrades its pip to one that reads
# PEP 735 dependency groups (>= 25.1), then runs `pip install -e '.[EXTRAS]' --group GROUP`
# unless a stamp file shows pyproject.toml has not changed since the last install.
# Afterwards $AWA_PY is the venv's python and .venv/bin is first on PATH.

AWA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AWA_VENV="${AWA_VENV:-$AWA_ROOT/.venv}"

awa_find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
            >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

awa_hash() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

awa_ensure_venv() {
    local extras="${1:-}"
    local group="${2:-}"
    local spec="."
    [ -n "$extras" ] && spec=".[$extras]"
    local group_args=()
    [ -n "$group" ] && group_args=(--group "$group")

    if [ ! -x "$AWA_VENV/bin/python" ]; then
        local python
        if ! python="$(awa_find_python)"; then
            echo "error: Python 3.11 or newer is required (set PYTHON=/path/to/python3)" >&2
            return 1
        fi
        echo "==> creating $AWA_VENV with $python" >&2
        "$python" -m venv "$AWA_VENV" || return 1
    fi

    local stamp="$AWA_VENV/.awa-install-${extras:-base}${group:+-$group}"
    local want
    want="$(awa_hash "$AWA_ROOT/pyproject.toml")"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "==> installing awa-py ($spec${group:+ and group $group}) into $AWA_VENV" >&2
        # pip's output is kept out of the way unless the install fails.
        local log="$AWA_VENV/.awa-install.log"
        # Dependency groups need pip >= 25.1; a venv may start with an older one.
        if ! (cd "$AWA_ROOT" && "$AWA_VENV/bin/python" -m pip install \
            --disable-pip-version-check --upgrade 'pip>=25.1' &&
            "$AWA_VENV/bin/python" -m pip install \
                --disable-pip-version-check -e "$spec" ${group_args[@]+"${group_args[@]}"}) >"$log" 2>&1; then
            cat "$log" >&2
            echo "error: installing $spec failed (log: $log)" >&2
            return 1
        fi
        echo "$want" >"$stamp"
        # Any install with extras or a group also satisfies the plain install.
        echo "$want" >"$AWA_VENV/.awa-install-base"
    fi

    AWA_PY="$AWA_VENV/bin/python"
    PATH="$AWA_VENV/bin:$PATH"
    export AWA_PY PATH
}
