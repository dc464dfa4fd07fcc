#!/usr/bin/env bash
# Follow-mode benchmark: `spool replay --follow` idle CPU over 10 s, and
# enqueue-to-delivery latency with file-change notifications (one-shot
# `spool enqueue` processes, one at a time with gaps; the --exec target
# stamps the time it sees each item). Both backends. Prints Markdown; see
# docs/benchmarks.md for recorded figures.
#
#   benches/follow.sh                       # everything (about a minute)
#   benches/follow.sh --items 20 --idle 5   # other flags: benches/follow_bench.py --help
#   SPOOL_BENCH_DIR=/var/tmp/b benches/follow.sh   # keep the work files there
#   SPOOL_BIN=/path/to/spool benches/follow.sh   # measure that binary instead (benches/check.sh --baseline)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

cargo build --release --locked >&2
target="${CARGO_TARGET_DIR:-$root/target}/release"

if [ -n "${SPOOL_BENCH_DIR:-}" ]; then
    dir=$SPOOL_BENCH_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/spool-follow-bench.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
fi

python3 "$root/benches/follow_bench.py" --spool "${SPOOL_BIN:-$target/spool}" --dir "$dir" "$@"
