#!/bin/bash
# bench/run.sh: the leader_election benchmark, in one command.
#
#   sudo bash bench/run.sh            full run (3 rounds of 5 s per cell, 1M-renewal bloat, 30 failover trials)
#   sudo bash bench/run.sh --quick    smoke run (~2 s per cell, fewer scenarios, 100k bloat, 7 trials)
#   options: --no-build (skip package install and build), --only STEPS (see bench.py --help),
#            --rounds N (rounds per throughput cell; the median is reported)
#
# Installs and builds like test/all.sh, starts a throwaway cluster (fsync and
# synchronous_commit at their defaults), installs the extension and the
# reference protocols (bench/protocols.sql), runs the failover/expiry
# measurements (bench/failover.sh) and every throughput, correctness and
# bloat scenario (bench/bench.py), and writes bench/results/<date>-<host>.md
# and bench/results/latest.md.  See bench/README.md.
set -euo pipefail

quick=() build=() only=() trials=30 rounds=()
while [ $# -gt 0 ]; do
    case $1 in
        --quick) quick=(--quick); trials=7 ;;
        --no-build) build=(--no-build) ;;
        --only) only=(--only "$2"); shift ;;
        --rounds) rounds=(--rounds "$2"); shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_prepare "${build[@]}"
trap bench_cluster_stop EXIT
bench_cluster_start

fo_json=$BENCH_WORK/failover.json
if [ ${#only[@]} -eq 0 ] || [[ ${only[1]} == *failover* ]]; then
    le_say "failover and expiry ($trials trials per method)"
    BENCH_USE_CLUSTER=1 bash "$BENCH_DIR/failover.sh" --trials "$trials" --json "$fo_json"
fi
if [ ${#only[@]} -gt 0 ]; then
    only=(--only "$(echo "${only[1]}" | sed 's/,*failover,*/,/; s/^,//; s/,$//')")
    [ "${only[1]}" = "" ] && only=(--only none)
fi
le_say "throughput, correctness, bloat"
"$BENCH_PY" "$BENCH_DIR/bench.py" "${quick[@]}" "${only[@]}" "${rounds[@]}" --failover-json "$fo_json"
