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

# Start a throwaway redis-server via .ci/redis (the Redis lease backend's tests), stop it on
# exit (after whatever the EXIT trap already does) and set REDIS_TEST_PORT / REDIS_TEST_DIR.
# Like start_postgres, call it from the main shell.
start_redis() {
    local redis_env previous
    redis_env=$(bash .ci/redis start)
    REDIS_TEST_PORT=$(printf '%s\n' "$redis_env" | sed -n 's/^REDIS_PORT=//p')
    REDIS_TEST_DIR=$(printf '%s\n' "$redis_env" | sed -n 's/^REDIS_DIR=//p')
    if [ -z "$REDIS_TEST_PORT" ] || [ -z "$REDIS_TEST_DIR" ]; then
        echo "unexpected output from .ci/redis start: $redis_env" >&2
        return 1
    fi
    # `trap -p EXIT` prints the current handler quoted for the shell: keep it, then stop Redis.
    previous=$(trap -p EXIT | sed -e "s/^trap -- //" -e "s/ EXIT\$//")
    eval "previous=$previous"
    trap "bash .ci/redis stop \"\$REDIS_TEST_DIR\"${previous:+; $previous}" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Start a throwaway MariaDB via .ci/mariadb (the MySQL/MariaDB tests), stop it on exit (after
# whatever the EXIT trap already does) and set MYSQL_TEST_PORT / MYSQL_TEST_DIR. Like
# start_postgres, call it from the main shell.
start_mariadb() {
    local mysql_env previous
    mysql_env=$(bash .ci/mariadb start)
    MYSQL_TEST_PORT=$(printf '%s\n' "$mysql_env" | sed -n 's/^MYSQL_PORT=//p')
    MYSQL_TEST_DIR=$(printf '%s\n' "$mysql_env" | sed -n 's/^MYSQL_DIR=//p')
    if [ -z "$MYSQL_TEST_PORT" ] || [ -z "$MYSQL_TEST_DIR" ]; then
        echo "unexpected output from .ci/mariadb start: $mysql_env" >&2
        return 1
    fi
    previous=$(trap -p EXIT | sed -e "s/^trap -- //" -e "s/ EXIT\$//")
    eval "previous=$previous"
    trap "bash .ci/mariadb stop \"\$MYSQL_TEST_DIR\"${previous:+; $previous}" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
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
