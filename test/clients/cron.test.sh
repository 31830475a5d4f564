#!/usr/bin/env bash
# test/clients/cron.test.sh: checks test/clients/cron.sh.  Four "hosts" fire
# the same cron job at once: exactly one does the work, and it is the one
# the lease names.  Later runs by the others within the ttl do nothing; the
# winner's rerun renews (same term); a database that cannot be reached is
# an error for cron to report, and runs nothing.
# shellcheck source=test/clients/lib.sh
source "$(dirname "$0")/lib.sh"
cl_setup cron

job="$CL_DIR/cron.sh"
done_file="$CL_TMP/work-done"
# The "work": append the host's name to a file.
work() { LE_HOLDER=$1 bash "$job" sh -c 'echo "$LE_HOLDER" >> "$1"' sh "$done_file"; }

# All four at the same moment, as cron would on four hosts.
pids=()
for h in host-a host-b host-c host-d; do
    work "$h" & pids+=($!)
done
statuses=0
for p in "${pids[@]}"; do wait "$p" || statuses=$((statuses + 1)); done

cl_eq "every host's cron job exited 0" 0 "$statuses"
cl_eq "exactly one host did the work" 1 "$(wc -l <"$done_file")"
winner=$(head -n 1 "$done_file")
cl_eq "the host that worked is the lease holder" "$winner" \
    "$(q "SELECT holder FROM current_leader('nightly-report')")"
cl_eq "the lease is named-holder, not session-bound" f \
    "$(q "SELECT session_bound FROM current_leader('nightly-report')")"
cl_eq "first term is 1" 1 "$(q "SELECT term FROM current_leader('nightly-report')")"

# A late cron on another host, within the 2 minutes: nothing.
loser=host-a; [ "$winner" = host-a ] && loser=host-b
work "$loser"
cl_eq "a late run on $loser does nothing" 1 "$(wc -l <"$done_file")"

# The winner again within the ttl: it still holds the lease (a renewal).
work "$winner"
cl_eq "the winner's rerun works again" 2 "$(wc -l <"$done_file")"
cl_eq "and keeps its term" 1 "$(q "SELECT term FROM current_leader('nightly-report')")"

# Once the winner gives the lease back, the next host's run takes it: term 2.
cl_eq "release by the winner" t "$(q "SELECT release_leader('nightly-report', '$winner')")"
work "$loser"
cl_eq "after a release the next host works" "$loser" "$(tail -n 1 "$done_file")"
cl_eq "with term 2" 2 "$(q "SELECT term FROM current_leader('nightly-report')")"

# Database down: cron must hear about it, and nothing runs.
before=$(wc -l <"$done_file")
if PGHOST=/nonexistent PGPORT=1 work host-z 2>/dev/null; then rc=0; else rc=$?; fi
cl_check "an unreachable database makes the job fail (exit $rc)" test "$rc" -ne 0
cl_eq "and runs nothing" "$before" "$(wc -l <"$done_file")"

cl_done
