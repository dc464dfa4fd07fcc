"""Helpers shared by the benchmark scripts (`cli_bench.py`,
`replay_bench.py`): spawning timed processes, counting system calls,
describing the machine. Standard library only."""

import os
import platform
import shutil
import subprocess
import sys
import time
from collections import namedtuple

# One timed process: wall seconds; user + system CPU seconds of it and its
# children; peak resident memory in KiB.
Timed = namedtuple("Timed", "wall cpu maxrss_kib")


def which(name, installer):
    """The full path of a program, or exit naming the script that installs it."""
    path = shutil.which(name)
    if not path:
        sys.exit(f"{name} not found ({installer} installs it)")
    return path


def run_timed(argv, stdin_path=None, stdout_path=os.devnull, ok=(0,)):
    """Spawn argv directly (no shell, no Python wrapper in the timed path),
    wait for it and return a `Timed`. Raises on an exit status not in `ok`."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, stdin_path or os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise RuntimeError(f"{argv!r} exited with {code}")
    return Timed(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)


def peak_rss_kib(argv, stdin_path=None, stdout_path=os.devnull, ok=(0,)):
    """The peak RSS of argv alone, in KiB, measured by `/usr/bin/time`.

    (`Timed.maxrss_kib` from `run_timed` is not that: Linux carries the peak
    RSS of the memory image a process had before `exec` into its own, and a
    child spawned from Python starts in Python's image — so it reports at
    least the benchmark script's own RSS.)"""
    out = os.path.join(os.path.dirname(os.path.abspath(stdout_path)) if stdout_path != os.devnull else "/tmp",
                       f".rss-{os.getpid()}")
    try:
        run_timed(["/usr/bin/time", "-f", "%M", "-o", out] + list(argv), stdin_path, stdout_path, ok)
        with open(out) as f:
            return int(f.read().split()[-1])
    finally:
        try:
            os.remove(out)
        except FileNotFoundError:
            pass


def check(argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, **kw).stdout


def strace_counts(argv, out_path, stdin_path=None, trace=None, must_succeed=False):
    """Run argv once under `strace -f -c` (only the calls in `trace`, a
    comma-separated list, when given) and return {syscall: calls}."""
    cmd = ["strace", "-f", "-c", "-o", out_path]
    if trace:
        cmd += ["-e", f"trace={trace}"]
    with open(stdin_path or os.devnull, "rb") as stdin:
        subprocess.run(cmd + argv, check=must_succeed, stdin=stdin, stdout=subprocess.DEVNULL)
    counts = {}
    with open(out_path) as f:
        for line in f:
            # columns: %time seconds usecs/call calls [errors] syscall
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                counts[parts[-1]] = int(parts[3])
    return counts


def uptime():
    try:
        return check(["uptime"]).decode().strip()
    except (OSError, subprocess.CalledProcessError):
        with open("/proc/loadavg") as f:
            return "load average: " + " ".join(f.read().split()[:3])


def machine_info(workdir):
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        df = check(["df", "-T", workdir]).decode().splitlines()[-1].split()
        fs = f"{df[1]} on {df[0]}"
    except (subprocess.CalledProcessError, IndexError):
        fs = "?"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": os.cpu_count(),
        "cpu": model,
        "fs": fs,
        "kernel": platform.release(),
        "load": uptime(),
    }


def verdict(ok):
    return "**met**" if ok else "**missed**"
