# 101_task_renewal.pl: long runs keep their lease; a lost lease cancels the run
# (task_runner.h, "Long runs").
#
# A run three times longer than the ttl finishes 'succeeded' in a single
# term, because the launcher renews the lease while the worker is inside
# CALL.  When the lease is taken away during a run (here: a superuser writes
# another holder into the lease row, which no renewal can undo), the run is
# cancelled and recorded 'cancelled'; the worker keeps campaigning and runs
# again, in a new term, once the lease is free.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('renewal', conf => "leader_election.database = 'postgres'\n");

$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO app;
-- Sleeps in small steps for the given time, noting the term each second.
CREATE PROCEDURE public.slow(seconds int, term bigint) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. seconds * 10 LOOP
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
CREATE PROCEDURE public.long_run(term bigint) LANGUAGE sql AS $$ CALL public.slow(9, term) $$;
CREATE PROCEDURE public.endless(term bigint) LANGUAGE sql AS $$ CALL public.slow(120, term) $$;
ALTER PROCEDURE public.slow(int, bigint) OWNER TO app;
ALTER PROCEDURE public.long_run(bigint) OWNER TO app;
ALTER PROCEDURE public.endless(bigint) OWNER TO app;
SET ROLE app;
SELECT leader_election.register_task('long', 'public.long_run(bigint)', '1 hour', '3 seconds');
});

# 9 s of work under a 3 s ttl (renewed every second; a busy machine may
# delay a renewal by some hundreds of milliseconds).
ok(le_poll($node, q{SELECT status FROM leader_election.task_runs WHERE task_name = 'long'},
	'succeeded', 90), 'a run three times the ttl succeeds');
is($node->safe_psql('postgres', q{SELECT finished_at - started_at >= interval '8.9 seconds'
	FROM leader_election.task_runs WHERE task_name = 'long'}), 't', 'it really ran that long');
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.history WHERE name = 'long'}),
	'1', 'one term for the whole run: the lease was renewed, never lost');
is($node->safe_psql('postgres', q{SELECT h.term = r.term FROM leader_election.history h, leader_election.task_runs r
	WHERE h.name = 'long' AND r.task_name = 'long'}), 't', 'the run is recorded with that term');

# Take the lease away in the middle of an endless run.
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('endless', 'public.endless(bigint)', '1 second', '2 seconds')});
ok(le_poll($node, q{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 'endless' AND status = 'running'}, '1'), 'the endless run started');
my $term = $node->safe_psql('postgres', q{SELECT term FROM leader_election.leases WHERE name = 'endless'});
$node->safe_psql('postgres', q{UPDATE leader_election.leases
	SET holder = 'intruder', expires_at = now() + interval '1 hour' WHERE name = 'endless'});
ok(le_poll($node, q{SELECT status || ': ' || error FROM leader_election.task_runs WHERE task_name = 'endless'},
	'cancelled: leadership lost: the lease is held by another holder or in another term', 30),
	'the run is cancelled, and says why');
is($node->safe_psql('postgres', qq{SELECT term FROM leader_election.task_runs WHERE task_name = 'endless'}),
	$term, 'the cancelled run carries its term');
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE application_name = 'leader_election task endless' AND state = 'idle'}, '1'),
	'the worker lives on, idle');
sleep(2);
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs WHERE task_name = 'endless'}),
	'1', 'no run while the lease is held by someone else');

# Free the lease: the worker, still campaigning, takes a new term and runs.
$node->safe_psql('postgres', q{UPDATE leader_election.leases SET holder = NULL WHERE name = 'endless'});
ok(le_poll($node, qq{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 'endless' AND status = 'running' AND term > $term}, '1'),
	'after the lease frees up the task runs again in a newer term');

# A disabled task's run is cancelled and the lease released.
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.disable_task('endless')});
ok(le_poll($node, q{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 'endless' AND status = 'running'}, '0'), 'disabling stops the run');
is($node->safe_psql('postgres', q{SELECT status FROM leader_election.task_runs
	WHERE task_name = 'endless' ORDER BY id DESC LIMIT 1}), 'cancelled', 'recorded as cancelled');
ok(le_poll($node, q{SELECT holder IS NULL FROM leader_election.leases WHERE name = 'endless'}),
	'and the lease is released');

# The launcher stops renewing (frozen with SIGSTOP): the worker's own
# watchdog cancels the run before the lease can expire.
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('watched', 'public.endless(bigint)', '1 hour', '2 seconds')});
ok(le_poll($node, q{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 'watched' AND status = 'running'}, '1'), 'the watched run started');
my $launcher = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'});
kill 'STOP', $launcher;
# Nobody renews now: the worker is inside CALL and the launcher is frozen.
my $expiry = $node->safe_psql('postgres', q{SELECT expires_at FROM leader_election.leases WHERE name = 'watched'});
my $ok = le_poll($node, q{SELECT status || ': ' || error FROM leader_election.task_runs WHERE task_name = 'watched'},
	'cancelled: leadership lost: the lease was not renewed in time (noticed by the worker)', 30);
kill 'CONT', $launcher;
ok($ok, 'without renewals the worker cancels its own run');
is($node->safe_psql('postgres', qq{SELECT finished_at < '$expiry'
	FROM leader_election.task_runs WHERE task_name = 'watched'}), 't',
	'the run ended before the lease expired');

$node->stop;
done_testing();
