#!/usr/bin/env bash
# Benchmark: `spool compact` on ~100 MB NDJSON spools and
# `spool checkpoint --mode truncate` on a ~100 MB SQLite WAL.
#
#   bash benches/compact.sh            # work files under target/bench-compact
#   BENCH_DIR=/data/tmp bash benches/compact.sh
#   BENCH_ONLY=compact BENCH_KEY_CASES=1 BENCH_CONTROL=0 bash benches/compact.sh   # the keyed cases only
#   SPOOL_BIN=/path/to/spool bash benches/compact.sh   # measure that binary instead (benches/check.sh --baseline)
#
# Builds the release binary, generates the spools, measures wall time and
# peak RSS with /usr/bin/time -v (installed with apt-get when missing),
# measures the disk's sequential write bandwidth in the same run with
#   dd if=/dev/zero of=… bs=1M count=512 conv=fdatasync
# on the same file system, and prints a Markdown table. The target is a
# compaction throughput (input bytes per second) of at least 0.25 x the
# dd bandwidth, with peak memory that grows with live items only.
#
# The NDJSON spools are written directly in the spool's own line format
# (docs/formats.md) by a small generator, which is much faster than
# enqueueing 100 MB through the CLI; `spool verify` checks each one before
# it is compacted. Before every measured run the spool's own files are
# synced and dropped from the page cache (`dd iflag=nocache count=0`, a
# per-file POSIX_FADV_DONTNEED), so the compaction reads its input from
# disk; the spool binary stays cached, as it is for a command run often.
#
# A spool that `spool` writes has its index (`<spool>.idx`, see
# docs/formats.md), which compaction carries over to the new file. The
# generated spools get theirs from an empty `enqueue --lines` (the first
# write builds it) before the measured run; BENCH_INDEX=0 leaves them
# without one, as a reference writer's spool is, so that the compaction
# builds it from the new file.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${BENCH_DIR:-target/bench-compact}
SIZE_MB=${BENCH_SIZE_MB:-100}
PAYLOAD=${BENCH_PAYLOAD:-200}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -x /usr/bin/time ]] || apt_install compact.sh time
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }

cargo build --release --quiet --bin spool
SPOOL=${SPOOL_BIN:-$(pwd)/target/release/spool}

# drop_cache FILE...: write FILEs out and drop them from the page cache.
drop_cache() {
    sync
    CACHE="cold"
    local f
    for f in "$@"; do
        [[ -e $f ]] || continue
        dd if="$f" iflag=nocache count=0 status=none 2>/dev/null || CACHE="warm"
    done
}

# gen FILE LIVE_FRACTION: an NDJSON spool of about SIZE_MB MB in which
# LIVE_FRACTION of the bytes belong to items still pending; the rest are
# items that were delivered (put + done) and superseded versions of live
# items (attempt updates), interleaved as a real spool's history is.
gen() {
    python3 - "$1" "$2" "$SIZE_MB" "$PAYLOAD" "${BENCH_KEYS:-1}" <<'EOF'
import json, random, sys
path, live_frac, size_mb = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
payload_len, keys = int(sys.argv[4]), sys.argv[5] == "1"
random.seed(7)
target = size_mb * 1_000_000
t0 = 1_764_000_000
def put(i, attempts):
    p = (("event %d " % i) + "x" * payload_len)[:payload_len]
    return json.dumps({"op": "put", "id": i, "payload": p,
                       "idempotencyKey": ("key-%d" % i) if keys else "",
                       "attempts": attempts, "enqueuedAt": t0 + i // 100},
                      separators=(",", ":")) + "\n"
def done(i):
    return '{"op":"done","id":%d}\n' % i
# A live item is one put (plus, in the garbage cases, superseded attempt
# updates now and then); a delivered item is a put and a done line. The
# counts make live puts live_frac of the file and the whole about target.
put_len = len(put(10**6, 0))
live_bytes = target * live_frac
garbage_bytes = target - live_bytes
n_live = max(1, int(live_bytes / put_len))
n_updates = int(garbage_bytes * 0.2 / put_len)
n_delivered = int((garbage_bytes - n_updates * put_len) / (put_len + len(done(10**6))))
n = n_live + n_delivered
live_list = sorted(random.sample(range(1, n + 1), n_live))
live_ids = set(live_list)
with open(path, "w") as f:
    backlog = []
    updates_left = n_updates
    seen_live = []
    for i in range(1, n + 1):
        f.write(put(i, 0))
        if i in live_ids:
            seen_live.append(i)
        else:
            backlog.append(i)
        if len(backlog) >= 64:
            for d in backlog:
                f.write(done(d))
            backlog = []
            # Replay retried some live items meanwhile.
            for _ in range(min(updates_left, 8)):
                if seen_live:
                    f.write(put(random.choice(seen_live), 1))
                    updates_left -= 1
    for d in backlog:
        f.write(done(d))
    for j in range(updates_left):
        f.write(put(live_list[j % len(live_list)], 2))
EOF
}

# measure CMD...: sets SECS (wall time, from the clock around the run)
# and RSS_KB (peak resident set size, from /usr/bin/time -v).
measure() {
    local log t0 t1
    log=$(mktemp)
    t0=$(date +%s%N)
    /usr/bin/time -v "$@" >"$DIR/last.out" 2>"$log" || { cat "$log" >&2; rm -f "$log"; return 1; }
    t1=$(date +%s%N)
    SECS=$(python3 -c "print(f'{($t1 - $t0) / 1e9:.3f}')")
    RSS_KB=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
    rm -f "$log"
}

# The disk's sequential write bandwidth in bytes per second: the median
# of three `dd … conv=fdatasync` runs (single runs vary a lot on a
# virtualised disk).
dd_bandwidth() {
    local out bytes secs samples=()
    for _ in 1 2 3; do
        out=$(dd if=/dev/zero of="$DIR/dd.tmp" bs=1M count=512 conv=fdatasync 2>&1 | tail -1)
        rm -f "$DIR/dd.tmp"
        bytes=$(awk '{print $1}' <<<"$out")
        secs=$(sed -E 's/.*copied, ([0-9.]+) s.*/\1/' <<<"$out")
        samples+=("$(python3 -c "print(int($bytes / $secs))")")
    done
    printf '%s\n' "${samples[@]}" | sort -n | sed -n 2p
}

mb() { python3 -c "print(f'{$1 / 1e6:.1f}')"; }

ROWS=()
DD_ALL=()

compact_case() {
    local name=$1 live=$2 keys=$3
    local f="$DIR/compact.ndjson"
    rm -f "$f" "$f".*
    BENCH_KEYS=$keys gen "$f" "$live"
    "$SPOOL" -q -s "$f" verify >/dev/null
    if [[ ${BENCH_INDEX:-1} == 1 ]]; then
        "$SPOOL" -q -s "$f" enqueue --lines </dev/null >/dev/null
    fi
    local before items
    before=$(stat -c %s "$f")
    items=$("$SPOOL" -s "$f" size)
    local bw
    bw=$(dd_bandwidth)
    DD_ALL+=("$bw")
    drop_cache "$f" "$f.dead" "$f.meta" "$f.idx"
    measure "$SPOOL" --json -s "$f" compact
    local after
    after=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_after"])' "$DIR/last.out")
    local thr ratio
    thr=$(python3 -c "print($before / $SECS)")
    ratio=$(python3 -c "print(f'{$thr / $bw:.2f}')")
    local k=no
    [[ $keys == 1 ]] && k=yes
    ROWS+=("| compact: $name | $k | $(mb "$before") MB → $(mb "$after") MB | $items | $SECS s | $(mb "$thr") MB/s | $(mb "$bw") MB/s | **$ratio** | $((RSS_KB / 1024)) MiB | $CACHE |")
    "$SPOOL" -q -s "$f" verify >/dev/null
    rm -f "$f" "$f".*
}

ONLY=${BENCH_ONLY:-all}
if [[ $ONLY == all || $ONLY == compact ]]; then
    echo "generating and compacting ~${SIZE_MB} MB spools in $DIR" >&2
    # Every item with an idempotency key (what most producers send), and
    # none (the reference's unkeyed enqueue); BENCH_KEY_CASES=1 runs the
    # keyed cases only.
    for keys in ${BENCH_KEY_CASES:-1 0}; do
        compact_case "90% garbage" 0.10 "$keys"
        compact_case "10% garbage" 0.90 "$keys"
    done
    # Control for the memory question: the live items of the 90% case
    # alone, without the garbage (BENCH_CONTROL=0 leaves it out).
    if [[ ${BENCH_CONTROL:-1} == 1 ]]; then
        SIZE_SAVED=$SIZE_MB
        SIZE_MB=$((SIZE_MB / 10))
        compact_case "no garbage, the live set of 90%" 1.0 0
        SIZE_MB=$SIZE_SAVED
    fi
fi
if [[ $ONLY == all || $ONLY == checkpoint ]]; then
echo "growing a ~${SIZE_MB} MB WAL behind a reader" >&2
# ---- checkpoint --mode truncate on a ~100 MB WAL.
# A reader holds a read transaction open (python3's sqlite3) while
# items are enqueued, so no checkpoint can copy the new frames and the WAL
# grows. The reader then ends its transaction but keeps its connection,
# so its close cannot checkpoint and delete the WAL before we measure.
db="$DIR/wal.db"
rm -f "$db" "$db"-wal "$db"-shm
"$SPOOL" -q -s "$db" init
READER_PROG='
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN")
c.execute("SELECT count(*) FROM morph_offline_queue").fetchone()
print("holding", flush=True)
sys.stdin.readline()
c.execute("COMMIT")
print("released", flush=True)
sys.stdin.readline()
'
coproc READER { python3 -u -c "$READER_PROG" "$db"; }
read -r _ <&"${READER[0]}"
batch=$(python3 -c "print(('y' * $PAYLOAD + '\n') * 20000, end='')")
while :; do
    wal=$(stat -c %s "$db-wal" 2>/dev/null || echo 0)
    [[ $wal -ge $((SIZE_MB * 1000000)) ]] && break
    "$SPOOL" -q -s "$db" enqueue --stdin --lines <<<"$batch" >/dev/null
done
echo >&"${READER[1]}"
read -r _ <&"${READER[0]}"
wal_before=$(stat -c %s "$db-wal")
items=$("$SPOOL" -s "$db" size)
bw=$(dd_bandwidth)
DD_ALL+=("$bw")
drop_cache "$db" "$db-wal" "$db-shm"
measure "$SPOOL" --json -s "$db" checkpoint --mode truncate --wait 30s
read -r frames done_frames wal_after busy <<<"$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["wal_frames"], r["checkpointed_frames"], r["wal_bytes_after"], r["busy"])' "$DIR/last.out")"
thr=$(python3 -c "print($wal_before / $SECS)")
ratio=$(python3 -c "print(f'{$thr / $bw:.2f}')")
# A successful TRUNCATE resets the WAL, and SQLite then reports 0 frames;
# the frame count comes from the WAL's size (32-byte header, 24-byte
# frame headers, 4 KiB pages).
[[ $frames -eq 0 ]] && frames="≈$(( (wal_before - 32) / (4096 + 24) ))"
ROWS+=("| checkpoint --mode truncate | no | WAL $(mb "$wal_before") MB → $(mb "$wal_after") MB ($frames frames, busy=$busy) | $items | $SECS s | $(mb "$thr") MB/s | $(mb "$bw") MB/s | $ratio | $((RSS_KB / 1024)) MiB | $CACHE |")
echo >&"${READER[1]}"
wait "$READER_PID" 2>/dev/null || true
rm -f "$db" "$db"-wal "$db"-shm "$DIR/last.out"
fi

echo
echo "| case | keys | size | items kept | time | input/s | dd write | ratio | peak RSS | cache |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---|"
for r in "${ROWS[@]}"; do echo "$r"; done
echo
echo "dd bandwidth per row (median of 3, bytes/s): ${DD_ALL[*]}"
echo "$(uname -srm); $(nproc) cores; $(df -T "$DIR" | awk 'NR==2 {print $2 " on " $1}')"
