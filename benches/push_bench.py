#!/usr/bin/env python3
"""Push benchmark (SPEC §7, issue "Push"): `spool replay --push` end to end
against `spool serve`, compared with `spool replay --url` sending one item
per request to the same server's `/v1/items`. SQLite spools on both sides,
every answer durable (the receiver commits before it answers), loopback.
Standard library only; run through benches/push.sh.
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_info, run_timed  # noqa: E402


def serve(spool, central, extra=()):
    p = subprocess.Popen([spool, "-s", central, "serve", "--listen", "127.0.0.1:0", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    if not line.startswith("listening on "):
        p.kill()
        raise RuntimeError(f"serve did not start: {line!r}")
    return p, line[len("listening on "):]


def stop(p):
    """SIGTERM the server; return its user + system CPU seconds (wait4)."""
    p.terminate()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def fill(spool, edge, n, workdir):
    lines = os.path.join(workdir, f"push-lines-{n}.txt")
    if not os.path.exists(lines):
        with open(lines, "w") as f:
            for i in range(n):
                f.write('{"event":"progress","user":%d,"pad":"0123456789abcdef0123456789abcdef0123456789"}\n' % i)
    subprocess.run([spool, "-s", edge, "enqueue", "--lines", "--file", lines],
                   check=True, stdout=subprocess.DEVNULL)


def count(spool, path):
    return int(subprocess.run([spool, "-s", path, "size"], check=True,
                              stdout=subprocess.PIPE).stdout.strip())


def fresh(workdir, name):
    path = os.path.join(workdir, name)
    for suffix in ("", "-wal", "-shm", ".replay.lock"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass
    return path


def run(spool, workdir, n, mode, extra=()):
    edge = fresh(workdir, f"edge-{mode}.db")
    central = fresh(workdir, f"central-{mode}.db")
    fill(spool, edge, n, workdir)
    p, base = serve(spool, central)
    try:
        if mode == "push":
            argv = [spool, "-s", edge, "replay", "--push", base + "/v1/push", *extra]
        else:
            argv = [spool, "-s", edge, "replay", "--url", base + "/v1/items", *extra]
        t = run_timed(argv)
    finally:
        server_cpu = stop(p)
    got = count(spool, central)
    if got != n or count(spool, edge) != 0:
        raise RuntimeError(f"{mode}: {got} of {n} items arrived")
    for path in (edge, central):
        fresh(workdir, os.path.basename(path))
    return t, server_cpu


def floor(workdir, n, batch):
    """The write floor: benches/write_floor.rs (already built by push.sh)."""
    out = subprocess.run(["cargo", "bench", "--quiet", "--locked", "--bench", "write_floor", "--",
                          str(n), str(batch), workdir],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("floor: ")][-1]
    return float(line.split(" in ")[1].split(" s,")[0])


CONTENDERS = [
    ("push", "`replay --push` (batch 2000, pipeline 2: the defaults)", "push", ()),
    ("compress", "`replay --push --compress`", "push", ("--compress",)),
    ("url", "`replay --url …/v1/items` (one item per request)", "url", ()),
    ("url16", "`replay --url …/v1/items --concurrency 16`", "url", ("--concurrency", "16")),
    ("pipe1", "`replay --push --batch 500 --pipeline 1`", "push", ("--batch", "500", "--pipeline", "1")),
    ("pipe2", "`replay --push --batch 500 --pipeline 2`", "push", ("--batch", "500", "--pipeline", "2")),
    ("floor", "write floor: Rust inserts into a SQLite spool's table, 2000 per transaction, synchronous=FULL",
     "floor", ()),
]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spool", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--url-items", type=int, default=None,
                    help="items for the one-item-per-request contenders (default: --items); "
                         "the ratio compares items/s, which does not depend on the count")
    ap.add_argument("--modes", default="push,compress,url,url16",
                    help="which contenders, comma-separated (push, compress, url, url16, pipe1, "
                         "pipe2, floor); the ratio columns need url, pipe1 and floor")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds, the contenders interleaved in each; the median is reported")
    args = ap.parse_args()
    wanted = set(args.modes.split(","))
    info = machine_info(args.dir)
    print(f"# push benchmark: {info['date']}, {info['nproc']} cores, {info['cpu']}, "
          f"{info['fs']}, load {info['load']}\n")
    n = args.items
    url_n = args.url_items or n
    chosen = [c for c in CONTENDERS if c[0] in wanted]
    rates = {c[0]: [] for c in chosen}
    cpus = {c[0]: [] for c in chosen}
    for r in range(args.rounds):
        for key, label, mode, extra in chosen:
            k = url_n if mode == "url" else n
            if mode == "floor":
                wall = floor(args.dir, k, 2000)
                cpu, server_cpu = 0.0, 0.0
                note = ""
            else:
                t, server_cpu = run(args.spool, args.dir, k, mode, extra)
                wall, cpu = t.wall, t.cpu
                note = f", sender CPU {cpu:.2f} s, server CPU {server_cpu:.2f} s"
            rates[key].append(k / wall)
            cpus[key].append((cpu, server_cpu))
            print(f"round {r + 1}: {label}: {k:,} items in {wall:.2f} s, {k / wall:,.0f} items/s{note}",
                  flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}\n")
    base = median(rates["url"]) if "url" in rates else None
    print("| items of ~100 bytes | items | items/s (median) | sender CPU s | server CPU s | × one item per request |")
    print("|---|---:|---:|---:|---:|---:|")
    for key, label, mode, _ in chosen:
        k = url_n if mode == "url" else n
        rate = median(rates[key])
        cpu, scpu = cpus[key][rates[key].index(rate)]
        ratio = f"{rate / base:.1f}×" if base else "–"
        print(f"| {label} | {k:,} | {rate:,.0f} | {cpu:.2f} | {scpu:.2f} | {ratio} |")
    if "pipe1" in rates and "pipe2" in rates:
        print(f"\npipeline 2 ÷ pipeline 1 at batch 500: {median(rates['pipe2']) / median(rates['pipe1']):.2f}× "
              f"(target ≥ 1.6×)")
    if "push" in rates and "floor" in rates:
        print(f"push (defaults) ÷ write floor: {median(rates['push']) / median(rates['floor']):.2f}× "
              f"(target ≥ 0.7×)")


if __name__ == "__main__":
    main()
