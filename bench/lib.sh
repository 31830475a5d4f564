# bench/lib.sh: cluster setup shared by bench/run.sh and bench/failover.sh.
#
# Sources test/lib/common.sh (package install, build, throwaway clusters) and
# adds what the benchmark needs on top: a cluster with fsync and
# synchronous_commit at their defaults (le_cluster_start writes fsync = off
# for the tests; a later "fsync = on" line wins), enough connections for the
# 200-candidate scenario (BENCH_EXTRA_CONF adds lines), and the extension plus the reference protocols
# installed.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../test/lib/common.sh
source "$BENCH_DIR/../test/lib/common.sh"
# BENCH_PORT, if set, is the port of the cluster (else a free one).
if [ -n "${BENCH_PORT:-}" ]; then le_free_port() { echo "$BENCH_PORT"; }; fi
# psycopg2 is installed for the system interpreter, whatever python3 is on PATH.
BENCH_PY=/usr/bin/python3

# bench_cluster_start: start the cluster in a fresh directory; sets
# BENCH_WORK and the libpq variables; bench_cluster_stop removes it.
bench_cluster_start() {
    BENCH_WORK=$(mktemp -d /tmp/le_bench.XXXXXX)
    [ "$(id -u)" = 0 ] && chown postgres: "$BENCH_WORK"
    chmod 755 "$BENCH_WORK"
    le_cluster_start "$BENCH_WORK" "fsync = on" "max_connections = 250" "${BENCH_EXTRA_CONF[@]}"
    le_say "cluster on port $PGPORT ($BENCH_WORK)"
    psql -qX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION leader_election" -f "$BENCH_DIR/protocols.sql" >/dev/null
    local fsync
    fsync=$(psql -qXAt -c "SHOW fsync")
    [ "$fsync" = on ] || { echo "fsync is $fsync, expected on" >&2; return 1; }
}

bench_cluster_stop() {
    [ -n "${BENCH_WORK:-}" ] || return 0
    le_cluster_stop "$BENCH_WORK"
    rm -rf "$BENCH_WORK"
    BENCH_WORK=
}

# bench_prepare [--no-build]: packages, build and install (as root: sudo).
bench_prepare() {
    if [ "${1:-}" = --no-build ]; then return 0; fi
    le_bootstrap python3-psycopg2
}
