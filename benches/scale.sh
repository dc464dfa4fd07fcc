#!/usr/bin/env bash
# Scale benchmark (SPEC §10, issue 11), both backends: one-shot commands
# (enqueue with and without --key, size, stats, list --limit 20, show ID,
# drain --limit 20, start of replay) on spools of growing size — median /
# p99 wall time, CPU time and peak RSS — and streamed batches of ~1 GiB
# (enqueue --lines, export, import, dlq export, drain: peak RSS of the
# spool process). Prints Markdown; see docs/benchmarks.md ("Scale") for
# recorded figures and benches/scale_bench.py for what is measured.
#
#   benches/scale.sh --backend ndjson --sizes 1000,100000,1000000
#   benches/scale.sh --backend sqlite --sizes 1000,1000000,10000000 --only oneshot
#   benches/scale.sh --backend sqlite --only stream --gib 1
#   SPOOL_BENCH_DIR=/var/tmp/b benches/scale.sh --keep ...   # keep the spools there
#   SPOOL_BIN=/path/to/spool benches/scale.sh   # measure that binary instead (benches/check.sh --baseline)
#
# Disk: a 10M-item SQLite spool is ~1.4 GB; the stream part needs ~3× the
# batch size at its peak (the spool, its export and a copy). Every spool
# and work file is deleted as soon as it has been measured (unless --keep).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

missing=()
command -v python3 >/dev/null || missing+=(python3)
[ -x /usr/bin/time ] || missing+=(time)
apt_install scale.sh "${missing[@]}"

cargo build --release --locked >&2
spool="${SPOOL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/spool}"

bench_dir scale

python3 "$root/benches/scale_bench.py" --spool "$spool" --dir "$dir" "$@"
