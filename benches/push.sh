#!/usr/bin/env bash
# Push benchmark: `spool replay --push` into `spool serve` against
# `replay --url` one item per request into the same server's /v1/items.
# Prints Markdown; see docs/benchmarks.md for recorded figures.
#
#   benches/push.sh                # 100,000 items
#   benches/push.sh 20000          # fewer
#   benches/push.sh 100000 --modes push,url   # some contenders only
#   benches/push.sh 20000 --url-items 1000    # fewer one-item requests (ratio per item/s)
#   benches/push.sh 100000 --modes pipe1,pipe2,push,floor --rounds 3
#                                  # pipelining at batch 500, and the defaults against the
#                                  # receiver's write floor (benches/write_floor.rs), interleaved
#   SPOOL_BENCH_DIR=/var/tmp/b benches/push.sh   # keep the work files there
#   SPOOL_BIN=/path/to/spool benches/push.sh   # measure that binary instead (benches/check.sh --baseline)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

missing=()
command -v python3 >/dev/null || missing+=(python3)
apt_install push.sh "${missing[@]}"

cargo build --release --locked >&2
cargo bench --locked --no-run --bench write_floor >&2
spool="${SPOOL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/spool}"

bench_dir push /var/tmp

python3 benches/push_bench.py --spool "$spool" --dir "$dir" --items "${1:-100000}" "${@:2}"
