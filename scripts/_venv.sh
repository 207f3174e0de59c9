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

# Reads pip's output on stdin and prints one short line per step on stderr: each package
# collected (numbered), building, installing and the end, so a first install that takes a
# minute shows where it is. On a terminal the line is rewritten in place.
awa_install_progress() {
    local line n=0 text
    local tty=0
    [ -t 2 ] && tty=1
    while IFS= read -r line; do
        case "$line" in
            Collecting\ *)
                n=$((n + 1))
                text="    [$n] collecting ${line#Collecting }"
                ;;
            *"Building wheel"* | *"Building editable"*)
                text="    building ${line#*for }"
                ;;
            "Installing collected packages:"*)
                local names="${line#Installing collected packages: }"
                local commas="${names//[^,]/}"
                text="    installing $((${#commas} + 1)) packages..."
                ;;
            "Successfully installed"*)
                text="    done"
                ;;
            *) continue ;;
        esac
        if [ "$tty" = 1 ]; then
            local width="${COLUMNS:-80}"
            printf '\r\033[K%s' "${text:0:$((width - 1))}" >&2
        else
            echo "$text" >&2
        fi
    done
    if [ "$tty" = 1 ]; then
        printf '\n' >&2
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
        echo "    (the first time takes a minute or so; pip's full log: $AWA_VENV/.awa-install.log)" >&2
        # pip's full output goes to the log; awa_install_progress shows one line per step.
        local log="$AWA_VENV/.awa-install.log"
        local status_file="$AWA_VENV/.awa-install.status"
        # The pipeline always succeeds (callers may run under `set -e -o pipefail`); pip's
        # own status goes through a file. An `if` keeps errexit out of the subshell.
        # Dependency groups need pip >= 25.1; a venv may start with an older one.
        (
            if cd "$AWA_ROOT" && "$AWA_VENV/bin/python" -m pip install \
                --disable-pip-version-check --upgrade 'pip>=25.1' &&
                "$AWA_VENV/bin/python" -m pip install --progress-bar off \
                    --disable-pip-version-check -e "$spec" ${group_args[@]+"${group_args[@]}"}; then
                echo 0 >"$status_file"
            else
                echo 1 >"$status_file"
            fi
        ) 2>&1 | tee "$log" | awa_install_progress
        if [ "$(cat "$status_file" 2>/dev/null)" != 0 ]; then
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

# Keep Python's bytecode caches for a test run. A host that sets PYTHONDONTWRITEBYTECODE
# (some images do) makes every pytest worker rewrite and compile every test module again
# at each collection (14 s of CPU against 4.8 s with the caches, measured on this kind of
# host) and every process a test starts (the CLI, the docs' examples, worker processes)
# compile awa from source again. __pycache__ is ignored by git.
awa_keep_bytecode() {
    unset PYTHONDONTWRITEBYTECODE
}
