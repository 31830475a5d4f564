# test/lib/common.sh: shared by test/all.sh, test/demo.sh and bench/run.sh.
#
#   le_bootstrap         install Debian packages (as root), build, install
#   le_install_packages  only the Debian packages
#   le_build_install DIR build the tree in DIR against $LE_PG_BIN and install
#   le_run_as_tester     run a command as the unprivileged test user
#   le_workdir           a copy of the tree the test user can write to
#   le_cluster_start     initdb + start a throwaway cluster (as the test user)
#   le_cluster_stop      stop and remove it
#
# PostgreSQL refuses to run as root, so clusters and pg_regress run as the
# user "postgres" (created by Debian's postgresql package) when we are root,
# and as the calling user otherwise.

LE_PG_MAJOR=${LE_PG_MAJOR:-15}
# LE_PG_BIN may point at another installation of the same major (a private
# copy, or a major built from source): pg_config there says where to install.
LE_PG_BIN=${LE_PG_BIN:-/usr/lib/postgresql/$LE_PG_MAJOR/bin}
LE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LE_PACKAGES=(make gcc libc6-dev
    "postgresql-$LE_PG_MAJOR" "postgresql-client-$LE_PG_MAJOR" "postgresql-server-dev-$LE_PG_MAJOR"
    libpq-dev libipc-run-perl libio-pty-perl
    prometheus-postgres-exporter prometheus)   # test/t/120_postgres_exporter.pl (promtool)

le_say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

le_sudo() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# le_install_packages [extra debian packages...]
# The server packages are those of $LE_PG_MAJOR when Debian ships it;
# test/all.sh installs them for the system's major and builds the others
# (test/lib/build_pg.sh), then sets LE_PACKAGES_DONE=1 for each major.
le_install_packages() {
    [ "${LE_PACKAGES_DONE:-0}" = 1 ] && return 0
    local missing=() p
    for p in "${LE_PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        le_say "installing Debian packages: ${missing[*]}"
        le_sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        le_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    # Debian starts a cluster on 5432 when it installs the server; we never use it.
    # The test servers listen on 127.0.0.1, and a fresh network namespace
    # has its loopback interface down.
    if command -v ip >/dev/null && ! ip -br link show lo 2>/dev/null | grep -q ',UP'; then
        le_say "bringing the loopback interface up"
        le_sudo ip link set lo up || true
    fi
}

# le_build_install DIR: build the tree in DIR (as the owner of DIR) against
# $LE_PG_BIN/pg_config and install it there.
le_build_install() {
    local dir=$1 as=()
    le_say "building and installing leader_election for $("$LE_PG_BIN/pg_config" --version)"
    [ "$dir" != "$LE_ROOT" ] && [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
    "${as[@]}" make -C "$dir" -s PG_CONFIG="$LE_PG_BIN/pg_config" LE_WERROR="${LE_WERROR:-0}" >/dev/null
    le_sudo make -C "$dir" -s PG_CONFIG="$LE_PG_BIN/pg_config" install >/dev/null
}

# le_bootstrap [extra debian packages...]
le_bootstrap() {
    le_install_packages "$@"
    le_build_install "$LE_ROOT"
}

le_tester() {
    if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi
}

# le_run_as_tester CMD...: run with PATH pointing at the server binaries.
le_run_as_tester() {
    local path="$LE_PG_BIN:$PATH"
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- env PATH="$path" "$@"
    else
        env PATH="$path" "$@"
    fi
}

# le_workdir: copy the tree (without build output) into a fresh directory
# the test user owns, and print its path.
le_workdir() {
    local dir
    dir=$(mktemp -d /tmp/leader_election.XXXXXX)
    tar -C "$LE_ROOT" --exclude=.git --exclude='*.o' --exclude='*.bc' -cf - . | tar -C "$dir" -xf -
    [ "$(id -u)" = 0 ] && chown -R postgres: "$dir"
    chmod 755 "$dir"
    echo "$dir"
}

# le_free_port: a TCP port nobody listens on.
le_free_port() {
    local port
    for _ in $(seq 1 50); do
        port=$(( 20000 + RANDOM % 20000 ))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
    done
    echo "no free port found" >&2; return 1
}

# le_cluster_start DIR [extra postgresql.conf lines...]
# Starts a cluster in DIR/data with the library preloaded; sets PGHOST,
# PGPORT, PGUSER, PGDATABASE for the caller.
# A port can be taken between le_free_port and the server's bind (by
# another test, or as a client's ephemeral port), so a failed start is
# tried again on another port; each failure prints the server's log, so a
# CI report says why.
le_cluster_start() {
    local dir=$1; shift
    local port attempt
    le_run_as_tester initdb -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
    {
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "shared_preload_libraries = 'leader_election'"
        echo "max_prepared_transactions = 5"
        echo "fsync = off"
        for line in "$@"; do echo "$line"; done
    } | le_run_as_tester tee -a "$dir/data/postgresql.conf" >/dev/null
    for attempt in 1 2 3; do
        port=$(le_free_port)
        echo "port = $port" | le_run_as_tester tee -a "$dir/data/postgresql.conf" >/dev/null
        if le_run_as_tester pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null; then
            export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
            return 0
        fi
        echo "the test server did not start (attempt $attempt, port $port); its log:" >&2
        tail -n 30 "$dir/server.log" >&2 2>/dev/null || echo "(no log: $dir/server.log)" >&2
        le_run_as_tester pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
        le_run_as_tester truncate -s 0 "$dir/server.log" 2>/dev/null || true
    done
    return 1
}

le_cluster_stop() {
    local dir=$1
    [ -d "$dir/data" ] && le_run_as_tester pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
}
