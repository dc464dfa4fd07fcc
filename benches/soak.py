#!/usr/bin/env python3
"""Edge-to-centre soak (issue 23, item 3): four edge spools (two SQLite, two
NDJSON) fed by producer processes push with `spool replay --push --follow`
through a fault-injecting HTTP proxy into two `spool serve` instances over
one PostgreSQL spool, while processes are killed with SIGKILL and restarted; a
`spool replay --follow --exec` on the centre drains into a sink that
records every delivery. At the end it drains everything and checks that
nothing acknowledged was lost, nothing was applied twice and nothing was
left behind. Standard library only; run through benches/soak.sh.

The same file is also the proxy (`soak.py proxy …`), the producer
(`soak.py produce …`) and the sink (`soak.py sink …`), each a process of
its own so that the soak can kill and restart it.
"""

import argparse
import collections
import json
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_info  # noqa: E402

# ---------------------------------------------------------------------------
# The proxy: HTTP-aware, one fault per request.

FAULTS = {
    # kind: weight out of the sum, while faults are on
    "pass": 58,
    "delay": 10,              # the request waits 50 ms to 1.5 s before it goes on
    "drop": 5,                # the request never reaches the server; connection reset
    "reset": 5,               # half of the request reaches the server, then both sides are reset
    "duplicate": 6,           # forwarded, answered, forwarded again; the second answer goes back
    "duplicate-concurrent": 4,  # forwarded to two server instances at the same moment
    "stale-replay": 4,        # an earlier captured push is sent again first, to another instance
                              # (its answer discarded)
    "lost-response": 8,       # forwarded and committed; the answer is thrown away, connection reset
}


class Reader:
    """Buffered reads of whole HTTP/1.1 messages from a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def _until(self, sep):
        while True:
            i = self.buf.find(sep)
            if i >= 0:
                out, self.buf = self.buf[: i + len(sep)], self.buf[i + len(sep):]
                return out
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def message(self, request):
        """The raw bytes of the next message and whether the connection
        closes after it. EOFError when the peer closed before a message
        (or in the middle of one)."""
        while True:
            head = self._until(b"\r\n\r\n")
            first = head.split(b"\r\n", 1)[0]
            if not request and first[9:12] == b"100":
                continue  # an interim answer: the real one follows
            break
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                headers[k.strip().lower()] = v.strip().lower()
        close = headers.get(b"connection") == b"close"
        if headers.get(b"transfer-encoding", b"").endswith(b"chunked"):
            body = b""
            while True:
                size_line = self._until(b"\r\n")
                size = int(size_line.split(b";")[0].strip(), 16)
                chunk = self._exact(size + 2)
                body += size_line + chunk
                if size == 0:
                    # (trailers are not used by spool)
                    break
            return head + body, close
        if b"content-length" in headers:
            return head + self._exact(int(headers[b"content-length"])), close
        if request:
            return head, close
        # An answer without a length runs to the end of the connection.
        try:
            while True:
                self._fill()
        except EOFError:
            pass
        out, self.buf = self.buf, b""
        return head + out, True


def rst(sock):
    """Close with a reset (RST) rather than an orderly FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def proxy_main(args):
    rng = random.Random(args.seed)
    rng_lock = threading.Lock()
    counts = collections.Counter()
    captured = collections.deque(maxlen=64)
    state = {"clean": False}
    ports = args.upstream_port

    def count(kind):
        with rng_lock:
            counts[kind] += 1

    def write_stats():
        tmp = args.stats + ".tmp"
        with rng_lock:
            snapshot = dict(counts)
        with open(tmp, "w") as f:
            json.dump(snapshot, f)
        os.replace(tmp, args.stats)

    def on_usr1(_sig, _frame):
        state["clean"] = True

    def on_term(_sig, _frame):
        write_stats()
        os._exit(0)

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)

    def pick():
        with rng_lock:
            if state["clean"]:
                return "pass", 0.0, None
            total = sum(FAULTS.values())
            n = rng.randrange(total)
            for kind, w in FAULTS.items():
                if n < w:
                    break
                n -= w
            delay = rng.uniform(0.05, 1.5) if kind == "delay" else 0.0
            old = rng.choice(captured) if kind == "stale-replay" and captured else None
            return kind, delay, old

    def other(port):
        """Another server than `port` when there are several."""
        return next((p for p in ports if p != port), port)

    def connect(port):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.settimeout(60)
        return s

    def exchange(sock, reader, req):
        sock.sendall(req)
        return reader.message(request=False)

    def handle(client):
        client.settimeout(120)
        creader = Reader(client)
        up = upreader = None
        with rng_lock:
            port = rng.choice(ports)
        try:
            while True:
                try:
                    req, req_close = creader.message(request=True)
                except (EOFError, OSError, ValueError):
                    return
                kind, delay, old = pick()
                count(kind)
                if kind == "drop":
                    rst(client)
                    return
                if delay:
                    time.sleep(delay)
                if old is not None:
                    try:
                        s = connect(other(port))
                        exchange(s, Reader(s), old)
                        s.close()
                    except (OSError, EOFError, ValueError):
                        pass
                if req.startswith(b"POST /v1/push"):
                    with rng_lock:
                        captured.append(req)
                if up is None:
                    try:
                        up = connect(port)
                        upreader = Reader(up)
                    except OSError:
                        count("upstream-down")
                        rst(client)
                        return
                if kind == "reset":
                    try:
                        up.sendall(req[: len(req) // 2])
                    except OSError:
                        pass
                    rst(up)
                    rst(client)
                    return
                try:
                    if kind == "duplicate-concurrent":
                        second = {}

                        def twin():
                            try:
                                s = connect(other(port))
                                second["answer"] = exchange(s, Reader(s), req)
                                s.close()
                            except (OSError, EOFError, ValueError):
                                pass

                        t = threading.Thread(target=twin)
                        t.start()
                        resp, resp_close = exchange(up, upreader, req)
                        t.join()
                    else:
                        resp, resp_close = exchange(up, upreader, req)
                        if kind == "duplicate" and not resp_close:
                            resp, resp_close = exchange(up, upreader, req)
                except (OSError, EOFError, ValueError):
                    # The server died or hung up: the client sees a reset.
                    count("upstream-lost")
                    rst(client)
                    return
                if kind == "lost-response":
                    rst(client)
                    return
                client.sendall(resp)
                if resp_close or req_close:
                    return
        except OSError:
            return
        finally:
            for s in (client, up):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)

    def stats_loop():
        while True:
            time.sleep(1)
            write_stats()

    threading.Thread(target=stats_loop, daemon=True).start()
    while True:
        client, _ = listener.accept()
        threading.Thread(target=handle, args=(client,), daemon=True).start()


# ---------------------------------------------------------------------------
# The producer: one `spool enqueue` per item, each with its own key.


def produce_main(args):
    rng = random.Random(args.seed)
    log = open(args.log, "a", buffering=1)
    n = 0
    while not os.path.exists(args.stop):
        key = f"{args.prefix}-{n:06d}"
        payload = key + " " + "x" * rng.randrange(0, 300)
        log.write(f"try {key}\n")
        r = subprocess.run([args.spool_bin, "-s", args.spool, "enqueue", "--key", key, payload],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode == 0:
            log.write(f"ok {key}\n")
        else:
            err = r.stderr.decode(errors="replace").strip().replace("\n", " | ")
            log.write(f"fail {key} {r.returncode} {err}\n")
        n += 1
        time.sleep(args.pace * rng.uniform(0.5, 1.5))


# ---------------------------------------------------------------------------
# The soak.

SINK = """#!/bin/sh
# The centre's sink: one line per delivery, "<centre id> <key> <payload>".
p=$(cat)
printf '%s %s %s\\n' "$SPOOL_ITEM_ID" "$SPOOL_IDEMPOTENCY_KEY" "$p" >> {log}
"""


def load(info):
    """The load averages of a `machine_info`, without the rest of uptime's line."""
    return info["load"].split("load average:")[-1].strip()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw).stdout.decode()


def proc_sample(pid):
    """(VmRSS KiB, VmHWM KiB, open fds) of a live process, or None."""
    try:
        rss = hwm = None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        if rss is None:
            return None
        return rss, hwm, fds
    except (OSError, ValueError):
        return None


class Proc:
    """One long-running process of the soak that may be killed and restarted."""

    def __init__(self, soak, kind, name, argv_fn):
        self.soak, self.kind, self.name, self.argv_fn = soak, kind, name, argv_fn
        self.p = None
        self.restart_at = None
        self.starts = 0

    def start(self):
        self.starts += 1
        argv = self.argv_fn(self.starts)
        err = open(os.path.join(self.soak.dir, "logs", f"{self.name}.stderr"), "a")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=err, start_new_session=True)
        err.close()
        self.restart_at = None

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def kill(self):
        if self.alive():
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait()

    def term(self, timeout=30):
        if not self.alive():
            return None
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return "killed"


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = args.spool
        self.dir = args.dir
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.rng = random.Random(args.seed)
        self.kills = collections.Counter()
        self.exits = collections.Counter()   # (kind, code) of exits the soak did not cause
        self.samples = []                    # (t, kind, rss, hwm, fds)
        self.stopfile = os.path.join(self.dir, "stop-producers")
        self.sinklog = os.path.join(self.dir, "sink.log")
        self.centre = args.pg_url + ("&" if "?" in args.pg_url else "?") + "spool=soak"
        self.procs = []

    def spool(self, path, *argv):
        return run([self.bin, "-s", path, *argv])

    def setup(self):
        a = self.args
        self.edges = []
        for i, backend in enumerate(["sqlite", "file", "sqlite", "file"]):
            path = os.path.join(self.dir, f"edge{i}.db" if backend == "sqlite" else f"edge{i}.ndjson")
            self.spool(path, "init", "--backend", backend)
            uuid = json.loads(self.spool(path, "--json", "config"))["uuid"]
            token = "%032x" % self.rng.getrandbits(128)
            self.edges.append({"path": path, "uuid": uuid, "token": token, "backend": backend})
        self.spool(self.centre, "init")
        tokens = os.path.join(self.dir, "tokens")
        fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            for i, e in enumerate(self.edges):
                f.write(f"{e['token']} name=edge{i} {e['uuid']}\n")
        sink = os.path.join(self.dir, "sink.sh")
        with open(sink, "w") as f:
            f.write(SINK.replace("{log}", "'" + self.sinklog + "'"))
        os.chmod(sink, 0o755)

        self.server_ports = [free_port() for _ in range(a.servers)]
        self.proxy_port = free_port()
        self.proxy_stats = os.path.join(self.dir, "proxy-stats.json")
        me = os.path.abspath(__file__)
        self.proxy = Proc(self, "proxy", "proxy", lambda n: [
            sys.executable, me, "proxy", "--port", str(self.proxy_port),
            *[x for port in self.server_ports for x in ("--upstream-port", str(port))],
            "--seed", str(a.seed), "--stats", self.proxy_stats])
        self.servers = [Proc(self, "serve", f"serve{i}", lambda n, port=port: [
            self.bin, "-s", self.centre, "serve", "--listen", f"127.0.0.1:{port}",
            "--token-file", tokens]) for i, port in enumerate(self.server_ports)]
        self.centre_replay = Proc(self, "centre-replay", "centre-replay", lambda n: [
            self.bin, "-s", self.centre, "replay", "--follow", "--exec", sink, "--concurrency", "4",
            "--timeout", "10s", "--lease", "15s", "--max-attempts", "1000",
            "--backoff-base", "100ms", "--backoff-max", "2s", "--poll", "500ms"])
        url = f"http://127.0.0.1:{self.proxy_port}/v1/push"
        batches = ["20", "200", "3", "2000"]
        self.edge_replays = []
        self.producers = []
        for i, e in enumerate(self.edges):
            extra = ["--compress"] if i == 1 else []
            self.edge_replays.append(Proc(self, "edge-replay", f"edge{i}-replay", lambda n, e=e, i=i, extra=extra: [
                self.bin, "-s", e["path"], "replay", "--push", url, "--follow",
                "-H", f"Authorization: Bearer {e['token']}", "--batch", batches[i], *extra,
                "--timeout", "5s", "--max-attempts", "1000", "--backoff-base", "50ms",
                "--backoff-max", "1s", "--poll", "500ms", "--wait", "30s"]))
            self.producers.append(Proc(self, "producer", f"edge{i}-producer", lambda n, e=e, i=i: [
                sys.executable, me, "produce", "--spool-bin", self.bin, "--spool", e["path"],
                "--prefix", f"e{i}g{n}", "--log", os.path.join(self.dir, f"produced-{i}.log"),
                "--stop", self.stopfile, "--pace", str(a.pace), "--seed", str(a.seed * 100 + i * 10 + n)]))
        self.killable = {
            "producer": self.producers,
            "edge-replay": self.edge_replays,
            "serve": self.servers,
            "centre-replay": [self.centre_replay],
        }
        self.procs = [self.proxy, *self.servers, self.centre_replay, *self.edge_replays, *self.producers]

    def catch_mid_enqueue(self, producer):
        """Wait (up to 0.3 s) until the producer runs a `spool enqueue`,
        then a moment more, so that the kill lands inside the enqueue."""
        pid = producer.p.pid
        give_up = time.monotonic() + 0.3
        while time.monotonic() < give_up:
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    if f.read().strip():
                        time.sleep(self.rng.uniform(0, 0.008))
                        return
            except OSError:
                return
            time.sleep(0.001)

    def sample(self, t):
        for p in self.procs:
            if p.kind == "producer" or not p.alive():
                continue
            s = proc_sample(p.p.pid)
            if s:
                self.samples.append((t, p.kind, *s))

    def supervise(self, now, producers_on=True):
        for p in self.procs:
            if p.kind == "producer" and not producers_on:
                continue
            if p.p is not None and not p.alive() and p.restart_at is None:
                # It ended by itself: note how, and start it again.
                self.exits[(p.kind, p.p.returncode)] += 1
                p.restart_at = now + 1.0
            if p.restart_at is not None and now >= p.restart_at:
                p.start()

    def run(self):
        a = self.args
        self.setup()
        for p in self.procs:
            p.start()
        t0 = time.monotonic()
        end = t0 + a.minutes * 60
        next_kill = t0 + self.rng.uniform(a.kill_min, a.kill_max)
        next_sample = t0
        weights = {"producer": 4, "edge-replay": 4, "serve": 2, "centre-replay": 1}
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if now >= next_sample:
                self.sample(now - t0)
                next_sample += a.sample_every
            if now >= next_kill:
                kind = self.rng.choices(list(weights), list(weights.values()))[0]
                victim = self.rng.choice(self.killable[kind])
                if victim.alive():
                    if kind == "producer":
                        self.catch_mid_enqueue(victim)
                    victim.kill()
                    self.kills[kind] += 1
                    victim.restart_at = now + self.rng.uniform(0.1, 3.0)
                next_kill = now + self.rng.uniform(a.kill_min, a.kill_max)
            self.supervise(now)
            time.sleep(0.1)
        self.run_seconds = time.monotonic() - t0

        # Drain: producers stop after their enqueue in progress, faults
        # and kills stop, every other process runs until the edges and the
        # centre are empty (bounded).
        with open(self.stopfile, "w"):
            pass
        deadline = time.monotonic() + 60
        while any(p.alive() for p in self.producers) and time.monotonic() < deadline:
            time.sleep(0.2)
        for p in self.producers:
            p.kill()
            p.restart_at = None
        os.kill(self.proxy.p.pid, signal.SIGUSR1)
        t_drain = time.monotonic()
        drained = False
        last_check = 0
        while time.monotonic() - t_drain < a.drain_timeout:
            now = time.monotonic()
            self.supervise(now, producers_on=False)
            if now >= next_sample:
                self.sample(now - t0)
                next_sample += a.sample_every
            if now - last_check >= 2:
                last_check = now
                if all(self.depth(e["path"]) == 0 for e in self.edges) and self.depth(self.centre) == 0:
                    drained = True
                    break
            time.sleep(0.2)
        self.drain_seconds = time.monotonic() - t_drain
        self.drained = drained
        # Let a delivery in flight at the centre finish its sink line.
        time.sleep(1)
        stop_codes = {}
        for p in [*self.edge_replays, self.centre_replay, *self.servers]:
            stop_codes[p.name] = p.term()
        self.proxy.term()
        self.stop_codes = stop_codes
        return self.report()

    def depth(self, path):
        try:
            return int(self.spool(path, "size").strip())
        except (subprocess.CalledProcessError, ValueError):
            return -1

    def stats(self, path):
        return json.loads(self.spool(path, "--json", "stats"))

    def report(self):
        a = self.args
        # What the producers were told. A line may be cut (a producer
        # killed while writing it, a full disk) and the next one glued on:
        # read the records wherever they are.
        record = re.compile(r"(try|ok|fail) (e\d+g\d+-\d{6})(?: (-?\d+))?")
        tried, ok, failed = set(), set(), {}
        for i in range(len(self.edges)):
            path = os.path.join(self.dir, f"produced-{i}.log")
            if not os.path.exists(path):
                continue
            with open(path, errors="replace") as f:
                for line in f:
                    for what, key, code in record.findall(line):
                        tried.add(key)
                        if what == "ok":
                            ok.add(key)
                        elif what == "fail":
                            failed[key] = code
        unacked = tried - ok - set(failed)
        # What the centre applied and the sink saw.
        ids_of = collections.defaultdict(set)
        deliveries = 0
        complete = collections.defaultdict(set)   # (centre id, key) -> payloads seen whole
        short = []                                # deliveries whose payload is not whole
        foreign = set()
        # One record per delivery; as for the producers' logs, a cut line
        # (the sink killed while writing, a full disk) does not hide the
        # records around it.
        sink_record = re.compile(r"(\d+) [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:"
                                 r"(e\d+g\d+-\d{6}) ((?:e\d+g\d+-\d{6} x*)?)")
        with open(self.sinklog, errors="replace") as f:
            for line in f:
                for cid, edge_key, payload in sink_record.findall(line):
                    deliveries += 1
                    ids_of[edge_key].add(cid)
                    if payload.startswith(edge_key + " "):
                        complete[(cid, edge_key)].add(payload)
                    else:
                        short.append((cid, edge_key, payload))
                    if edge_key not in tried:
                        foreign.add(edge_key)
        # A centre replayer killed between starting the sink and writing
        # the payload to its stdin leaves the sink an empty (or cut)
        # payload; the item is delivered again, whole. Only a payload that
        # is not the start of the same item's whole payload is wrong.
        cut_short = sum(1 for cid, k, pl in short
                        if any(w.startswith(pl) for w in complete[(cid, k)]))
        bad_payload = len(short) - cut_short
        delivered = set(ids_of)
        applied = sum(len(v) for v in ids_of.values())
        lost = sorted(ok - delivered)
        dup_applied = sorted(k for k, v in ids_of.items() if len(v) > 1)
        # Anything left anywhere.
        left = {}
        for e in self.edges:
            s = self.stats(e["path"])
            left[os.path.basename(e["path"])] = (s["depth"], s["dead_letters"])
        s = self.stats(self.centre)
        left["centre"] = (s["depth"], s["dead_letters"])
        clients = [json.loads(line) for line in self.spool(self.centre, "--json", "clients").splitlines()
                   if line.strip()]
        anything_left = sum(d + dl for d, dl in left.values())
        with open(self.proxy_stats) as f:
            faults = json.load(f)

        out = []
        p = out.append
        info = self.info
        p(f"# soak: edge to centre under faults\n")
        p(f"{info['date']}, {info['nproc']} cores, {info['cpu']}, {info['fs']}, kernel {info['kernel']}; "
          f"load average at the start {load(info)}, at the end {load(machine_info(self.dir))}\n")
        p(f"`{' '.join(sys.argv[1:])}`: {a.minutes} min of faults and kills "
          f"({self.run_seconds:.0f} s), then drained in {self.drain_seconds:.0f} s "
          f"({'complete' if self.drained else 'NOT complete: drain timeout'}).\n")
        p("| | count |")
        p("|---|---:|")
        p(f"| items produced (enqueue exit 0) | {len(ok):,} ({len(ok) / self.run_seconds:.1f}/s) |")
        p(f"| enqueues killed before their exit (unacknowledged) | {len(unacked):,} "
          f"(of which arrived: {len(unacked & delivered):,}) |")
        p(f"| enqueues that failed (exit ≠ 0) | {len(failed):,} "
          + (f"(exit {', '.join(sorted(set(failed.values())))}) " if failed else "")
          + f"(of which arrived: {len(set(failed) & delivered):,}) |")
        p(f"| applied at the centre (distinct centre items) | {applied:,} |")
        p(f"| delivered to the sink (deliveries / distinct keys) | {deliveries:,} / {len(delivered):,} |")
        p(f"| **lost** (acknowledged, never delivered) | **{len(lost)}** |")
        p(f"| **duplicated-applied** (one key, several centre items) | **{len(dup_applied)}** |")
        p(f"| delivered but never produced | {len(foreign)} |")
        p(f"| deliveries with the payload cut short (centre replayer killed while writing it; "
          f"delivered again whole) | {cut_short} |")
        p(f"| payload not matching its key | {bad_payload} |")
        p(f"| left: pending / dead letters | " + ", ".join(
            f"{k} {d}/{dl}" for k, (d, dl) in left.items()) + " |")
        p("")
        p("| faults injected (per request) | count |")
        p("|---|---:|")
        for kind in [*FAULTS, "upstream-down", "upstream-lost"]:
            p(f"| {kind} | {faults.get(kind, 0):,} |")
        p("")
        p("| kills (SIGKILL) | count |")
        p("|---|---:|")
        for kind in ["producer", "edge-replay", "serve", "centre-replay"]:
            p(f"| {kind} | {self.kills[kind]} |")
        p(f"\nStopped at the end with SIGTERM: " + ", ".join(
            f"{name} exit {code}" for name, code in self.stop_codes.items()) + ".")
        if self.exits:
            p("")
            p("| exits the soak did not cause (restarted) | count |")
            p("|---|---:|")
            for (kind, code), n in sorted(self.exits.items(), key=str):
                p(f"| {kind}, exit {code} | {n} |")
        p("")
        p(f"Push clients at the centre: " + ", ".join(
            f"{c['client_id'][:8]}… last_seq {c['last_seq']}" for c in clients) + ".\n")
        p("| process kind | peak RSS (VmHWM) | RSS first → last quartile | open files first → last quartile | flat |")
        p("|---|---:|---:|---:|---|")
        total = self.run_seconds
        for kind in ["serve", "centre-replay", "edge-replay", "proxy"]:
            rows = [s for s in self.samples if s[1] == kind and s[0] <= total]
            if not rows:
                continue
            first = [s for s in rows if s[0] < total / 4]
            last = [s for s in rows if s[0] >= total * 3 / 4]
            if not first or not last:
                continue
            r1, r4 = statistics.median(s[2] for s in first), statistics.median(s[2] for s in last)
            f1, f4 = statistics.median(s[4] for s in first), statistics.median(s[4] for s in last)
            peak = max(s[3] for s in rows)
            flat = r4 <= r1 * 1.25 + 2048 and f4 <= f1 + 4
            p(f"| {kind} | {peak / 1024:.1f} MiB | {r1 / 1024:.1f} → {r4 / 1024:.1f} MiB | "
              f"{f1:.0f} → {f4:.0f} | {'yes' if flat else '**no**'} |")
        p("")
        verdict = not lost and not dup_applied and not anything_left and not foreign and not bad_payload \
            and self.drained
        p(f"Result: {'**pass**' if verdict else '**FAIL**'}")
        if lost:
            p(f"\nlost keys (first 20): {', '.join(lost[:20])}")
        if dup_applied:
            p(f"\nduplicated-applied keys (first 20): " + ", ".join(
                f"{k} {sorted(ids_of[k])}" for k in dup_applied[:20]))
        if foreign:
            p(f"\ndelivered, never produced (first 20): {', '.join(sorted(foreign)[:20])}")
        print("\n".join(out), flush=True)
        return 0 if verdict else 1


def soak_main(args):
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    os.makedirs(args.dir, exist_ok=True)
    soak = Soak(args)
    soak.info = machine_info(args.dir)
    print(f"soak: seed {args.seed}, {args.minutes} min, work files in {args.dir}", file=sys.stderr, flush=True)
    try:
        return soak.run()
    finally:
        for p in soak.procs:
            p.kill()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode")
    s = sub.add_parser("soak")
    s.add_argument("--spool", required=True, help="the spool binary")
    s.add_argument("--dir", required=True)
    s.add_argument("--pg-url", required=True)
    s.add_argument("--minutes", type=float, default=10)
    s.add_argument("--seed", type=int)
    s.add_argument("--pace", type=float, default=0.05, help="seconds between one producer's enqueues")
    s.add_argument("--kill-min", type=float, default=2.0, help="shortest time between two kills (s)")
    s.add_argument("--kill-max", type=float, default=12.0, help="longest time between two kills (s)")
    s.add_argument("--sample-every", type=float, default=5.0)
    s.add_argument("--drain-timeout", type=float, default=300.0)
    s.add_argument("--servers", type=int, default=2,
                   help="`spool serve` instances on the centre spool; the proxy spreads connections "
                        "over them and sends a concurrent duplicate to another one")
    pr = sub.add_parser("proxy")
    pr.add_argument("--port", type=int, required=True)
    pr.add_argument("--upstream-port", type=int, action="append", required=True)
    pr.add_argument("--seed", type=int, required=True)
    pr.add_argument("--stats", required=True)
    po = sub.add_parser("produce")
    po.add_argument("--spool-bin", required=True)
    po.add_argument("--spool", required=True)
    po.add_argument("--prefix", required=True)
    po.add_argument("--log", required=True)
    po.add_argument("--stop", required=True)
    po.add_argument("--pace", type=float, required=True)
    po.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    if args.mode == "proxy":
        proxy_main(args)
    elif args.mode == "produce":
        produce_main(args)
    elif args.mode == "soak":
        sys.exit(soak_main(args))
    else:
        ap.error("a mode: soak, proxy or produce")


if __name__ == "__main__":
    main()
