#!/usr/bin/env bash
# Edge-to-centre soak (not in CI): four edge spools (two SQLite, two
# NDJSON) fed by producers push through a fault-injecting proxy into two
# `spool serve` instances over one PostgreSQL spool while processes are
# killed with SIGKILL;
# the centre drains into a sink. Then everything is drained and checked:
# nothing acknowledged lost, nothing applied twice, nothing left, memory
# and open files flat. Prints a Markdown summary; exits non-zero when a
# check fails. See docs/testing.md ("The soak") and docs/benchmarks.md.
#
#   benches/soak.sh                    # 10 minutes
#   benches/soak.sh --minutes 60       # the recorded run
#   benches/soak.sh --minutes 3 --seed 7
#   SPOOL_BIN=target/debug/spool benches/soak.sh --minutes 2   # no release build
#   SPOOL_SOAK_DIR=/var/tmp/s benches/soak.sh   # keep the work files there
#
# Other options (benches/soak.py soak --help): --pace (seconds between
# one producer's enqueues, 0.05), --kill-min/--kill-max (seconds between
# two kills, 2 and 12), --drain-timeout (300 s), --servers (2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

missing=()
command -v python3 >/dev/null || missing+=(python3)
apt_install soak.sh "${missing[@]}"

if [ -n "${SPOOL_BIN:-}" ]; then
    spool=$(cd "$(dirname "$SPOOL_BIN")" && pwd)/$(basename "$SPOOL_BIN")
else
    cargo build --release --locked >&2
    spool="${CARGO_TARGET_DIR:-$root/target}/release/spool"
fi

if [ -n "${SPOOL_SOAK_DIR:-}" ]; then
    dir=$SPOOL_SOAK_DIR
    mkdir -p "$dir"
    keep=1
else
    dir=$(mktemp -d "${TMPDIR:-/var/tmp}/spool-soak.XXXXXX")
    keep=0
fi
# Its own directory: the cluster's owner must reach the socket in it.
pg=$(mktemp -d /tmp/spool-soak-pg.XXXXXX)
cleanup() {
    bash .ci/pg.sh stop "$pg" >/dev/null 2>&1 || true
    if [ $keep = 0 ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
# The centre's PostgreSQL keeps its default durability settings: the soak
# kills the server that writes to it, and a lost commit must show.
url=$(bash .ci/pg.sh start "$pg" --durable)

python3 benches/soak.py soak --spool "$spool" --dir "$dir" --pg-url "$url" "$@"
