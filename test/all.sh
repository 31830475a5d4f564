#!/usr/bin/env bash
# test/all.sh: set up and run every test of leader_election.
#
#   sudo bash test/all.sh
#
# Installs what it needs (Debian 12 packages), builds and installs the
# extension, then, as an unprivileged user: the pg_regress suite and the
# isolation specs against a throwaway cluster, then the TAP tests (each
# starts its own clusters), then the client examples.  Exits non-zero if
# anything fails.  LE_WERROR=1 makes compiler warnings errors (CI sets it).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

le_bootstrap pgbouncer postgresql-$LE_PG_MAJOR-cron faketime python3 python3-psycopg2 $(command -v node >/dev/null || echo nodejs npm)

work=$(le_workdir)
trap 'le_cluster_stop "$work/cluster"; [ "${LE_KEEP:-0}" = 1 ] || rm -rf "$work"' EXIT
le_run_as_tester mkdir -p "$work/cluster"
le_cluster_start "$work/cluster"

failed=0 passed=0
run_suite() {
    local name=$1; shift
    le_say "$name"
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: $name" >&2
        for f in "$work"/regression.diffs "$work"/output_iso/regression.diffs; do
            [ -f "$f" ] && cat "$f" >&2
        done
        return 0
    fi
}
mk() { le_run_as_tester env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres make -C "$work" -s PG_CONFIG="$LE_PG_BIN/pg_config" "$@"; }

run_suite "pg_regress suite" mk installcheck-regress
run_suite "isolation specs" mk installcheck-isolation
run_suite "TAP tests" mk installcheck-tap PROVE_FLAGS="--timer"
for t in "$work"/test/clients/*.test.sh; do
    [ -e "$t" ] || continue
    run_suite "client example $(basename "$t")" le_run_as_tester env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres bash "$t"
done

echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
