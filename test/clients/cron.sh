#!/usr/bin/env bash
# test/clients/cron.sh: run a nightly job from cron on every host, and let
# exactly one host actually do it.
#
#   crontab on every host:   0 3 * * *  /opt/app/cron.sh /opt/app/nightly-report
#
# Usage: cron.sh COMMAND [ARGS...]
#   Runs COMMAND if this host wins the lease 'nightly-report'; otherwise does
#   nothing and exits 0.  The holder is the host's name (LE_HOLDER overrides
#   it).  Connection settings come from the PG* environment variables.
#
# Why a NAMED holder: psql exits as soon as the query returns, so a session
# identity would end with it and the lease would be free again at once.  A
# named holder keeps the lease for its whole ttl, whoever connects.
#
# Why 2 minutes and no release: the hosts' crons fire at slightly different
# moments (their clocks differ; the lease uses only the database server's
# clock).  Keeping the lease for a while after the job started makes every
# other host that fires within those 2 minutes find it taken.  Pick a ttl
# longer than the spread of the cron clocks and shorter than the period.
set -euo pipefail

holder=${LE_HOLDER:-$(hostname)}

# The query's answer is the gate.  psql commits it (autocommit) before
# printing, so a "t" is a committed lease: act only after the commit.
leader=$(psql -X -qAt -v ON_ERROR_STOP=1 -v holder="$holder" <<'SQL'
SELECT try_acquire_leader('nightly-report', '2 minutes', :'holder');
SQL
)

if [ "$leader" = t ]; then
    exec "$@"
fi
# Another host has it: not an error, nothing to report to cron's mail.
exit 0
