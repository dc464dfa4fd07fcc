#!/usr/bin/env bash
# Coverage-guided fuzzing on the stable toolchain.
#
#   fuzz/run.sh TARGET [SECONDS] [libFuzzer flags…]
#
# cargo-fuzz needs a nightly toolchain only for its sanitizer flags; the
# coverage instrumentation libFuzzer feeds on (SanitizerCoverage) is set
# with stable rustc flags, and libfuzzer-sys builds libFuzzer itself from
# source with the C++ compiler. This builds TARGET so, then fuzzes it for
# SECONDS (default 60) from the committed corpus, fuzz/corpus/TARGET/.
# New interesting inputs go to a scratch directory (printed at the end),
# not into the committed corpus; a crash is written to
# fuzz/artifacts/TARGET/, where `cargo test` replays it from then on.
# With a nightly toolchain and cargo-fuzz the same targets run as
# `cargo +nightly fuzz run TARGET`.
set -euo pipefail
cd "$(dirname "$0")"

if [ $# -lt 1 ]; then
    echo "usage: fuzz/run.sh TARGET [SECONDS] [libFuzzer flags...]" >&2
    echo "targets: $(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' Cargo.toml | grep -v spool-fuzz | tr '\n' ' ')" >&2
    exit 2
fi
target=$1
seconds=${2:-60}
shift $(( $# < 2 ? $# : 2 ))

host=$(rustc -vV | sed -n 's/^host: //p')
# What cargo-fuzz passes, less the sanitizer: coverage counters, the
# table of covered code, comparison tracing; plus the checks of a debug
# build. Given with --target, so build scripts and proc macros are built
# without them.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
-Cdebug-assertions -Coverflow-checks"
cargo build --release --locked --target "$host" --bin "$target"

mkdir -p "corpus/$target" "artifacts/$target"
scratch=${FUZZ_SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/spool-fuzz-$target.XXXXXX")}
mkdir -p "$scratch"
echo "== fuzzing $target for ${seconds}s; new inputs go to $scratch"
"target/$host/release/$target" \
    -artifact_prefix="artifacts/$target/" \
    -max_total_time="$seconds" \
    -timeout=10 \
    -rss_limit_mb=2048 \
    "$@" "$scratch" "corpus/$target"
