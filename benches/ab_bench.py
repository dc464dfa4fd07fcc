#!/usr/bin/env python3
"""Two spool binaries, call by call: an A/B of the small writes and reads
of an NDJSON spool, where `benches/check.sh --baseline` alternates whole
areas and a difference of a few per cent drowns in drift.

Per round, each case runs once with each binary, the order swapped every
round, each binary on its own spools:

- one-shot `enqueue`, `size` and `done ID` (one item) on an NDJSON spool,
  one-shot `enqueue` on a SQLite spool and `spool --version` as controls
  (code the two builds share: what they show is drift and layout, not the
  change);
- `replay --url` of ITEMS items to examples/http_sink, durable per item
  and with `--commit-every 64`, per item;
- with `--batches N`, N rounds of streamed batches of BATCH_ITEMS items
  into a fresh NDJSON spool: `enqueue --lines`, `enqueue --ndjson` with a
  key per item, with 1,000 coalesce keys, `--lines` under `drop-oldest`
  with a bound of 1,000, and `import` of an export of the keyed batch.

Prints a Markdown table of the medians (new / old) and the load average.
Run through benches/ab.sh, which builds the sink.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_info, uptime  # noqa: E402


def timed(argv, stdin=None):
    t = time.perf_counter()
    subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", required=True, help="the spool binary under test")
    ap.add_argument("--old", required=True, help="the spool binary to compare with")
    ap.add_argument("--sink", required=True, help="the http_sink example binary")
    ap.add_argument("--dir", required=True, help="work directory")
    ap.add_argument("--calls", type=int, default=600, help="rounds of one-shot calls (default 600)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of replays (default 6)")
    ap.add_argument("--items", type=int, default=2000, help="items per replay (default 2000)")
    ap.add_argument("--batches", type=int, default=0, help="rounds of streamed batches (default 0: none)")
    ap.add_argument("--batch-items", type=int, default=100000, help="items per batch (default 100000)")
    args = ap.parse_args()
    d = tempfile.mkdtemp(dir=args.dir)
    bins = {"new": args.new, "old": args.old}
    times = {}

    def order(i):
        tags = ["new", "old"] if i % 2 == 0 else ["old", "new"]
        return [(t, bins[t]) for t in tags]

    oneshot = {
        "`spool --version` (control)": lambda b, t, i: [b, "--version"],
        "one-shot `enqueue`, SQLite spool (control)": lambda b, t, i: [b, "-s", f"{d}/{t}.db", "enqueue", f"p{i}"],
        "one-shot `enqueue`, NDJSON spool": lambda b, t, i: [b, "-s", f"{d}/{t}.ndjson", "enqueue", f"p{i}"],
        "one-shot `size`, NDJSON spool": lambda b, t, i: [b, "-s", f"{d}/{t}.ndjson", "size"],
        # Every other round: an item enqueued before (ids 1, 2, 3 ...).
        "one-shot `done ID`, NDJSON spool": lambda b, t, i: [b, "-s", f"{d}/{t}.ndjson", "done", str(i // 2 + 1)],
    }
    start = machine_info(args.dir)
    for i in range(args.calls):
        for label, argv in oneshot.items():
            if "done" in label and i % 2 == 1:
                continue
            for tag, b in order(i):
                times.setdefault((label, tag), []).append(timed(argv(b, tag, i)))

    sink = subprocess.Popen([args.sink, "--port", "0", "--delay-ms", "0"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        line = sink.stdout.readline().decode().strip()
        if not line.startswith("listening on "):
            sys.exit(f"ab_bench: http_sink said {line!r}")
        url = line[len("listening on "):] + "/in"
        lines = "".join(f"item {i}\n" for i in range(args.items)).encode()
        modes = {
            "`replay --url`, durable per item, NDJSON spool (per item)": [],
            "`replay --url --commit-every 64`, NDJSON spool (per item)": ["--commit-every", "64"],
        }
        for r in range(args.rounds):
            for label, extra in modes.items():
                for tag, b in order(r):
                    p = f"{d}/{tag}-replay-{r}-{len(extra)}.ndjson"
                    subprocess.run([b, "-s", p, "enqueue", "--lines"], input=lines, stdout=subprocess.DEVNULL, check=True)
                    # Untimed: write back what the enqueue left dirty.
                    os.sync()
                    t = timed([b, "-s", p, "replay", "-q", "--url", url] + extra)
                    times.setdefault((label, tag), []).append(t / args.items)
    finally:
        sink.kill()
        sink.wait()

    batches = run_batches(args, d, order, times) if args.batches else {}

    print(f"- machine: {start['cpu']}, {start['nproc']} cores, {start['fs']}, kernel {start['kernel']}")
    print(f"- new: `{args.new}`; old: `{args.old}`")
    print(f"- {args.calls} rounds of one-shot calls, {args.rounds} of replays of {args.items} items; medians")
    print(f"- load at the start: {start['load']}")
    print(f"- load at the end: {uptime()}")
    print()
    print("| case | new | old | new / old |")
    print("|---|---:|---:|---:|")
    for label in list(oneshot) + list(modes):
        a = statistics.median(times[(label, "new")])
        b = statistics.median(times[(label, "old")])
        print(f"| {label} | {a * 1e6:.1f} µs | {b * 1e6:.1f} µs | {a / b:.3f} |")
    for label in batches:
        a = statistics.median(times[(label, "new")])
        b = statistics.median(times[(label, "old")])
        print(f"| {label} | {a * 1e3:.1f} ms | {b * 1e3:.1f} ms | {a / b:.3f} |")


def run_batches(args, d, order, times):
    """The streamed batches (see the module docs); their labels."""
    n = args.batch_items
    lines = "".join(f"item {i} payload payload payload\n" for i in range(n)).encode()
    keyed = "".join(f'{{"payload":"item {i}","key":"k{i}"}}\n' for i in range(n)).encode()
    coalescing = "".join(f'{{"payload":"item {i}","coalesce_key":"c{i % 1000}"}}\n' for i in range(n)).encode()
    export = f"{d}/batch-export.ndjson"
    source = f"{d}/batch-source.ndjson"
    subprocess.run([args.old, "-s", source, "enqueue", "--ndjson"], input=keyed, stdout=subprocess.DEVNULL, check=True)
    with open(export, "wb") as f:
        subprocess.run([args.old, "-s", source, "export"], stdout=f, check=True)
    cases = {
        f"`enqueue --lines`, {n:,} items, NDJSON (per batch)": (["enqueue", "--lines"], lines, False),
        f"`enqueue --ndjson`, {n:,} keyed items, NDJSON (per batch)": (["enqueue", "--ndjson"], keyed, False),
        f"`enqueue --ndjson`, {n:,} items, 1,000 coalesce keys, NDJSON (per batch)": (["enqueue", "--ndjson"], coalescing, False),
        f"`enqueue --lines`, {n:,} items, `drop-oldest` at 1,000, NDJSON (per batch)": (["enqueue", "--lines"], lines, True),
        f"`import` of {n:,} keyed items, NDJSON (per batch)": (["import", export], None, False),
    }
    for r in range(args.batches):
        for k, (label, (argv, stdin, bound)) in enumerate(cases.items()):
            for tag, b in order(r):
                p = f"{d}/{tag}-batch-{r}-{k}.ndjson"
                if bound:
                    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": True}
                    subprocess.run([b, "-s", p, "init", "--max-depth", "1000"], **quiet)
                    subprocess.run([b, "-s", p, "config", "on-full", "drop-oldest"], **quiet)
                os.sync()
                times.setdefault((label, tag), []).append(timed([b, "-s", p, *argv], stdin))
    return list(cases)


if __name__ == "__main__":
    main()
