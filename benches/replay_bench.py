#!/usr/bin/env python3
"""Replay benchmark for `spool` (issue 4, "Performance"): measured side by
side in one run, printed as Markdown tables.

  1. 10,000 small items to a local HTTP sink (examples/http_sink.rs) that
     answers 200 at once: `spool replay --url` (SQLite and NDJSON spools)
     against a `while read; do curl …; done` loop and a Python
     `requests.Session()` loop;
  2. the same against a sink that answers after 20 ms: `spool replay`
     sequential and with `--concurrency 16` on 10,000 items; the curl and
     Python loops on 500 items, extrapolated per item;
  3. `spool replay --exec cat` against a shell loop
     `while read -r l; do printf '%s' "$l" | cat >/dev/null; done`;
  4. profile: sync calls, thread creations and CPU per item (`strace -f
     -c`, rusage), and the same replay on tmpfs (where a sync costs
     nothing) to attribute the time;
  5. retention of delivered items (SPEC §9): the same replay with
     `spool config retain 7d` against retention off, per-item durable and
     with `--commit-every 64`, on both backends, in paired rounds (off and
     on back to back); the verdict is on the median per-round ratio.

Every spool replay commits each outcome durably before the next item
(one `mark_done` per delivery), and starts after an untimed `sync`, so that
the writeback of earlier runs' files does not land in it. Times are
wall-clock for the whole process, start-up included, for every contender.
Standard library only, except the Python contender itself, which needs
`requests` (benches/replay.sh installs it). Performance is measured, never asserted: the script exits 0 whatever
the ratios are.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.request

from benchlib import check, machine_info, run_timed, strace_counts, uptime, verdict, which

INSTALLER = "benches/replay.sh"
CURL_LOOP = 'while read -r line; do curl -s -o /dev/null --data-binary "$line" "$1"; done'
SHELL_EXEC_LOOP = "while read -r l; do printf '%s' \"$l\" | cat >/dev/null; done"
PY_LOOP = r'''
import sys
import requests

url = sys.argv[1]
s = requests.Session()
for line in sys.stdin.buffer:
    r = s.post(url, data=line.rstrip(b"\n"))
    if r.status_code != 200:
        sys.exit(f"HTTP {r.status_code}")
'''


class Sink:
    """One examples/http_sink process (started and stopped by us)."""

    def __init__(self, binary, delay_ms):
        self.proc = subprocess.Popen(
            [binary, "--port", "0", "--delay-ms", str(delay_ms)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"http_sink said {line!r}")
        self.base = line[len("listening on ") :]
        self.url = self.base + "/in"
        self.delay_ms = delay_ms

    def count(self):
        with urllib.request.urlopen(self.base + "/count", timeout=10) as r:
            return int(r.read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Bench:
    def __init__(self, args, spool, sinks, d):
        self.args = args
        self.spool = spool
        self.sinks = sinks
        self.d = d
        self.bash = which("bash", INSTALLER)
        self.curl = which("curl", INSTALLER)
        self.python = sys.executable
        self.pyloop = os.path.join(d, "requests_loop.py")
        with open(self.pyloop, "w") as f:
            f.write(PY_LOOP)
        self.files = {}
        self.rows = {}

    def items(self, n):
        """A file of n small payloads, one per line."""
        if n not in self.files:
            p = os.path.join(self.d, f"items-{n}.txt")
            with open(p, "w") as f:
                for i in range(n):
                    f.write(json.dumps({"event": "bench", "seq": i, "user": "u-%06d" % (i % 5000)}) + "\n")
            self.files[n] = p
        return self.files[n]

    def fresh_spool(self, backend, n, where=None, retain=None):
        base = where or self.d
        p = os.path.join(base, "replay.db" if backend == "sqlite" else "replay.ndjson")
        for suffix in ("", "-wal", "-shm", ".meta", ".dead", ".delivered", ".idx", ".idx-dirty", ".idx-journal", ".replay.lock"):
            if os.path.exists(p + suffix):
                os.remove(p + suffix)
        run_timed([self.spool, "-s", p, "enqueue", "--stdin", "--lines"], stdin_path=self.items(n))
        if retain:
            check([self.spool, "-s", p, "config", "retain", retain])
        return p

    def spool_size(self, p):
        return int(check([self.spool, "-s", p, "size"]).decode())

    def replay(self, label, backend, n, target, extra=(), where=None, retain=None):
        p = self.fresh_spool(backend, n, where, retain)
        sink = target if isinstance(target, Sink) else None
        before = sink.count() if sink else 0
        argv = [self.spool, "-s", p, "replay", "-q"]
        argv += ["--url", sink.url] if sink else ["--exec", target]
        argv += list(extra)
        # Untimed: write back what earlier runs left dirty in the page
        # cache, so that their writeback does not land in this run.
        os.sync()
        wall, cpu, _ = run_timed(argv)
        left = self.spool_size(p)
        if left != 0:
            raise RuntimeError(f"{label}: {left} items left in the spool")
        if sink and sink.count() - before != n:
            raise RuntimeError(f"{label}: the sink saw {sink.count() - before} requests, expected {n}")
        if retain:
            kept = json.loads(check([self.spool, "-s", p, "--json", "stats"]))["delivered_retained"]
            if kept != n:
                raise RuntimeError(f"{label}: {kept} delivered items retained, expected {n}")
        return self.record(label, n, wall, cpu)

    def loop(self, label, n, script, args, sink=None):
        before = sink.count() if sink else 0
        wall, cpu, _ = run_timed([self.bash, "-c", script, "bash"] + list(args), stdin_path=self.items(n))
        if sink and sink.count() - before != n:
            raise RuntimeError(f"{label}: the sink saw {sink.count() - before} requests, expected {n}")
        return self.record(label, n, wall, cpu)

    def pyloop_run(self, label, n, sink):
        before = sink.count()
        wall, cpu, _ = run_timed([self.python, self.pyloop, sink.url], stdin_path=self.items(n))
        if sink.count() - before != n:
            raise RuntimeError(f"{label}: the sink saw {sink.count() - before} requests, expected {n}")
        return self.record(label, n, wall, cpu)

    def record(self, label, n, wall, cpu):
        row = {"label": label, "n": n, "wall": wall, "cpu": cpu, "per_item": wall / n}
        self.rows[label] = row
        print(f"  {label}: {n} items in {wall:.2f} s ({wall / n * 1000:.3f} ms/item)", file=sys.stderr, flush=True)
        return row


def merge(runs):
    """One row from repeated runs of one contender: the median wall time,
    with every run kept for the range."""
    walls = sorted(r["wall"] for r in runs)
    wall = median(walls)
    cpu = median(r["cpu"] for r in runs)
    n = runs[0]["n"]
    return {"label": runs[0]["label"], "n": n, "wall": wall, "cpu": cpu, "per_item": wall / n, "walls": walls}


def median(xs):
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def rounds(k, contenders):
    """Run every contender k times, round-robin (so that load changes on a
    shared machine hit all of them alike); return one merged row each."""
    runs = [[] for _ in contenders]
    for r in range(k):
        for i, c in enumerate(contenders):
            if r == 0 or c[1]:
                runs[i].append(c[0]())
    return [merge(x) for x in runs]


def table(rows, ref=None, ref_label=""):
    head = "| contender | items | runs | wall s (median) | range s | ms per item | items/s | CPU ms per item |"
    sep = "|---|---:|---:|---:|---|---:|---:|---:|"
    if ref:
        head += f" {ref_label} |"
        sep += "---:|"
    out = [head, sep]
    for r in rows:
        walls = r.get("walls", [r["wall"]])
        span = f"{walls[0]:.2f}–{walls[-1]:.2f}" if len(walls) > 1 else "–"
        line = (
            f"| {r['label']} | {r['n']:,} | {len(walls)} | {r['wall']:.2f} | {span} | {r['per_item'] * 1000:.3f} | "
            f"{1 / r['per_item']:,.0f} | {r['cpu'] / r['n'] * 1000:.3f} |"
        )
        if ref:
            line += f" {ref(r)} |"
        out.append(line)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spool", required=True, help="the spool binary (release build)")
    ap.add_argument("--sink", required=True, help="the http_sink example binary (release build)")
    ap.add_argument("--dir", required=True, help="work directory")
    ap.add_argument("--items", type=int, default=10_000, help="items per spool replay (default 10000)")
    ap.add_argument("--loop-items", type=int, default=None, help="items for the curl/python loops at 0 ms (default: --items)")
    ap.add_argument("--slow-loop-items", type=int, default=500, help="items for the curl/python loops at 20 ms (default 500)")
    ap.add_argument("--slow-items", type=int, default=None, help="items for spool replays at 20 ms (default: --items)")
    ap.add_argument("--exec-items", type=int, default=2_000, help="items for the --exec comparison (default 2000)")
    ap.add_argument("--reps", type=int, default=3, help="runs of the shorter contenders in parts 1 and 3 (default 3)")
    ap.add_argument("--delay-ms", type=int, default=20, help="the slow sink's delay (default 20)")
    ap.add_argument("--concurrency", type=int, default=16, help="--concurrency for the slow sink (default 16)")
    ap.add_argument("--commit-every", type=int, default=64, help="group size of the grouped-commit contenders (default 64)")
    ap.add_argument("--grouped-concurrency", type=int, default=4, help="--concurrency of the grouped, concurrent contenders in part 1 (default 4)")
    ap.add_argument("--profile-items", type=int, default=1000, help="items per strace profile run (0: no profile)")
    ap.add_argument("--retention-reps", type=int, default=7, help="paired rounds of part 5 (default 7)")
    ap.add_argument("--only", default="12345", help="which parts to run (default 12345)")
    ap.add_argument("--json-out", help="also write the raw figures as JSON here")
    args = ap.parse_args()
    args.loop_items = args.loop_items or args.items
    args.slow_items = args.slow_items or args.items

    spool = os.path.abspath(args.spool)
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    which("strace", INSTALLER)
    info = machine_info(d)
    version = check([spool, "--version"]).decode().strip()
    curl_version = check([which("curl", INSTALLER), "--version"]).decode().split()[1]
    try:
        import requests  # noqa: F401  (only to report its version)

        requests_version = requests.__version__
    except ImportError:
        sys.exit("replay_bench: the Python contender needs requests (pip install requests)")

    print("## Replay benchmark (`benches/replay.sh`)\n")
    print(f"- date: {info['date']}; {version}; curl {curl_version}; Python {platform.python_version()} with requests {requests_version}")
    print(f"- machine: {info['nproc']} cores ({info['cpu']}), kernel {info['kernel']}, work dir on {info['fs']}")
    print(f"- load at start: `{info['load']}`")
    print("- sink: `examples/http_sink` (127.0.0.1, one thread per connection), answering `200` with an empty body")
    print()
    sys.stdout.flush()

    t_start = time.perf_counter()
    fast = Sink(os.path.abspath(args.sink), 0)
    slow = Sink(os.path.abspath(args.sink), args.delay_ms)
    results = {"machine": info}
    try:
        b = Bench(args, spool, (fast, slow), d)
        n, ln = args.items, args.loop_items

        if "1" in args.only:
            print("part 1: local sink answering at once", file=sys.stderr)
            group = ("--commit-every", str(args.commit_every))
            gc = args.grouped_concurrency
            group_conc = (*group, "--concurrency", str(gc))
            r_sql, r_curl, r_nd, r_py, g_sql, g_nd, gc_sql, gc_nd = rounds(
                args.reps,
                [
                    (lambda: b.replay("`spool replay --url` (SQLite spool)", "sqlite", n, fast), True),
                    (lambda: b.loop("`while read; do curl …; done`", ln, CURL_LOOP, [fast.url], fast), False),
                    (lambda: b.replay("`spool replay --url` (NDJSON spool)", "ndjson", n, fast), True),
                    (lambda: b.pyloop_run("Python `requests.Session()` loop", ln, fast), True),
                    (lambda: b.replay(f"`spool replay --url --commit-every {args.commit_every}` (SQLite spool)", "sqlite", n, fast, extra=group), True),
                    (lambda: b.replay(f"`spool replay --url --commit-every {args.commit_every}` (NDJSON spool)", "ndjson", n, fast, extra=group), True),
                    (lambda: b.replay(f"`spool replay --url --commit-every {args.commit_every} --concurrency {gc}` (SQLite spool)", "sqlite", n, fast, extra=group_conc), True),
                    (lambda: b.replay(f"`spool replay --url --commit-every {args.commit_every} --concurrency {gc}` (NDJSON spool)", "ndjson", n, fast, extra=group_conc), True),
                ],
            )
            rows = [r_sql, r_nd, g_sql, g_nd, gc_sql, gc_nd, r_curl, r_py]
            print(f"### 1. Replay of {n:,} small items to a local sink answering at once\n")
            print(f"Spool and Python runs: median of {args.reps}, round-robin; the curl loop ran once (it takes longest).\n")
            print(
                table(
                    rows,
                    ref=lambda r: f"{r_curl['per_item'] / r['per_item']:.1f}× / {r_py['per_item'] / r['per_item']:.2f}×",
                    ref_label="speed vs curl loop / vs Python loop",
                )
            )
            print()
            print("| target | SQLite spool | NDJSON spool | verdict (SQLite / NDJSON) |")
            print("|---|---:|---:|---|")
            for name, ref, goal in (("≥ 25× the curl loop", r_curl, 25), ("≥ 2× the Python loop", r_py, 2)):
                a = ref["per_item"] / r_sql["per_item"]
                c = ref["per_item"] / r_nd["per_item"]
                print(f"| {name} | {a:.1f}× | {c:.1f}× | {verdict(a >= goal)} / {verdict(c >= goal)} |")
            print()
            print(f"With `--commit-every {args.commit_every}` (a crash redelivers at most {args.commit_every - 1} delivered items, with their keys):\n")
            print("| target | SQLite spool | NDJSON spool | verdict (SQLite / NDJSON) |")
            print("|---|---:|---:|---|")
            a = r_py["per_item"] / g_sql["per_item"]
            c = r_py["per_item"] / g_nd["per_item"]
            print(f"| ≥ 15× the Python loop (grouped commits) | {a:.1f}× | {c:.1f}× | {verdict(a >= 15)} / {verdict(c >= 15)} |")
            a = r_curl["per_item"] / g_sql["per_item"]
            c = r_curl["per_item"] / g_nd["per_item"]
            print(f"| ≥ 25× the curl loop (grouped commits) | {a:.1f}× | {c:.1f}× | {verdict(a >= 25)} / {verdict(c >= 25)} |")
            a = r_py["per_item"] / gc_sql["per_item"]
            c = r_py["per_item"] / gc_nd["per_item"]
            print(f"| ≥ 15× the Python loop (grouped commits, `--concurrency {gc}`) | {a:.1f}× | {c:.1f}× | {verdict(a >= 15)} / {verdict(c >= 15)} |")
            print()
            sys.stdout.flush()
            results["1"] = [r_sql, r_nd, g_sql, g_nd, gc_sql, gc_nd, r_curl, r_py]

        if "2" in args.only:
            print(f"part 2: sink answering after {args.delay_ms} ms", file=sys.stderr)
            sn, sl = args.slow_items, args.slow_loop_items
            c = args.concurrency
            r_seq = b.replay("`spool replay --url` (SQLite spool), sequential", "sqlite", sn, slow)
            r_curl = b.loop("`while read; do curl …; done`", sl, CURL_LOOP, [slow.url], slow)
            r_conc = b.replay(f"`spool replay --url --concurrency {c}` (SQLite spool)", "sqlite", sn, slow, ["--concurrency", str(c)])
            r_py = b.pyloop_run("Python `requests.Session()` loop", sl, slow)
            r_conc_nd = b.replay(f"`spool replay --url --concurrency {c}` (NDJSON spool)", "ndjson", sn, slow, ["--concurrency", str(c)])
            rows = [r_seq, r_conc, r_conc_nd, r_curl, r_py]
            print(f"### 2. Replay to a sink answering after {args.delay_ms} ms\n")
            print(
                f"The curl and Python loops ran {sl:,} items; their per-item cost is "
                f"extrapolated to {sn:,} items (the time per item does not depend on the count).\n"
            )
            print(table(rows, ref=lambda r: f"{r_seq['per_item'] / r['per_item']:.1f}×", ref_label="speed vs spool sequential"))
            print()
            ratio = r_seq["per_item"] / r_conc["per_item"]
            ratio_nd = r_seq["per_item"] / r_conc_nd["per_item"]
            floor = args.delay_ms / 1000 / c
            print("| target | measured | verdict |")
            print("|---|---:|---|")
            print(f"| `--concurrency {c}` ≥ 10× sequential (SQLite) | {ratio:.1f}× | {verdict(ratio >= 10)} |")
            print(f"| `--concurrency {c}` ≥ 10× sequential (NDJSON, vs SQLite sequential) | {ratio_nd:.1f}× | {verdict(ratio_nd >= 10)} |")
            print()
            print(
                f"Floor for {c} in flight: {args.delay_ms} ms / {c} = {floor * 1000:.2f} ms per item "
                f"(a ratio of at most {c}×); measured {r_conc['per_item'] * 1000:.2f} ms (SQLite), "
                f"{r_conc_nd['per_item'] * 1000:.2f} ms (NDJSON).\n"
            )
            sys.stdout.flush()
            results["2"] = rows

        if "3" in args.only:
            print("part 3: --exec cat", file=sys.stderr)
            en = args.exec_items
            r_ex, r_sh, r_ex_nd = rounds(
                args.reps,
                [
                    (lambda: b.replay("`spool replay --exec cat` (SQLite spool)", "sqlite", en, "cat"), True),
                    (lambda: b.loop("`while read -r l; do printf '%s' \"$l\" \\| cat >/dev/null; done`", en, SHELL_EXEC_LOOP, []), True),
                    (lambda: b.replay("`spool replay --exec cat` (NDJSON spool)", "ndjson", en, "cat"), True),
                ],
            )
            rows = [r_ex, r_ex_nd, r_sh]
            print(f"### 3. `--exec cat` against a shell loop, {en:,} items (median of {args.reps}, round-robin)\n")
            print(table(rows, ref=lambda r: f"{r['per_item'] / r_sh['per_item']:.2f}×", ref_label="per-item cost vs shell loop"))
            print()
            a = r_ex["per_item"] / r_sh["per_item"]
            c2 = r_ex_nd["per_item"] / r_sh["per_item"]
            print("| target | SQLite spool | NDJSON spool | verdict (SQLite / NDJSON) |")
            print("|---|---:|---:|---|")
            print(f"| `--exec` ≤ 1.3× the shell loop's per-item cost | {a:.2f}× | {c2:.2f}× | {verdict(a <= 1.3)} / {verdict(c2 <= 1.3)} |")
            print()
            sys.stdout.flush()
            results["3"] = rows

        if "4" in args.only and args.profile_items:
            print("part 4: profile", file=sys.stderr)
            pn = args.profile_items
            print(f"### 4. Profile ({pn:,} items per run)\n")
            print("Sync calls, thread and process creations and all system calls per item, from `strace -f -c` (strace slows")
            print("the run down; only the counts are used):\n")
            print("| run | fsync+fdatasync per item | threads+processes created per item | execve per item | syscalls per item |")
            print("|---|---:|---:|---:|---:|")
            out = os.path.join(d, "strace.txt")
            prof = {}
            for label, argv, backend in (
                ("`spool replay --url` (SQLite)", lambda p: [spool, "-s", p, "replay", "-q", "--url", fast.url], "sqlite"),
                ("`spool replay --url` (NDJSON)", lambda p: [spool, "-s", p, "replay", "-q", "--url", fast.url], "ndjson"),
                ("Python `requests.Session()` loop", lambda p: [sys.executable, b.pyloop, fast.url], None),
                ("`spool replay --exec cat` (SQLite)", lambda p: [spool, "-s", p, "replay", "-q", "--exec", "cat"], "sqlite"),
                ("shell `printf \\| cat` loop", lambda p: [b.bash, "-c", SHELL_EXEC_LOOP, "bash"], None),
            ):
                p = b.fresh_spool(backend, pn) if backend else None
                counts = strace_counts(argv(p), out, None if backend else b.items(pn))
                syncs = sum(counts.get(k, 0) for k in ("fsync", "fdatasync", "sync_file_range"))
                spawns = sum(counts.get(k, 0) for k in ("clone", "clone3", "fork", "vfork"))
                total = sum(counts.values())
                print(
                    f"| {label} | {syncs / pn:.2f} | {spawns / pn:.2f} | {counts.get('execve', 0) / pn:.2f} | {total / pn:.1f} |"
                )
                prof[label] = counts
            print()
            # The same replays with the spool on tmpfs, where fsync returns
            # at once: the difference is what durability costs per item.
            shm = "/dev/shm"
            if os.path.isdir(shm) and os.access(shm, os.W_OK):
                tmp = os.path.join(shm, f"spool-replay-bench-{os.getpid()}")
                os.makedirs(tmp, exist_ok=True)
                try:
                    rows = []
                    for backend in ("sqlite", "ndjson"):
                        disk = b.replay(f"`spool replay --url` ({backend}, work dir)", backend, n, fast)
                        mem = b.replay(f"`spool replay --url` ({backend}, tmpfs: syncs are free)", backend, n, fast, where=tmp)
                        rows += [disk, mem]
                    ex_disk = b.replay("`spool replay --exec cat` (sqlite, work dir)", "sqlite", args.exec_items, "cat")
                    ex_mem = b.replay("`spool replay --exec cat` (sqlite, tmpfs: syncs are free)", "sqlite", args.exec_items, "cat", where=tmp)
                    rows += [ex_disk, ex_mem]
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                print("Where the time goes: the same replays with the spool on the work dir's file system and on tmpfs")
                print("(`/dev/shm`, where `fsync` returns at once). The difference is the cost of one durable commit per item.\n")
                print(table(rows))
                print()
                prof["tmpfs"] = rows
            results["4"] = prof

        if "5" in args.only:
            print("part 5: retention on against off", file=sys.stderr)
            group = ("--commit-every", str(args.commit_every))
            pairs = []
            for backend in ("sqlite", "ndjson"):
                for extra, how in (((), "per item"), (group, f"--commit-every {args.commit_every}")):
                    pairs.append([
                        (lambda label=f"{backend}, {how}, retain {retain or 'off'}", backend=backend, extra=extra, retain=retain:
                         b.replay(label, backend, n, fast, extra=extra, retain=retain))
                        for retain in (None, "7d")
                    ])
            # Paired rounds: each round runs every pair's two contenders
            # back to back (alternating which goes first), so that a load
            # change on a shared machine hits both alike; the verdict is
            # on the median of the per-round ratios.
            runs = [([], []) for _ in pairs]
            for r in range(args.retention_reps):
                for (off, on), (offs, ons) in zip(pairs, runs):
                    if r % 2:
                        ons.append(on())
                        offs.append(off())
                    else:
                        offs.append(off())
                        ons.append(on())
            rows = [row for offs, ons in runs for row in (merge(offs), merge(ons))]
            print(f"### 5. Retention of delivered items: `retain 7d` against off, {n:,} items, sink answering at once\n")
            print(f"{args.retention_reps} rounds; in each, retention off and on run back to back (alternating which goes first).")
            print("With retention on, every delivered item is kept (checked after each run).\n")
            print(table(rows))
            print()
            print("| target | per-round ratios (on / off, time) | median | verdict |")
            print("|---|---|---:|---|")
            ratios5 = []
            for (offs, ons), on_row in zip(runs, rows[1::2]):
                ratios = [on_run["wall"] / off_run["wall"] for off_run, on_run in zip(offs, ons)]
                mid = median(ratios)
                ratios5.append({"label": on_row["label"], "ratios": ratios, "median": mid})
                shown = ", ".join(f"{x:.2f}" for x in ratios)
                print(f"| {on_row['label'].replace(', retain 7d', '')}: within 10% of retention off | {shown} | {mid:.3f} | {verdict(mid <= 1.10)} |")
            print()
            sys.stdout.flush()
            results["5"] = {"rows": rows, "ratios": ratios5}
    finally:
        fast.stop()
        slow.stop()
    results["load_end"] = uptime()
    print(f"- load at end: `{results['load_end']}`; total run time {time.perf_counter() - t_start:.0f} s")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
