#!/usr/bin/env bash
# A throwaway PostgreSQL server for Trainyard's tests, without systemd.
#
#   scripts/dev-postgres.sh start   install (if needed), init, start; print the URL line
#   scripts/dev-postgres.sh stop    stop the server (pg_ctl stop -m fast)
#   scripts/dev-postgres.sh url     print the URL line
#
# `start` and `url` print exactly one line on stdout:
#   TRAINYARD_TEST_DATABASE_URL=postgresql://trainyard:trainyard@127.0.0.1:PORT/trainyard_test
# and everything else on stderr, so a caller can do
#   line="$(scripts/dev-postgres.sh start)" && export "$line"
#
# Every command is idempotent. Settings (environment):
#   TRAINYARD_PG_PORT  TCP port (default 55432)
#   TRAINYARD_PG_ROOT  state directory (default /tmp/trainyard-pg): data/, run/ (socket), postgres.log
#
# The server is tuned for tests (fsync off): do not keep anything precious in it.
set -euo pipefail

PORT="${TRAINYARD_PG_PORT:-55432}"
ROOT="${TRAINYARD_PG_ROOT:-/tmp/trainyard-pg}"
DATA="$ROOT/data"
SOCKDIR="$ROOT/run"
LOGFILE="$ROOT/postgres.log"
DB_USER=trainyard
DB_PASSWORD=trainyard
DB_NAME=trainyard_test

# All chatter to stderr; fd 3 is the real stdout, for the URL line only.
exec 3>&1 1>&2

log() { printf 'dev-postgres: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

case "$PORT" in
    ''|*[!0-9]*) die "TRAINYARD_PG_PORT must be a number, got '$PORT'" ;;
esac

# Privileges: as root, the server runs as the `postgres` user; otherwise as the caller.
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
    AS_ROOT=1
else
    SUDO=(sudo -n)
    AS_ROOT=0
fi

# Run a command as the server's user, from a directory that user can enter.
as_pg() {
    if [ "$AS_ROOT" -eq 0 ]; then
        (cd / && "$@")
    elif command -v runuser >/dev/null 2>&1; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && su postgres -s /bin/bash -c "$(printf '%q ' "$@")")
    fi
}

# The newest /usr/lib/postgresql/<version>/bin holding initdb and pg_ctl (empty if none).
find_bindir() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/psql" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 0
}

install_postgres() {
    log "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin; installing 'postgresql' with apt-get"
    command -v apt-get >/dev/null 2>&1 || die "apt-get not available; install PostgreSQL (initdb, pg_ctl, psql) yourself"
    if [ "$AS_ROOT" -eq 0 ] && ! sudo -n true 2>/dev/null; then
        die "installing PostgreSQL needs root (or passwordless sudo)"
    fi
    export DEBIAN_FRONTEND=noninteractive
    # Keep the package from starting its own "main" cluster: a policy-rc.d that
    # refuses every service start, only if the machine has none, removed afterwards.
    local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
    if [ ! -e "$policy" ]; then
        "${SUDO[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
        made_policy=1
        trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    {
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q &&
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
            --no-install-recommends postgresql
    } || rc=$?
    if [ "$made_policy" -eq 1 ]; then
        "${SUDO[@]}" rm -f "$policy"
        trap - EXIT
    fi
    [ "$rc" -eq 0 ] || die "apt-get failed (exit $rc)"
}

# The port the server listens on: line 4 of postmaster.pid while it runs, else $PORT.
running_port() {
    local p=""
    if is_running; then
        p="$(sed -n 4p "$DATA/postmaster.pid" 2>/dev/null || true)"
    fi
    case "$p" in
        ''|*[!0-9]*) echo "$PORT" ;;
        *) echo "$p" ;;
    esac
}

is_running() {
    [ -n "$BINDIR" ] && [ -f "$DATA/PG_VERSION" ] && as_pg "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

print_url() {
    printf 'TRAINYARD_TEST_DATABASE_URL=postgresql://%s:%s@127.0.0.1:%s/%s\n' \
        "$DB_USER" "$DB_PASSWORD" "$1" "$DB_NAME" >&3
}

# Make $ROOT and its subdirectories, owned by the server's user; check the parents are traversable.
prepare_dirs() {
    mkdir -p "$ROOT"
    chmod 755 "$ROOT"
    if [ "$AS_ROOT" -eq 1 ]; then
        id postgres >/dev/null 2>&1 || die "user 'postgres' does not exist (is the postgresql package installed?)"
        chown postgres:postgres "$ROOT"
        as_pg test -x "$ROOT" || die "user postgres cannot enter $ROOT (a parent directory is not traversable); set TRAINYARD_PG_ROOT under /tmp"
    fi
    as_pg mkdir -p "$SOCKDIR"
    as_pg chmod 755 "$SOCKDIR"
}

init_cluster() {
    if [ -f "$DATA/PG_VERSION" ]; then
        local have want
        have="$(cat "$DATA/PG_VERSION")"
        want="$(basename "$(dirname "$BINDIR")")"
        [ "$have" = "$want" ] || die "$DATA holds a PostgreSQL $have cluster but the binaries are $want; remove $ROOT and retry"
        return 0
    fi
    if [ -e "$DATA" ]; then
        log "removing incomplete data directory $DATA"
        rm -rf "$DATA"
    fi
    log "initdb $DATA"
    as_pg "$BINDIR/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C \
        --auth-local=trust --auth-host=scram-sha-256 --no-sync >/dev/null
}

# Close every file descriptor above 2 in the current (sub)shell.
close_extra_fds() {
    local fd
    for fd in $(ls /proc/$BASHPID/fd 2>/dev/null || echo 3 4 5 6 7 8 9); do
        if [ "$fd" -gt 2 ] 2>/dev/null; then
            eval "exec $fd>&-" 2>/dev/null || true
        fi
    done
}

start_server() {
    log "starting PostgreSQL on 127.0.0.1:$PORT (socket dir $SOCKDIR, log $LOGFILE)"
    local opts="-p $PORT -k $SOCKDIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    # The server must not inherit our descriptors above 2: fd 3 (the caller's stdout pipe)
    # would keep `$(dev-postgres.sh start)` waiting forever, fd 9 would hold the lock.
    if ! (close_extra_fds; as_pg "$BINDIR/pg_ctl" -D "$DATA" -l "$LOGFILE" -o "$opts" -w -t 60 start >/dev/null); then
        log "pg_ctl start failed; last lines of $LOGFILE:"
        tail -n 30 "$LOGFILE" >&2 || true
        die "could not start PostgreSQL (is port $PORT taken? set TRAINYARD_PG_PORT)"
    fi
}

psql_admin() {
    as_pg "$BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$SOCKDIR" -p "$ACTIVE_PORT" -U postgres -d postgres "$@"
}

ensure_role_and_db() {
    psql_admin -c "DO \$\$ BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN
            CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASSWORD';
        END IF;
    END \$\$;" >/dev/null
    if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]; then
        log "creating database $DB_NAME owned by $DB_USER"
        psql_admin -c "CREATE DATABASE $DB_NAME OWNER $DB_USER" >/dev/null
    fi
}

lock() {
    # Serialize concurrent invocations (flock is in util-linux).
    if command -v flock >/dev/null 2>&1; then
        exec 9>"/tmp/trainyard-pg.lock"
        flock -w 300 9 || die "timed out waiting for /tmp/trainyard-pg.lock"
    fi
}

cmd_start() {
    lock
    BINDIR="$(find_bindir)"
    if [ -z "$BINDIR" ]; then
        install_postgres
        BINDIR="$(find_bindir)"
        [ -n "$BINDIR" ] || die "PostgreSQL installed, but no initdb/pg_ctl/psql under /usr/lib/postgresql/*/bin"
    fi
    log "using $BINDIR"
    if is_running; then
        log "already running (data dir $DATA)"
    else
        prepare_dirs
        init_cluster
        start_server
    fi
    ACTIVE_PORT="$(running_port)"
    if [ "$ACTIVE_PORT" != "$PORT" ]; then
        log "note: the server in $DATA already runs on port $ACTIVE_PORT, not $PORT; stop it to change ports"
    fi
    ensure_role_and_db
    print_url "$ACTIVE_PORT"
}

cmd_stop() {
    lock
    BINDIR="$(find_bindir)"
    if is_running; then
        log "stopping PostgreSQL ($DATA)"
        as_pg "$BINDIR/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
    else
        log "not running"
    fi
}

cmd_url() {
    BINDIR="$(find_bindir)"
    print_url "$(running_port)"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    url) cmd_url ;;
    *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
