# 104_task_ignores_cancel.pl: a run that ignores its cancel cannot outlive
# its lease (task_worker.c, the watchdog).
#
# A procedure may catch query_canceled and carry on.  When its lease is taken
# away, the launcher and the watchdog cancel the run; the procedure swallows
# the cancels; once the lease's last confirmed expiry arrives the watchdog
# ends the worker process with a FATAL, which no handler can catch, so
# nothing the run did after that point commits.  The launcher then starts a
# new worker, and the abandoned run is closed as 'failed'.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('stubborn', conf => "leader_election.database = 'postgres'\n");

$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO app;
CREATE TABLE public.ticks (at timestamptz NOT NULL);
GRANT INSERT ON public.ticks TO app;
-- Notes a tick every 100 ms and swallows every cancel; never commits.
CREATE PROCEDURE public.stubborn(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    BEGIN
      INSERT INTO public.ticks VALUES (clock_timestamp());
      PERFORM pg_sleep(0.1);
    EXCEPTION WHEN query_canceled THEN
      NULL;
    END;
  END LOOP;
END $$;
ALTER PROCEDURE public.stubborn(bigint) OWNER TO app;
SET ROLE app;
SELECT leader_election.register_task('stubborn', 'public.stubborn(bigint)', '1 hour', '2 seconds');
});

ok(le_poll($node, q{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 'stubborn' AND status = 'running'}, '1'), 'the run started');
my $pid = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE application_name = 'leader_election task stubborn'});
ok($pid =~ /^\d+$/, "the worker runs as pid $pid");

# Take the lease away: no renewal can succeed from now on.
$node->safe_psql('postgres', q{UPDATE leader_election.leases
	SET holder = 'intruder', expires_at = now() + interval '1 hour' WHERE name = 'stubborn'});

ok(le_poll($node, qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $pid}, '0', 30),
	'the worker that ignored its cancels is ended');
ok($node->log_contains(qr/terminating background worker "leader_election task/),
	'the log says the worker was terminated');
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.ticks}), '0',
	'nothing the run did was committed');
ok(le_poll($node, q{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 'stubborn' AND status = 'running'}, '0', 30),
	'the abandoned run is closed');
isnt($node->safe_psql('postgres', q{SELECT status FROM leader_election.task_runs
	WHERE task_name = 'stubborn' ORDER BY id LIMIT 1}), 'succeeded',
	'and not recorded as a success');

$node->stop;
done_testing();
