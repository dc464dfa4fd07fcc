#!/usr/bin/env bash
# Every ratio target of docs/benchmarks.md in one run of a few minutes:
# builds the release binary, runs the existing benchmark scripts with
# smaller sizes and fewer repetitions than their defaults (each comparison
# still interleaved as the script does it), and prints one table: target,
# figure, verdict, with the load average at the start and the end.
#
#   benches/check.sh                                 # every area
#   benches/check.sh --only cli,replay               # some areas (list: --help)
#   benches/check.sh --baseline /old/target/release/spool
#                                                    # also the old binary, new/old per row
#   benches/check.sh --rounds 2                      # every area twice per binary
#   benches/check.sh --keep DIR                      # keep the scripts' own outputs in DIR
#
# Figures count only on a quiet machine: a 1-minute load average below 1
# at the start and at the end; otherwise the run says so loudly and its
# figures are for nothing but finding out that the scripts still work.
#
# --baseline OLD runs every area with the old binary as well, alternating
# the two binaries area by area and round by round (new then old, then old
# then new, ...), and prints new/old per row: "within 5%", "regressed" (the
# figure moved more than 5% the wrong way) or "improved". Most figures are
# themselves ratios against a reference measured in the same run
# (sqlite3, curl, a shell loop, dd), which takes the machine's drift
# between the two binaries' runs out of the comparison. Both binaries are
# run on fresh spools, so their on-disk formats need not agree.
#
# Needs cargo, python3 (with the package requests), sqlite3, curl, dd,
# strace and /usr/bin/time; PostgreSQL (initdb, pg_ctl, psql) for the
# postgres area, which is left out with a note when it is missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

AREAS="cli scale replay retention follow groups compact push postgres"
baseline=
rounds=1
only=
keep=

usage() {
    sed -n '2,30p' "$0" >&2
    echo "areas: $AREAS" >&2
    exit 64
}

while [ $# -gt 0 ]; do
    case $1 in
    --baseline) baseline=${2:?--baseline needs a path}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --only) only=${2:?--only needs a list}; shift 2 ;;
    --keep) keep=${2:?--keep needs a directory}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "check.sh: unknown argument $1" >&2; usage ;;
    esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "check.sh: --rounds takes a positive number" >&2; exit 64; }
areas=$AREAS
if [ -n "$only" ]; then
    areas=${only//,/ }
    for a in $areas; do
        [[ " $AREAS " == *" $a "* ]] || { echo "check.sh: unknown area $a (areas: $AREAS)" >&2; exit 64; }
    done
fi

load1() { cut -d' ' -f1 /proc/loadavg; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
busy() { awk -v l="$1" 'BEGIN { exit !(l >= 1) }'; }
shout() {
    echo "check.sh: ******************************************************************" >&2
    echo "check.sh: *** $1" >&2
    echo "check.sh: ******************************************************************" >&2
}

# ---- tools
missing=()
for t in cargo python3 sqlite3 curl dd strace; do
    command -v "$t" >/dev/null || missing+=("$t")
done
[ -x /usr/bin/time ] || missing+=(/usr/bin/time)
if command -v python3 >/dev/null && ! python3 -c 'import requests' 2>/dev/null; then
    missing+=("python3 package requests")
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "check.sh: missing: ${missing[*]}" >&2
    echo "check.sh: on Debian: apt-get install sqlite3 curl coreutils strace time python3 python3-pip;" \
        "python3 -m pip install requests; cargo from rustup (.ci/run installs some of these)" >&2
    exit 69
fi
if [[ " $areas " == *" postgres "* ]] && [ -z "${SPOOL_BENCH_PG_URL:-}" ] &&
    ! { command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }; then
    echo "check.sh: PostgreSQL (initdb) is missing: the postgres area is left out" \
        "(.ci/pg.sh installs it with apt-get when run as root; or set SPOOL_BENCH_PG_URL)" >&2
    areas=${areas/postgres/}
fi

# ---- binaries
# The three builds the scripts run (a binary and an example built together
# unify their dependencies' features differently), so that no area's time
# includes a build.
cargo build --release --locked >&2
cargo build --release --locked --example http_sink >&2
cargo build --release --locked --bin spool --example http_sink >&2
# A build leaves the load average high for a while.
wait_for_quiet
new="${CARGO_TARGET_DIR:-$root/target}/release/spool"
new=$(cd "$(dirname "$new")" && pwd)/$(basename "$new")
tags="new"
if [ -n "$baseline" ]; then
    [ -x "$baseline" ] || { echo "check.sh: --baseline $baseline is not an executable" >&2; exit 64; }
    baseline=$(cd "$(dirname "$baseline")" && pwd)/$(basename "$baseline")
    "$baseline" --version >/dev/null || { echo "check.sh: $baseline --version failed" >&2; exit 64; }
    tags="new old"
fi
echo "check.sh: new: $new ($("$new" --version))" >&2
[ -z "$baseline" ] || echo "check.sh: old: $baseline ($("$baseline" --version))" >&2

# ---- work directory
work=$(mktemp -d "${TMPDIR:-/var/tmp}/spool-check.XXXXXX")
out=$work/out
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    out=$(cd "$keep" && pwd)
fi
mkdir -p "$out"
trap 'rm -rf "$work"' EXIT

load_start=$(loadavg)
t_start=$(date +%s)
echo "check.sh: load average at the start: $load_start" >&2
if busy "$(load1)"; then
    shout "LOAD AVERAGE $(load1) >= 1 AT THE START: THE FIGURES OF THIS RUN DO NOT COUNT"
fi

# run_area AREA TAG ROUND: one area's script with one binary; its stdout
# (and JSON, where the script writes it) goes to $out/AREA.TAG.ROUND.*,
# its stderr to ….err; the load average at its start to ….load.
run_area() {
    local area=$1 tag=$2 round=$3
    local bin=$new
    [ "$tag" = new ] || bin=$baseline
    local o="$out/$area.$tag.$round" d="$work/run"
    rm -rf "$d"
    mkdir -p "$d"
    loadavg >"$o.load"
    echo "check.sh: $area ($tag binary, round $round), load average $(load1)" >&2
    local t0 rc=0
    t0=$(date +%s)
    export SPOOL_BIN=$bin SPOOL_BENCH_DIR=$d
    case $area in
    cli) # (a) 200 one-shot calls each instead of 400, no ageing part;
        # (b) 100,000 lines, median of 3 as by default.
        benches/cli.sh --only ab --calls 200 --drift-calls 0 --json-out "$o.json" ;;
    scale) # NDJSON 1,000 against 1,000,000 items, 11 runs per command instead of 21.
        benches/scale.sh --backend ndjson --sizes 1000,1000000 --runs 11 --only oneshot ;;
    replay) # 3,000 items instead of 10,000; the curl and Python loops 500
        # (at 20 ms: 50), extrapolated per item as the script does.
        benches/replay.sh --only 123 --items 3000 --loop-items 500 --slow-items 400 \
            --slow-loop-items 50 --exec-items 1000 --json-out "$o.json" ;;
    retention) # 9 paired rounds of 2,000 items instead of 7 of 10,000.
        benches/replay.sh --only 5 --items 2000 --retention-reps 9 --json-out "$o.json" ;;
    follow) # 5 s idle instead of 10, 20 enqueues instead of 100.
        benches/follow.sh --idle 5 --items 20 ;;
    groups) # 16 groups of 20 items instead of 40.
        PER_GROUP=20 benches/groups.sh ;;
    compact) # The four 100 MB cases; no memory control, no checkpoint.
        BENCH_DIR=$d BENCH_ONLY=compact BENCH_CONTROL=0 bash benches/compact.sh ;;
    push) # 20,000 items pushed; 1,000 sent one per request (items/s compared).
        benches/push.sh 20000 --modes push,url --url-items 1000 ;;
    postgres) # Parts 1-3: 100 calls instead of 200, 200 replayed items instead of 1,000.
        benches/postgres.sh --only 123 --calls 100 --replay-items 200 ;;
    esac >"$o.md" 2>"$o.err" || rc=$?
    unset SPOOL_BIN SPOOL_BENCH_DIR
    echo "$(($(date +%s) - t0))" >"$o.secs"
    rm -rf "$d"
    if [ "$rc" -ne 0 ]; then
        echo "check.sh: $area ($tag binary) failed with exit $rc; the end of its stderr:" >&2
        tail -n 15 "$o.err" >&2
        echo "failed with exit $rc" >"$o.failed"
    fi
}

# Areas in order, each round alternating which binary goes first (and
# the order flips from one area to the next), so that neither binary
# always runs after the other.
k=0
for r in $(seq 1 "$rounds"); do
    for area in $areas; do
        if [ "$tags" = new ] || [ $((k % 2)) -eq 0 ]; then
            order=$tags
        else
            order="old new"
        fi
        for tag in $order; do
            run_area "$area" "$tag" "$r"
        done
        k=$((k + 1))
    done
done

load_end=$(loadavg)
echo "check.sh: load average at the end: $load_end" >&2

python3 benches/check_table.py --out "$out" --areas "$areas" --rounds "$rounds" \
    ${baseline:+--baseline "$baseline"} --new "$new" \
    --load-start "$load_start" --load-end "$load_end" --seconds $(($(date +%s) - t_start))

if busy "${load_start%% *}" || busy "${load_end%% *}"; then
    shout "LOAD AVERAGE >= 1 (start ${load_start%% *}, end ${load_end%% *}): THESE FIGURES DO NOT COUNT"
fi
if ls "$out"/*.failed >/dev/null 2>&1; then
    echo "check.sh: some areas failed (see above; --keep DIR keeps every script's output)" >&2
    exit 1
fi
