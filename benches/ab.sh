#!/usr/bin/env bash
# A/B of two spool binaries, call by call (benches/ab_bench.py): one-shot
# enqueue, size and done on an NDJSON spool, replay per item and with
# --commit-every 64, with controls; with --batches N also streamed
# batches (enqueue --lines, keyed, coalescing, drop-oldest, import) on an
# NDJSON spool. For a change to a hot path whose effect is a few per
# cent, which benches/check.sh --baseline cannot tell from drift. Prints
# a Markdown table; see docs/benchmarks.md.
#
#   benches/ab.sh --old /path/to/old/spool                  # this build against OLD
#   benches/ab.sh --old OLD --new NEW --calls 300 --rounds 4
#   benches/ab.sh --old OLD --batches 5 --batch-items 100000
#   SPOOL_BENCH_DIR=/var/tmp/b benches/ab.sh --old OLD      # keep the work files there
#
# Measure on a quiet machine (load average below 1) and on the file
# system you care about: most of a call is sync latency.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

command -v python3 >/dev/null || apt_install ab.sh python3

new=""
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --new) new=${2:?--new needs a path}; shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
cargo build --release --locked --bin spool --example http_sink >&2
# A build leaves the load average high for a while.
wait_for_quiet
target="${CARGO_TARGET_DIR:-$root/target}/release"
[ -n "$new" ] || new="$target/spool"

bench_dir ab /var/tmp

python3 "$root/benches/ab_bench.py" --new "$new" --sink "$target/examples/http_sink" --dir "$dir" "${args[@]}"
