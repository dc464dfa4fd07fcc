#!/usr/bin/env bash
# Scale benchmark (SPEC §10): one-shot commands on spools of 1k to 10M
# items, median / p99 wall time and peak RSS, per backend. Prints Markdown;
# see docs/benchmarks.md for recorded figures.
#
#   benches/scale.sh sqlite 1000,100000,1000000,10000000
#   benches/scale.sh ndjson 1000,100000,1000000
#   SPOOL_BENCH_DIR=/var/tmp/b benches/scale.sh sqlite   # keep the spools
#
# A 10M-item spool is about 1.4 GB (SQLite) and takes a minute or two to
# build; the input lines are generated once per size.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

missing=()
command -v python3 >/dev/null || missing+=(python3)
apt_install scale.sh "${missing[@]}"

backend=${1:-sqlite}
sizes=${2:-1000,100000,1000000}

cargo build --release --locked >&2
spool="${CARGO_TARGET_DIR:-$root/target}/release/spool"

if [ -n "${SPOOL_BENCH_DIR:-}" ]; then
    dir=$SPOOL_BENCH_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d "${TMPDIR:-/var/tmp}/spool-scale-bench.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
fi

python3 benches/scale_bench.py --spool "$spool" --dir "$dir" --backend "$backend" --sizes "$sizes"
