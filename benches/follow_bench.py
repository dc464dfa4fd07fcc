"""`spool replay --follow`: idle CPU and enqueue-to-delivery latency.

Idle CPU: a follower on an empty spool, after a 1 s warm-up, for --idle
seconds; its user + system time from /proc/PID/stat over that window, and
getrusage (wait4) for the whole run after SIGTERM.

Latency: --items one-shot `spool enqueue` processes, one at a time, --gap
seconds apart; the time an enqueue process has exited (the item is
committed) to the time the --exec target sees the item (it stamps
CLOCK_REALTIME with `date +%s%N` as it starts). --poll is 1h, so every
delivery was woken by a file-change notification, not by the poll.
Standard library only.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

from benchlib import machine_info, uptime, verdict


def spool_cmd(spool, path, *args):
    return [spool, "-s", path, *args]


def start_follow(spool, path, log, extra=()):
    target = f"sh -c 'printf \"%s %s\\n\" \"$(cat)\" \"$(date +%s%N)\" >> {log}'"
    return subprocess.Popen(
        spool_cmd(spool, path, "replay", "--follow", "--exec", target, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 (1-based), 12 and 13 here.
    return int(fields[11]) + int(fields[12])


def stop(p):
    p.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(p.pid, 0)
    out = p.stdout.read().decode().strip()
    return os.waitstatus_to_exitcode(status), usage, out


def idle(spool, dir_, name, seconds):
    path = os.path.join(dir_, "idle-" + name)
    subprocess.run(spool_cmd(spool, path, "init"), check=True, stderr=subprocess.DEVNULL)
    p = start_follow(spool, path, os.path.join(dir_, "idle.log"))
    time.sleep(1.0)
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.monotonic(), ticks(p.pid)
    time.sleep(seconds)
    t1, c1 = time.monotonic(), ticks(p.pid)
    code, usage, _ = stop(p)
    window = (c1 - c0) / hz
    total = usage.ru_utime + usage.ru_stime
    return window, t1 - t0, total, code


def latency(spool, dir_, name, items, gap):
    path = os.path.join(dir_, "lat-" + name)
    log = os.path.join(dir_, "lat-" + name + ".log")
    subprocess.run(spool_cmd(spool, path, "init"), check=True, stderr=subprocess.DEVNULL)
    p = start_follow(spool, path, log, ("--poll", "1h"))
    time.sleep(1.0)
    committed = {}
    for i in range(items):
        subprocess.run(spool_cmd(spool, path, "enqueue", f"item-{i}"), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        committed[f"item-{i}"] = time.time_ns()
        time.sleep(gap)
    deadline = time.monotonic() + 30
    seen = {}
    while time.monotonic() < deadline:
        if os.path.exists(log):
            with open(log) as f:
                seen = dict(line.split() for line in f if line.strip())
        if len(seen) >= items:
            break
        time.sleep(0.05)
    code, _, out = stop(p)
    if len(seen) < items:
        sys.exit(f"{name}: only {len(seen)} of {items} delivered")
    ms = sorted((int(seen[k]) - committed[k]) / 1e6 for k in committed)
    return ms, code, out


def pct(xs, q):
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spool", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--gap", type=float, default=0.1)
    ap.add_argument("--idle", type=float, default=10.0)
    a = ap.parse_args()
    m = machine_info(a.dir)
    print(f"{m['date']}, {m['nproc']} cores ({m['cpu']}), kernel {m['kernel']}, "
          f"{m['fs']}; {m['load']}")
    print()
    print(f"### Idle CPU ({a.idle:.0f} s, empty spool, after 1 s warm-up)")
    print()
    print("| backend | CPU in the window | share of one core | whole run (getrusage) | exit |")
    print("|---|---|---|---|---|")
    for name in ("q.db", "q.ndjson"):
        window, wall, total, code = idle(a.spool, a.dir, name, a.idle)
        share = 100 * window / wall
        print(f"| {name} | {window * 1000:.0f} ms | {share:.2f} % {verdict(share < 1)} "
              f"| {total * 1000:.0f} ms | {code} |")
    print()
    print(f"### Enqueue-to-delivery latency ({a.items} one-shot enqueues, "
          f"{a.gap * 1000:.0f} ms apart, --poll 1h)")
    print()
    print("| backend | p50 | p90 | p99 | max | mean |")
    print("|---|---|---|---|---|---|")
    for name in ("q.db", "q.ndjson"):
        ms, code, out = latency(a.spool, a.dir, name, a.items, a.gap)
        p50 = statistics.median(ms)
        print(f"| {name} | {p50:.1f} ms {verdict(p50 < 50)} | {pct(ms, 0.9):.1f} ms "
              f"| {pct(ms, 0.99):.1f} ms | {ms[-1]:.1f} ms | {statistics.mean(ms):.1f} ms |")
        assert code == 0, (code, out)
    print()
    print(f"End: {uptime()}")


if __name__ == "__main__":
    main()
