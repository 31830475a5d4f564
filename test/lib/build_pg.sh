#!/usr/bin/env bash
# test/lib/build_pg.sh: build a PostgreSQL major that Debian 12 does not ship.
#
#   bash test/lib/build_pg.sh 17      # prints the bin directory on stdout
#
# Debian 12 packages only PostgreSQL 15, but Debian's archive keeps the
# sources of newer majors: postgresql-17 in trixie (and its security
# updates), postgresql-18 in sid.  This fetches the newest upstream tarball
# of the major with `apt-get source` through an apt state of its own (its
# own sources.list with deb-src lines, lists and cache; the system's
# sources are never touched), and builds into $LE_PG_CACHE/pg-MAJOR
# (default /var/cache/leader_election/pg-MAJOR): the server with
# --enable-tap-tests, the isolation tester, the TAP perl modules and the
# contrib modules the tests use.  A build there is reused until the archive
# has a newer minor release (checked at most every 12 hours).  The newest
# minor matters: pg_upgrade from Debian 12's PostgreSQL 15 needs a target
# at least as recent as the 15 release.  Needs root for apt-get (bison,
# flex, readline, zlib, ICU).  Progress goes to stderr, the build log to
# pg-MAJOR.log beside the build.
set -euo pipefail

major=${1:?usage: build_pg.sh MAJOR [DEBIAN-VERSION]}
# An exact Debian version (e.g. 15.18-0+deb12u1) builds that one, into a
# directory of its own: test/all.sh uses it for the old side of pg_upgrade.
pinned=${2:-}
cache=${LE_PG_CACHE:-/var/cache/leader_election}
prefix=$cache/pg-$major${pinned:+-$(tr -c 'A-Za-z0-9.\n' _ <<<"$pinned")}
contrib_used=(dblink amcheck pageinspect)

case $major in
    17|18) ;;
    15) [ -n "$pinned" ] || { echo "build_pg.sh: PostgreSQL 15 is Debian 12's own; name a version to build" >&2; exit 2; } ;;
    *) echo "build_pg.sh: no Debian suite known for PostgreSQL $major" >&2; exit 2 ;;
esac

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

sudo_ mkdir -p "$cache"
[ -w "$cache" ] || sudo_ chown "$(id -u):$(id -g)" "$cache"

# A private apt state: only deb-src lines, nothing shared with the system.
apt_dir=$cache/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources.list.d"
cat > "$apt_dir/sources.list" <<SOURCES
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security trixie-security main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
SOURCES
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
          -o "Dir::Etc::sourceparts=$apt_dir/sources.list.d"
          -o "Dir::State::Lists=$apt_dir/lists"
          -o "Dir::Cache=$apt_dir/cache"
          -o "APT::Get::List-Cleanup=0")

# The cached build is current if it is of the newest source version seen
# in lists fetched within the last 12 hours.
stamp=$apt_dir/lists/.updated
if [ -f "$prefix/.complete" ] && [ -x "$prefix/bin/pg_config" ] && [ -f "$stamp" ] \
   && [ -z "$(find "$stamp" -mmin +720)" ] && [ "$(cat "$stamp")" = "$(cat "$apt_dir/sources.list")" ]; then
    # Built from these lists (a version they list): current.
    listed=$(apt-cache "${apt_opts[@]}" showsrc "postgresql-$major" 2>/dev/null || true)
    if grep -qx "Version: $(cat "$prefix/.complete")" <<<"$listed"; then
        echo "$prefix/bin"
        exit 0
    fi
fi

need=()
for p in bison flex libreadline-dev zlib1g-dev libicu-dev pkg-config gcc make libc6-dev \
         libipc-run-perl xz-utils bzip2 perl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    say "installing build dependencies: ${need[*]}"
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

start=$(date +%s)
if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +720)" ] || [ "$(cat "$stamp")" != "$(cat "$apt_dir/sources.list")" ]; then
    say "apt-get update (private deb-src state in $apt_dir)"
    apt-get "${apt_opts[@]}" update -qq >&2
    cp "$apt_dir/sources.list" "$stamp"
fi
versions=$(apt-cache "${apt_opts[@]}" showsrc "postgresql-$major" | sed -n 's/^Version: //p' | sort -Vru)
if [ -n "$pinned" ]; then
    # (Not listed any more: only the known tarballs below can serve it.)
    if grep -qx -- "$pinned" <<<"$versions"; then versions=$pinned; else versions=; fi
fi

src=$cache/src-$(basename "$prefix")
# The newest version whose files can be fetched (a suite's index may list a
# version its pool does not serve here).
newest=
for v in $versions; do
    if [ -f "$prefix/.complete" ] && [ "$(cat "$prefix/.complete")" = "$v" ]; then
        echo "$prefix/bin"
        exit 0
    fi
    rm -rf "$src"
    mkdir -p "$src"
    # apt downloads as the unprivileged _apt user where it can write.
    id _apt >/dev/null 2>&1 && chown _apt "$src"
    say "apt-get source postgresql-$major=$v"
    # --download-only: we build the upstream tarball as it is (the Debian
    # patches are about packaging paths, which a private prefix does not need).
    if (cd "$src" && apt-get "${apt_opts[@]}" source --download-only -qq "postgresql-$major=$v" >&2); then
        newest=$v
        break
    fi
done
# The archive's index can name a version its pool does not serve yet (seen:
# trixie listing 17.12 while the pool still had only 17.11).  Then a known
# earlier upstream tarball, checked against its SHA-256 as the archive
# published it, is fetched from the pool directly.
if [ -z "$newest" ]; then
    while read -r fmajor fversion fsum; do
        [ "$fmajor" = "$major" ] || continue
        [ -z "$pinned" ] || [ "$pinned" = "$fversion" ] || continue
        if [ -f "$prefix/.complete" ] && [ "$(cat "$prefix/.complete")" = "$fversion" ]; then
            echo "$prefix/bin"
            exit 0
        fi
        upstream=${fversion%%-*}
        file=postgresql-${major}_$upstream.orig.tar.bz2
        rm -rf "$src"
        mkdir -p "$src"
        id _apt >/dev/null 2>&1 && chown _apt "$src"
        say "the archive serves no listed postgresql-$major; fetching $file (SHA-256 checked)"
        if /usr/lib/apt/apt-helper download-file \
               "http://deb.debian.org/debian/pool/main/p/postgresql-$major/$file" "$src/$file" "SHA256:$fsum" >&2; then
            newest=$fversion
            break
        fi
    done <<'KNOWN'
15 15.18-0+deb12u1 11df0df97fe3ea4ba9a791faaf39cee1d2fe571e78885b5b55d8517d27c323b4
17 17.11-0+deb13u1 dd27f2b3c59e73ed14aa3324901242bf69a032a6347805f274e6260322d42979
18 18.6-3 555610c24d53e4316da5b7d3fc25c279d96856d5e0e23ee308c328c5fa881d9f
KNOWN
fi
[ -n "$newest" ] || { echo "build_pg.sh: could not fetch any version of postgresql-$major" >&2; exit 1; }
orig=$(ls "$src"/postgresql-"$major"_*.orig.tar.* | head -1)
tar -C "$src" -xf "$orig"
dir=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name "postgresql-$major*" | head -1)

log=$prefix.log
say "building PostgreSQL $major from $(basename "$orig") into $prefix (log: $log)"
rm -rf "$prefix"
(
    set -e
    cd "$dir"
    ./configure --prefix="$prefix" --enable-tap-tests --with-icu --without-openssl \
        --enable-debug CFLAGS="-O2" >"$log" 2>&1
    make -j"${LE_BUILD_JOBS:-2}" -s >>"$log" 2>&1
    make -s install >>"$log" 2>&1
    make -C src/test/isolation -s install >>"$log" 2>&1
    make -C src/test/perl -s install >>"$log" 2>&1
    for m in "${contrib_used[@]}"; do
        make -C "contrib/$m" -s -j"${LE_BUILD_JOBS:-2}" install >>"$log" 2>&1
    done
) || { echo "build of PostgreSQL $major failed; last lines of $log:" >&2; tail -40 "$log" >&2; exit 1; }
# The source tree is only needed for the build.
rm -rf "$src"
echo "$newest" > "$prefix/.complete"
say "PostgreSQL $major ($newest) built in $(( $(date +%s) - start )) s"
echo "$prefix/bin"
