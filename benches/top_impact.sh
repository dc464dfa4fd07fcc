#!/usr/bin/env bash
# What `spool top` costs the processes it watches: one-shot enqueue and a
# short replay, with and without `spool top --interval 100ms` running in a
# pseudo-terminal on the same spool, rounds interleaved. Prints Markdown;
# see docs/benchmarks.md for recorded figures.
#
#   benches/top_impact.sh                         # 100,000 items, 4 rounds
#   benches/top_impact.sh --items 1000000 --rounds 2
#   SPOOL_BENCH_DIR=/var/tmp/b benches/top_impact.sh
#   SPOOL_BIN=/path/to/spool benches/top_impact.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

missing=()
command -v python3 >/dev/null || missing+=(python3)
apt_install top_impact.sh "${missing[@]}"

if [ -z "${SPOOL_BIN:-}" ]; then
    cargo build --release --locked >&2
fi
spool="${SPOOL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/spool}"

bench_dir top-impact

python3 benches/top_impact.py --spool "$spool" --dir "$dir" "$@"
