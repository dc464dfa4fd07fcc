#!/usr/bin/env python3
"""Scale benchmark (SPEC §10): the one-shot commands on spools of growing
size, median and p99 wall time and peak RSS (from wait4), and a streamed
batch of a large input. Standard library only; run through
benches/scale.sh, which builds the release binary.

    benches/scale_bench.py --spool BIN --dir DIR --backend sqlite --sizes 1000,100000,1000000,10000000
"""

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_info, run_timed  # noqa: E402

PAD = "x" * 60

# The commands of §10, each a list of arguments after `spool -s SPOOL`,
# with the exit statuses that count as success (replay --limit 1 leaves
# due items behind: 75).
COMMANDS = [
    ("enqueue", ["enqueue", "x"], (0,)),
    ("enqueue --key", ["enqueue", "--key", "{key}", "y"], (0,)),
    ("size", ["size"], (0,)),
    ("stats", ["stats"], (0,)),
    ("list --limit 20", ["list", "--limit", "20"], (0,)),
    ("show ID", ["show", "{mid}"], (0,)),
    ("drain --limit 20", ["drain", "--limit", "20"], (0,)),
    ("replay (start)", ["replay", "--limit", "1", "--exec", "true"], (0, 75)),
]


def write_lines(path, n):
    with open(path, "w") as f:
        for i in range(n):
            f.write('{"event":"signup","user":%d,"pad":"%s"}\n' % (i, PAD))


def build(spool, path, n, workdir):
    lines = os.path.join(workdir, f"lines-{n}.txt")
    if not os.path.exists(lines):
        write_lines(lines, n)
    return run_timed([spool, "-s", path, "enqueue", "--lines", "--file", lines])


def peak_rss_kib(argv, ok):
    """Peak RSS of one run, measured by /usr/bin/time: a child spawned
    from Python inherits the interpreter's memory until it execs, and
    wait4's ru_maxrss counts that too."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + argv, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode not in ok:
        raise RuntimeError(f"{argv!r} exited with {r.returncode}")
    return int(r.stderr.strip().splitlines()[-1])


def pct(values, p):
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spool", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--backend", choices=["sqlite", "ndjson"], default="sqlite")
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    info = machine_info(args.dir)
    print(f"# scale benchmark, {args.backend}: {info['date']}, {info['nproc']} cores, "
          f"{info['cpu']}, {info['fs']}, load {info['load']}\n")
    ext = "db" if args.backend == "sqlite" else "ndjson"
    rows = {}
    for n in [int(s) for s in args.sizes.split(",")]:
        path = os.path.join(args.dir, f"scale-{n}.{ext}")
        for suffix in ("", "-wal", "-shm", ".dead", ".meta", ".idx", ".idx-wal", ".idx-shm"):
            try:
                os.remove(path + suffix)
            except FileNotFoundError:
                pass
        t = build(args.spool, path, n, args.dir)
        print(f"built {n:,} items: {t.wall:.1f} s", flush=True)
        for name, argv, ok in COMMANDS:
            walls = []
            for r in range(args.runs):
                a = [x.format(key=f"bench-key-{r}", mid=n // 2) for x in argv]
                walls.append(run_timed([args.spool, "-s", path] + a, ok=ok).wall)
            a = [x.format(key="bench-key-rss", mid=n // 2) for x in argv]
            rss = peak_rss_kib([args.spool, "-s", path] + a, ok)
            rows.setdefault(name, {})[n] = (statistics.median(walls), pct(walls, 99), rss)
    sizes = [int(s) for s in args.sizes.split(",")]
    print()
    print("| command | " + " | ".join(f"{n:,} items: median / p99 ms, RSS MiB" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name, _, _ in COMMANDS:
        cells = []
        for n in sizes:
            med, p99, rss = rows[name][n]
            cells.append(f"{med * 1000:.1f} / {p99 * 1000:.1f}, {rss / 1024:.1f}")
        print(f"| `{name}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
