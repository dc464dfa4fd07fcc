#!/usr/bin/env python3
"""CLI benchmark for `spool` (issue 3, "Performance"): measured side by side
in one run, printed as Markdown tables.

  (a) per-invocation latency of `spool enqueue PAYLOAD` (SQLite and NDJSON
      spools, and an NDJSON spool that holds --big-ndjson items, 1,000,000
      by default) against `sqlite3 db "PRAGMA synchronous=FULL; INSERT ..."`
      into the reference table in WAL mode, and `sh -c 'echo ... >> file'`;
      sync calls per invocation counted with `strace -f -c`; the contenders
      run interleaved (A B A B …, rotating) and the verdicts compare
      medians (targets: both spools ≤ 0.9× the sqlite3 insert);
  (b) `spool enqueue --stdin --lines` of 100,000 lines against a
      single-transaction `sqlite3` import of the same lines (a generated
      SQL script, and `.import`);
  (c) `spool size`, `spool stats`, `spool list --limit 20` latency and peak
      RSS (`/usr/bin/time -f %M`) on SQLite spools of 100,000 and
      1,000,000 items.

Standard library only. Run it through `benches/cli.sh`, which builds the
release binary and installs missing tools. Performance is measured here,
never asserted: the script exits 0 whatever the ratios are.
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

from benchlib import check, machine_info, run_timed, strace_counts, uptime, verdict, which

# The reference table spool's own databases start with.
REFERENCE_SCHEMA_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "src", "backend", "sqlite", "migrations", "0000_reference.sql"
)

SYNC_CALLS = "fsync,fdatasync,sync_file_range"
INSTALLER = "benches/cli.sh"


# --------------------------------------------------------------------------
# Process helpers


def pct(values, p):
    """Nearest-rank percentile."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def ms(x):
    return f"{x * 1000:.2f}"


def strace_syncs(argv, out_path):
    """Run argv once under `strace -f -c` and return {sync call: calls}."""
    counts = strace_counts(argv, out_path, trace=SYNC_CALLS, must_succeed=True)
    return {name: counts.get(name, 0) for name in SYNC_CALLS.split(",")}


# --------------------------------------------------------------------------
# Payloads


def payload(i):
    # ~100 bytes of JSON, like an application event; single quotes and
    # commas included so quoting is exercised on every path.
    return json.dumps(
        {"event": "bench", "seq": i, "user": "u-%06d" % (i % 5000), "note": "it's a payload, with commas"}
    )


def sql_quote(s):
    return "'" + s.replace("'", "''") + "'"


def remove_spool(path):
    """Remove a spool (or database) and its companion files, if any."""
    for suffix in ("", "-wal", "-shm", "-journal", ".meta", ".dead", ".delivered", ".idx", ".idx-dirty", ".idx-journal", ".idx-wal", ".idx-shm", ".replay.lock"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def sqlite3_insert_argv(sqlite3, ref_db, p):
    """One `sqlite3` call that inserts payload p into the reference table,
    durably (WAL, synchronous=FULL), as a shell script would."""
    return [
        sqlite3,
        ref_db,
        "PRAGMA synchronous=FULL; INSERT INTO morph_offline_queue(payload, enqueued_at) "
        f"VALUES({sql_quote(p)}, CAST(strftime('%s','now') AS INTEGER));",
    ]


def write_reference_ndjson(path, n):
    """An NDJSON spool of `n` pending items in the reference line format,
    as a reference writer (or a spool offline for a week) leaves it."""
    with open(path, "w") as f:
        buf = []
        for i in range(1, n + 1):
            key = f"key-{i}" if i % 10 == 0 else ""
            buf.append(
                '{"op":"put","id":%d,"payload":%s,"idempotencyKey":"%s","attempts":0,"enqueuedAt":1764547200}\n'
                % (i, json.dumps(payload(i)), key)
            )
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


def make_reference_db(sqlite3, path):
    remove_spool(path)
    with open(REFERENCE_SCHEMA_FILE) as f:
        schema = f.read()
    check([sqlite3, path, "PRAGMA journal_mode=WAL;\n" + schema])


# --------------------------------------------------------------------------
# (a) per-invocation latency


def bench_latency(args, spool, sqlite3, sh, d):
    n = args.calls
    db_spool = os.path.join(d, "a-spool.db")
    nd_spool = os.path.join(d, "a-spool.ndjson")
    big_spool = os.path.join(d, "a-big-spool.ndjson")
    ref_db = os.path.join(d, "a-ref.db")
    echo_file = os.path.join(d, "a-echo.txt")
    for p in (db_spool, nd_spool, big_spool, echo_file):
        remove_spool(p)
    make_reference_db(sqlite3, ref_db)
    big = args.big_ndjson
    if big:
        write_reference_ndjson(big_spool, big)
        # The first writer builds the index (not timed here).
        check([spool, "-s", big_spool, "enqueue", "--", payload(-1000)])

    def sqlite3_argv(p):
        return sqlite3_insert_argv(sqlite3, ref_db, p)

    variants = [
        ("spool enqueue (SQLite spool)", lambda p: [spool, "-s", db_spool, "enqueue", "--", p]),
        ("spool enqueue (NDJSON spool)", lambda p: [spool, "-s", nd_spool, "enqueue", "--", p]),
    ]
    big_name = f"spool enqueue (NDJSON spool of {big:,} items)"
    if big:
        variants.append((big_name, lambda p: [spool, "-s", big_spool, "enqueue", "--", p]))
    variants += [
        ("sqlite3 INSERT (WAL, synchronous=FULL)", sqlite3_argv),
        ("sh -c 'echo … >> file' (no sync)", lambda p: [sh, "-c", 'echo "$1" >> "$2"', "sh", p, echo_file]),
        ("floor: spool --version", lambda p: [spool, "--version"]),
        ("floor: sqlite3 -version", lambda p: [sqlite3, "-version"]),
    ]
    # Warm up (creates the spools, fills the page cache), not timed.
    for i in range(args.warmup):
        for _, argv in variants:
            run_timed(argv(payload(-1 - i)))
    times = {name: [] for name, _ in variants}
    for i in range(n):
        # Interleave the variants, rotating the order, so that load changes
        # on the shared machine hit all of them alike.
        k = i % len(variants)
        for name, argv in variants[k:] + variants[:k]:
            t = run_timed(argv(payload(i))).wall
            times[name].append(t)

    # Check the work was really done.
    sizes = {
        "sqlite": int(check([spool, "-s", db_spool, "size"]).decode()),
        "ndjson": int(check([spool, "-s", nd_spool, "size"]).decode()),
        "sqlite3": int(check([sqlite3, ref_db, "SELECT count(*) FROM morph_offline_queue"]).decode()),
    }
    expected = n + args.warmup
    for k, v in sizes.items():
        if v != expected:
            raise RuntimeError(f"(a) {k} holds {v} rows, expected {expected}")
    if big:
        held = int(check([spool, "-s", big_spool, "size"]).decode())
        if held != big + 1 + expected:
            raise RuntimeError(f"(a) the big NDJSON spool holds {held} items, expected {big + 1 + expected}")

    syncs = {}
    for name, argv in variants[: 5 if big else 4]:
        syncs[name] = strace_syncs(argv(payload(10**9)), os.path.join(d, "strace.txt"))

    ref = "sqlite3 INSERT (WAL, synchronous=FULL)"
    out = []
    out.append(f"### (a) Per-invocation latency, {n} calls each (interleaved), ~{len(payload(0))}-byte payloads\n")
    out.append("| command | p50 ms | p99 ms | mean ms | syncs per call (fsync+fdatasync+sync_file_range) | p50 / sqlite3 | p99 / sqlite3 |")
    out.append("|---|---:|---:|---:|---|---:|---:|")
    p50ref, p99ref = pct(times[ref], 50), pct(times[ref], 99)
    results = {}
    for name, _ in variants:
        t = times[name]
        p50, p99, mean = pct(t, 50), pct(t, 99), statistics.fmean(t)
        s = syncs.get(name)
        if s is None:
            s_text = "–"
        elif sum(s.values()):
            s_text = f"{sum(s.values())} (" + ", ".join(f"{k} {v}" for k, v in s.items() if v) + ")"
        else:
            s_text = "0"
        out.append(f"| {name} | {ms(p50)} | {ms(p99)} | {ms(mean)} | {s_text} | {p50 / p50ref:.2f}× | {p99 / p99ref:.2f}× |")
        results[name] = {"p50": p50, "p99": p99, "mean": mean, "syncs": s}
    r_sql = results["spool enqueue (SQLite spool)"]["p50"] / p50ref
    r_nd = results["spool enqueue (NDJSON spool)"]["p50"] / p50ref
    r_sql99 = results["spool enqueue (SQLite spool)"]["p99"] / p99ref
    r_nd99 = results["spool enqueue (NDJSON spool)"]["p99"] / p99ref
    ratios = {"sqlite_p50": r_sql, "ndjson_p50": r_nd}
    out.append("")
    out.append(f"Load average at the end of the timed calls: `{uptime()}`.")
    out.append("")
    out.append("| target | measured (p50) | measured (p99) | verdict |")
    out.append("|---|---:|---:|---|")
    out.append(f"| SQLite spool ≤ 0.9× sqlite3 | {r_sql:.2f}× | {r_sql99:.2f}× | {verdict(r_sql <= 0.9)} |")
    if big:
        r_big = results[big_name]["p50"] / p50ref
        r_big99 = results[big_name]["p99"] / p99ref
        ratios["ndjson_big_p50"] = r_big
        out.append(f"| NDJSON spool of {big:,} items ≤ 0.9× sqlite3 | {r_big:.2f}× | {r_big99:.2f}× | {verdict(r_big <= 0.9)} |")
    out.append(f"| NDJSON spool (small) ≤ 0.9× sqlite3 | {r_nd:.2f}× | {r_nd99:.2f}× | {verdict(r_nd <= 0.9)} |")
    return "\n".join(out), {"times": {k: sorted(v) for k, v in times.items()}, "results": results, "ratios": ratios}


def bench_drift(args, spool, sqlite3, d):
    """Per-call latency as a spool ages: fresh spools, --drift-calls one-shot
    enqueues into each, p50 per window, with the WAL size and the sync calls
    of one call at the end of each window."""
    n, w = args.drift_calls, args.drift_window
    db_spool = os.path.join(d, "a2-spool.db")
    nd_spool = os.path.join(d, "a2-spool.ndjson")
    ref_db = os.path.join(d, "a2-ref.db")
    remove_spool(db_spool)
    remove_spool(nd_spool)
    make_reference_db(sqlite3, ref_db)

    def sqlite3_argv(p):
        return sqlite3_insert_argv(sqlite3, ref_db, p)

    variants = [
        ("sqlite", lambda p: [spool, "-s", db_spool, "enqueue", "--", p]),
        ("ndjson", lambda p: [spool, "-s", nd_spool, "enqueue", "--", p]),
        ("sqlite3", sqlite3_argv),
    ]
    times = {k: [] for k, _ in variants}
    windows = []
    for i in range(n):
        k = i % len(variants)
        for name, argv in variants[k:] + variants[:k]:
            t = run_timed(argv(payload(i))).wall
            times[name].append(t)
        if (i + 1) % w == 0:
            wal = db_spool + "-wal"
            wal_mib = os.path.getsize(wal) / 2**20 if os.path.exists(wal) else 0.0
            syncs = {name: sum(strace_syncs(argv(payload(-i)), os.path.join(d, "strace.txt")).values()) for name, argv in variants}
            windows.append((i + 1, {k: pct(v[-w:], 50) for k, v in times.items()}, wal_mib, syncs))
    out = []
    out.append(
        f"### (a′) Per-call latency as the spool ages: {n} one-shot enqueues into fresh spools, p50 per window of {w} calls\n"
    )
    out.append(
        "| calls so far | SQLite spool p50 ms | NDJSON spool p50 ms | sqlite3 p50 ms | SQLite / sqlite3 | NDJSON / sqlite3 "
        "| SQLite spool `-wal` MiB | syncs per call: SQLite spool / NDJSON spool / sqlite3 |"
    )
    out.append("|---:|---:|---:|---:|---:|---:|---:|---|")
    for calls, p50, wal_mib, syncs in windows:
        out.append(
            f"| {calls} | {ms(p50['sqlite'])} | {ms(p50['ndjson'])} | {ms(p50['sqlite3'])} | "
            f"{p50['sqlite'] / p50['sqlite3']:.2f}× | {p50['ndjson'] / p50['sqlite3']:.2f}× | {wal_mib:.1f} | "
            f"{syncs['sqlite']} / {syncs['ndjson']} / {syncs['sqlite3']} |"
        )
    return "\n".join(out), {"windows": windows}


# --------------------------------------------------------------------------
# (b) batch enqueue of 100,000 lines


def write_lines(path, n):
    with open(path, "w") as f:
        for i in range(n):
            f.write(payload(i) + "\n")


def bench_batch(args, spool, sqlite3, d):
    n = args.lines
    lines = os.path.join(d, "b-lines.txt")
    write_lines(lines, n)
    now = int(time.time())
    sql = os.path.join(d, "b-insert.sql")
    with open(lines) as src, open(sql, "w") as f:
        f.write("PRAGMA synchronous=FULL;\nBEGIN;\n")
        for line in src:
            f.write(f"INSERT INTO morph_offline_queue(payload, enqueued_at) VALUES({sql_quote(line.rstrip(chr(10)))}, {now});\n")
        f.write("COMMIT;\n")
    imp = os.path.join(d, "b-import.sql")
    with open(imp, "w") as f:
        # Raw lines into a temporary staging table (ascii mode: no quote
        # processing; \037 never occurs in the payloads), then one
        # transaction into the queue table.
        f.write(
            "PRAGMA synchronous=FULL;\n"
            "CREATE TEMP TABLE staging(payload TEXT);\n"
            ".mode ascii\n"
            '.separator "\\037" "\\n"\n'
            f".import {lines} staging\n"
            "BEGIN;\n"
            "INSERT INTO morph_offline_queue(payload, enqueued_at) "
            "SELECT payload, CAST(strftime('%s','now') AS INTEGER) FROM staging;\n"
            "COMMIT;\n"
        )

    variants = ["spool SQLite", "spool NDJSON", "sqlite3 SQL script", "sqlite3 .import"]
    times = {v: [] for v in variants}
    for rep in range(args.reps):
        order = variants[rep % 4:] + variants[: rep % 4]
        for v in order:
            if v == "spool SQLite":
                p = os.path.join(d, "b-spool.db")
                remove_spool(p)
                t = run_timed([spool, "-s", p, "enqueue", "--stdin", "--lines"], stdin_path=lines).wall
                got = int(check([spool, "-s", p, "size"]).decode())
            elif v == "spool NDJSON":
                p = os.path.join(d, "b-spool.ndjson")
                remove_spool(p)
                t = run_timed([spool, "-s", p, "enqueue", "--stdin", "--lines"], stdin_path=lines).wall
                got = int(check([spool, "-s", p, "size"]).decode())
            else:
                p = os.path.join(d, "b-ref.db")
                make_reference_db(sqlite3, p)
                script = sql if v == "sqlite3 SQL script" else imp
                t = run_timed([sqlite3, p], stdin_path=script).wall
                got = int(check([sqlite3, p, "SELECT count(*) FROM morph_offline_queue"]).decode())
            if got != n:
                raise RuntimeError(f"(b) {v} holds {got} items, expected {n}")
            times[v].append(t)

    med = {v: statistics.median(times[v]) for v in variants}
    best_ref = min(med["sqlite3 SQL script"], med["sqlite3 .import"])
    out = []
    out.append(f"### (b) Batch enqueue of {n:,} lines in one commit (median of {args.reps} runs, interleaved)\n")
    out.append("| command | median s | min s | max s | lines/s | speed vs sqlite3 SQL script | speed vs sqlite3 .import |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    labels = {
        "spool SQLite": "`spool enqueue --stdin --lines` (SQLite spool)",
        "spool NDJSON": "`spool enqueue --stdin --lines` (NDJSON spool)",
        "sqlite3 SQL script": "`sqlite3 db < BEGIN; INSERT ×N; COMMIT;`",
        "sqlite3 .import": "`sqlite3 db < .import` + one `INSERT … SELECT`",
    }
    for v in variants:
        t = med[v]
        out.append(
            f"| {labels[v]} | {t:.3f} | {min(times[v]):.3f} | {max(times[v]):.3f} | {n / t:,.0f} | "
            f"{med['sqlite3 SQL script'] / t:.2f}× | {med['sqlite3 .import'] / t:.2f}× |"
        )
    r_sql = best_ref / med["spool SQLite"]
    r_nd = best_ref / med["spool NDJSON"]
    r_sql_script = med["sqlite3 SQL script"] / med["spool SQLite"]
    r_nd_script = med["sqlite3 SQL script"] / med["spool NDJSON"]
    out.append("")
    out.append("| target | vs the SQL script | verdict | vs the faster sqlite3 import | verdict |")
    out.append("|---|---:|---|---:|---|")
    out.append(
        f"| SQLite spool ≥ 3× sqlite3 | {r_sql_script:.2f}× | {verdict(r_sql_script >= 3)} | {r_sql:.2f}× | {verdict(r_sql >= 3)} |"
    )
    out.append(
        f"| NDJSON spool ≥ 4× sqlite3 | {r_nd_script:.2f}× | {verdict(r_nd_script >= 4)} | {r_nd:.2f}× | {verdict(r_nd >= 4)} |"
    )
    out.append(
        f"| NDJSON spool ≥ 4.5× sqlite3 (issue 11) | {r_nd_script:.2f}× | {verdict(r_nd_script >= 4.5)} | {r_nd:.2f}× | {verdict(r_nd >= 4.5)} |"
    )
    return "\n".join(out), {"times": times, "median": med}, lines


# --------------------------------------------------------------------------
# (c) size / stats / list on big spools


def bench_inspect(args, spool, sqlite3, timebin, d, lines):
    """size / stats / list on spools built by `enqueue --lines`, measured
    twice: as the writer left them (writers do not checkpoint on close, so
    the last batch stays in the -wal file), then after the WAL was
    checkpointed and truncated (`PRAGMA wal_checkpoint(TRUNCATE)`)."""
    out = []
    data = {}
    batch = args.lines
    rows = []
    build = {}

    def mib(path):
        return os.path.getsize(path) / 2**20 if os.path.exists(path) else 0.0

    def measure(p, total, state):
        cmds = [
            ("spool size", [spool, "-s", p, "size"]),
            ("spool stats", [spool, "-s", p, "stats"]),
            ("spool list --limit 20", [spool, "-s", p, "list", "--limit", "20"]),
        ]
        db_mib, wal_mib = mib(p), mib(p + "-wal")
        for name, argv in cmds:
            run_timed(argv)  # warm-up
        lat = {name: [] for name, _ in cmds}
        for _ in range(args.inspect_runs):
            for name, argv in cmds:
                t = run_timed(argv).wall
                lat[name].append(t)
        for name, argv in cmds:
            rss = []
            for _ in range(3):
                rss_file = os.path.join(d, "rss.txt")
                run_timed([timebin, "-f", "%M", "-o", rss_file] + argv)
                with open(rss_file) as f:
                    rss.append(int(f.read().strip().splitlines()[-1]))
            t = lat[name]
            rows.append((total, state, db_mib, wal_mib, name, pct(t, 50), max(t), max(rss)))
            data[f"{total}:{state}:{name}"] = {"p50": pct(t, 50), "max": max(t), "rss_kib": max(rss), "db_mib": db_mib, "wal_mib": wal_mib}

    for total in (args.small, args.big):
        p = os.path.join(d, f"c-spool-{total}.db")
        remove_spool(p)
        t0 = time.perf_counter()
        left = total
        while left > 0:
            chunk = min(batch, left)
            src = lines
            if chunk != batch:
                src = os.path.join(d, f"c-lines-{chunk}.txt")
                write_lines(src, chunk)
            run_timed([spool, "-s", p, "enqueue", "--stdin", "--lines"], stdin_path=src)
            left -= chunk
        build[total] = time.perf_counter() - t0
        got = int(check([spool, "-s", p, "size"]).decode())
        if got != total:
            raise RuntimeError(f"(c) spool holds {got}, expected {total}")
        measure(p, total, "as written")
        check([sqlite3, p, "PRAGMA wal_checkpoint(TRUNCATE);"])
        measure(p, total, "WAL truncated")
    out.append(
        f"### (c) Inspecting SQLite spools (warm page cache; {args.inspect_runs} runs each after one warm-up; "
        "peak RSS from `/usr/bin/time -f %M`, max of 3)\n"
    )
    out.append(
        "\"as written\": the spool as the `enqueue --lines` processes left it, with the `-wal` file they "
        "wrote (writers do not checkpoint on close; a new process re-reads the whole valid WAL when it "
        "opens the spool); \"WAL truncated\": after `sqlite3 SPOOL 'PRAGMA wal_checkpoint(TRUNCATE)'`.\n"
    )
    out.append("| items | state | db MiB | wal MiB | command | p50 ms | max ms | peak RSS MiB | p50 < 100 ms |")
    out.append("|---:|---|---:|---:|---|---:|---:|---:|---|")
    for total, state, db_mib, wal_mib, name, p50, mx, rss in rows:
        out.append(
            f"| {total:,} | {state} | {db_mib:.0f} | {wal_mib:.0f} | `{name}` | {ms(p50)} | {ms(mx)} | "
            f"{rss / 1024:.1f} | {verdict(p50 < 0.1)} |"
        )
    out.append("")
    out.append(
        "Built with `spool enqueue --stdin --lines` in batches of "
        f"{batch:,}: {args.small:,} items in {build[args.small]:.1f} s, {args.big:,} items in {build[args.big]:.1f} s."
    )
    for state in ("as written", "WAL truncated"):
        small = {r[4]: r[7] for r in rows if r[0] == args.small and r[1] == state}
        big = {r[4]: r[7] for r in rows if r[0] == args.big and r[1] == state}
        growth = ", ".join(f"`{k}` {small[k] / 1024:.1f} → {big[k] / 1024:.1f} MiB" for k in small)
        out.append(f"Peak RSS from {args.small:,} to {args.big:,} items ({state}): {growth}.")
    return "\n".join(out), data


# --------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spool", required=True, help="the spool binary (release build)")
    ap.add_argument("--dir", required=True, help="work directory (files are created here)")
    ap.add_argument("--calls", type=int, default=400, help="(a) calls per command (default 400)")
    ap.add_argument("--warmup", type=int, default=10, help="(a) untimed calls per command first")
    ap.add_argument("--big-ndjson", type=int, default=1_000_000, help="(a) items in the big NDJSON spool (0: leave it out)")
    ap.add_argument("--drift-calls", type=int, default=2000, help="(a') calls per command on fresh spools (0: skip)")
    ap.add_argument("--drift-window", type=int, default=250, help="(a') calls per reported window")
    ap.add_argument("--lines", type=int, default=100_000, help="(b) lines per batch (default 100000)")
    ap.add_argument("--reps", type=int, default=3, help="(b) runs per command (default 3)")
    ap.add_argument("--small", type=int, default=100_000, help="(c) small spool items")
    ap.add_argument("--big", type=int, default=1_000_000, help="(c) big spool items")
    ap.add_argument("--inspect-runs", type=int, default=15, help="(c) timed runs per command")
    ap.add_argument("--only", default="abc", help="which parts to run (default abc)")
    ap.add_argument("--json-out", help="also write the raw figures as JSON here")
    args = ap.parse_args()

    spool = os.path.abspath(args.spool)
    sqlite3 = which("sqlite3", INSTALLER)
    sh = which("sh", INSTALLER)
    which("strace", INSTALLER)
    timebin = "/usr/bin/time"
    if not os.access(timebin, os.X_OK):
        sys.exit("cli_bench: /usr/bin/time not found (apt-get install time)")
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)

    info = machine_info(d)
    version = check([spool, "--version"]).decode().strip()
    sqlite_version = check([sqlite3, "-version"]).decode().split()[0]
    print("## CLI benchmark (`benches/cli.sh`)\n")
    print(f"- date: {info['date']}; {version}; sqlite3 CLI {sqlite_version}; Python {platform.python_version()}")
    print(f"- machine: {info['nproc']} cores ({info['cpu']}), kernel {info['kernel']}, work dir on {info['fs']}")
    print(f"- load at start: `{info['load']}`")
    print()
    sys.stdout.flush()
    results = {"machine": info}
    t_start = time.perf_counter()
    lines = None
    if "a" in args.only:
        text, results["a"] = bench_latency(args, spool, sqlite3, sh, d)
        print(text + "\n")
        sys.stdout.flush()
        if args.drift_calls:
            text, results["a2"] = bench_drift(args, spool, sqlite3, d)
            print(text + "\n")
            sys.stdout.flush()
    if "b" in args.only or "c" in args.only:
        if "b" in args.only:
            text, results["b"], lines = bench_batch(args, spool, sqlite3, d)
            print(text + "\n")
            sys.stdout.flush()
        else:
            lines = os.path.join(d, "b-lines.txt")
            write_lines(lines, args.lines)
    if "c" in args.only:
        text, results["c"] = bench_inspect(args, spool, sqlite3, timebin, d, lines)
        print(text + "\n")
    results["load_end"] = uptime()
    print(f"- load at end: `{results['load_end']}`; total run time {time.perf_counter() - t_start:.0f} s")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
