# 100_task_runner.pl: the background task runner's basic life (task_worker.c).
#
# A task runs only while the runner holds its lease, every run is recorded
# with its term, it runs as the registering role and may COMMIT; an
# application session holding the lease keeps it from running; a failing
# procedure is recorded and the runner stays healthy; a terminated worker is
# restarted; a clean shutdown releases the runner's lease.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('runner', conf => "leader_election.database = 'postgres'\n");

$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO app;
CREATE TABLE public.log (at timestamptz DEFAULT clock_timestamp(), term bigint,
                         cur text, ses text, am boolean, lterm bigint, step text);
GRANT ALL ON public.log TO app;
CREATE PROCEDURE public.tick(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.log (term, cur, ses, am, lterm, step)
  VALUES (term, current_user, session_user, am_leader('t1'), leader_term('t1'), 'before');
  COMMIT;
  INSERT INTO public.log (term, step) VALUES (term, 'after commit');
END $$;
CREATE PROCEDURE public.boom() LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'boom from the task'; END $$;
ALTER PROCEDURE public.tick(bigint) OWNER TO app;
ALTER PROCEDURE public.boom() OWNER TO app;
});

is($node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('t1', 'public.tick(bigint)', '1 second', '5 seconds') > 0}),
	't', 'register_task returns an id');

# The launcher and the task's worker show up with recognisable types.
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'}, '1'), 'launcher in pg_stat_activity');
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'leader_election task' AND usename = 'app'
	  AND application_name = 'leader_election task t1'}, '1'),
	'task worker in pg_stat_activity, connected as the owner');

# Runs happen and are recorded with the term of the lease.
ok(le_poll($node, q{SELECT count(*) >= 2 FROM leader_election.task_runs
	WHERE task_name = 't1' AND status = 'succeeded'}), 'two runs succeeded');
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs r
	WHERE r.task_name = 't1' AND r.status = 'succeeded'
	  AND NOT EXISTS (SELECT FROM leader_election.history h
	                  WHERE h.name = 't1' AND h.term = r.term AND h.holder = r.holder)}),
	'0', 'every run carries a term the runner held');
is($node->safe_psql('postgres', q{SELECT bool_and(cur = 'app' AND ses = 'app' AND am AND lterm = term)
	FROM public.log WHERE step = 'before'}), 't',
	'the procedure runs as the owner, sees itself as leader, gets its term');
is($node->safe_psql('postgres', q{SELECT count(*) >= 2 FROM public.log WHERE step = 'after commit'}),
	't', 'the procedure may COMMIT');
like($node->safe_psql('postgres', q{SELECT holder FROM leader_election.leases WHERE name = 't1'}),
	qr/^task-runner:\d+:1$/, 'the runner holds the lease under its documented identity');

# An application instance holding the lease keeps the task from running.
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.disable_task('t1')});
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE application_name = 'leader_election task t1'}, '0'), 'disabled task: worker gone');
is($node->safe_psql('postgres', q{SELECT holder IS NULL FROM leader_election.leases WHERE name = 't1'}),
	't', 'the stopping worker released its lease');
is($node->safe_psql('postgres', q{SET ROLE app; SELECT try_acquire_leader('t1', '1 hour', 'app-instance')}),
	't', 'an application instance takes the lease');
my $app_term = $node->safe_psql('postgres', q{SELECT term FROM leader_election.leases WHERE name = 't1'});
my $runs_before = $node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs WHERE task_name = 't1'});
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.enable_task('t1')});
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE application_name = 'leader_election task t1'}, '1'), 'enabled task: worker back');
# The worker campaigns every 250 ms and would run at once; watch for 3 s.
sleep(3);
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs WHERE task_name = 't1'}),
	$runs_before, 'no run while the application instance holds the lease');
$node->safe_psql('postgres', q{SET ROLE app; SELECT release_leader('t1', 'app-instance')});
ok(le_poll($node, qq{SELECT count(*) > 0 FROM leader_election.task_runs
	WHERE task_name = 't1' AND status = 'succeeded' AND term > $app_term}),
	'after the release the task runs again, in a newer term');

# A failing procedure: recorded, the task stays enabled, the runner healthy.
my $launcher = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'});
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('t2', 'public.boom()', '1 second', '5 seconds')});
ok(le_poll($node, q{SELECT count(*) >= 2 FROM leader_election.task_runs
	WHERE task_name = 't2' AND status = 'failed' AND error = 'boom from the task'}),
	'a failing procedure is recorded as failed, with its error, run after run');
is($node->safe_psql('postgres', q{SELECT enabled AND last_status = 'failed' FROM leader_election.tasks WHERE name = 't2'}),
	't', 'a failing task stays enabled');
is($node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'}), $launcher, 'the launcher is unaffected');
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.unregister_task('t2')});

# SIGTERM of the worker: it releases, the launcher starts a new one.
my $worker = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE application_name = 'leader_election task t1'});
my $term = $node->safe_psql('postgres', q{SELECT term FROM leader_election.leases WHERE name = 't1'});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker)");
ok(le_poll($node, qq{SELECT count(*) FROM pg_stat_activity
	WHERE application_name = 'leader_election task t1' AND pid <> $worker}, '1'),
	'a terminated worker is replaced');
is($node->safe_psql('postgres', qq{SELECT end_reason FROM leader_election.history WHERE name = 't1' AND term = $term}),
	'released', 'the terminated worker released its lease');
ok(le_poll($node, qq{SELECT count(*) > 0 FROM leader_election.task_runs
	WHERE task_name = 't1' AND status = 'succeeded' AND pid <> $worker}),
	'the new worker runs the task');

# Clean shutdown releases the runner's lease.
$term = $node->safe_psql('postgres', q{SELECT term FROM leader_election.leases WHERE name = 't1'});
$node->stop('fast');
$node->start;
is($node->safe_psql('postgres', qq{SELECT end_reason FROM leader_election.history WHERE name = 't1' AND term = $term}),
	'released', 'clean shutdown released the lease');
ok(le_poll($node, qq{SELECT count(*) > 0 FROM leader_election.task_runs
	WHERE task_name = 't1' AND status = 'succeeded' AND term > $term}),
	'after the restart the task runs in a new term');
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs WHERE status = 'running' AND task_name = 't2'}),
	'0', 'no run is left open');

$node->stop;
done_testing();
