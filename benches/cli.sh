#!/usr/bin/env bash
# CLI benchmark (issue 3, "Performance"): per-call enqueue latency against
# the sqlite3 CLI and `echo >> file`, batch enqueue against a one-transaction
# sqlite3 import, and size/stats/list on a 1,000,000-item spool. Prints
# Markdown tables; see docs/benchmarks.md for recorded figures.
#
#   benches/cli.sh                  # everything (a few minutes)
#   benches/cli.sh --only a         # one part; other flags: benches/cli_bench.py --help
#   SPOOL_BENCH_DIR=/var/tmp/b benches/cli.sh   # keep the work files there
#   SPOOL_BIN=/path/to/spool benches/cli.sh   # measure that binary instead (benches/check.sh --baseline)
#
# Work files go to $SPOOL_BENCH_DIR, or to a temporary directory that is
# removed afterwards. Measure on the file system you care about: the
# figures are mostly sync latency.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

# Tools a fresh Debian machine may lack.
missing=()
command -v sqlite3 >/dev/null || missing+=(sqlite3)
command -v strace >/dev/null || missing+=(strace)
command -v curl >/dev/null || missing+=(curl)
[ -x /usr/bin/time ] || missing+=(time)
command -v python3 >/dev/null || missing+=(python3)
apt_install cli.sh "${missing[@]}"

cargo build --release --locked >&2
spool="${SPOOL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/spool}"

bench_dir cli

python3 "$root/benches/cli_bench.py" --spool "$spool" --dir "$dir" "$@"
