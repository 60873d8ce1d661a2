# Shared helpers for .ci/test and .ci/demo (sourced, not executed).
# Both scripts cd to the repository root before sourcing this file.

# Create .venv with python3 (or reuse a working one) and `pip install -e SPEC` into it.
ensure_venv() {
    local spec=$1
    if ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
        rm -rf .venv
        if ! python3 -m venv .venv; then
            # Debian's own python3 needs python3-venv for ensurepip.
            if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
                rm -rf .venv
                DEBIAN_FRONTEND=noninteractive apt-get update -qq
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
                python3 -m venv .venv
            else
                echo "python3 -m venv failed" >&2
                return 1
            fi
        fi
    fi
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"
}

# Start a throwaway PostgreSQL via .ci/postgres, stop it on exit and set
# PG_TEST_PORT / PG_TEST_DATA. Must be called from the main shell (not a subshell)
# because it installs the EXIT trap there.
start_postgres() {
    local pg_env
    pg_env=$(bash .ci/postgres start)   # a failing start aborts the caller (set -e)
    PG_TEST_PORT=$(printf '%s\n' "$pg_env" | sed -n 's/^PGPORT=//p')
    PG_TEST_DATA=$(printf '%s\n' "$pg_env" | sed -n 's/^PGDATA=//p')
    if [ -z "$PG_TEST_PORT" ] || [ -z "$PG_TEST_DATA" ]; then
        echo "unexpected output from .ci/postgres start: $pg_env" >&2
        return 1
    fi
    trap 'bash .ci/postgres stop "$PG_TEST_DATA"' EXIT
    # Make sure Ctrl-C / SIGTERM still run the EXIT trap.
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
