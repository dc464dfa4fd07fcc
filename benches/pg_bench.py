#!/usr/bin/env python3
"""The PostgreSQL benchmark; run through benches/postgres.sh, which builds
the binaries and starts the cluster. Standard library only."""

import argparse
import os
import statistics
import subprocess
import sys
import time

from benchlib import check, run_timed

SPOOL = "target/release/spool"
SINK = "target/release/examples/http_sink"


def psql(url, *args, stdin=None):
    return subprocess.run(
        ["psql", url, "-XAtq", *args], check=True, stdout=subprocess.PIPE, input=stdin
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
    s, p = [], []
    for i in range(n):
        # Interleaved, so that both see the same server state.
        s.append(run_timed([SPOOL, "-q", "-s", url, "enqueue", f"payload {i}"]).wall)
        p.append(
            run_timed(
                ["/usr/bin/psql", base, "-XAtqc",
                 f"INSERT INTO bench_insert (payload, enqueued_at) VALUES ('payload {i}', 0)"]
            ).wall
        )
    print(f"\n### 1. One-shot enqueue, {n} calls each (fsync on)\n")
    print("| command | median | p99 | ratio (median) |")
    print("|---|---:|---:|---:|")
    print(f"| `psql -c \"INSERT …\"` | {median_ms(p):.2f} ms | {p99_ms(p):.2f} ms | 1.00× |")
    print(f"| `spool enqueue PAYLOAD` | {median_ms(s):.2f} ms | {p99_ms(s):.2f} ms | {median_ms(s) / median_ms(p):.2f}× |")


def lines(base, work, n):
    path = os.path.join(work, f"lines-{n}.txt")
    with open(path, "w") as f:
        for i in range(n):
            f.write('{"event":"bench","seq":%d,"user":"u-%06d"}\n' % (i, i % 5000))
    psql(base, "-c", "CREATE TABLE IF NOT EXISTS bench_copy (payload text NOT NULL)")
    rows = []
    for rnd in range(3):
        psql(base, "-c", "TRUNCATE bench_copy")
        c = run_timed(["/usr/bin/psql", base, "-XAtqc", f"\\copy bench_copy (payload) FROM '{path}' WITH (FORMAT text)"]).wall
        url = spool_url(base, f"lines{rnd}")
        s = run_timed([SPOOL, "-q", "-s", url, "enqueue", "--lines", "--file", path]).wall
        assert int(check([SPOOL, "-s", url, "size"]).decode()) == n
        rows.append((c, s))
    c = statistics.median(r[0] for r in rows)
    s = statistics.median(r[1] for r in rows)
    print(f"\n### 2. {n:,} lines in one commit (median of 3)\n")
    print("| command | time | lines/s | speed vs \\copy |")
    print("|---|---:|---:|---:|")
    print(f"| `psql \\copy` (text, no index) | {c:.2f} s | {n / c:,.0f} | 1.00× |")
    print(f"| `spool enqueue --lines` | {s:.2f} s | {n / s:,.0f} | {c / s:.2f}× |")


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
    print("| processes | --concurrency | --commit-every | time | items/s |")
    print("|---:|---:|---:|---:|---:|")
    for procs, conc, every, w in rows:
        print(f"| {procs} | {conc} | {every} | {w:.2f} s | {n / w:,.0f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", type=int)
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
        if a.only in (None, k):
            f()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main()
