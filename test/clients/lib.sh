# shellcheck shell=bash
# test/clients/lib.sh: shared by the client examples' test wrappers
# (test/clients/*.test.sh), which test/all.sh runs against its throwaway
# cluster with PGHOST, PGPORT and PGUSER set.
#
#   cl_setup NAME     a scratch dir ($CL_TMP) and a fresh database with the
#                     extension (exported as PGDATABASE); both removed on exit
#                     together with every process registered by cl_track
#   cl_track PID      kill PID on exit if it still runs
#   q SQL             one query, unaligned tuples only, stop on error
#   cl_wait_until SECONDS CMD...   poll CMD until it succeeds, bounded
#   cl_check WHAT CMD...           an assertion; cl_done reports and exits
#
# Waits poll a condition with a deadline; none stands in for synchronisation.

set -euo pipefail

# shellcheck disable=SC2034  # used by the wrappers
CL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CL_PIDS=()
CL_FAILED=0
CL_PASSED=0

q() { psql -X -qAt -v ON_ERROR_STOP=1 -c "$1"; }

cl_track() { CL_PIDS+=("$1"); }

cl_cleanup() {
    local pid
    for pid in "${CL_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    for pid in "${CL_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "${CL_DB:-}" ]; then
        PGDATABASE=postgres psql -X -q -c "DROP DATABASE IF EXISTS \"$CL_DB\" WITH (FORCE)" >/dev/null 2>&1 || true
    fi
    [ -n "${CL_TMP:-}" ] && rm -rf "$CL_TMP"
}

cl_setup() {
    CL_TMP=$(mktemp -d "/tmp/le_client_$1.XXXXXX")
    CL_DB="le_client_$1_$$"
    trap cl_cleanup EXIT
    PGDATABASE=postgres psql -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$CL_DB\"" >/dev/null
    export PGDATABASE=$CL_DB
    q 'CREATE EXTENSION leader_election' >/dev/null
}

# cl_pause SECONDS: a sleep, for pacing polls only.
cl_pause() { sleep "$1"; }

cl_wait_until() {
    local seconds=$1; shift
    local deadline=$((SECONDS + seconds))
    until "$@"; do
        if [ $SECONDS -ge $deadline ]; then
            echo "   timed out after ${seconds}s waiting for: $*" >&2
            return 1
        fi
        cl_pause 0.1
    done
}

cl_check() {
    local what=$1; shift
    if "$@"; then
        echo "ok - $what"
        CL_PASSED=$((CL_PASSED + 1))
    else
        echo "not ok - $what"
        CL_FAILED=$((CL_FAILED + 1))
    fi
}

# cl_eq WHAT EXPECTED ACTUAL
cl_eq() {
    if [ "$2" = "$3" ]; then
        cl_check "$1" true
    else
        cl_check "$1 (expected '$2', got '$3')" false
    fi
}

cl_done() {
    echo "# $CL_PASSED passed, $CL_FAILED failed"
    [ "$CL_FAILED" -eq 0 ]
}
