#!/usr/bin/env bash
# Throwaway PostgreSQL 15 and MariaDB servers for the test suite, on loopback only.
#
#   scripts/testdb.sh run -- <command...>   start both servers, run the command with
#                                           MILLRACE_TEST_POSTGRES_URL and
#                                           MILLRACE_TEST_MARIADB_URL exported, stop
#                                           both servers; exit with the command's code.
#   scripts/testdb.sh start                 start long-lived servers (idempotent) and
#                                           print `export ...` lines:
#                                               eval "$(scripts/testdb.sh start)"
#   scripts/testdb.sh env                   print the export lines of running servers
#   scripts/testdb.sh stop                  stop the servers started by `start`
#
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin),
#              MILLRACE_TESTDB_STATE_DIR (default <repo>/.tmp/testdb, or
#                  <repo>/.tmp/testdb-durable with MILLRACE_TESTDB_DURABLE=1),
#              MILLRACE_TESTDB_DURABLE=1: PostgreSQL keeps its durable defaults (fsync,
#                  synchronous_commit and full_page_writes on), for the benchmarks;
#                  without it they are off, which is all the test suite needs.
# Works as root (servers run as the postgres / mysql OS users) or as an ordinary user.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
DURABLE=${MILLRACE_TESTDB_DURABLE:-0}
if [ "$DURABLE" = 1 ]; then
    STATE_DIR=${MILLRACE_TESTDB_STATE_DIR:-$REPO/.tmp/testdb-durable}
else
    STATE_DIR=${MILLRACE_TESTDB_STATE_DIR:-$REPO/.tmp/testdb}
fi
STATE_FILE=$STATE_DIR/state.env
DB_USER=millrace
DB_PASSWORD=millrace
DB_NAME=millrace
PG_READY_SECONDS=30
MY_READY_SECONDS=60
STOP_SECONDS=30

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

# Server state (a started server sets these; the state file records them).
PG_DIR="" PG_PORT="" MY_DIR="" MY_PORT="" MY_PID=""

log() { echo "testdb: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --------------------------------------------------------------------------- helpers

python_bin() {
    local candidate
    for candidate in /usr/bin/python3 "$REPO/.venv/bin/python" python3 python; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c '' >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    die "no Python interpreter found (needed to pick a free port)"
}

free_port() {
    "$(python_bin)" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

apt_install() {
    # apt_install PACKAGE...: install missing Debian packages (root only).
    local missing=() pkg
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$IS_ROOT" -ne 1 ] || ! command -v apt-get >/dev/null 2>&1; then
        die "missing packages: ${missing[*]} (install them, e.g. apt-get install ${missing[*]})"
    fi
    log "installing ${missing[*]}"
    # Keep apt from starting the system services of the packages it installs.
    local own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    } >&2 || rc=$?
    [ "$own_policy" -eq 1 ] && rm -f /usr/sbin/policy-rc.d
    [ "$rc" -eq 0 ] || die "apt-get install ${missing[*]} failed"
}

ensure_packages() {
    if [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pg_ctl" ]; then
        apt_install postgresql-15
    fi
    [ -x "$PG_BIN/initdb" ] || die "PostgreSQL binaries not found in $PG_BIN"
    if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1 &&
        [ ! -x /usr/sbin/mariadbd ] && [ ! -x /usr/sbin/mysqld ]; then
        apt_install mariadb-server
    fi
    # Needed to build the mysqlclient driver, and (unixodbc) to load pyodbc, which
    # mssql-django imports to compile SQL Server's SQL; only installable as root.
    if [ "$IS_ROOT" -eq 1 ]; then
        apt_install libmariadb-dev pkg-config mariadb-client unixodbc
    fi
    export PATH="$PATH:/usr/sbin:/sbin"
}

temp_base() {
    # As root the servers run as other users, who must be able to reach the directory.
    if [ "$IS_ROOT" -eq 1 ]; then echo /tmp; else echo "${TMPDIR:-/tmp}"; fi
}

as_user() {
    # as_user USER CMD...: run CMD as USER when root, else as ourselves.
    local user=$1
    shift
    if [ "$IS_ROOT" -eq 1 ]; then
        (cd / && runuser -u "$user" -- "$@")
    else
        (cd / && "$@")
    fi
}

tail_log() {
    local file=$1
    if [ -f "$file" ]; then
        log "---- last lines of $file ----"
        tail -n 40 "$file" >&2 || true
        log "----"
    fi
}

mariadbd_bin() {
    local candidate
    for candidate in mariadbd mysqld /usr/sbin/mariadbd /usr/sbin/mysqld; do
        if command -v "$candidate" >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    die "mariadbd not found"
}

client_bin() {
    # client_bin NAME FALLBACK: the MariaDB client tool NAME or its mysql* alias.
    if command -v "$1" >/dev/null 2>&1; then echo "$1"; else echo "$2"; fi
}

# --------------------------------------------------------------------------- PostgreSQL

pg_durability() {
    # What the server does on commit: nothing reaches the disk for the test suite;
    # PostgreSQL's own defaults (every commit flushed) for the benchmarks.
    if [ "$DURABLE" = 1 ]; then
        echo "# durable: PostgreSQL's defaults (fsync, synchronous_commit, full_page_writes on)"
    else
        printf 'fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n'
    fi
}

pg_start() {
    local attempt
    PG_DIR=$(mktemp -d "$(temp_base)/millrace-pg.XXXXXX")
    chmod 700 "$PG_DIR"
    [ "$IS_ROOT" -eq 1 ] && chown postgres:postgres "$PG_DIR"
    if ! as_user postgres "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 \
        >"$PG_DIR/initdb.log" 2>&1; then
        tail_log "$PG_DIR/initdb.log"
        die "PostgreSQL initdb failed"
    fi
    for attempt in 1 2 3; do
        PG_PORT=$(free_port)
        as_user postgres sh -c "cat >>'$PG_DIR/data/postgresql.conf'" <<EOF

# millrace throwaway test server
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DIR'
max_connections = 200
$(pg_durability)
EOF
        if as_user postgres setsid -w "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" \
            -w -t "$PG_READY_SECONDS" start </dev/null >/dev/null 2>&1 9>&-; then
            break
        fi
        if [ "$attempt" -eq 3 ] || ! grep -q 'could not bind\|Address already in use' "$PG_DIR/postgres.log" 2>/dev/null; then
            tail_log "$PG_DIR/postgres.log"
            die "PostgreSQL failed to start (data dir $PG_DIR)"
        fi
        log "PostgreSQL port $PG_PORT was taken; retrying"
    done
    local i
    for ((i = 0; i < PG_READY_SECONDS * 2; i++)); do
        "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && break
        sleep 0.5
    done
    if ! "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
        tail_log "$PG_DIR/postgres.log"
        die "PostgreSQL not ready after ${PG_READY_SECONDS}s"
    fi
    if ! as_user postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres \
        -c "CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASSWORD'" \
        -c "CREATE DATABASE $DB_NAME OWNER $DB_USER" >"$PG_DIR/setup.log" 2>&1; then
        tail_log "$PG_DIR/setup.log"
        tail_log "$PG_DIR/postgres.log"
        die "PostgreSQL role/database setup failed"
    fi
}

durable_note() {
    [ "$DURABLE" = 1 ] && echo " (durable: fsync on)"
    return 0
}

pg_running() {
    [ -n "$PG_DIR" ] && [ -n "$PG_PORT" ] && [ -d "$PG_DIR/data" ] &&
        "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null
}

pg_stop() {
    [ -n "$PG_DIR" ] || return 0
    if [ -f "$PG_DIR/data/postmaster.pid" ]; then
        if ! as_user postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t "$STOP_SECONDS" stop >/dev/null 2>&1; then
            local pid
            pid=$(head -n 1 "$PG_DIR/data/postmaster.pid" 2>/dev/null || true)
            if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
                log "pg_ctl stop failed; killing postmaster $pid"
                kill -QUIT "$pid" 2>/dev/null || true
                sleep 1
                kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
    fi
    rm -rf "$PG_DIR"
    PG_DIR="" PG_PORT=""
}

# --------------------------------------------------------------------------- MariaDB

my_root_client() {
    "$(client_bin mariadb mysql)" --no-defaults --protocol=socket -S "$MY_DIR/mysqld.sock" -uroot "$@"
}

my_start() {
    local mysqld attempt i
    mysqld=$(mariadbd_bin)
    MY_DIR=$(mktemp -d "$(temp_base)/millrace-mariadb.XXXXXX")
    chmod 700 "$MY_DIR"
    local user_opt=()
    if [ "$IS_ROOT" -eq 1 ]; then
        chown mysql:mysql "$MY_DIR"
        user_opt=(--user=mysql)
    fi
    local install_db
    install_db=$(client_bin mariadb-install-db mysql_install_db)
    if ! (cd / && "$install_db" --no-defaults --auth-root-authentication-method=normal \
        --datadir="$MY_DIR/data" "${user_opt[@]}" --skip-test-db >"$MY_DIR/install.log" 2>&1); then
        tail_log "$MY_DIR/install.log"
        die "mariadb-install-db failed"
    fi
    for attempt in 1 2 3; do
        MY_PORT=$(free_port)
        : >"$MY_DIR/mariadb.log"
        [ "$IS_ROOT" -eq 1 ] && chown mysql:mysql "$MY_DIR/mariadb.log"
        (cd / && exec setsid "$mysqld" --no-defaults "${user_opt[@]}" \
            --datadir="$MY_DIR/data" --tmpdir="$MY_DIR" \
            --socket="$MY_DIR/mysqld.sock" --pid-file="$MY_DIR/mysqld.pid" \
            --log-error="$MY_DIR/mariadb.log" \
            --bind-address=127.0.0.1 --port="$MY_PORT" --skip-name-resolve \
            --max-connections=300 --innodb-flush-log-at-trx-commit=2 \
            --innodb-doublewrite=0 --innodb-buffer-pool-size=256M \
            --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
            </dev/null >>"$MY_DIR/mariadb.log" 2>&1 9>&-) &
        MY_PID=$!
        local ready=0
        for ((i = 0; i < MY_READY_SECONDS * 2; i++)); do
            if my_root_client -e 'SELECT 1' >/dev/null 2>&1; then
                ready=1
                break
            fi
            kill -0 "$MY_PID" 2>/dev/null || break
            sleep 0.5
        done
        if [ "$ready" -eq 1 ]; then
            [ -s "$MY_DIR/mysqld.pid" ] && MY_PID=$(cat "$MY_DIR/mysqld.pid")
            break
        fi
        if kill -0 "$MY_PID" 2>/dev/null; then
            kill -KILL "$MY_PID" 2>/dev/null || true
            tail_log "$MY_DIR/mariadb.log"
            die "MariaDB not ready after ${MY_READY_SECONDS}s"
        fi
        wait "$MY_PID" 2>/dev/null || true
        if [ "$attempt" -eq 3 ] || ! grep -qi 'address already in use\|Do you already have another' "$MY_DIR/mariadb.log"; then
            tail_log "$MY_DIR/mariadb.log"
            die "MariaDB failed to start (data dir $MY_DIR)"
        fi
        log "MariaDB port $MY_PORT was taken; retrying"
    done
    if ! my_root_client -e "
        CREATE USER '$DB_USER'@'%' IDENTIFIED BY '$DB_PASSWORD';
        CREATE USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
        GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'%' WITH GRANT OPTION;
        GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'localhost' WITH GRANT OPTION;
        CREATE DATABASE $DB_NAME CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
        FLUSH PRIVILEGES;" >"$MY_DIR/setup.log" 2>&1; then
        tail_log "$MY_DIR/setup.log"
        tail_log "$MY_DIR/mariadb.log"
        die "MariaDB user/database setup failed"
    fi
}

my_running() {
    [ -n "$MY_DIR" ] && [ -S "$MY_DIR/mysqld.sock" ] && [ -n "$MY_PID" ] &&
        kill -0 "$MY_PID" 2>/dev/null && my_root_client -e 'SELECT 1' >/dev/null 2>&1
}

my_stop() {
    [ -n "$MY_DIR" ] || return 0
    if [ -n "$MY_PID" ] && kill -0 "$MY_PID" 2>/dev/null; then
        timeout "$STOP_SECONDS" "$(client_bin mariadb-admin mysqladmin)" --no-defaults \
            --protocol=socket -S "$MY_DIR/mysqld.sock" -uroot shutdown >/dev/null 2>&1 ||
            kill -TERM "$MY_PID" 2>/dev/null || true
        local i
        for ((i = 0; i < STOP_SECONDS * 2; i++)); do
            kill -0 "$MY_PID" 2>/dev/null || break
            sleep 0.5
        done
        if kill -0 "$MY_PID" 2>/dev/null; then
            log "MariaDB did not stop; killing $MY_PID"
            kill -KILL "$MY_PID" 2>/dev/null || true
        fi
    fi
    rm -rf "$MY_DIR"
    MY_DIR="" MY_PORT="" MY_PID=""
}

# --------------------------------------------------------------------------- commands

pg_url() { echo "postgres://$DB_USER:$DB_PASSWORD@127.0.0.1:$PG_PORT/$DB_NAME"; }
my_url() { echo "mysql://$DB_USER:$DB_PASSWORD@127.0.0.1:$MY_PORT/$DB_NAME"; }

print_exports() {
    echo "export MILLRACE_TEST_POSTGRES_URL=$(pg_url)"
    echo "export MILLRACE_TEST_MARIADB_URL=$(my_url)"
}

stop_all() {
    my_stop
    pg_stop
}

start_all() {
    ensure_packages
    pg_start
    my_start
}

cmd_run() {
    [ $# -gt 0 ] || die "usage: $0 run -- <command...>"
    trap 'rc=$?; trap - EXIT INT TERM; stop_all; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_all
    export MILLRACE_TEST_POSTGRES_URL MILLRACE_TEST_MARIADB_URL
    MILLRACE_TEST_POSTGRES_URL=$(pg_url)
    MILLRACE_TEST_MARIADB_URL=$(my_url)
    log "PostgreSQL on 127.0.0.1:$PG_PORT$(durable_note), MariaDB on 127.0.0.1:$MY_PORT"
    # Run the command in the background (keeping our stdin) so that a TERM/INT sent to
    # this script is forwarded to it at once and the servers are still stopped after.
    local rc=0 child
    "$@" <&0 &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null || true' TERM
    trap 'kill -INT "$child" 2>/dev/null || true' INT
    while :; do
        rc=0
        wait "$child" || rc=$?
        kill -0 "$child" 2>/dev/null || break
    done
    if [ "$rc" -gt 128 ]; then
        # Possibly the status of an interrupted wait: ask for the recorded one.
        local recorded=0
        wait "$child" 2>/dev/null || recorded=$?
        [ "$recorded" -ne 127 ] && rc=$recorded
    fi
    exit "$rc"
}

load_state() {
    PG_DIR="" PG_PORT="" MY_DIR="" MY_PORT="" MY_PID=""
    # shellcheck disable=SC1090
    [ -f "$STATE_FILE" ] && . "$STATE_FILE"
    return 0
}

save_state() {
    local tmp=$STATE_FILE.new
    {
        printf 'PG_DIR=%q\nPG_PORT=%q\nMY_DIR=%q\nMY_PORT=%q\nMY_PID=%q\n' \
            "$PG_DIR" "$PG_PORT" "$MY_DIR" "$MY_PORT" "$MY_PID"
    } >"$tmp"
    mv "$tmp" "$STATE_FILE"
    print_exports >"$STATE_DIR/env.sh"
}

lock_state() {
    mkdir -p "$STATE_DIR"
    exec 9>"$STATE_DIR/lock"
    flock -w 180 9 || die "timed out waiting for the lock $STATE_DIR/lock"
}

cmd_start() {
    lock_state
    load_state
    if pg_running && my_running; then
        print_exports
        return 0
    fi
    # Partly running or stale: clear what is left, then start afresh.
    stop_all
    rm -f "$STATE_FILE" "$STATE_DIR/env.sh"
    trap 'rc=$?; trap - EXIT INT TERM; if [ $rc -ne 0 ]; then stop_all; fi; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_all
    save_state
    trap - EXIT INT TERM
    log "PostgreSQL on 127.0.0.1:$PG_PORT$(durable_note), MariaDB on 127.0.0.1:$MY_PORT (state in $STATE_DIR; stop with $0 stop)"
    print_exports
}

cmd_env() {
    load_state
    pg_running && my_running || die "servers are not running; use $0 start"
    print_exports
}

cmd_stop() {
    lock_state
    load_state
    stop_all
    rm -f "$STATE_FILE" "$STATE_DIR/env.sh"
    log "stopped"
}

main() {
    local command=${1:-}
    [ $# -gt 0 ] && shift
    case "$command" in
        run)
            [ "${1:-}" = "--" ] && shift
            cmd_run "$@"
            ;;
        start) cmd_start ;;
        env) cmd_env ;;
        stop) cmd_stop ;;
        deps) ensure_packages ;;
        *)
            echo "usage: $0 run -- <command...> | start | env | stop | deps" >&2
            exit 2
            ;;
    esac
}

main "$@"
