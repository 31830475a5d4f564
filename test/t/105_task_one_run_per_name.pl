# 105_task_one_run_per_name.pl: one run per lease name at a time, whatever
# was unregistered or re-registered; a worker releases only its own term;
# alter_task changes a task in place (task_runner.h, "One run per name").
#
# The procedures here catch query_canceled, as real ones do to clean up:
# a stopped run may not be cancelled by its cancel alone.  Every procedure
# commits a tick with its worker's pid, its term and what am_leader() says,
# so overlap is measured on the server clock.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('onerun', conf => "leader_election.database = 'postgres'\n");
le_task_role($node, 'app');
$node->safe_psql('postgres', q{
CREATE TABLE public.ticks (pid int, proc text, term bigint, leader boolean,
                           at timestamptz DEFAULT clock_timestamp());
GRANT INSERT, SELECT ON public.ticks TO app;
-- Ticks every 50 ms and swallows every cancel.
CREATE PROCEDURE public.stubborn(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    INSERT INTO public.ticks (pid, proc, term, leader)
      VALUES (pg_backend_pid(), 'stubborn', term, am_leader('job'));
    COMMIT;
    BEGIN
      PERFORM pg_sleep(0.05);
    EXCEPTION WHEN query_canceled THEN
      NULL;
    END;
  END LOOP;
END $$;
-- Ticks every 50 ms; after a cancel it cleans up for a second, then ends.
CREATE PROCEDURE public.tidy(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    INSERT INTO public.ticks (pid, proc, term, leader)
      VALUES (pg_backend_pid(), 'tidy', term, am_leader('job2'));
    COMMIT;
    BEGIN
      PERFORM pg_sleep(0.05);
    EXCEPTION WHEN query_canceled THEN
      PERFORM pg_sleep(1);
      INSERT INTO public.ticks (pid, proc, term, leader)
        VALUES (pg_backend_pid(), 'tidy cleanup', term, am_leader('job2'));
      RETURN;
    END;
  END LOOP;
END $$;
CREATE PROCEDURE public.quick(term bigint) LANGUAGE sql AS $$
  INSERT INTO public.ticks (pid, proc, term, leader)
    VALUES (pg_backend_pid(), 'quick', term, am_leader('job3')) $$;
CREATE PROCEDURE public.quick2(term bigint) LANGUAGE sql AS $$
  INSERT INTO public.ticks (pid, proc, term, leader)
    VALUES (pg_backend_pid(), 'quick2', term, am_leader('job3')) $$;
ALTER PROCEDURE public.stubborn(bigint) OWNER TO app;
ALTER PROCEDURE public.tidy(bigint) OWNER TO app;
ALTER PROCEDURE public.quick(bigint) OWNER TO app;
ALTER PROCEDURE public.quick2(bigint) OWNER TO app;
});

# Overlap of two workers' ticks of one procedure, in ms (<= 0: none).
sub overlap_ms
{
	my ($proc, $old, $new) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT round(extract(epoch FROM
		  (SELECT max(at) FROM public.ticks WHERE pid = $old AND proc LIKE '$proc%') -
		  (SELECT min(at) FROM public.ticks WHERE pid = $new AND proc LIKE '$proc%')) * 1000)});
}

# --- unregister + register while a run that swallows cancels is going ---
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('job', 'public.stubborn(bigint)', '1 hour', '3 seconds')});
ok(le_poll($node, q{SELECT count(DISTINCT pid) = 1 AND count(*) >= 5 FROM public.ticks
	WHERE proc = 'stubborn'}), 'the first run ticks');
my $old = $node->safe_psql('postgres', q{SELECT min(pid) FROM public.ticks WHERE proc = 'stubborn'});
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.unregister_task('job');
	SELECT leader_election.register_task('job', 'public.stubborn(bigint)', '1 hour', '4 seconds')});
ok(le_poll($node, qq{SELECT count(*) >= 20 FROM public.ticks
	WHERE proc = 'stubborn' AND pid <> $old}, 't', 60), 'the re-registered task runs');
my $new = $node->safe_psql('postgres', qq{SELECT min(pid) FROM public.ticks
	WHERE proc = 'stubborn' AND pid <> $old});
my $ov = overlap_ms('stubborn', $old, $new);
note("re-register, cancel swallowed: overlap $ov ms (> 0 means two runs at once)");
cmp_ok($ov, '<', 0, 'the old run ended before the new one started');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $old}), '0',
	'the old worker is gone');
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.ticks WHERE proc = 'stubborn' AND NOT leader}),
	'0', 'every tick of either run was made as leader');
is($node->safe_psql('postgres', qq{SELECT (SELECT min(term) FROM public.ticks WHERE pid = $new) >
	(SELECT max(term) FROM public.ticks WHERE pid = $old)}), 't',
	'the new run has a later term than the old one: fences tell them apart');
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.unregister_task('job')});

# --- a run that cleans up for a second after its cancel; its worker's exit
# must not release the next run's lease ---
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('job2', 'public.tidy(bigint)', '1 hour', '3 seconds')});
ok(le_poll($node, q{SELECT count(*) >= 5 FROM public.ticks WHERE proc = 'tidy'}), 'tidy ticks');
$old = $node->safe_psql('postgres', q{SELECT min(pid) FROM public.ticks WHERE proc = 'tidy'});
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.unregister_task('job2');
	SELECT leader_election.register_task('job2', 'public.tidy(bigint)', '1 hour', '3 seconds')});
ok(le_poll($node, qq{SELECT count(*) >= 40 FROM public.ticks
	WHERE proc = 'tidy' AND pid <> $old}, 't', 60), 'the re-registered tidy task runs for 2 s');
$new = $node->safe_psql('postgres', qq{SELECT min(pid) FROM public.ticks
	WHERE proc = 'tidy' AND pid <> $old});
$ov = overlap_ms('tidy', $old, $new);
note("re-register, 1 s cleanup: overlap $ov ms");
cmp_ok($ov, '<', 0, 'the cleanup ended before the new run started');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM public.ticks WHERE pid = $new AND NOT leader}),
	'0', 'the new run stayed leader: the old worker did not release its lease');
is($node->safe_psql('postgres', q{SELECT holder LIKE 'task-runner:%' AND expires_at > now()
	FROM leader_election.leases WHERE name = 'job2'}), 't', 'the lease is the runner\'s');
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.unregister_task('job2')});

# --- alter_task changes schedule, ttl and procedure in place ---
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('job3', 'public.quick(bigint)', '1 second', '3 seconds')});
ok(le_poll($node, q{SELECT count(*) >= 2 FROM public.ticks WHERE proc = 'quick'}), 'quick runs');
is($node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.alter_task('job3', procedure => 'public.quick2(bigint)',
	                                  run_every => '2 seconds', ttl => '7 seconds')}),
	't', 'alter_task returns true');
is($node->safe_psql('postgres', q{SELECT procedure::text || ' ' || run_every || ' ' || ttl
	FROM leader_election.tasks WHERE name = 'job3'}),
	'public.quick2(bigint) 00:00:02 00:00:07', 'the task row is changed');
ok(le_poll($node, q{SELECT count(*) >= 2 FROM public.ticks WHERE proc = 'quick2'}),
	'the new procedure runs');
ok(le_poll($node, q{SELECT expires_at - renewed_at = interval '7 seconds'
	FROM leader_election.leases WHERE name = 'job3'}), 'with the new ttl');
my $gap = $node->safe_psql('postgres', q{SELECT min(d) FROM (SELECT extract(epoch FROM
	at - lag(at) OVER (ORDER BY at)) AS d FROM public.ticks WHERE proc = 'quick2') s});
cmp_ok($gap, '>=', 1.9, "and the new schedule (shortest gap $gap s)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
	WHERE application_name = 'leader_election task job3'}), '1', 'one worker for the task');
is(le_sqlstate($node, q{SELECT leader_election.alter_task('job3', ttl => '0 seconds')}), '22023',
	'alter_task checks its values like register_task');
is(le_sqlstate($node, q{SET ROLE app; SELECT leader_election.alter_task('job3', procedure => 'pg_catalog.now()')}),
	'42809', 'and refuses a function');
le_task_role($node, 'other');
is(le_sqlstate($node, q{SET ROLE other; SELECT leader_election.alter_task('job3', ttl => '5 seconds')}),
	'42501', 'another role may not alter the task');
is($node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.alter_task('nosuch', ttl => '5 seconds')}),
	'f', 'false for a task that does not exist');

$node->stop;
done_testing();
