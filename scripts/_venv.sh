# shellcheck shell=bash
# Sourced by scripts/test and scripts/demo: make sure .venv exists and holds this checkout.
#
#   awa_ensure_venv [EXTRAS]   e.g. awa_ensure_venv dev
#
# Creates .venv with python >= 3.11 when missing, then runs `pip install -e '.[EXTRAS]'`
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
    local spec="."
    [ -n "$extras" ] && spec=".[$extras]"

    if [ ! -x "$AWA_VENV/bin/python" ]; then
        local python
        if ! python="$(awa_find_python)"; then
            echo "error: Python 3.11 or newer is required (set PYTHON=/path/to/python3)" >&2
            return 1
        fi
        echo "==> creating $AWA_VENV with $python" >&2
        "$python" -m venv "$AWA_VENV" || return 1
    fi

    local stamp="$AWA_VENV/.awa-install-${extras:-base}"
    local want
    want="$(awa_hash "$AWA_ROOT/pyproject.toml")"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "==> installing awa-py ($spec) into $AWA_VENV" >&2
        # pip's output is kept out of the way unless the install fails.
        local log="$AWA_VENV/.awa-install.log"
        if ! (cd "$AWA_ROOT" && "$AWA_VENV/bin/python" -m pip install \
            --disable-pip-version-check -e "$spec") >"$log" 2>&1; then
            cat "$log" >&2
            echo "error: installing $spec failed (log: $log)" >&2
            return 1
        fi
        echo "$want" >"$stamp"
        # Any install with extras also satisfies the plain install.
        echo "$want" >"$AWA_VENV/.awa-install-base"
    fi

    AWA_PY="$AWA_VENV/bin/python"
    PATH="$AWA_VENV/bin:$PATH"
    export AWA_PY PATH
}
