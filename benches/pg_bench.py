#!/usr/bin/env python3
"""The PostgreSQL benchmark; run through benches/postgres.sh, which builds
the binaries and starts the cluster. Standard library only."""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import check, run_timed

# SPOOL_BIN measures another spool binary (benches/check.sh --baseline).
SPOOL = os.environ.get("SPOOL_BIN") or "target/release/spool"
SINK = "target/release/examples/http_sink"


def find_psql():
    """The psql binary itself: on Debian, /usr/bin/psql is pg_wrapper, a
    Perl script that picks a version and then execs the real psql, which
    adds a Perl start-up to every call."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return found[-1] if found else shutil.which("psql")


PSQL = find_psql()
WRAPPER = "/usr/bin/psql" if os.path.realpath("/usr/bin/psql") != os.path.realpath(PSQL or "") else None


def psql(url, *args, stdin=None):
    return subprocess.run(
        [PSQL, url, "-XAtq", *args], check=True, stdout=subprocess.PIPE, input=stdin
    ).stdout.decode()


class Sink:
    def __init__(self, delay_ms):
        self.proc = subprocess.Popen(
            [SINK, "--port", "0", "--delay-ms", str(delay_ms)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        line = self.proc.stdout.readline().decode().strip()
        self.url = line[len("listening on ") :] + "/in"

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def spool_url(base, name):
    return f"{base}{'&' if '?' in base else '?'}spool={name}"


def median_ms(xs):
    return statistics.median(xs) * 1000


def p99_ms(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1000


def one_shot(base, n):
    url = spool_url(base, "oneshot")
    check([SPOOL, "-s", url, "init"])
    psql(base, "-c", "CREATE TABLE IF NOT EXISTS bench_insert (id bigserial PRIMARY KEY, payload bytea NOT NULL, key bytea NOT NULL DEFAULT '', enqueued_at bigint)")
    contenders = [("spool", None), ("psql", PSQL)] + ([("wrapper", WRAPPER)] if WRAPPER else [])
    times = {name: [] for name, _ in contenders}
    for i in range(n):
        # Interleaved, in rotating order, so that all see the same server
        # state and the same load from other work on the machine.
        k = i % len(contenders)
        for name, binary in contenders[k:] + contenders[:k]:
            if name == "spool":
                argv = [SPOOL, "-q", "-s", url, "enqueue", f"payload {i}"]
            else:
                argv = [binary, base, "-XAtqc", f"INSERT INTO bench_insert (payload, enqueued_at) VALUES ('payload {i}', 0)"]
            times[name].append(run_timed(argv).wall)
    p = times["psql"]
    print(f"\n### 1. One-shot enqueue, {n} calls each (fsync on)\n")
    print("| command | median | p99 | ratio (median) | ratio (p99) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| `psql -c \"INSERT …\"` ({PSQL}) | {median_ms(p):.2f} ms | {p99_ms(p):.2f} ms | 1.00× | 1.00× |")
    if WRAPPER:
        w = times["wrapper"]
        print(f"| `psql -c \"INSERT …\"` through {WRAPPER} (Debian's pg_wrapper) | {median_ms(w):.2f} ms | {p99_ms(w):.2f} ms "
              f"| {median_ms(w) / median_ms(p):.2f}× | {p99_ms(w) / p99_ms(p):.2f}× |")
    s = times["spool"]
    print(f"| `spool enqueue PAYLOAD` | {median_ms(s):.2f} ms | {p99_ms(s):.2f} ms | {median_ms(s) / median_ms(p):.2f}× "
          f"| {p99_ms(s) / p99_ms(p):.2f}× |")


def lines(base, work, n):
    path = os.path.join(work, f"lines-{n}.txt")
    with open(path, "w") as f:
        for i in range(n):
            f.write('{"event":"bench","seq":%d,"user":"u-%06d"}\n' % (i, i % 5000))
    # Two \copy targets: a bare one-column table, and a table equivalent to
    # spool's items table (bigserial id as primary key, payload bytea, key,
    # attempts, enqueue time from the server's clock, the unique partial
    # index on keys and a partial index like the claim path's).
    psql(base, "-c", "CREATE TABLE IF NOT EXISTS bench_copy (payload text NOT NULL)")
    psql(base, "-c", "CREATE TABLE IF NOT EXISTS bench_copy_eq (id bigserial PRIMARY KEY, payload bytea NOT NULL, "
         "key bytea NOT NULL DEFAULT '', attempts bigint NOT NULL DEFAULT 0, "
         "enqueued_at bigint DEFAULT (extract(epoch FROM now()) * 1000)::bigint, next_retry_at bigint, held boolean NOT NULL DEFAULT false); "
         "CREATE UNIQUE INDEX IF NOT EXISTS bench_copy_eq_key ON bench_copy_eq (key) WHERE key <> ''; "
         "CREATE INDEX IF NOT EXISTS bench_copy_eq_fresh ON bench_copy_eq (id) WHERE NOT held AND next_retry_at IS NULL")
    rows = []
    for rnd in range(3):
        psql(base, "-c", "TRUNCATE bench_copy, bench_copy_eq")
        c = run_timed([PSQL, base, "-XAtqc", f"\\copy bench_copy (payload) FROM '{path}' WITH (FORMAT text)"]).wall
        e = run_timed([PSQL, base, "-XAtqc", f"\\copy bench_copy_eq (payload) FROM '{path}' WITH (FORMAT text)"]).wall
        url = spool_url(base, f"lines{rnd}")
        s = run_timed([SPOOL, "-q", "-s", url, "enqueue", "--lines", "--file", path]).wall
        assert int(check([SPOOL, "-s", url, "size"]).decode()) == n
        rows.append((c, e, s))
    c = statistics.median(r[0] for r in rows)
    e = statistics.median(r[1] for r in rows)
    s = statistics.median(r[2] for r in rows)
    print(f"\n### 2. {n:,} lines in one commit (median of 3, interleaved)\n")
    print("| command | time | lines/s | speed vs \\copy (equivalent table) | speed vs \\copy (bare table) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| `psql \\copy` into a table equivalent to spool's (id, key, indexes) | {e:.2f} s | {n / e:,.0f} | 1.00× | {c / e:.2f}× |")
    print(f"| `psql \\copy` into a one-column text table, no index | {c:.2f} s | {n / c:,.0f} | {e / c:.2f}× | 1.00× |")
    print(f"| `spool enqueue --lines --file` | {s:.2f} s | {n / s:,.0f} | {e / s:.2f}× | {c / s:.2f}× |")


def fill(url, work, n):
    path = os.path.join(work, f"items-{n}.txt")
    if not os.path.exists(path):
        with open(path, "w") as f:
            for i in range(n):
                f.write("item %d\n" % i)
    check([SPOOL, "-q", "-s", url, "enqueue", "--lines", "--file", path])


def replayers(base, work, n, k, sink, extra=(), tag="r"):
    url = spool_url(base, f"{tag}-{k}-{time.time_ns()}")
    fill(url, work, n)
    argv = [SPOOL, "-q", "-s", url, "replay", "--url", sink.url, *extra]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv) for _ in range(k)]
    for p in procs:
        if p.wait() not in (0,):
            raise RuntimeError(f"replay exited {p.returncode}")
    wall = time.perf_counter() - t0
    left = int(check([SPOOL, "-s", url, "size"]).decode())
    assert left == 0, f"{left} items left"
    return wall


def concurrent(base, work, n):
    sink = Sink(20)
    try:
        one = replayers(base, work, n, 1, sink)
        four = replayers(base, work, n, 4, sink)
    finally:
        sink.stop()
    print(f"\n### 3. Replayer processes sharing one spool, {n} items, sink answers after 20 ms\n")
    print("| replayers | time | items/s | speed-up |")
    print("|---:|---:|---:|---:|")
    print(f"| 1 | {one:.2f} s | {n / one:,.0f} | 1.00× |")
    print(f"| 4 | {four:.2f} s | {n / four:,.0f} | {one / four:.2f}× |")


def throughput(base, work, n):
    sink = Sink(0)
    rows = []
    try:
        for procs, conc, every in [(1, 1, 1), (1, 1, 64), (1, 8, 64), (4, 8, 64)]:
            extra = ["--concurrency", str(conc), "--commit-every", str(every)]
            w = replayers(base, work, n, procs, sink, extra, tag="t")
            rows.append((procs, conc, every, w))
    finally:
        sink.stop()
    print(f"\n### 4. Claim + ack throughput, {n:,} items, sink answers at once\n")
    cores = os.cpu_count()
    print(f"| processes | --concurrency | --commit-every | time | items/s | items/s per core ({cores} cores) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for procs, conc, every, w in rows:
        print(f"| {procs} | {conc} | {every} | {w:.2f} s | {n / w:,.0f} | {n / w / cores:,.0f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", help="which parts to run, e.g. 3 or 123 (default: all)")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--replay-items", type=int, default=1000)
    ap.add_argument("--throughput-items", type=int, default=20_000)
    a = ap.parse_args()
    base = os.environ["SPOOL_BENCH_PG_URL"]
    print(f"server: {psql(base, '-c', 'SELECT version()').strip()}")
    print(f"fsync: {psql(base, '-c', 'SHOW fsync').strip()}, synchronous_commit: {psql(base, '-c', 'SHOW synchronous_commit').strip()}")
    print(f"machine: {os.cpu_count()} cores")
    parts = {1: lambda: one_shot(base, a.calls), 2: lambda: lines(base, a.work, a.lines),
             3: lambda: concurrent(base, a.work, a.replay_items),
             4: lambda: throughput(base, a.work, a.throughput_items)}
    for k, f in parts.items():
        if a.only is None or str(k) in a.only:
            f()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main()
