#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for spool's tests, CI and benchmarks.
#
#   .ci/pg.sh start DIR [--durable]   initdb into DIR (created), start it,
#                                     print the spool URL on stdout
#   .ci/pg.sh stop DIR                stop the cluster (fast) and delete DIR
#   .ci/pg.sh kill DIR                kill -9 the server (crash), keep DIR
#   .ci/pg.sh restart DIR             start a stopped or crashed cluster again
#   .ci/pg.sh url DIR                 print the URL of the cluster in DIR
#
# The server listens on a Unix socket in DIR only (listen_addresses=''),
# so clusters in different directories never collide and nothing is
# reachable from the network. Without --durable it runs with fsync=off,
# synchronous_commit=off and full_page_writes=off: fast, and fine for tests
# that do not crash the server. --durable keeps PostgreSQL's default
# durability settings (the kill -9 test and the benchmarks use it).
#
# As root, initdb refuses to run, so the cluster belongs to the `postgres`
# user (created by Debian's postgresql package) and its commands run
# through `runuser`; DIR is given to that user. PostgreSQL is installed
# with apt-get when it is missing and this runs as root. Any failure exits
# non-zero: CI must fail, never skip, when the cluster cannot start.
set -euo pipefail

usage() {
    sed -n '2,10p' "$0" >&2
    exit 64
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$2
shift 2
durable=0
for a in "$@"; do
    case $a in
    --durable) durable=1 ;;
    *) usage ;;
    esac
done

find_bindir() {
    local d
    if command -v pg_config >/dev/null 2>&1; then
        d=$(pg_config --bindir 2>/dev/null || true)
        if [ -n "$d" ] && [ -x "$d/initdb" ]; then
            echo "$d"
            return 0
        fi
    fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

bindir=$(find_bindir || true)
if [ -z "$bindir" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "pg.sh: installing postgresql with apt-get" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq postgresql >&2
        bindir=$(find_bindir || true)
    fi
fi
if [ -z "$bindir" ]; then
    echo "pg.sh: PostgreSQL is not installed (no initdb found); install the postgresql package" >&2
    exit 69
fi

# Run a PostgreSQL command as the cluster's owner.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

owner_name() {
    if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi
}

data=$dir/data
log=$dir/server.log
db=spooltest

url() {
    local abs
    abs=$(cd "$dir" && pwd)
    echo "postgresql:///$db?host=$abs&user=$(owner_name)"
}

start_server() {
    # After a crash the old server's children may hold its shared memory
    # for a moment; try again for a few seconds.
    for _ in $(seq 1 20); do
        if as_owner "$bindir/pg_ctl" -D "$data" -l "$log" -w -t 60 start >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.5
    done
    if ! as_owner "$bindir/pg_ctl" -D "$data" -l "$log" -w -t 60 start >/dev/null; then
        echo "pg.sh: the server in $dir did not start; its log:" >&2
        tail -n 30 "$log" >&2 || true
        exit 1
    fi
}

case $cmd in
start)
    mkdir -p "$dir"
    if [ -e "$data" ]; then
        echo "pg.sh: $data exists already" >&2
        exit 73
    fi
    if [ "$(id -u)" = 0 ]; then
        if ! id postgres >/dev/null 2>&1; then
            useradd --system --home-dir "$dir" --shell /bin/false postgres
        fi
        chown postgres: "$dir"
        chmod 0700 "$dir"
    fi
    as_owner "$bindir/initdb" -D "$data" -U "$(owner_name)" --auth=trust \
        --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
        echo "pg.sh: initdb failed:" >&2
        cat "$dir/initdb.log" >&2
        exit 1
    }
    abs=$(cd "$dir" && pwd)
    {
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$abs'"
        echo "max_connections = 300"
        echo "shared_buffers = 128MB"
        if [ $durable = 0 ]; then
            echo "fsync = off"
            echo "synchronous_commit = off"
            echo "full_page_writes = off"
        fi
    } >>"$data/postgresql.conf"
    start_server
    as_owner "$bindir/createdb" -h "$abs" -U "$(owner_name)" "$db"
    url
    ;;
stop)
    if [ -e "$data/PG_VERSION" ]; then
        as_owner "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
        # A server pg_ctl could not stop must not outlive its directory.
        if [ -f "$data/postmaster.pid" ]; then
            pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)
            case $pid in
            '' | *[!0-9]*) ;;
            *) kill -9 "$pid" 2>/dev/null || true ;;
            esac
        fi
    fi
    rm -rf "$dir"
    ;;
kill)
    pid=$(head -n 1 "$data/postmaster.pid")
    kill -9 "$pid"
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    ;;
restart)
    start_server
    url
    ;;
url)
    url
    ;;
*)
    usage
    ;;
esac
