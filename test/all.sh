#!/usr/bin/env bash
# test/all.sh: set up and run every test of leader_election, on every
# PostgreSQL major we can reach (15, 17 and 18), and the packaging tests.
#
#   sudo bash test/all.sh
#   sudo LE_PG_MAJORS=15 LE_PACKAGING=0 bash test/all.sh   # a quicker run
#
# Installs what it needs (Debian 12 packages: PostgreSQL 15 and the tools
# the tests drive), builds the other majors asked for from Debian's source
# packages (test/lib/build_pg.sh; cached in /var/cache/leader_election,
# reused when present), then for each major: builds and installs the
# extension and, as an unprivileged user, runs the pg_regress suite and the
# isolation specs against a throwaway cluster, the TAP tests (each starts
# its own clusters) and the client examples; then, if asked, the META.json
# check and the Debian package test (test/packaging).  Prints one summary
# line per major and exits non-zero if anything fails.  CI runs exactly
# this (.ci/run), on a fresh machine: about 55 minutes on 2 cores, 12 of
# them building the majors Debian 12 does not ship.
#
#   LE_WERROR=1          compiler warnings are errors (CI sets it)
#   LE_PG_MAJORS="15 17 18"  these majors (the default; 17 and 18 are
#                        built from Debian's sources, ~5 min each once)
#   LE_PG_BIN=DIR        the bin directory to use for its major (a private
#                        copy of 15, say); the others are found or built
#   LE_UPGRADE_FROM=DIR  the installation (with leader_election) that
#                        test/t/060_pg_upgrade.pl upgrades from; default:
#                        PostgreSQL ${LE_UPGRADE_FROM_VERSION:-15.18-0+deb12u1}
#                        built from bookworm's source (none: no upgrade test)
#   LE_PACKAGING=1       also the META.json and Debian package tests
#                        (the default; 0: not)
#   LE_PATRONI=0         without the Patroni + etcd failover test
#                        (test/t/400_patroni.pl: PostgreSQL 15 only, about
#                        4 minutes; LE_PATRONI_LONG=1 runs its long mode)
#   LE_README_TABLE=1    write the table of majors this run tested into
#                        README.md (test/lib/majors_table.py); it is
#                        printed after the summary either way
#   LE_KEEP=1            keep the scratch directories
set -euo pipefail

if [ "${LE_ALL_MAJOR_RUN:-0}" != 1 ]; then
    # The driver: packages once, then one run of this script per major.
    user_bin=${LE_PG_BIN:-}
    source "$(dirname "$0")/lib/common.sh"
    here=$(cd "$(dirname "$0")" && pwd)
    majors=${LE_PG_MAJORS:-15 17 18}
    # pg_cron is packaged for Debian 12's PostgreSQL 15 only; its test
    # skips (with the reason) on the majors built from source.
    total_passed=0 total_failed=0 summaries=() table_rows=()
    # patroni, etcd-server, etcd-client, python3-etcd: test/t/400_patroni.pl.
    le_install_packages pgbouncer "postgresql-$LE_PG_MAJOR-cron" faketime python3 python3-psycopg2 \
        $([ "${LE_PATRONI:-1}" != 0 ] && echo patroni etcd-server etcd-client python3-etcd) \
        $(command -v node >/dev/null || echo nodejs npm)

    # The old side of test/t/060_pg_upgrade.pl: PostgreSQL 15 with the
    # extension installed.  Debian 12's current 15 (15.20) writes column
    # versions into pg_upgrade's dump that the 17 and 18 minors in Debian's
    # archive predate, so the upgrade starts from the previous 15 minor,
    # built from bookworm's source like the others.
    if [ -z "${LE_UPGRADE_FROM:-}" ] && [ "${LE_UPGRADE_FROM_VERSION:-15.18-0+deb12u1}" != none ] \
       && [ -n "$(tr ' ' '\n' <<<"$majors" | awk '$1 > 15')" ]; then
        t0=$(date +%s)
        if ubin=$(bash "$here/lib/build_pg.sh" 15 "${LE_UPGRADE_FROM_VERSION:-15.18-0+deb12u1}"); then
            uwork=$(le_workdir)
            if (LE_PG_BIN=$ubin; le_build_install "$uwork"); then
                export LE_UPGRADE_FROM=${ubin%/bin}
                summaries+=("pg_upgrade source: $("$ubin/pg_config" --version) with leader_election ($(( $(date +%s) - t0 )) s)")
            else
                total_failed=$((total_failed + 1))
                summaries+=("pg_upgrade source: leader_election does not build on $("$ubin/pg_config" --version): FAILED")
            fi
            rm -rf "$uwork"
        else
            total_failed=$((total_failed + 1))
            summaries+=("pg_upgrade source: PostgreSQL ${LE_UPGRADE_FROM_VERSION:-15.18-0+deb12u1} could not be built: FAILED")
        fi
    fi

    user_major=
    [ -n "$user_bin" ] && user_major=$("$user_bin/pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
    for m in $majors; do
        t0=$(date +%s)
        if [ "$m" = "$user_major" ]; then
            bin=$user_bin
        elif [ -x "/usr/lib/postgresql/$m/bin/pg_config" ] && [ -x "/usr/lib/postgresql/$m/bin/postgres" ]; then
            bin=/usr/lib/postgresql/$m/bin
        elif ! bin=$(bash "$here/lib/build_pg.sh" "$m"); then
            total_failed=$((total_failed + 1))
            summaries+=("PostgreSQL $m: could not be built: suites: 0 passed, 1 failed")
            table_rows+=("| $m | could not be built | - | - | - | - | - | 0 passed, 1 failed |")
            continue
        fi
        version=$("$bin/pg_config" --version | sed -E 's/^PostgreSQL ([^ ]+).*/\1/')
        t1=$(date +%s)
        le_say "PostgreSQL $version ($bin)"
        log=$(mktemp /tmp/leader_election-all-$m.XXXXXX)
        set +e
        LE_ALL_MAJOR_RUN=1 LE_PACKAGES_DONE=1 LE_PG_MAJOR=$m LE_PG_BIN=$bin bash "$0" 2>&1 | tee "$log"
        set -e
        line=$(grep -E '^suites: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -1) || line=
        if [ "$bin" = "/usr/lib/postgresql/$m/bin" ]; then
            source_="Debian 12's package"
        elif [ -f "${bin%/bin}/.complete" ]; then
            source_="built from Debian's postgresql-$m $(cat "${bin%/bin}/.complete") source"
        else
            source_=$bin
        fi
        table_rows+=("$(python3 "$here/lib/majors_table.py" row "$version" "$source_" "$log")")
        rm -f "$log"
        if [ -z "$line" ]; then line="suites: 0 passed, 1 failed"; fi
        p=$(sed -E 's/^suites: ([0-9]+) passed.*/\1/' <<<"$line")
        f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$line")
        total_passed=$((total_passed + p)) total_failed=$((total_failed + f))
        t2=$(date +%s)
        note="tests $((t2 - t1)) s"
        if [ "$t1" -gt $((t0 + 1)) ]; then note+=", server build $((t1 - t0)) s"; fi
        summaries+=("PostgreSQL $version: $line ($note)")
    done
    # Packaging, once: META.json for PGXN, and the Debian package built,
    # installed and tested (for the system's major, $LE_PG_MAJOR).
    if [ "${LE_PACKAGING:-1}" = 1 ]; then
        for suite in "META.json (PGXN):python3 $here/packaging/meta_json.py" \
                     "Debian package:bash $here/packaging/deb.sh"; do
            t0=$(date +%s)
            le_say "${suite%%:*}"
            if ${suite#*:}; then
                total_passed=$((total_passed + 1)); result=passed
            else
                total_failed=$((total_failed + 1)); result=FAILED
            fi
            summaries+=("${suite%%:*}: $result ($(( $(date +%s) - t0 )) s)")
        done
    fi

    # The README's table of majors, as this run saw them.
    if [ ${#table_rows[@]} -gt 0 ]; then
        le_say "majors table (README.md; LE_README_TABLE=1 writes it there)"
        printf '%s\n' "${table_rows[@]}"
        if [ "${LE_README_TABLE:-0}" = 1 ]; then
            rows=$(mktemp)
            printf '%s\n' "${table_rows[@]}" > "$rows"
            python3 "$here/lib/majors_table.py" readme "$LE_ROOT/README.md" "$rows"
            rm -f "$rows"
        fi
    fi
    le_say "summary"
    printf '%s\n' "${summaries[@]}"
    echo "suites: $total_passed passed, $total_failed failed"
    [ "$total_failed" -eq 0 ]
    exit
fi

# One major: LE_PG_MAJOR and LE_PG_BIN say which.
source "$(dirname "$0")/lib/common.sh"

work=$(le_workdir)
trap 'le_cluster_stop "$work/cluster"; [ "${LE_KEEP:-0}" = 1 ] || rm -rf "$work"' EXIT
le_build_install "$work"
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
