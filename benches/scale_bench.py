#!/usr/bin/env python3
"""Scale benchmark (SPEC §10, issue 11), both backends. Run it through
`benches/scale.sh`, which builds the release binary. Standard library only.

Part `oneshot`: the one-shot commands of §10 (`enqueue` with and without
`--key`, `size`, `stats`, `list --limit 20`, `show ID`, `drain --limit 20`,
and the start of a replay: `replay --limit 1 --exec true`) on spools of
each size in --sizes. Each command runs --runs times; the table gives the
median and the 99th percentile of the wall time, the median CPU time (user
+ system, from wait4), and the peak RSS of one more run under
`/usr/bin/time` (see `benchlib.peak_rss_kib`).

- NDJSON spools are written directly in the reference line format (an
  item of ~100 bytes of payload per line, an idempotency key on every
  tenth), as a reference writer or an older spool would leave them; the
  first mutating command builds the index (timed apart, and once more
  after deleting the index, for its peak RSS).
- SQLite spools are built with `spool enqueue --lines --file` of a
  generated file of ~90-byte lines (the build is timed, with its peak RSS).

Verdicts: NDJSON, the largest size against the smallest (≤ 2× the wall
time, ≤ 32 MiB peak RSS); SQLite, the largest size under 100 ms.

Part `stream`: a streamed batch of about --gib GiB: `enqueue --lines` of
the input on stdin, `export -o`, `import` of that export into a fresh
spool, `dlq export -o` of a spool holding the same records as dead letters
(imported untimed), and `drain` to a file; wall time and peak RSS of the
spool process itself (`/usr/bin/time -v`). Verdict: ≤ 64 MiB.

Every spool and work file is deleted as soon as its part is done.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_info, peak_rss_kib, run_timed, verdict  # noqa: E402

PAYLOAD = "x" * 100
PAD = "x" * 60
T0 = 1_764_583_200
MIB = 1024

# The one-shot commands, each a list of arguments after `spool -s SPOOL`.
# {run} is replaced by the run number ("rss" for the RSS run), {mid} by the
# id of an item in the middle of the spool.
COMMANDS = [
    ("enqueue", ["enqueue", "--", "one more item {run}"]),
    ("enqueue --key", ["enqueue", "--key", "bench-{run}", "--", "keyed item {run}"]),
    ("size", ["size"]),
    ("stats", ["stats"]),
    ("list --limit 20", ["list", "--limit", "20"]),
    ("show ID", ["show", "{mid}"]),
    ("drain --limit 20", ["drain", "--limit", "20"]),
    ("replay --limit 1 --exec true", ["replay", "--limit", "1", "--exec", "true"]),
]
# The commands SPEC §10 bounds, per backend.
TARGETED = {
    "ndjson": {"enqueue", "enqueue --key", "size", "list --limit 20", "show ID", "drain --limit 20",
               "replay --limit 1 --exec true"},
    "sqlite": {"enqueue", "size", "stats", "list --limit 20", "replay --limit 1 --exec true"},
}

COMPANIONS = ("", "-wal", "-shm", "-journal", ".dead", ".meta", ".idx", ".idx-wal", ".idx-shm", ".replay.lock")


def remove_spool(path):
    for suffix in COMPANIONS:
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def spool_bytes(path):
    total = 0
    for suffix in COMPANIONS:
        try:
            total += os.path.getsize(path + suffix)
        except FileNotFoundError:
            pass
    return total


def percentile(values, p):
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def write_reference_ndjson(path, n):
    """An NDJSON spool of `n` pending items in the reference format (plus
    the enqueue time spool writes)."""
    with open(path, "w") as f:
        buf = []
        for i in range(1, n + 1):
            key = f"key-{i}" if i % 10 == 0 else ""
            buf.append(
                '{"op":"put","id":%d,"payload":"%s %d","idempotencyKey":"%s","attempts":0,"enqueuedAt":%d}\n'
                % (i, PAYLOAD, i, key, T0)
            )
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


def write_lines(path, n):
    with open(path, "w") as f:
        buf = []
        for i in range(n):
            buf.append('{"event":"signup","user":%d,"pad":"%s"}\n' % (i, PAD))
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


def time_v(argv, stdin_path=None, stdout_path=os.devnull, ok=(0,), workdir="/tmp"):
    """Run argv under `/usr/bin/time -v`: (wall s, user + system s, peak
    RSS KiB) of the spool process itself."""
    out = os.path.join(workdir, f".time-v-{os.getpid()}")
    try:
        t = run_timed(["/usr/bin/time", "-v", "-o", out] + list(argv), stdin_path, stdout_path, ok)
        fields = {}
        with open(out) as f:
            for line in f:
                if ":" in line:
                    k, v = line.rsplit(":", 1) if "Elapsed" not in line else line.split(": ", 1)
                    fields[k.strip()] = v.strip()
        rss = int(fields["Maximum resident set size (kbytes)"])
        cpu = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
        return t.wall, cpu, rss
    finally:
        try:
            os.remove(out)
        except FileNotFoundError:
            pass


def measure(spool, path, argv, runs, ok):
    walls, cpus = [], []
    for r in range(runs):
        args = [a.replace("{run}", str(r)) for a in argv]
        t = run_timed([spool, "-s", path] + args, ok=ok)
        walls.append(t.wall)
        cpus.append(t.cpu)
    args = [a.replace("{run}", "rss") for a in argv]
    rss = peak_rss_kib([spool, "-s", path] + args, ok=ok)
    return statistics.median(walls), percentile(walls, 99), rss, statistics.median(cpus)


def build(spool, backend, path, n, workdir):
    """Make a spool of n items; return (label, wall s, CPU s, peak RSS KiB)."""
    remove_spool(path)
    if backend == "ndjson":
        write_reference_ndjson(path, n)
        first = run_timed([spool, "-s", path, "enqueue", "--", "warm-up"])
        os.remove(path + ".idx")
        wall, cpu, rss = time_v([spool, "-s", path, "enqueue", "--", "warm-up 2"], workdir=workdir)
        return "index build (first write)", first.wall, first.cpu, rss
    lines = os.path.join(workdir, f"lines-{n}.txt")
    write_lines(lines, n)
    try:
        wall, cpu, rss = time_v([spool, "-s", path, "enqueue", "--lines", "--file", lines], workdir=workdir)
    finally:
        os.remove(lines)
    return "build: enqueue --lines --file", wall, cpu, rss


def one_shot(spool, backend, workdir, sizes, runs, keep):
    results = {}
    ext = "db" if backend == "sqlite" else "ndjson"
    for n in sizes:
        path = os.path.join(workdir, f"scale-{n}.{ext}")
        label, bwall, bcpu, brss = build(spool, backend, path, n, workdir)
        row = {"_build": (label, bwall, bcpu, brss)}
        print(f"{n:,} items: {label} {bwall:.1f} s, {bcpu:.1f} s CPU, {brss / MIB:.1f} MiB; "
              f"spool {spool_bytes(path) / 1e6:.0f} MB", file=sys.stderr, flush=True)
        for name, argv in COMMANDS:
            argv = [a.replace("{mid}", str(max(1, n // 2))) for a in argv]
            # replay --limit 1 exits 75 when due items are left.
            row[name] = measure(spool, path, argv, runs, ok=(0, 75))
        results[n] = row
        if not keep:
            remove_spool(path)
    return results


def print_one_shot(results, backend, sizes, runs):
    small, large = sizes[0], sizes[-1]
    if backend == "ndjson":
        target = f"{large:,} vs {small:,}: ≤ 2× wall, ≤ 32 MiB"
    else:
        target = f"{large:,} items: < 100 ms"
    print("| command | " + " | ".join(f"{n:,} items: wall median / p99, CPU median, peak RSS" for n in sizes)
          + f" | {large:,} / {small:,}: wall, CPU | {target} |")
    print("|---|" + "---|" * (len(sizes) + 2))
    cells = []
    for n in sizes:
        label, wall, cpu, rss = results[n]["_build"]
        cells.append(f"{wall:.2f} s, {cpu:.2f} s CPU, {rss / MIB:.1f} MiB")
    print(f"| {label} (once) | " + " | ".join(cells) + " | — | — |")
    for name, _ in COMMANDS:
        cells = []
        for n in sizes:
            med, p99, rss, cpu = results[n][name]
            cells.append(f"{med * 1000:.1f} / {p99 * 1000:.1f} ms, {cpu * 1000:.1f} ms, {rss / MIB:.1f} MiB")
        ratio = results[large][name][0] / results[small][name][0]
        cpu_ratio = results[large][name][3] / max(results[small][name][3], 1e-9)
        if name not in TARGETED[backend]:
            v = "(not a target)"
        elif backend == "ndjson":
            v = verdict(ratio <= 2.0 and results[large][name][2] <= 32 * MIB)
        else:
            v = verdict(results[large][name][0] < 0.100)
        print(f"| `{name}` | " + " | ".join(cells) + f" | {ratio:.2f}×, {cpu_ratio:.2f}× | {v} |")
    print(f"\n{runs} runs per command; wall time from spawn to exit, CPU time (user + system) from wait4; "
          "peak RSS from `/usr/bin/time` (one more run).")


def big_input(path, gib):
    target = int(gib * (1 << 30))
    line = "payload of a streamed batch " + "y" * 72 + " %d\n"
    n = 0
    with open(path, "w") as f:
        written, buf = 0, []
        while written < target:
            s = line % n
            buf.append(s)
            written += len(s)
            n += 1
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
    return n


def stream(spool, backend, workdir, gib):
    ext = "db" if backend == "sqlite" else "ndjson"
    main = os.path.join(workdir, f"big.{ext}")
    copy = os.path.join(workdir, f"big-import.{ext}")
    dead = os.path.join(workdir, f"big-dead.{ext}")
    inp = os.path.join(workdir, "big-input.txt")
    exp = os.path.join(workdir, "big-export.ndjson")
    out = os.path.join(workdir, "big-out.ndjson")
    for p in (main, copy, dead):
        remove_spool(p)
    rows = []

    def timed(name, argv, nbytes_of, stdin_path=None, stdout_path=os.devnull):
        wall, cpu, rss = time_v(argv, stdin_path=stdin_path, stdout_path=stdout_path, workdir=workdir)
        rows.append((name, nbytes_of(), wall, cpu, rss))
        print(f"{backend} {name}: {wall:.1f} s, {rss / MIB:.1f} MiB", file=sys.stderr, flush=True)

    try:
        lines = big_input(inp, gib)
        timed("enqueue --lines (stdin)", [spool, "-s", main, "enqueue", "--lines"],
              lambda: os.path.getsize(inp), stdin_path=inp)
        os.remove(inp)
        spool_size = spool_bytes(main)
        timed("export -o FILE", [spool, "-s", main, "export", "-o", exp], lambda: os.path.getsize(exp))
        timed("import FILE (fresh spool)", [spool, "-s", copy, "import", exp], lambda: os.path.getsize(exp))
        remove_spool(copy)
        # The same records as dead letters, for dlq export.
        with open(exp, "rb") as src, open(out, "wb") as dst:
            subprocess.run(["sed", 's/"state":"pending"/"state":"dead","dead_at":"2026-12-01T00:00:00Z"/'],
                           stdin=src, stdout=dst, check=True)
        os.remove(exp)
        subprocess.run([spool, "-q", "-s", dead, "import", out], check=True, stdout=subprocess.DEVNULL)
        os.remove(out)
        timed("dlq export -o FILE", [spool, "-s", dead, "dlq", "export", "-o", out], lambda: os.path.getsize(out))
        os.remove(out)
        remove_spool(dead)
        timed("drain (to a file)", [spool, "-s", main, "drain"], lambda: os.path.getsize(out), stdout_path=out)
        os.remove(out)
    finally:
        for p in (main, copy, dead):
            remove_spool(p)
        for p in (inp, exp, out):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass
    print(f"{backend}: {lines:,} input lines, spool {spool_size / 1e9:.2f} GB after the batch\n")
    print("| command | bytes in/out | wall | CPU | peak RSS | ≤ 64 MiB |")
    print("|---|---:|---:|---:|---:|---|")
    for name, n, wall, cpu, rss in rows:
        print(f"| `{name}` | {n / (1 << 30):.2f} GiB | {wall:.1f} s | {cpu:.1f} s | {rss / MIB:.1f} MiB "
              f"| {verdict(rss <= 64 * MIB)} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spool", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--backend", choices=["sqlite", "ndjson"], default="ndjson")
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--gib", type=float, default=1.0, help="size of the streamed batch")
    ap.add_argument("--only", choices=["oneshot", "stream"], help="one part (default: both)")
    ap.add_argument("--keep", action="store_true", help="keep the one-shot spools in --dir")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    info = machine_info(a.dir)
    print(f"Scale, {a.backend}: {info['nproc']} × {info['cpu']}, {info['fs']}, kernel {info['kernel']}; "
          f"{info['date']}; {info['load']}\n")
    t0 = time.time()
    if a.only in (None, "oneshot"):
        results = one_shot(a.spool, a.backend, a.dir, sizes, a.runs, a.keep)
        print_one_shot(results, a.backend, sizes, a.runs)
        print()
    if a.only in (None, "stream") and a.gib > 0:
        stream(a.spool, a.backend, a.dir, a.gib)
    print(f"\nfinished {time.strftime('%Y-%m-%d %H:%M:%S %Z')} ({time.time() - t0:.0f} s); {machine_info(a.dir)['load']}")


if __name__ == "__main__":
    main()
