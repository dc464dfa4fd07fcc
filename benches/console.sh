#!/usr/bin/env bash
# The console on a million items (`spool serve --console`; the target:
# a page loads in under 300 ms, because the lists and the counts come
# from bounded reads). A SQLite and an NDJSON spool of N pending items
# (default 1,000,000; PostgreSQL too when SPOOL_BENCH_PG_URL names a
# database) are served by a release `spool serve --console`, and each
# page is fetched RUNS times over one keep-alive connection, with a pause
# of 1.1 s before each fetch so that the cached counts are read again
# every time:
#
#   - /console/items              the first 100 pending items
#   - /console/items?key=…        a filter that matches nothing: the
#                                 worst case, a window reads its whole
#                                 bound (20,000 entries) and keeps none
#   - /console/live               the counts the page's script reads
#   - /console/                   the overview (its shapes are computed
#                                 in the background after the first load)
#
# Prints a Markdown table (p50 and max wall time per page, as the client
# sees it) and the load average at the start and the end (a figure counts
# only with both below 1).
#
#   benches/console.sh
#   benches/console.sh --items 100000 --runs 5
#   SPOOL_BENCH_DIR=/var/tmp/b benches/console.sh   # keep the spools (reused)
#   SPOOL_BENCH_PG_URL='postgresql:///bench?host=/tmp/pg&user=postgres' benches/console.sh
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
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "console.sh: unknown option $1" >&2; exit 64 ;;
    esac
done

missing=()
command -v python3 >/dev/null || missing+=(python3)
apt_install console.sh "${missing[@]}"

load() { cut -d' ' -f1 /proc/loadavg; }
if [ -z "${SPOOL_BIN:-}" ]; then
    cargo build --release --locked >&2
fi
spool="${SPOOL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/spool}"
bench_dir console

build() { build_items "$spool" "$1" "$items" console.sh; }

measure() {
    local path=$1 label=$2
    local out="$dir/serve.out"
    "$spool" -q -s "$path" serve --console --listen 127.0.0.1:0 >"$out" 2>"$dir/serve.err" &
    local pid=$!
    local base=""
    for _ in $(seq 200); do
        base=$(sed -n 's/^listening on //p' "$out")
        [ -n "$base" ] && break
        sleep 0.05
    done
    [ -n "$base" ] || { cat "$dir/serve.err" >&2; kill "$pid"; exit 1; }
    python3 - "$base" "$runs" "$label" <<'PY'
import http.client, sys, time, urllib.parse
base, runs, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
u = urllib.parse.urlparse(base)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
def fetch(path):
    t = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200, (path, r.status, body[:200])
    return (time.perf_counter() - t) * 1000
pages = [("/console/items", "first 100 pending"),
         ("/console/items?key=no-such-key", "filter matching nothing"),
         ("/console/live", "counts"),
         ("/console/", "overview")]
first_overview = fetch("/console/")
for path, what in pages:
    fetch(path)  # warm-up
    xs = []
    for _ in range(runs):
        time.sleep(1.1)
        xs.append(fetch(path))
    xs.sort()
    p50, worst = xs[len(xs) // 2], xs[-1]
    verdict = "**met**" if worst < 300 else "**missed**"
    print(f"| {label} | `{path}` ({what}) | {p50:.1f} | {worst:.1f} | {verdict} |")
print(f"| {label} | `/console/` first load (computes both shapes) | {first_overview:.1f} | | |")
PY
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

load_start=$(load)
uptime_start=$(uptime)
echo "| spool | page | p50 ms | max ms | max < 300 ms |"
echo "|---|---|---:|---:|---|"
for file in spool.db spool.ndjson; do
    build "$dir/$file"
    measure "$dir/$file" "$([ "$file" = spool.db ] && echo SQLite || echo NDJSON)"
done
if [ -n "${SPOOL_BENCH_PG_URL:-}" ]; then
    sep='?'; [[ "$SPOOL_BENCH_PG_URL" == *\?* ]] && sep='&'
    pg="${SPOOL_BENCH_PG_URL}${sep}spool=console_bench"
    build "$pg"
    measure "$pg" PostgreSQL
fi
load_end=$(load)
echo
echo "Items: $items; runs: $runs per page after one warm-up, 1.1 s apart, over one connection."
echo "Load average (1 min): $load_start at the start, $load_end at the end."
echo "uptime at the start: $uptime_start"
echo "uptime at the end:   $(uptime)"
if python3 -c "import sys; sys.exit(0 if float('$load_start') < 1 and float('$load_end') < 1 else 1)"; then
    echo "The machine was quiet: these figures count."
else
    echo "**Load ≥ 1 at the start or the end: these figures are indicative only.**"
fi
