#!/usr/bin/env bash
# Ordering groups under concurrency (SPEC §9, issue 12): 16 groups of
# items to a sink that answers after 20 ms, `spool replay --url` sequential
# against `--concurrency 16`, on a SQLite and an NDJSON spool. Groups must
# not serialize the replay: the target is >= 10x the sequential rate.
#
#   benches/groups.sh                     # 16 groups x 40 items
#   GROUP_COUNT=16 PER_GROUP=100 benches/groups.sh
#   SPOOL_BIN=/path/to/spool benches/groups.sh   # measure that binary instead (benches/check.sh --baseline)
#
# Prints a Markdown table; docs/benchmarks.md records the figures.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
groups=${GROUP_COUNT:-16}
per=${PER_GROUP:-40}
delay=${DELAY_MS:-20}

cargo build --release --locked --bin spool --example http_sink >&2
target=${CARGO_TARGET_DIR:-$root/target}/release
spool=${SPOOL_BIN:-$target/spool}
dir=$(mktemp -d)
sink_pid=
cleanup() {
    [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

"$target/examples/http_sink" --port 0 --delay-ms "$delay" >"$dir/sink.out" &
sink_pid=$!
for _ in $(seq 100); do
    [ -s "$dir/sink.out" ] && break
    sleep 0.05
done
base=$(sed -n 's/^listening on //p' "$dir/sink.out")
url="$base/in"

# Item k of every group, for k = 0, 1, ...: the groups interleave in
# enqueue order, as independent customers' events do.
for k in $(seq 0 $((per - 1))); do
    for g in $(seq 0 $((groups - 1))); do
        printf '{"payload":"g%d item %d","group":"g%d"}\n' "$g" "$k" "$g"
    done
done >"$dir/items.ndjson"
n=$((groups * per))

now() { date +%s.%N; }

run() { # backend concurrency -> seconds
    local s="$dir/spool.$1"
    rm -f "$s" "$s"-* "$s".*
    "$spool" -q -s "$s" enqueue --ndjson --file "$dir/items.ndjson" >/dev/null
    local t0 t1
    t0=$(now)
    "$spool" -q -s "$s" replay --url "$url" --concurrency "$2" >/dev/null
    t1=$(now)
    [ "$("$spool" -s "$s" size)" = 0 ] || { echo "groups.sh: items left in $s" >&2; exit 1; }
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

echo "| backend | items | sequential | --concurrency 16 | speed-up |"
echo "|---|---:|---:|---:|---:|"
for backend in db ndjson; do
    seq_s=$(run "$backend" 1)
    par_s=$(run "$backend" 16)
    awk -v b="$backend" -v n="$n" -v g="$groups" -v s="$seq_s" -v p="$par_s" 'BEGIN {
        printf "| %s | %d (%d groups) | %.2f s (%.0f items/s) | %.2f s (%.0f items/s) | %.1fx |\n",
            b, n, g, s, n / s, p, n / p, s / p
    }'
done
