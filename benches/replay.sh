#!/usr/bin/env bash
# Replay benchmark (issue 4, "Performance"): `spool replay --url` against a
# curl loop and a Python requests loop on a local sink (at once and after
# 20 ms, sequential and --concurrency 16), and `--exec cat` against a shell
# loop. Prints Markdown tables; see docs/benchmarks.md for recorded figures.
#
#   benches/replay.sh                 # everything (about 10 minutes)
#   benches/replay.sh --only 5        # one part (5: retention on vs off, about 3 minutes); other flags: benches/replay_bench.py --help
#   SPOOL_BENCH_DIR=/var/tmp/b benches/replay.sh   # keep the work files there
#   SPOOL_BIN=/path/to/spool benches/replay.sh   # measure that binary instead (benches/check.sh --baseline)
#
# Work files go to $SPOOL_BENCH_DIR, or to a temporary directory that is
# removed afterwards.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benches/lib.sh
source benches/lib.sh

# Tools a fresh Debian machine may lack.
missing=()
command -v curl >/dev/null || missing+=(curl)
command -v strace >/dev/null || missing+=(strace)
command -v python3 >/dev/null || missing+=(python3 python3-pip)
apt_install replay.sh "${missing[@]}"
# The Python contender uses requests.
if ! python3 -c 'import requests' 2>/dev/null; then
    echo "replay.sh: installing the Python package requests" >&2
    python3 -m pip install --quiet requests ||
        python3 -m pip install --quiet --break-system-packages requests
fi

cargo build --release --locked >&2
cargo build --release --locked --example http_sink >&2
target="${CARGO_TARGET_DIR:-$root/target}/release"

if [ -n "${SPOOL_BENCH_DIR:-}" ]; then
    dir=$SPOOL_BENCH_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/spool-replay-bench.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
fi

python3 "$root/benches/replay_bench.py" --spool "${SPOOL_BIN:-$target/spool}" \
    --sink "$target/examples/http_sink" --dir "$dir" "$@"
