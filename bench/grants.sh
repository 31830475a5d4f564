#!/bin/bash
# bench/grants.sh: grants and storms (PERFORMANCE.md T8-T11) in one command.
#
#   sudo bash bench/grants.sh [--quick] [--no-build] [--only STEPS] [--label TEXT] [--json FILE]
#
# Like run.sh: installs and builds like test/all.sh (LE_PG_BIN selects the
# PostgreSQL installation, BENCH_PORT the port), starts a throwaway cluster
# with the library preloaded, fsync and synchronous_commit on, 300
# connections (the storm needs 250 candidates at once) and commit
# timestamps (the observers' delay is counted from the commit), installs the
# extension and the reference protocols, runs bench/grants.py, removes the
# cluster.  The report goes to stdout; --json keeps the raw results, which
# `grants.py --render BEFORE.json AFTER.json` turns into one report.
set -euo pipefail

build=() args=()
while [ $# -gt 0 ]; do
    case $1 in
        --no-build) build=(--no-build) ;;
        --quick) args+=(--quick) ;;
        --only|--label|--json|--rounds|--duration|--storm-trials) args+=("$1" "$2"); shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_prepare "${build[@]}"
trap bench_cluster_stop EXIT
BENCH_EXTRA_CONF=("max_connections = 300" "track_commit_timestamp = on")
bench_cluster_start
PATH="$LE_PG_BIN:$PATH" "$BENCH_PY" "$BENCH_DIR/grants.py" "${args[@]}"
