# Shared helpers for .ci/test and .ci/demo (sourced, not executed).
# Both scripts cd to the repository root before sourcing this file.

# Create .venv with python3 (or reuse a working one) and `pip install -e SPEC` into it; nothing when
# FENCEMIGRATE_VENV_READY is set (.ci/run did it before starting .ci/lint and .ci/test side by side).
ensure_venv() {
    local spec=$1
    [ -z "${FENCEMIGRATE_VENV_READY:-}" ] || return 0
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

# Run initdb once for every PostgreSQL server of the run: export PG_INITDB_COPY (which .ci/postgres
# `start` copies, also for the servers tests start of their own) and delete it on exit. Call it
# from the main shell after start_postgres, like start_server.
make_initdb_copy() {
    local output previous
    output=$(bash .ci/postgres initdb)
    PG_INITDB_COPY=$(printf '%s\n' "$output" | sed -n 's/^PGDATA=//p')
    if [ -z "$PG_INITDB_COPY" ]; then
        echo "unexpected output from .ci/postgres initdb: $output" >&2
        return 1
    fi
    export PG_INITDB_COPY
    previous=$(trap -p EXIT | sed -e "s/^trap -- //" -e "s/ EXIT\$//")
    eval "previous=$previous"
    trap "bash .ci/postgres stop '$PG_INITDB_COPY'${previous:+; $previous}" EXIT
}

# Start a throwaway server with .ci/SCRIPT, whose `start` prints exactly KEY_PORT=<port> and
# KEY_DIR=<dir>; stop it on exit (after whatever the EXIT trap already does) and set the variables
# named PORT_VAR and DIR_VAR. Like start_postgres, call it from the main shell.
#   start_server redis REDIS REDIS_TEST_PORT REDIS_TEST_DIR
start_server() {
    local script=$1 key=$2 port_var=$3 dir_var=$4 output port dir previous
    output=$(bash ".ci/$script" start)
    port=$(printf '%s\n' "$output" | sed -n "s/^${key}_PORT=//p")
    dir=$(printf '%s\n' "$output" | sed -n "s/^${key}_DIR=//p")
    if [ -z "$port" ] || [ -z "$dir" ]; then
        echo "unexpected output from .ci/$script start: $output" >&2
        return 1
    fi
    printf -v "$port_var" '%s' "$port"
    printf -v "$dir_var" '%s' "$dir"
    # `trap -p EXIT` prints the current handler quoted for the shell: keep it, then stop this server.
    previous=$(trap -p EXIT | sed -e "s/^trap -- //" -e "s/ EXIT\$//")
    eval "previous=$previous"
    trap "bash .ci/$script stop '$dir'${previous:+; $previous}" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# The Redis lease backend's tests: REDIS_TEST_PORT / REDIS_TEST_DIR.
start_redis() {
    start_server redis REDIS REDIS_TEST_PORT REDIS_TEST_DIR
}

# The MySQL/MariaDB tests and benchmark: MYSQL_TEST_PORT / MYSQL_TEST_DIR.
start_mariadb() {
    start_server mariadb MYSQL MYSQL_TEST_PORT MYSQL_TEST_DIR
}

# Install a Debian package when its command is missing (only possible as root).
#   ensure_command faketime faketime
ensure_command() {
    local command=$1 package=$2
    command -v "$command" >/dev/null && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "$command is missing and cannot be installed here: install the $package package" >&2
        return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package"
}
