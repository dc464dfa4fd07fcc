"""NDJSON spools at scale (SPEC §10): one-shot commands on spools of
1,000, 100,000 and 1,000,000 pending items, and streaming batches of about
1 GiB. Run through `benches/scale_ndjson.sh`, which builds the release
binary. Standard library only.

Spools are written directly in the reference line format (an item of
about 100 bytes of payload per line, an idempotency key on every tenth),
as a reference writer or an older spool would leave them; the first
mutating command (`enqueue warm-up`, timed apart) builds the index. Each
command then runs `--runs` times; the table shows the median and the 99th
percentile of the wall time, and the peak RSS of one more run under
`/usr/bin/time` (see `benchlib.peak_rss_kib`)."""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_info, peak_rss_kib, run_timed, verdict  # noqa: E402

PAYLOAD = "x" * 100
T0 = 1_764_583_200


def write_spool(path, n):
    """A spool of `n` pending items in the reference format (plus the
    enqueue time spool writes)."""
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


def percentile(values, p):
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def measure(spool, path, argv, runs, ok=(0,)):
    """Median and p99 wall time, median CPU time (user + system, from
    wait4: what the command itself costs, whatever else runs on the
    machine), and peak RSS."""
    walls, cpus = [], []
    for r in range(runs):
        args = [a.replace("{run}", str(r)) for a in argv]
        t = run_timed([spool, "-s", path] + args, ok=ok)
        walls.append(t.wall)
        cpus.append(t.cpu)
    args = [a.replace("{run}", "rss") for a in argv]
    rss = peak_rss_kib([spool, "-s", path] + args, ok=ok)
    return statistics.median(walls), percentile(walls, 99), rss, statistics.median(cpus)


COMMANDS = [
    ("enqueue", ["enqueue", "--", "one more item {run}"]),
    ("enqueue --key", ["enqueue", "--key", "bench-{run}", "--", "keyed item {run}"]),
    ("size", ["size"]),
    ("list --limit 20", ["list", "--limit", "20"]),
    ("show ID", ["show", "{mid}"]),
    ("drain --limit 20", ["drain", "--limit", "20"]),
    ("replay --limit 1 --exec true", ["replay", "--limit", "1", "--exec", "true"]),
]


def one_shot(spool, workdir, sizes, runs):
    results = {}
    for n in sizes:
        path = os.path.join(workdir, f"scale-{n}.ndjson")
        for suffix in ("", ".idx", ".meta", ".dead"):
            try:
                os.remove(path + suffix)
            except FileNotFoundError:
                pass
        write_spool(path, n)
        build = run_timed([spool, "-s", path, "enqueue", "--", "warm-up"])
        os.remove(path + ".idx")
        rss = peak_rss_kib([spool, "-s", path, "enqueue", "--", "warm-up 2"])
        row = {"index build": (build.wall, build.wall, rss, build.cpu)}
        for name, argv in COMMANDS:
            argv = [a.replace("{mid}", str(max(1, n // 2))) for a in argv]
            # replay exits 75 when due items are left (--limit).
            row[name] = measure(spool, path, argv, runs, ok=(0, 75))
        results[n] = row
        size = os.path.getsize(path)
        idx = os.path.getsize(path + ".idx")
        print(f"{n} items: spool file {size / 1e6:.1f} MB, index {idx / 1e6:.1f} MB", file=sys.stderr)
    return results


def print_one_shot(results, sizes, runs):
    small, large = sizes[0], sizes[-1]
    print("| command | " + " | ".join(f"{n:,} items: wall median / p99, CPU median, peak RSS" for n in sizes)
          + f" | {large:,} / {small:,}: wall, CPU | ≤ 2× and ≤ 32 MiB |")
    print("|---|" + "---|" * (len(sizes) + 2))
    for name in ["index build"] + [c for c, _ in COMMANDS]:
        cells = []
        for n in sizes:
            med, p99, rss, cpu = results[n][name]
            if name == "index build":
                cells.append(f"{med * 1000:.0f} ms, {cpu * 1000:.0f} ms CPU (once), {rss / 1024:.1f} MiB")
            else:
                cells.append(f"{med * 1000:.1f} / {p99 * 1000:.1f} ms, {cpu * 1000:.1f} ms, {rss / 1024:.1f} MiB")
        if name == "index build":
            print(f"| {name} (first write) | " + " | ".join(cells) + " | — | — |")
            continue
        ratio = results[large][name][0] / results[small][name][0]
        cpu_ratio = results[large][name][3] / max(results[small][name][3], 1e-9)
        ok = ratio <= 2.0 and results[large][name][2] <= 32 * 1024
        print(f"| `{name}` | " + " | ".join(cells) + f" | {ratio:.2f}×, {cpu_ratio:.2f}× | {verdict(ok)} |")
    print(f"\n{runs} runs per command; wall time from spawn to exit, CPU time (user + system) from wait4; "
          "peak RSS from `/usr/bin/time` (one more run). The verdict is on the wall-time ratio and the RSS; "
          "the CPU ratio shows what the command itself costs when other work shares the machine.")


def big_batches(spool, workdir, gib):
    """enqueue --lines of about `gib` GiB, then export, drain and dlq export
    of the result: time and peak RSS."""
    path = os.path.join(workdir, "big.ndjson")
    for suffix in ("", ".idx", ".meta", ".dead"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass
    inp = os.path.join(workdir, "big-input.txt")
    target = int(gib * (1 << 30))
    line = ("payload of a streamed batch " + "y" * 72 + " %d\n")
    with open(inp, "w") as f:
        written, i, buf = 0, 0, []
        while written < target:
            s = line % i
            buf.append(s)
            written += len(s)
            i += 1
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
    rows = []

    def timed(name, argv, size_of, stdin_path=None, stdout_path=os.devnull):
        # Wall time and peak RSS in one run, through /usr/bin/time.
        rss_out = os.path.join(workdir, ".rss")
        t = run_timed(["/usr/bin/time", "-f", "%M", "-o", rss_out, spool, "-s", path] + argv,
                      stdin_path=stdin_path, stdout_path=stdout_path)
        with open(rss_out) as f:
            rss = int(f.read().split()[-1])
        os.remove(rss_out)
        rows.append((name, size_of(), t.wall, rss))

    timed("enqueue --lines", ["enqueue", "--lines"], lambda: os.path.getsize(inp), stdin_path=inp)
    os.remove(inp)
    out = os.path.join(workdir, "big-export.ndjson")
    timed("export -o FILE", ["export", "-o", out], lambda: os.path.getsize(out))
    os.remove(out)
    timed("drain", ["drain"], lambda: os.path.getsize(out), stdout_path=out)
    os.remove(out)
    timed("size", ["size"], lambda: 0)
    timed("list --limit 20", ["list", "--limit", "20"], lambda: 0)
    print("| command | bytes in/out | wall | peak RSS | ≤ 64 MiB |")
    print("|---|---|---|---|---|")
    for name, n, wall, rss in rows:
        ok = rss <= 64 * 1024
        print(f"| `{name}` | {n / (1 << 30):.2f} GiB | {wall:.1f} s | {rss / 1024:.1f} MiB | {verdict(ok)} |")
    for suffix in ("", ".idx", ".meta", ".dead"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spool", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--gib", type=float, default=1.0, help="size of the streamed batch (0: skip)")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    info = machine_info(a.dir)
    print(f"Machine: {info['nproc']} × {info['cpu']}, {info['fs']}, kernel {info['kernel']}; {info['date']}; {info['load']}\n")
    results = one_shot(a.spool, a.dir, sizes, a.runs)
    print_one_shot(results, sizes, a.runs)
    print()
    if a.gib > 0:
        big_batches(a.spool, a.dir, a.gib)
    json.dump({str(k): v for k, v in results.items()}, sys.stderr)
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
