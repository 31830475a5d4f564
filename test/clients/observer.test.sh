#!/usr/bin/env bash
# test/clients/observer.test.sh: checks test/clients/node/observer.js.
# Installs its locked dependencies (npm ci), starts the observer for one
# name, then makes that name change hands four ways and checks the observer
# printed each change, in order, with holder, term and reason:
#   host-a elected (new name) -> host-a released -> host-b elected after a
#   release -> a session holder elected after expiry -> its session ends and
#   host-c is elected (previous term: session_ended) -> host-c publishes
#   its URL (info) -> hands over to host-d -> host-d elected -> an operator
#   moves host-d -> host-a elected (previous term: moved).
# A change of another name, and a rolled-back acquisition, must not show.
# shellcheck source=test/clients/lib.sh
source "$(dirname "$0")/lib.sh"
cl_setup observer

node_dir="$CL_DIR/node"
# npm's cache in our scratch dir: the test user's home may not be writable.
(cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error --cache "$CL_TMP/npm-cache") >"$CL_TMP/npm.log" 2>&1 ||
    { cat "$CL_TMP/npm.log" >&2; echo "npm ci failed" >&2; exit 1; }

out="$CL_TMP/observer.out"
node "$node_dir/observer.js" watched >"$out" 2>&1 &
observer=$!
cl_track "$observer"
printed() { grep -q -- "$1" "$out"; }
absent() { ! grep -q -- "$1" "$out"; }
cl_wait_until 30 printed 'listening on channel leader_election' || true
cl_check "the observer is listening" printed 'listening on channel leader_election'

q "SELECT try_acquire_leader('watched', '1 minute', 'host-a')" >/dev/null
q "SELECT try_acquire_leader('other', '1 minute', 'host-a')" >/dev/null    # not followed
q "SELECT release_leader('watched', 'host-a')" >/dev/null
psql -X -q -c "BEGIN" -c "SELECT try_acquire_leader('watched', '1 minute', 'host-x')" -c "ROLLBACK" >/dev/null
q "SELECT try_acquire_leader('watched', '1 minute', 'host-b')" >/dev/null
# host-b's lease expires; a session holder takes it over without waiting
# (wait_for_leadership wakes at expires_at), then its psql exits ...
q "SELECT try_acquire_leader('watched', '150 ms', 'host-b')" >/dev/null      # shorten: renew with a tiny ttl
q "SELECT wait_for_leadership('watched', '1 minute', '30 s')" >/dev/null
# ... and host-c finds the lease void at once: previous term session_ended.
q "SELECT try_acquire_leader('watched', '1 minute', 'host-c')" >/dev/null
q "SELECT set_leader_info('watched', '{\"url\": \"http://host-c:8080\"}', 'host-c')" >/dev/null
q "SELECT release_leader('watched', 'host-c', 'host-d')" >/dev/null
q "SELECT try_acquire_leader('watched', '1 minute', 'host-d')" >/dev/null
q "SELECT leader_election.move_leader('watched')" >/dev/null
q "SELECT try_acquire_leader('watched', '1 minute', 'host-a')" >/dev/null

# Terms come from one counter per database: 'other' drew term 2 and the
# rolled-back acquisition term 3 (a gap, never reused).
expected=(
    'watched term 1: host-a elected (previous term ended: none)'
    'watched term 1: host-a released (released)'
    'watched term 4: host-b elected (previous term ended: released)'
    'watched term 5: session:*:* elected (previous term ended: expired)'
    'watched term 6: host-c elected (previous term ended: session_ended)'
    'watched term 6: host-c published {"url":"http://host-c:8080"}'
    'watched term 6: host-c handed over to host-d'
    'watched term 7: host-d elected (previous term ended: released)'
    'watched term 7: host-d moved by an operator'
    'watched term 8: host-a elected (previous term ended: moved)'
)
last=${expected[${#expected[@]}-1]}
cl_wait_until 30 printed "$last" || true
kill -TERM "$observer"
if wait "$observer"; then rc=0; else rc=$?; fi
cl_eq "SIGTERM: the observer exits 0" 0 "$rc"

mapfile -t seen < <(grep ' watched term ' "$out" | cut -d' ' -f2-)
cl_eq "ten changes seen" "${#expected[@]}" "${#seen[@]}"
for i in "${!expected[@]}"; do
    # shellcheck disable=SC2053  # the right side is a glob pattern on purpose
    if [[ "${seen[$i]:-}" == ${expected[$i]} ]]; then
        cl_check "change $((i + 1)): ${seen[$i]}" true
    else
        cl_check "change $((i + 1)): expected '${expected[$i]}', got '${seen[$i]:-nothing}'" false
    fi
done
cl_check "no change of another name shown" absent ' other term '
cl_check "the rolled-back acquisition is not shown" absent host-x
[ "$CL_FAILED" -eq 0 ] || sed 's/^/#   /' "$out"

cl_done
