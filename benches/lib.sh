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
