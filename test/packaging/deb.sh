#!/usr/bin/env bash
# test/packaging/deb.sh: build the Debian package from a clean copy of the
# tree and run the regression suite against the installed package.
#
#   sudo bash test/packaging/deb.sh
#
# 1. Installs the build dependencies (debian/control), copies the tracked
#    tree (no build output, no .git) and runs `dpkg-buildpackage -us -uc -b`
#    there.  The build runs pg_regress and the isolation specs against the
#    package's files through pg_buildext installcheck (debian/rules).
# 2. Installs the .deb and runs the same suites against the installed files
#    in a throwaway cluster with the library preloaded.  By default the
#    .deb is unpacked into a private copy of the system's PostgreSQL 15
#    (the machine's own installation stays untouched: other work may be
#    using it); with LE_DEB_SYSTEM_INSTALL=1 it is installed with apt, the
#    autopkgtest (debian/tests/installcheck) runs, and the package is
#    removed again.
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"

le_install_packages debhelper postgresql-server-dev-all postgresql-all dpkg-dev

tmp=$(mktemp -d /tmp/leader_election-deb.XXXXXX)
cleanup() {
    [ -d "$tmp/cluster/data" ] && le_run_as_tester "$bin/pg_ctl" -D "$tmp/cluster/data" -m immediate -w stop >/dev/null 2>&1 || true
    [ "${LE_KEEP:-0}" = 1 ] || rm -rf "$tmp"
}
trap cleanup EXIT
chmod 755 "$tmp"

# ---- 1. build from a clean copy ----
mkdir "$tmp/src"
if git -C "$LE_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    # What a clone would have: the tracked files, as they are in the tree.
    (cd "$LE_ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - --no-recursion) | tar -C "$tmp/src" -xf -
else
    tar -C "$LE_ROOT" --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' -cf - . | tar -C "$tmp/src" -xf -
fi
chown -R postgres: "$tmp/src" 2>/dev/null || true
le_say "dpkg-buildpackage -us -uc -b"
(cd "$tmp/src" && dpkg-buildpackage -us -uc -b) >"$tmp/build.log" 2>&1 || {
    tail -60 "$tmp/build.log"; echo "FAILED: dpkg-buildpackage" >&2; exit 1; }
grep -E '^(test |ok |not ok |=+$| All [0-9]+ tests passed)' "$tmp/build.log" | grep -v '^=*$' | tail -4 || true
shopt -s nullglob
debs=("$tmp"/postgresql-*-leader-election_*.deb)
[ ${#debs[@]} -gt 0 ] || { echo "FAILED: no .deb built" >&2; exit 1; }
for d in "${debs[@]}"; do
    echo "built $(basename "$d"):"
    dpkg-deb -c "$d" | awk '{print "    " $6}' | grep -E '\.(so|control|sql)$'
done

# ---- 2. install the package and run the suites against it ----
deb=$(printf '%s\n' "${debs[@]}" | grep -- "-$LE_PG_MAJOR-leader-election_" | head -1)
[ -n "$deb" ] || { echo "FAILED: no package for PostgreSQL $LE_PG_MAJOR" >&2; exit 1; }
if [ "${LE_DEB_SYSTEM_INSTALL:-0}" = 1 ]; then
    le_say "apt-get install $(basename "$deb"), then the autopkgtest"
    le_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/dev/null
    rc=0
    (cd "$tmp/src" && sh debian/tests/installcheck) || rc=$?
    le_sudo env DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq "postgresql-$LE_PG_MAJOR-leader-election" >/dev/null
    [ "$rc" = 0 ] || { echo "FAILED: autopkgtest installcheck" >&2; exit 1; }
    exit 0
fi

le_say "unpacking $(basename "$deb") into a private copy of PostgreSQL $LE_PG_MAJOR"
root=$tmp/root
mkdir -p "$root/usr/lib/postgresql" "$root/usr/share/postgresql"
cp -a "/usr/lib/postgresql/$LE_PG_MAJOR" "$root/usr/lib/postgresql/"
cp -a "/usr/share/postgresql/$LE_PG_MAJOR" "$root/usr/share/postgresql/"
# Whatever `make install` put there is not the package's.
rm -f "$root/usr/lib/postgresql/$LE_PG_MAJOR/lib/leader_election.so" \
      "$root/usr/share/postgresql/$LE_PG_MAJOR/extension/leader_election"*
rm -rf "$root/usr/lib/postgresql/$LE_PG_MAJOR/lib/bitcode/leader_election"*
dpkg-deb -x "$deb" "$root"
bin=$root/usr/lib/postgresql/$LE_PG_MAJOR/bin
LE_PG_BIN=$bin
[ -f "$root/usr/lib/postgresql/$LE_PG_MAJOR/lib/leader_election.so" ] || { echo "FAILED: the package has no leader_election.so" >&2; exit 1; }

mkdir -p "$tmp/cluster"
chown -R postgres: "$tmp/cluster" "$tmp/src" 2>/dev/null || true
le_cluster_start "$tmp/cluster"
le_say "pg_regress and isolation suites against the installed package"
le_run_as_tester env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres \
    make -C "$tmp/src" -s PG_CONFIG="$bin/pg_config" TAP_TESTS= installcheck || {
    cat "$tmp/src/regression.diffs" "$tmp/src/output_iso/regression.diffs" 2>/dev/null | head -100 >&2
    echo "FAILED: regression suite against the installed package" >&2; exit 1; }
