#!/usr/bin/env bash
# PostgreSQL benchmark (docs/benchmarks.md, "PostgreSQL"): spool against
# psql on the same throwaway cluster, started with PostgreSQL's default
# durability settings (fsync on) through .ci/pg.sh:
#
#   1. one-shot `spool enqueue` against `psql -c "INSERT …"`, per call;
#   2. `enqueue --lines` of 100,000 lines against `psql \copy` into an
#      equivalent table;
#   3. 1 and 4 concurrent `spool replay` processes against a sink that
#      answers after 20 ms;
#   4. claim + ack throughput against a sink that answers at once, with
#      --commit-every 1 and 64, --concurrency 1 and 8.
#
#   benches/postgres.sh                 # everything (a few minutes)
#   benches/postgres.sh --only 3        # one part
#   SPOOL_BENCH_PG_URL=postgresql://… benches/postgres.sh   # another server
#   SPOOL_BIN=/path/to/spool benches/postgres.sh   # measure that binary instead (benches/check.sh --baseline)
#
# Prints Markdown tables. Performance is measured, never asserted.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

cargo build --release --locked --quiet --bin spool --example http_sink
work=$(mktemp -d /tmp/spool-pg-bench.XXXXXX)
# As root, .ci/pg.sh runs the cluster as the `postgres` user, which must be
# able to reach its directory inside $work (mktemp makes it 0700).
chmod 0755 "$work"
cleanup() {
    if [ -z "${SPOOL_BENCH_PG_URL:-}" ]; then
        bash .ci/pg.sh stop "$work/pg" || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${SPOOL_BENCH_PG_URL:-}" ]; then
    SPOOL_BENCH_PG_URL=$(bash .ci/pg.sh start "$work/pg" --durable)
fi
export SPOOL_BENCH_PG_URL
python3 benches/pg_bench.py --work "$work" "$@"
