#!/usr/bin/env bash
# `spool top` benchmark (SPEC §11: "a refresh costs under 50 ms on a
# million items"): the cost of one refresh of the view on a 1,000,000-item
# SQLite spool and NDJSON spool, measured by the hidden `spool top --once`,
# which runs exactly one refresh of the model (`spool::ops::top`) without a
# terminal and prints its cost as JSON: the counts (header), the rows of
# the pending tab, and, apart, the two shape aggregates (which the view
# recomputes at most every 5 s and which the target leaves out).
#
# Two cases per spool: no filter (the first 500 pending rows), and a
# filter that matches nothing (the worst case: the refresh reads its whole
# scan bound, 20,000 entries, and keeps none). Each run is a new process
# (a cold connection, a warm OS page cache); the script prints a Markdown
# table with the p50 and the max of each piece, and the load average at the
# start and the end (a figure counts only with both below 1).
#
#   benches/top.sh                      # 1,000,000 items, 10 runs per case
#   benches/top.sh --items 100000 --runs 5
#   SPOOL_BENCH_DIR=/var/tmp/b benches/top.sh   # keep the spools there (reused when present)
#   SPOOL_BIN=/path/to/spool benches/top.sh     # measure that binary
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

items=1000000
runs=10
while [ $# -gt 0 ]; do
    case $1 in
        --items) items=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "top.sh: unknown option $1" >&2; exit 64 ;;
    esac
done

missing=()
command -v python3 >/dev/null || missing+=(python3)
apt_install top.sh "${missing[@]}"

load() { cut -d' ' -f1 /proc/loadavg; }
load_start=$(load)
uptime_start=$(uptime)

if [ -z "${SPOOL_BIN:-}" ]; then
    cargo build --release --locked >&2
fi
spool="${SPOOL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/spool}"

bench_dir top

# A spool of $items items: JSON payloads of about 60 bytes, keys, enqueued
# in batches of 100,000 lines (one commit each).
build() { build_items "$spool" "$1" "$items" top.sh; }

measure() {
    local path=$1 label=$2
    shift 2
    # One warm-up, then $runs runs, one JSON line each.
    "$spool" -s "$path" top --once "$@" >/dev/null
    for _ in $(seq "$runs"); do
        "$spool" -s "$path" top --once "$@"
    done | python3 -c '
import json, sys
label, items = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in sys.stdin]
def p50(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
def cell(key):
    xs = [r[key] for r in rows if r.get(key) is not None]
    return "%.1f / %.1f" % (p50(xs), max(xs)) if xs else "-"
r0 = rows[0]
refresh = p50([r["refresh_ms"] for r in rows])
print("| %s | %s | %s | %s | %s | %s | %d rows, %d read | %s |" % (
    label, "{:,}".format(r0["depth"]), cell("refresh_ms"), cell("counts_ms"),
    cell("rows_ms"), cell("shape_ms"), r0["rows"], r0["scanned"],
    "**met**" if refresh < 50 else "**missed**"))
' "$label" "$items"
}

echo "| spool | items | refresh p50 / max ms | counts | rows | shapes (apart) | window | refresh < 50 ms |"
echo "|---|---:|---:|---:|---:|---:|---|---|"
for file in spool.db spool.ndjson; do
    path="$dir/$file"
    build "$path"
    name=$([ "$file" = spool.db ] && echo SQLite || echo NDJSON)
    measure "$path" "$name" 
    measure "$path" "$name, filter matching nothing" --filter no-such-text
done

load_end=$(load)
echo
echo "Runs: $runs per case after one warm-up, each a new \`spool top --once\` process."
echo "Load average (1 min): $load_start at the start, $load_end at the end."
echo "uptime at the start: $uptime_start"
echo "uptime at the end:   $(uptime)"
if python3 -c "import sys; sys.exit(0 if float('$load_start') < 1 and float('$load_end') < 1 else 1)"; then
    echo "The machine was quiet: these figures count."
else
    echo "**Load ≥ 1 at the start or the end: these figures are indicative only.**"
fi
