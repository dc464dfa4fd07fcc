#!/usr/bin/env bash
# NDJSON at scale (SPEC §10): one-shot enqueue (with and without --key),
# size, list --limit 20, show ID, drain --limit 20 and the start of a
# replay on spools of 1,000, 100,000 and 1,000,000 pending items (median,
# p99, peak RSS), and a streamed `enqueue --lines` of about 1 GiB with the
# export and drain of its result (peak RSS). Prints Markdown tables; see
# docs/benchmarks.md ("Scale (NDJSON)") for recorded figures.
#
#   benches/scale_ndjson.sh                    # everything (~10 minutes, ~5 GB of disk)
#   benches/scale_ndjson.sh --gib 0            # skip the streamed batch
#   benches/scale_ndjson.sh --sizes 1000,1000000 --runs 51
#   SPOOL_BENCH_DIR=/var/tmp/b benches/scale_ndjson.sh   # keep the work files there
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

missing=()
command -v python3 >/dev/null || missing+=(python3)
apt_install scale_ndjson.sh "${missing[@]}"

cargo build --release --locked >&2
spool="${CARGO_TARGET_DIR:-$root/target}/release/spool"

if [ -n "${SPOOL_BENCH_DIR:-}" ]; then
    dir=$SPOOL_BENCH_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/spool-scale-bench.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
fi

python3 "$root/benches/scale_ndjson.py" --spool "$spool" --dir "$dir" "$@"
