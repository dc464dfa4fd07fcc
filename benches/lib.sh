# Shell helpers shared by the benchmark scripts; sourced, not run.

# apt_install WHO PACKAGE...: install Debian packages a fresh machine
# lacks, as root or through sudo, saying so on stderr as WHO.
apt_install() {
    local who=$1
    shift
    [ $# -gt 0 ] || return 0
    echo "$who: installing $*" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "$@" >/dev/null
}

# wait_for_quiet: wait (at most four minutes) for the 1-minute load
# average to fall below 1, as it does a while after a build.
wait_for_quiet() {
    for _ in $(seq 48); do
        awk '{ exit !($1 < 1) }' /proc/loadavg && return 0
        sleep 5
    done
}

# The work directory of benchmark NAME in $dir: $SPOOL_BENCH_DIR (created
# when missing, kept), else a new temporary directory under $TMPDIR (or
# BASE, default /tmp) that is removed when the script exits.
bench_dir() {
    if [ -n "${SPOOL_BENCH_DIR:-}" ]; then
        dir=$SPOOL_BENCH_DIR
        mkdir -p "$dir"
    else
        dir=$(mktemp -d "${TMPDIR:-${2:-/tmp}}/spool-$1-bench.XXXXXX")
        trap 'rm -rf "$dir"' EXIT
    fi
}

# build_items SPOOL PATH ITEMS WHO: make PATH a spool of ITEMS pending
# items (JSON payloads of about 60 bytes, enqueued in batches of 100,000
# lines, one commit each) with the spool binary SPOOL, unless it holds
# exactly ITEMS already (then it is reused). PATH may be a PostgreSQL URL.
build_items() {
    local spool=$1 path=$2 items=$3 who=$4
    if [[ "$path" == postgres* ]] || [ -e "$path" ]; then
        if [ "$("$spool" -s "$path" size 2>/dev/null || echo 0)" = "$items" ]; then
            return
        fi
    fi
    [[ "$path" == postgres* ]] || rm -f "$path" "$path".*
    local batch=100000 start=0 t0=$SECONDS
    while [ "$start" -lt "$items" ]; do
        local n=$(( items - start < batch ? items - start : batch ))
        python3 -c '
import sys
start, n = int(sys.argv[1]), int(sys.argv[2])
w = sys.stdout.write
for i in range(start, start + n):
    w("{\"order\":%d,\"customer\":\"c-%d\",\"total\":%d.50}\n" % (i, i % 997, i % 300))
' "$start" "$n" | "$spool" -s "$path" enqueue --stdin --lines >/dev/null
        start=$(( start + n ))
    done
    echo "$who: built $path ($items items) in $(( SECONDS - t0 )) s" >&2
}
