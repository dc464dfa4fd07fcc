#!/usr/bin/env bash
# `spool shape` on a million items (SPEC §11: one aggregate, under 200 ms
# on every backend): a SQLite spool of N pending items (default
# 1,000,000) with ages spread over a day and four causes of failure (no
# error; HTTP 503; connection refused to 50 hosts; exit 1 with 7 stderr
# tails), and the same items in an NDJSON spool (exported and imported).
# Times `shape` (by error, the default), `shape --by key-prefix` and
# `shape --by attempts` RUNS times each (default 11): median and max wall
# time. Prints a Markdown table with the load average before and after;
# docs/benchmarks.md records the figures.
#
#   benches/shape.sh
#   ITEMS=100000 RUNS=5 benches/shape.sh
#   SPOOL_BIN=/path/to/spool benches/shape.sh   # measure that binary instead
#   SPOOL_BENCH_PG_URL='postgresql:///bench?host=/tmp/pg&user=postgres' benches/shape.sh
#
# With SPOOL_BENCH_PG_URL the same items are imported into the spool
# `shape_bench` (or $SPOOL_BENCH_PG_SPOOL) of that database too (reused
# when it holds exactly that many), vacuumed and analysed as autovacuum
# would leave them, and measured the same way.
#
# Disk: ~200 MB for the two spools and the export, deleted at the end.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
items=${ITEMS:-1000000}
runs=${RUNS:-11}
command -v sqlite3 >/dev/null || { echo "shape.sh: needs the sqlite3 CLI" >&2; exit 69; }
command -v python3 >/dev/null || { echo "shape.sh: needs python3" >&2; exit 69; }

if [ -z "${SPOOL_BIN:-}" ]; then
    cargo build --release --locked --bin spool >&2
fi
spool=${SPOOL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/spool}
dir=$(mktemp -d "${TMPDIR:-/tmp}/spool-shape-bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT

echo "building $items items..." >&2
python3 - "$items" >"$dir/batch.ndjson" <<'PY'
import json, sys
n = int(sys.argv[1])
prefixes = ["order", "invoice", "tenant", "user", "audit"]
out = sys.stdout
for i in range(1, n + 1):
    sep = ":" if i % 2 else "/"
    out.write(json.dumps({"payload": f"payload {i} " + "x" * 40,
                          "key": f"{prefixes[i % 5]}{sep}{i}"}) + "\n")
PY
"$spool" -q -s "$dir/s.db" enqueue --ndjson --file "$dir/batch.ndjson" >/dev/null
sqlite3 "$dir/s.db" <<'SQL'
UPDATE morph_offline_queue SET
  enqueued_at = enqueued_at - (id * 7919) % 86400,
  attempts = CASE WHEN id % 4 = 0 THEN 0 ELSE 3 END,
  last_error = CASE id % 4
    WHEN 0 THEN NULL
    WHEN 1 THEN 'HTTP 503 Service Unavailable: busy'
    WHEN 2 THEN 'connection error: connection refused (10.0.0.' || (id % 50) || ':443)'
    ELSE 'command exited with 1: boom ' || (id % 7) END;
SQL
"$spool" -q -s "$dir/s.db" export -o "$dir/all.ndjson"
"$spool" -q -s "$dir/s.ndjson" import "$dir/all.ndjson" >/dev/null
rm -f "$dir/batch.ndjson"
targets=(s.db s.ndjson)
if [ -n "${SPOOL_BENCH_PG_URL:-}" ]; then
    sep='?'; [[ "$SPOOL_BENCH_PG_URL" == *\?* ]] && sep='&'
    pg="${SPOOL_BENCH_PG_URL}${sep}spool=${SPOOL_BENCH_PG_SPOOL:-shape_bench}"
    have=$("$spool" -s "$pg" size 2>/dev/null || echo 0)
    if [ "$have" = 0 ]; then
        "$spool" -q -s "$pg" import "$dir/all.ndjson" >/dev/null
    elif [ "$have" != "$items" ]; then
        echo "shape.sh: $pg holds $have items, not $items: name another spool (SPOOL_BENCH_PG_SPOOL)" >&2
        exit 65
    fi
    # What autovacuum would have done by now: statistics and a visibility map.
    "$spool" -q -s "$pg" compact >/dev/null
    targets+=("$pg")
fi
rm -f "$dir/all.ndjson"
# Open each once, so that the NDJSON index exists before timing.
"$spool" -s "$dir/s.ndjson" stats >/dev/null

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "| backend | command | median | max |"
echo "|---|---|---|---|"
for db in "${targets[@]}"; do
    [[ "$db" == postgres* ]] || db="$dir/$db"
    for args in "shape" "shape --by key-prefix" "shape --by attempts"; do
        # shellcheck disable=SC2086
        python3 - "$runs" "$spool" -s "$db" $args <<'PY'
import statistics, subprocess, sys, time
runs, argv = int(sys.argv[1]), sys.argv[2:]
times = []
for _ in range(runs):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    times.append((time.perf_counter() - t) * 1000)
backend = ("PostgreSQL" if argv[2].startswith("postgres")
           else "SQLite" if argv[2].endswith(".db") else "NDJSON")
cmd = " ".join(["spool"] + argv[3:])
print(f"| {backend} | `{cmd}` | {statistics.median(times):.0f} ms | {max(times):.0f} ms |")
PY
    done
done
echo
echo "load average: $load_before → $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores, $items items, $runs runs each)"
"$spool" -s "$dir/s.db" shape >&2
