#!/usr/bin/env bash
# test/demo.sh: see leader election happen, in about 20 seconds.
#
#   sudo bash test/demo.sh
#
# Installs what it needs (Debian 12), builds and installs the extension,
# starts a throwaway cluster and plays the scenario of the seed blog post:
# three containers contend for one lease once per second with a 1.2 s ttl.
# Each container is one long-lived psql process using its SESSION identity
# (no holder argument), so its lease dies with its connection.  The demo
#
#   1. prints a live timeline: server clock, who leads, term;
#   2. kills the leader's client process (kill -9 of its psql) and shows the
#      takeover, with the gap from the kill to the new leader's acquisition
#      measured on the server clock (the candidates block in
#      wait_for_leadership(), which wakes the moment the old session ends);
#   3. shows the killed container, restarted and still believing it leads
#      its old term, having its fenced write rejected (SQLSTATE LE001) while
#      the new leader's fenced writes commit;
#   4. prints the history and checks what happened.
#
# Exit status 0 only if the demo behaved: a single leader at any moment, a
# takeover after the kill, a larger term, and the stale write rejected.
# Everything it starts (processes, cluster, temp dir) is removed on exit,
# also on failure or Ctrl-C.
set -euo pipefail
# shellcheck source=test/lib/common.sh
source "$(dirname "$0")/lib/common.sh"

NAME=demo          # the election name the containers contend for
TTL='1.2 s'        # the blog's ttl ...
PERIOD=1           # ... and its "try once per second"

# shellcheck disable=SC2119  # no extra packages
le_bootstrap

tmp=$(mktemp -d /tmp/leader_election_demo.XXXXXX)
chmod 755 "$tmp"
[ "$(id -u)" = 0 ] && chown postgres: "$tmp"

declare -A psql_pid=() feeder_pid=()   # per container
cleanup() {
    local c
    for c in "${!psql_pid[@]}"; do stop_container "$c"; done
    le_cluster_stop "$tmp"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failures=0
check() {   # check "what" command...: print ok/FAILED and count failures
    local what=$1; shift
    if "$@"; then
        printf '   ok      %s\n' "$what"
    else
        printf '   FAILED  %s\n' "$what"
        failures=$((failures + 1))
    fi
}

le_say "starting a throwaway cluster (library preloaded) in $tmp"
le_cluster_start "$tmp"
export PGAPPNAME=demo-observer
q() { "$LE_PG_BIN/psql" -X -qAt -v ON_ERROR_STOP=1 "$@"; }
q <<'SQL'
CREATE EXTENSION leader_election;
-- What the containers' leaders write, fenced by their term.
CREATE TABLE demo_ledger (
    id        bigserial PRIMARY KEY,
    term      bigint NOT NULL,
    container text NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
SQL

# A bash sleep without a child process: a read with a timeout on a FIFO
# nobody writes, so killing a feeder leaves no stray `sleep` behind.
mkfifo "$tmp/tick"
exec 9<>"$tmp/tick"
pause() { read -r -t "$1" -u 9 || true; }

# One container: a psql fed one tick per second.  Each tick is the blog's
# step, with the extension doing the work: renew if mine, take over if free,
# else wait -- here up to one period, waking at once when the lease frees.
# The leader then writes to the ledger, fenced by assert_leader.
tick_sql() {
    cat <<SQL
SELECT wait_for_leadership('$NAME', '$TTL', '$PERIOD s') AS leader \\gset
\\if :leader
BEGIN;
SELECT assert_leader('$NAME') AS term \\gset
INSERT INTO demo_ledger (term, container) VALUES (:term, :'container');
COMMIT;
\\endif
SQL
}
start_container() {
    local c=$1
    [ -p "$tmp/$c.in" ] || mkfifo "$tmp/$c.in"
    ( while :; do tick_sql; pause "$PERIOD"; done ) >"$tmp/$c.in" &
    feeder_pid[$c]=$!
    PGAPPNAME=$c "$LE_PG_BIN/psql" -X -qAt -v container="$c" <"$tmp/$c.in" >"$tmp/$c.log" 2>&1 &
    psql_pid[$c]=$!
    # Not jobs of ours any more: no "Killed" notice when we kill them.
    disown "${feeder_pid[$c]}" "${psql_pid[$c]}"
}
stop_container() {
    local pid deadline=$((SECONDS + 5))
    for pid in "${psql_pid[$1]}" "${feeder_pid[$1]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do pause 0.01; done
    done
}

# One line of the timeline, read from the server: clock, leader, term.
timeline_line() {
    q -F '  ' <<SQL
SELECT to_char(clock_timestamp(), 'HH24:MI:SS.MS'),
       coalesce(format('leader %s (pid %s)  term %s  expires in %s s  waiting %s',
                       application_name, holder_pid, term,
                       to_char(seconds_left, 'FM0.00'), waiting_candidates),
                'no leader')
  FROM (SELECT 1) AS one
  LEFT JOIN leader_election.leaders ON name = '$NAME' AND valid;
SQL
}
timeline() {   # timeline SECONDS: a line every half second
    local n=$(( $1 * 2 )) i
    for ((i = 0; i < n; i++)); do
        printf '   %s\n' "$(timeline_line)"
        pause 0.5
    done
}
# wait_until SECONDS SQL: poll a boolean query until true, bounded.
wait_until() {
    local deadline=$((SECONDS + $1))
    while [ "$(q -c "$2")" != t ]; do
        [ $SECONDS -lt $deadline ] || return 1
        pause 0.05
    done
}

le_say "three containers contend for '$NAME' every ${PERIOD}s, ttl $TTL"
for c in container-a container-b container-c; do start_container "$c"; done
if ! wait_until 10 "SELECT count(*) = 1 FROM current_leader('$NAME')"; then
    echo "no leader was elected within 10 s" >&2; exit 1
fi
timeline 4

# Who leads now, and which of our processes is it?
IFS='|' read -r old_leader old_term <<<"$(q -c "SELECT application_name, term FROM current_leader('$NAME')")"
le_say "killing $old_leader's client process (kill -9 of psql pid ${psql_pid[$old_leader]}), leader of term $old_term"
# Read the server clock and kill in one psql, so the two are microseconds apart.
kill_at=$(q <<SQL
SELECT clock_timestamp() AS kill_at \gset
\! kill -KILL ${psql_pid[$old_leader]}
\echo :kill_at
SQL
)
stop_container "$old_leader"
if wait_until 10 "SELECT coalesce((SELECT term > $old_term FROM current_leader('$NAME')), false)"; then
    IFS='|' read -r new_leader new_term gap_ms reason <<<"$(q <<SQL
SELECT c.application_name, c.term,
       round(extract(epoch FROM c.acquired_at - '$kill_at'::timestamptz) * 1000, 1),
       h.end_reason
  FROM current_leader('$NAME') AS c
  JOIN leader_election.history AS h ON h.name = '$NAME' AND h.term = $old_term;
SQL
)"
    le_say "takeover: $new_leader leads term $new_term, ${gap_ms} ms after the kill (server clock); term $old_term ended: $reason"
else
    new_leader='' new_term=$old_term
    echo "no takeover within 10 s of the kill" >&2
fi
timeline 3

le_say "$old_leader restarts, still believing it leads term $old_term, and tries its fenced write"
stale_out=$(PGAPPNAME=$old_leader "$LE_PG_BIN/psql" -X -qAt -v ON_ERROR_STOP=1 2>&1 <<SQL || true
\set VERBOSITY verbose
BEGIN;
SELECT assert_leader('$NAME', $old_term);
INSERT INTO demo_ledger (term, container) VALUES ($old_term, '$old_leader (stale)');
COMMIT;
SQL
)
echo "   BEGIN; SELECT assert_leader('$NAME', $old_term); INSERT INTO demo_ledger ...; COMMIT;"
sed -e '/^LOCATION:/d' -e 's/^psql:<stdin>:[0-9]*: //' -e 's/^/   /' <<<"$stale_out"
start_container "$old_leader"    # and rejoins as an ordinary candidate

le_say "the new leader's fenced writes commit (demo_ledger, last rows)"
wait_until 5 "SELECT exists (SELECT FROM demo_ledger WHERE term = $new_term)" || true
q -F '  ' <<'SQL' | sed 's/^/   /'
SELECT to_char(at, 'HH24:MI:SS.MS'), 'term ' || term, container
  FROM (SELECT * FROM demo_ledger ORDER BY id DESC LIMIT 4) AS last ORDER BY id;
SQL

le_say "leader_election.history"
q -F '  ' <<SQL | sed 's/^/   /'
SELECT 'term ' || h.term,
       coalesce((SELECT DISTINCT container FROM demo_ledger AS l WHERE l.term = h.term), h.holder),
       to_char(h.acquired_at, 'HH24:MI:SS.MS') || ' .. ' || coalesce(to_char(h.ended_at, 'HH24:MI:SS.MS'), 'now'),
       coalesce(h.end_reason, 'current')
  FROM leader_election.history AS h WHERE h.name = '$NAME' ORDER BY h.term;
SQL

le_say "checks"
# One leader at a time: each term ended no later than the next one began.
check "one leader at a time (history: no two terms overlap)" \
    test "$(q -c "SELECT count(*) FROM (SELECT ended_at, lead(acquired_at) OVER (ORDER BY term) AS next
                                          FROM leader_election.history WHERE name = '$NAME') AS t
                   WHERE next IS NOT NULL AND (ended_at IS NULL OR ended_at > next)")" = 0
check "one container per term in the fenced ledger" \
    test "$(q -c "SELECT count(*) FROM (SELECT term FROM demo_ledger GROUP BY term
                                         HAVING count(DISTINCT container) > 1) AS t")" = 0
check "fenced writes in term order" \
    test "$(q -c "SELECT count(*) FROM (SELECT term, lag(term) OVER (ORDER BY id) AS prev FROM demo_ledger) AS t
                   WHERE term < prev")" = 0
check "a takeover after the kill ($old_leader -> ${new_leader:-nobody})" \
    test -n "$new_leader" -a "$new_leader" != "$old_leader"
check "the term increased ($old_term -> $new_term)" test "$new_term" -gt "$old_term"
check "the stale fenced write was rejected with SQLSTATE LE001" grep -q 'ERROR:  LE001' <<<"$stale_out"
check "the stale write left no row" \
    test "$(q -c "SELECT count(*) FROM demo_ledger WHERE container LIKE '%(stale)'")" = 0
check "the new leader's fenced write committed" \
    test "$(q -c "SELECT count(*) > 0 FROM demo_ledger WHERE term = $new_term AND container = '$new_leader'")" = t

if [ "$failures" -ne 0 ]; then
    le_say "demo FAILED ($failures check(s)); container logs follow"
    tail -n 5 "$tmp"/container-*.log >&2 || true
    exit 1
fi
le_say "demo behaved; cleaning up"
