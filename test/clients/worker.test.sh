#!/usr/bin/env bash
# test/clients/worker.test.sh: checks test/clients/worker.py with two
# replicas, A and B.
#
#   1. exactly one leads, and only it writes;
#   2. the leader is paused (SIGSTOP) past its ttl: the other takes over
#      (term 2, previous term "expired"); resumed, the old leader notices it
#      lost leadership and stops working;
#   3. the new leader is killed (kill -9): the other takes over at once
#      (history says "session_ended": before the ttl ran out);
#   4. the leader published its label (current_leader().info); an operator
#      moves it (move_leader): it notices (its log says "moved") and a new
#      replica, C, takes over;
#   5. SIGTERM: the leader releases and exits 0;
#   6. every fenced row: terms never decrease, one worker per term, and each
#      term's worker is the holder history records for it.
# shellcheck source=test/clients/lib.sh
source "$(dirname "$0")/lib.sh"
cl_setup worker

# Debian's interpreter, the one python3-psycopg2 is installed for.
PY=${LE_PYTHON:-/usr/bin/python3}
NAME=py-worker
TTL=3   # renew every second

q "CREATE TABLE worker_output (id bigserial PRIMARY KEY, term bigint NOT NULL,
       worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"

declare -A pid=()
start() {
    "$PY" "$CL_DIR/worker.py" --name "$NAME" --ttl "$TTL" --label "$1" >"$CL_TMP/$1.log" 2>&1 &
    pid[$1]=$!
    cl_track "${pid[$1]}"
}
leader() { q "SELECT application_name FROM current_leader('$NAME')"; }
leader_term() { q "SELECT term FROM current_leader('$NAME')"; }
term_is() { [ "$(leader_term)" = "$1" ]; }
rows_by() { q "SELECT count(*) FROM worker_output WHERE worker = '$1' AND term = $2"; }
has_rows() { [ "$(rows_by "$1" "$2")" -ge "$3" ]; }
logged() { grep -q "$2" "$CL_TMP/$1.log"; }

start A
start B

# 1. One leader, and it does the work.
cl_wait_until 30 term_is 1 || true
first=$(leader)
cl_check "one of the two leads term 1 ($first)" test "$first" = A -o "$first" = B
other=B; [ "$first" = B ] && other=A
cl_wait_until 30 has_rows "$first" 1 2 || true
cl_check "the leader writes fenced rows" has_rows "$first" 1 2
cl_eq "the follower writes nothing" 0 "$(q "SELECT count(*) FROM worker_output WHERE worker = '$other'")"

# 2. Pause the leader beyond its ttl: its session lives, the lease expires.
kill -STOP "${pid[$first]}"
cl_wait_until 30 term_is 2 || true
cl_eq "after the pause, $other leads term 2" "$other" "$(leader)"
cl_eq "term 1 ended by expiry" expired \
    "$(q "SELECT end_reason FROM leader_election.history WHERE name = '$NAME' AND term = 1")"
kill -CONT "${pid[$first]}"
cl_wait_until 30 logged "$first" "stopping work" || true
cl_check "the resumed $first noticed it lost leadership" logged "$first" "stopping work"
cl_wait_until 30 has_rows "$other" 2 1 || true
cl_check "$other writes in term 2" has_rows "$other" 2 1

# 3. Kill the leader: session-bound lease, takeover without waiting the ttl.
kill_at=$(q "SELECT clock_timestamp()")
{ kill -KILL "${pid[$other]}"; wait "${pid[$other]}"; } 2>/dev/null || true   # (quiet: no "Killed")
cl_wait_until 30 term_is 3 || true
cl_eq "after the kill, $first leads term 3" "$first" "$(leader)"
cl_eq "term 2 ended with its session (not by expiry)" session_ended \
    "$(q "SELECT end_reason FROM leader_election.history WHERE name = '$NAME' AND term = 2")"
echo "# takeover $(q "SELECT round(extract(epoch FROM acquired_at - '$kill_at'::timestamptz) * 1000)
                     FROM leader_election.history WHERE name = '$NAME' AND term = 3") ms after the kill (ttl ${TTL} s)"
cl_wait_until 30 has_rows "$first" 3 1 || true
cl_check "$first writes in term 3" has_rows "$first" 3 1

# 4. The leader publishes its label; an operator drains it with move_leader.
info_is() { [ "$(q "SELECT info->>'label' FROM current_leader('$NAME')")" = "$1" ]; }
cl_wait_until 30 info_is "$first" || true
cl_check "the leader published its label in info" info_is "$first"
start C
cl_eq "the operator moves the leader" t "$(q "SELECT leader_election.move_leader('$NAME')")"
cl_wait_until 30 logged "$first" "moved by an operator" || true
cl_check "$first noticed it was moved" logged "$first" "moved by an operator"
cl_wait_until 30 term_is 4 || true
cl_eq "C, a new replica, leads term 4" C "$(leader)"
cl_eq "term 3 ended as moved" moved \
    "$(q "SELECT end_reason FROM leader_election.history WHERE name = '$NAME' AND term = 3")"

# 5. A clean stop releases (the moved replica first: it leads nothing).
kill -TERM "${pid[$first]}"
if wait "${pid[$first]}"; then rc=0; else rc=$?; fi
cl_eq "SIGTERM: the moved worker exits 0" 0 "$rc"
kill -TERM "${pid[C]}"
if wait "${pid[C]}"; then rc=0; else rc=$?; fi
cl_eq "SIGTERM: the worker exits 0" 0 "$rc"
cl_eq "and released term 4" released \
    "$(q "SELECT end_reason FROM leader_election.history WHERE name = '$NAME' AND term = 4")"

# 6. The fenced rows tell the same story as the history.
cl_eq "fenced rows never go back in term" 0 \
    "$(q "SELECT count(*) FROM (SELECT term, lag(term) OVER (ORDER BY id) AS prev FROM worker_output) t
          WHERE term < prev")"
cl_eq "one worker per term" 0 \
    "$(q "SELECT count(*) FROM (SELECT term FROM worker_output GROUP BY term
                                 HAVING count(DISTINCT worker) > 1) t")"
wrong=0
while IFS='|' read -r term worker; do
    logged "$worker" "became leader of '$NAME', term $term\$" || wrong=$((wrong + 1))
done < <(q "SELECT DISTINCT term, worker FROM worker_output")
cl_eq "each term's writer is the worker that was elected in it" 0 "$wrong"
cl_eq "every row was written while its term held the lease" 0 \
    "$(q "SELECT count(*) FROM worker_output w JOIN leader_election.history h
            ON h.name = '$NAME' AND h.term = w.term
          WHERE w.at < h.acquired_at OR w.at > coalesce(h.ended_at, 'infinity')")"
cl_eq "terms 1, 2, 3, 4 all wrote" 4 "$(q "SELECT count(DISTINCT term) FROM worker_output")"

no_traceback() { ! grep -q Traceback "$CL_TMP"/*.log; }
cl_check "no worker crashed" no_traceback

cl_done
