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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spool", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--url-items", type=int, default=None,
                    help="items for the one-item-per-request contenders (default: --items); "
                         "the ratio compares items/s, which does not depend on the count")
    ap.add_argument("--modes", default="push,compress,url,url16",
                    help="which contenders, comma-separated (push, compress, url, url16); "
                         "the ratio column needs url")
    args = ap.parse_args()
    wanted = set(args.modes.split(","))
    info = machine_info(args.dir)
    print(f"# push benchmark: {info['date']}, {info['nproc']} cores, {info['cpu']}, "
          f"{info['fs']}, load {info['load']}\n")
    n = args.items
    url_n = args.url_items or n
    rows = []
    base = None
    for key, label, mode, extra in [
        ("push", "`replay --push` (batch 2000, the default)", "push", ()),
        ("compress", "`replay --push --compress`", "push", ("--compress",)),
        ("url", "`replay --url …/v1/items` (one item per request)", "url", ()),
        ("url16", "`replay --url …/v1/items --concurrency 16`", "url", ("--concurrency", "16")),
    ]:
        if key not in wanted:
            continue
        k = url_n if mode == "url" else n
        t, server_cpu = run(args.spool, args.dir, k, mode, extra)
        rows.append((label, k, t.wall, k / t.wall, t.cpu, server_cpu))
        if key == "url":
            base = k / t.wall
        print(f"{label}: {k:,} items in {t.wall:.2f} s, {k / t.wall:,.0f} items/s, sender CPU {t.cpu:.2f} s, "
              f"server CPU {server_cpu:.2f} s", flush=True)
    print()
    print("| items of ~100 bytes | items | seconds | items/s | sender CPU s | server CPU s | × one item per request |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, k, wall, rate, cpu, scpu in rows:
        ratio = f"{rate / base:.1f}×" if base else "–"
        print(f"| {label} | {k:,} | {wall:.2f} | {rate:,.0f} | {cpu:.2f} | {scpu:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
