#!/usr/bin/env python3
"""What `spool top` costs the processes it watches (SPEC §11: top "never
holds a lock that blocks enqueue or replay"): the latency of one-shot
`spool enqueue` processes and of a short `spool replay --exec true`, with
no `top` running and with `spool top --interval 100ms` (ten refreshes a
second, ten times the default) running in a real pseudo-terminal on the
same spool. Rounds alternate without and with `top`, so both see the same
machine. Standard library only; run through benches/top_impact.sh.
"""

import argparse
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_info  # noqa: E402


class Top:
    """`spool top` in a pseudo-terminal of 120 × 40, its screen drained."""

    def __init__(self, spool, path, interval):
        pid, fd = pty.fork()
        if pid == 0:
            env = dict(os.environ, TERM="xterm-256color")
            os.execve(spool, [spool, "-s", path, "top", "--read-only", "--interval", interval], env)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.pid, self.fd, self.bytes = pid, fd, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.drain, daemon=True)
        self.thread.start()
        deadline = time.time() + 10
        while self.bytes < 1000:
            if time.time() > deadline:
                raise RuntimeError("spool top drew nothing in 10 s")
            time.sleep(0.01)

    def drain(self):
        while not self.stop.is_set():
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if r:
                try:
                    self.bytes += len(os.read(self.fd, 65536))
                except OSError:
                    return

    def close(self):
        os.write(self.fd, b"q")
        deadline = time.time() + 10
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.01)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
            raise RuntimeError("spool top did not quit on q")
        self.stop.set()
        self.thread.join()
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def timed(argv, ok=(0,)):
    """Milliseconds argv took; raises on an exit status not in `ok`."""
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode not in ok:
        raise RuntimeError(f"{argv!r} exited with {p.returncode}: {p.stderr.decode()}")
    return (time.perf_counter() - t0) * 1000


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spool", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--enqueues", type=int, default=50, help="one-shot enqueues per round")
    ap.add_argument("--replay", type=int, default=20, help="items per replay run")
    ap.add_argument("--interval", default="100ms", help="spool top --interval")
    args = ap.parse_args()
    info = machine_info(args.dir)
    print(f"# spool top's impact: {info['date']}, {info['nproc']} cores, {info['cpu']}, "
          f"{info['fs']}, load {info['load']}\n", flush=True)
    results = {}
    for name in ("spool.db", "spool.ndjson"):
        path = os.path.join(args.dir, name)
        for suffix in ("", "-wal", "-shm", ".replay.lock", ".idx", ".lock", ".delivered"):
            try:
                os.remove(path + suffix)
            except FileNotFoundError:
                pass
        lines = "".join('{"order":%d,"customer":"c-%d"}\n' % (i, i % 997) for i in range(args.items))
        subprocess.run([args.spool, "-s", path, "enqueue", "--stdin", "--lines"], input=lines.encode(),
                       check=True, stdout=subprocess.DEVNULL)
        for r in range(args.rounds):
            for with_top in (False, True):
                top = Top(args.spool, path, args.interval) if with_top else None
                try:
                    enq = [timed([args.spool, "-s", path, "enqueue", f"round {r} item {i}"])
                           for i in range(args.enqueues)]
                    # Exit 75: --limit reached with items left, as meant.
                    rep = [timed([args.spool, "-s", path, "replay", "--exec", "true",
                                  "--limit", str(args.replay)], ok=(0, 75))]
                finally:
                    if top:
                        top.close()
                key = (name, with_top)
                e, p = results.setdefault(key, ([], []))
                e.extend(enq)
                p.extend(rep)
                print(f"{name} round {r + 1} {'with' if with_top else 'without'} top: "
                      f"enqueue p50 {pct(enq, 0.5):.1f} ms, replay of {args.replay} {rep[0]:.0f} ms",
                      flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}\n")
    print(f"| spool ({args.items:,} items) | `spool top` | enqueue p50 / p99 ms | "
          f"`replay --exec true --limit {args.replay}` p50 ms | runs |")
    print("|---|---|---:|---:|---:|")
    for name in ("spool.db", "spool.ndjson"):
        for with_top in (False, True):
            e, p = results[(name, with_top)]
            print(f"| {'SQLite' if name.endswith('.db') else 'NDJSON'} | "
                  f"{'--interval ' + args.interval if with_top else 'not running'} | "
                  f"{pct(e, 0.5):.1f} / {pct(e, 0.99):.1f} | {pct(p, 0.5):.0f} | {len(e)} + {len(p)} |")


if __name__ == "__main__":
    main()
