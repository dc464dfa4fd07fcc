#!/usr/bin/env bash
# Long runs of the deterministic simulator (tests/sim.rs) on fresh seeds.
#
#   bash benches/sim.sh --minutes 30            # every local backend
#   bash benches/sim.sh --minutes 10 --backend ndjson
#   SPOOL_TEST_PG_URL=postgres://… bash benches/sim.sh --minutes 5 --backend postgres
#
# Builds the simulator once (the test profile, as `cargo test` runs it),
# then runs rounds of SIM_SEEDS seeds per backend, each round from a new
# random first seed, until the time is up. A failing round ends at its
# first failure; its output (the seed, the shortest failing plan, the
# command that replays it) is kept in target/sim/failures.log and the
# run goes on. At the end it prints the seeds, operations, crashes and
# failures per backend.
set -euo pipefail
cd "$(dirname "$0")/.."

MINUTES=30
BACKENDS="memory sqlite ndjson"
ROUND=${SIM_SEEDS:-100}
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) MINUTES=$2; shift 2 ;;
        --backend) BACKENDS=$2; shift 2 ;;
        --seeds-per-round) ROUND=$2; shift 2 ;;
        *) echo "usage: $0 [--minutes N] [--backend memory|sqlite|ndjson|postgres] [--seeds-per-round N]" >&2; exit 64 ;;
    esac
done

OUT=target/sim
mkdir -p "$OUT"
: >"$OUT/failures.log"
cargo test --locked --test sim --no-run 2>&1 | tail -1
# The test target's artifact (the spool binary, built for the CLI tests,
# is listed too, in no fixed order).
BIN=$(cargo test --locked --test sim --no-run --message-format=json 2>/dev/null |
    grep '"kind":\["test"\]' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$BIN" ] || { echo "sim.sh: could not find the simulator binary" >&2; exit 1; }

declare -A SEEDS OPS CRASHES CUT FAILS
for b in $BACKENDS; do SEEDS[$b]=0; OPS[$b]=0; CRASHES[$b]=0; CUT[$b]=0; FAILS[$b]=0; done

END=$(( $(date +%s) + MINUTES * 60 ))
while [ "$(date +%s)" -lt "$END" ]; do
    for b in $BACKENDS; do
        [ "$(date +%s)" -lt "$END" ] || break
        first=$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')
        log="$OUT/round.log"
        if SIM_BACKEND=$b SIM_SEEDS=$ROUND SIM_FIRST_SEED=$first \
            "$BIN" --exact "$b" --nocapture >"$log" 2>&1; then
            line=$(grep "^sim $b:" "$log" | tail -1)
            # sim ndjson: 100 seeds, 5000 operations, 812 crashes (301 cut ...
            set -- $(echo "$line" | sed 's/[^0-9 ]//g')
            SEEDS[$b]=$(( SEEDS[$b] + $1 ))
            OPS[$b]=$(( OPS[$b] + $2 ))
            CRASHES[$b]=$(( CRASHES[$b] + $3 ))
            CUT[$b]=$(( CUT[$b] + $4 ))
        else
            FAILS[$b]=$(( FAILS[$b] + 1 ))
            { echo "=== $b, first seed $first"; cat "$log"; } >>"$OUT/failures.log"
            grep -E "replay:|simulation failed" "$log" || tail -5 "$log"
        fi
    done
done

printf '%-9s %8s %10s %9s %9s %8s\n' backend seeds operations crashes cut failures
for b in $BACKENDS; do
    printf '%-9s %8d %10d %9d %9d %8d\n' "$b" "${SEEDS[$b]}" "${OPS[$b]}" "${CRASHES[$b]}" "${CUT[$b]}" "${FAILS[$b]}"
done
[ -s "$OUT/failures.log" ] && echo "failures: $OUT/failures.log"
exit 0
