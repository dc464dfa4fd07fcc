#!/usr/bin/env python3
"""The table of `benches/check.sh`: reads what the benchmark scripts wrote
(their Markdown, and their JSON where they write it) for each area, binary
and round, and prints one Markdown table of the ratio targets of
docs/benchmarks.md: target, figure, verdict; with --baseline also the old
binary's figure, new/old and "within 5%" / "regressed" / "improved".
Measures nothing itself. Standard library only."""

import argparse
import json
import os
import re
import statistics
import sys

# A figure this much worse than the old binary's is a regression.
TOLERANCE = 0.05

NUM = re.compile(r"-?[0-9][0-9,]*\.?[0-9]*")


def num(cell):
    """The first number in a Markdown cell ("**0.35**", "1.07×, 0.98×")."""
    m = NUM.search(cell)
    if not m:
        raise ValueError(f"no number in {cell!r}")
    return float(m.group().replace(",", ""))


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def rows_starting(text, prefix):
    return [cells(line) for line in text.splitlines() if line.startswith(prefix)]


# ---------------------------------------------------------------------------
# Targets: (area, key, target, direction, bound, unit). direction "le" and
# "lt": lower is better; "ge": higher is better.

X = "×"
X3 = "×3"  # a ratio shown with three decimals
TARGETS = [
    ("cli", "a.sqlite", "one-shot `enqueue`, SQLite spool ≤ 0.9× a `sqlite3` insert (p50; issue 22)", "le", 0.9, X),
    ("cli", "a.big", "one-shot `enqueue`, NDJSON spool of 1,000,000 items ≤ 0.9× a `sqlite3` insert (p50; issue 22)", "le", 0.9, X),
    ("cli", "a.sqlite", "one-shot `enqueue`, SQLite spool ≤ 0.8× a `sqlite3` insert (p50; issue 3)", "le", 0.8, X),
    ("cli", "a.ndjson", "one-shot `enqueue`, NDJSON spool (small) ≤ 0.4× a `sqlite3` insert (p50; issue 3)", "le", 0.4, X),
    ("cli", "b.sqlite.script", "`enqueue --lines` 100k, SQLite spool ≥ 3× the `sqlite3` SQL-script import", "ge", 3, X),
    ("cli", "b.sqlite.import", "`enqueue --lines` 100k, SQLite spool ≥ 3× `sqlite3 .import`", "ge", 3, X),
    ("cli", "b.ndjson.script", "`enqueue --lines` 100k, NDJSON spool ≥ 4× the `sqlite3` SQL-script import", "ge", 4, X),
    ("cli", "b.ndjson.import", "`enqueue --lines` 100k, NDJSON spool ≥ 4× `sqlite3 .import`", "ge", 4, X),
    ("cli", "b.ndjson.script", "`enqueue --lines` 100k, NDJSON spool ≥ 4.5× the SQL-script import (issue 11)", "ge", 4.5, X),
] + [
    ("scale", f"scale.{c}", f"NDJSON 1,000,000 items: `{c}` ≤ 2× the 1,000-item spool (median wall)", "le", 2, X)
    for c in ("enqueue", "enqueue --key", "size", "list --limit 20", "show ID", "drain --limit 20",
              "replay --limit 1 --exec true")
] + [
    (area, f"{key}.{b}", f"{text} ({b})", d, bound, X)
    for area, key, text, d, bound in (
        ("replay", "curl", "`replay --url`, durable per item, ≥ 25× a curl loop", "ge", 25),
        ("replay", "py", "`replay --url`, durable per item, ≥ 2× a Python `requests` loop", "ge", 2),
        ("replay", "gc", "`replay --url --commit-every 64 --concurrency 4` ≥ 15× the Python loop", "ge", 15),
        ("replay", "gseq", "`replay --url --commit-every 64` (sequential) ≥ 15× the Python loop — not reachable", "ge", 15),
        ("replay", "c16", "`--concurrency 16` ≥ 10× sequential, 20 ms sink", "ge", 10),
        ("replay", "exec", "`replay --exec cat` ≤ 1.3× a shell loop, per item", "le", 1.3),
    )
    for b in ("SQLite", "NDJSON")
] + [
    ("retention", f"{key}.{b}", f"{text} ({b})", "le", 1.10, X3)
    for key, text in (
        ("per-item", "retention on / off ≤ 1.10×, per item (median of paired rounds)"),
        ("grouped", "retention on / off ≤ 1.10×, `--commit-every 64` (median of paired rounds)"),
    )
    for b in ("SQLite", "NDJSON")
] + [
    ("follow", "idle.SQLite", "`replay --follow` idle < 1% of one core (SQLite)", "lt", 1, "%"),
    ("follow", "idle.NDJSON", "`replay --follow` idle < 1% of one core (NDJSON)", "lt", 1, "%"),
    ("follow", "lat.SQLite", "`replay --follow` enqueue-to-delivery p50 < 50 ms (SQLite)", "lt", 50, " ms"),
    ("follow", "lat.NDJSON", "`replay --follow` enqueue-to-delivery p50 < 50 ms (NDJSON)", "lt", 50, " ms"),
    ("groups", "SQLite", "16 ordering groups: `--concurrency 16` ≥ 10× sequential, 20 ms sink (SQLite)", "ge", 10, X),
    ("groups", "NDJSON", "16 ordering groups: `--concurrency 16` ≥ 10× sequential, 20 ms sink (NDJSON)", "ge", 10, X),
] + [
    ("compact", f"{g}.{k}", f"`compact` ~100 MB, {g}% garbage, {k}: ≥ 0.25× `dd conv=fdatasync`", "ge", 0.25, X)
    for k in ("keyed", "unkeyed")
    for g in ("90", "10")
] + [
    ("compact", "min", "`compact`, slowest of those cases: ≥ 0.3× `dd conv=fdatasync` (planned)", "ge", 0.3, X),
    ("push", "push", "`replay --push` ≥ 20× `replay --url` one item per request (items/s)", "ge", 20, X),
    ("postgres", "oneshot", "PostgreSQL: one-shot `enqueue` ≤ 1.0× `psql -c INSERT` (median)", "le", 1.0, X),
    ("postgres", "lines", "PostgreSQL: `enqueue --lines` 100k ≥ 0.5× `psql \\copy`, equivalent table", "ge", 0.5, X),
    ("postgres", "replayers", "PostgreSQL: 4 replayer processes ≥ 3.5× one, 20 ms sink", "ge", 3.5, X),
]


# ---------------------------------------------------------------------------
# Parsers: the figures of one area's output, {key: figure}.


def load_json(base):
    with open(base + ".json") as f:
        return json.load(f)


def parse_cli(base, md):
    j = load_json(base)
    r = j["a"]["ratios"]
    med = j["b"]["median"]
    return {
        "a.sqlite": r["sqlite_p50"],
        "a.ndjson": r["ndjson_p50"],
        "a.big": r["ndjson_big_p50"],
        "b.sqlite.script": med["sqlite3 SQL script"] / med["spool SQLite"],
        "b.sqlite.import": med["sqlite3 .import"] / med["spool SQLite"],
        "b.ndjson.script": med["sqlite3 SQL script"] / med["spool NDJSON"],
        "b.ndjson.import": med["sqlite3 .import"] / med["spool NDJSON"],
    }


def parse_scale(base, md):
    out = {}
    for c in rows_starting(md, "| `"):
        name = c[0].strip("`")
        out[f"scale.{name}"] = num(c[-2])
    return out


def parse_replay(base, md):
    j = load_json(base)
    per = lambda r: r["per_item"]  # noqa: E731
    r_sql, r_nd, g_sql, g_nd, gc_sql, gc_nd, r_curl, r_py = j["1"]
    r_seq, r_conc, r_conc_nd, _, _ = j["2"]
    r_ex, r_ex_nd, r_sh = j["3"]
    out = {}
    for b, plain, grouped, grouped_conc, conc, ex in (
        ("SQLite", r_sql, g_sql, gc_sql, r_conc, r_ex),
        ("NDJSON", r_nd, g_nd, gc_nd, r_conc_nd, r_ex_nd),
    ):
        out[f"curl.{b}"] = per(r_curl) / per(plain)
        out[f"py.{b}"] = per(r_py) / per(plain)
        out[f"gc.{b}"] = per(r_py) / per(grouped_conc)
        out[f"gseq.{b}"] = per(r_py) / per(grouped)
        # As replay_bench.py does: both against the SQLite spool's sequential run.
        out[f"c16.{b}"] = per(r_seq) / per(conc)
        out[f"exec.{b}"] = per(ex) / per(r_sh)
    return out


def parse_retention(base, md):
    j = load_json(base)
    out = {}
    for r in j["5"]["ratios"]:
        b = "SQLite" if r["label"].startswith("sqlite") else "NDJSON"
        how = "per-item" if "per item" in r["label"] else "grouped"
        out[f"{how}.{b}"] = r["median"]
    return out


def parse_follow(base, md):
    out = {}
    for c in rows_starting(md, "| q."):
        b = "SQLite" if c[0] == "q.db" else "NDJSON"
        if "%" in c[2]:
            out[f"idle.{b}"] = num(c[2])
        else:
            out[f"lat.{b}"] = num(c[1])
    return out


def parse_groups(base, md):
    out = {}
    for prefix, b in (("| db |", "SQLite"), ("| ndjson |", "NDJSON")):
        for c in rows_starting(md, prefix):
            out[b] = num(c[-1])
    return out


def parse_compact(base, md):
    out = {}
    for c in rows_starting(md, "| compact: "):
        m = re.match(r"compact: (\d+)% garbage$", c[0])
        if not m:
            continue  # the memory control row is not a target
        k = "keyed" if c[1] == "yes" else "unkeyed"
        out[f"{m.group(1)}.{k}"] = num(c[7])
    if out:
        out["min"] = min(out.values())
    return out


def parse_push(base, md):
    out = {}
    for c in rows_starting(md, "| `replay --push` (batch"):
        out["push"] = num(c[-1])
    return out


def parse_postgres(base, md):
    out = {}
    part = None
    for line in md.splitlines():
        if line.startswith("### "):
            part = line[4]
            continue
        if not line.startswith("|"):
            continue
        c = cells(line)
        if part == "1" and c[0] == "`spool enqueue PAYLOAD`":
            out["oneshot"] = num(c[3])
        elif part == "2" and c[0] == "`spool enqueue --lines --file`":
            out["lines"] = num(c[3])
        elif part == "3" and c[0] == "4":
            out["replayers"] = num(c[3])
    return out


PARSERS = {
    "cli": parse_cli,
    "scale": parse_scale,
    "replay": parse_replay,
    "retention": parse_retention,
    "follow": parse_follow,
    "groups": parse_groups,
    "compact": parse_compact,
    "push": parse_push,
    "postgres": parse_postgres,
}


def figures(out_dir, area, tag, rounds):
    """{key: median over the rounds}, and a note when something failed."""
    per_key, notes = {}, []
    for r in range(1, rounds + 1):
        base = os.path.join(out_dir, f"{area}.{tag}.{r}")
        if os.path.exists(base + ".failed"):
            notes.append(f"round {r}: " + open(base + ".failed").read().strip())
            continue
        try:
            with open(base + ".md") as f:
                md = f.read()
            got = PARSERS[area](base, md)
        except (OSError, ValueError, KeyError, IndexError, TypeError, json.JSONDecodeError) as e:
            notes.append(f"round {r}: output not understood ({e.__class__.__name__}: {e})")
            continue
        for k, v in got.items():
            per_key.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in per_key.items()}, notes


def fmt(v, unit):
    if v is None:
        return "–"
    if unit == X3:
        return f"{v:.3f}×"
    if unit == X:
        return f"{v:.2f}×" if v < 10 else f"{v:.1f}×"
    if unit == "%":
        return f"{v:.2f} %"
    return f"{v:.1f}{unit}"


def met(v, d, bound):
    if v is None:
        return "not run"
    ok = {"le": v <= bound, "lt": v < bound, "ge": v >= bound}[d]
    return "met" if ok else "**missed**"


def change(new, old, d):
    if new is None or old is None:
        return "–", "–"
    if old == 0:
        return "–", ("within 5%" if new == 0 else "–")
    r = new / old
    worse = r > 1 + TOLERANCE if d in ("le", "lt") else r < 1 - TOLERANCE
    better = r < 1 - TOLERANCE if d in ("le", "lt") else r > 1 + TOLERANCE
    return f"{r:.3f}", ("**regressed**" if worse else "improved" if better else "within 5%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where check.sh put the scripts' outputs")
    ap.add_argument("--areas", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--new", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--load-start", required=True)
    ap.add_argument("--load-end", required=True)
    ap.add_argument("--seconds", type=int, default=0)
    a = ap.parse_args()
    areas = a.areas.split()
    tags = ["new", "old"] if a.baseline else ["new"]

    figs, notes = {}, []
    for area in areas:
        for tag in tags:
            figs[(area, tag)], n = figures(a.out, area, tag, a.rounds)
            notes += [f"{area} ({tag} binary) {x}" for x in n]

    head = "| area | target | figure | verdict |"
    sep = "|---|---|---:|---|"
    if a.baseline:
        head += " old binary | new / old | change |"
        sep += "---:|---:|---|"
    print()
    print(head)
    print(sep)
    verdicts, changes = {}, {}
    for area, key, text, d, bound, unit in TARGETS:
        if area not in areas:
            continue
        new = figs[(area, "new")].get(key)
        v = met(new, d, bound)
        verdicts[v.strip("*")] = verdicts.get(v.strip("*"), 0) + 1
        line = f"| {area} | {text} | {fmt(new, unit)} | {v} |"
        if a.baseline:
            old = figs[(area, "old")].get(key)
            r, c = change(new, old, d)
            changes[c.strip("*")] = changes.get(c.strip("*"), 0) + 1
            line += f" {fmt(old, unit)} | {r} | {c} |"
        print(line)
    print()
    print("- targets: " + ", ".join(f"{k} {n}" for k, n in verdicts.items()))
    if a.baseline:
        print("- new against old: " + ", ".join(f"{k} {n}" for k, n in changes.items() if k != "–"))
    print(f"- new binary: `{a.new}`" + (f"; old binary: `{a.baseline}`" if a.baseline else ""))
    rounds = f"{a.rounds} round{'s' if a.rounds > 1 else ''} per binary (median over rounds)" if a.rounds > 1 else "1 round"
    print(f"- {rounds}; total run time {a.seconds // 60} min {a.seconds % 60} s")
    area_loads = []
    for area in areas:
        for tag in tags:
            for r in range(1, a.rounds + 1):
                p = os.path.join(a.out, f"{area}.{tag}.{r}.load")
                if os.path.exists(p):
                    lbl = area if len(tags) == 1 and a.rounds == 1 else f"{area}/{tag}/{r}"
                    area_loads.append(f"{lbl} {open(p).read().split()[0]}")
    print(f"- load average (1, 5, 15 min) at the start: {a.load_start}; at the end: {a.load_end}")
    print(f"- 1-minute load average as each area started: {', '.join(area_loads)}")
    for n in notes:
        print(f"- **{n}**")
    busy = float(a.load_start.split()[0]) >= 1 or float(a.load_end.split()[0]) >= 1
    if busy:
        print("- **LOAD AVERAGE ≥ 1: THE FIGURES OF THIS RUN DO NOT COUNT** (docs/benchmarks.md)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
