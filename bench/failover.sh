#!/bin/bash
# bench/failover.sh: failover and expiry latency (PERFORMANCE.md T5, T6).
#
#   sudo bash bench/failover.sh [--trials N] [--no-build]
#       starts its own throwaway cluster, writes bench/results/failover-<date>-<host>.md
#       and bench/results/failover-latest.md
#   BENCH_USE_CLUSTER=1 bash bench/failover.sh --trials N --json FILE
#       how bench/run.sh calls it: uses the cluster in PGHOST/PGPORT, writes JSON
#
# The measuring is done by bench/failover.py (see its header for the methods
# and the clock used).
set -euo pipefail

trials=30 json= build=()
while [ $# -gt 0 ]; do
    case $1 in
        --trials) trials=$2; shift ;;
        --json) json=$2; shift ;;
        --no-build) build=(--no-build) ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [ "${BENCH_USE_CLUSTER:-0}" = 1 ]; then
    exec "$BENCH_PY" "$BENCH_DIR/failover.py" --trials "$trials" ${json:+--json "$json"}
fi

bench_prepare "${build[@]}"
trap bench_cluster_stop EXIT
bench_cluster_start
mkdir -p "$BENCH_DIR/results"
out="$BENCH_DIR/results/failover-$(date +%F)-$(hostname).md"
"$BENCH_PY" "$BENCH_DIR/failover.py" --trials "$trials" ${json:+--json "$json"} --markdown "$out"
cp "$out" "$BENCH_DIR/results/failover-latest.md"
le_say "report: $out (and failover-latest.md)"
