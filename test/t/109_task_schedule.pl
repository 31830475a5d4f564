# 109_task_schedule.pl: "every run_every, start to start" holds across
# restarts of the worker, the launcher and the server (task_runner.h,
# "Schedule").
#
# An hourly task runs once; then its worker is terminated, the task is
# disabled and enabled, the launcher is cancelled and the server crashes.
# After each, a new worker starts, and the task must not run again before
# its hour is up: the next start comes from the last recorded start.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('schedule', conf => "leader_election.database = 'postgres'\nrestart_after_crash = on\n");
le_task_role($node, 'app');
$node->safe_psql('postgres', q{
CREATE TABLE public.ticks (pid int, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.ticks TO app;
CREATE PROCEDURE public.hourly() LANGUAGE sql AS $$ INSERT INTO public.ticks (pid) VALUES (pg_backend_pid()) $$;
ALTER PROCEDURE public.hourly() OWNER TO app;
SET ROLE app;
SELECT leader_election.register_task('hourly', 'public.hourly()', '1 hour', '5 seconds');
});
ok(le_poll($node, q{SELECT count(*) FROM public.ticks}, '1'), 'the hourly task ran once');

# Wait for a worker other than $old, then give it time to (wrongly) run.
sub new_worker_stays_quiet
{
	my ($old, $what) = @_;
	my $pid = '';
	ok(le_wait_until(sub {
		$pid = le_worker_pid($node, 'hourly');
		return $pid ne '' && $pid ne $old && $node->safe_psql('postgres',
			q{SELECT count(*) FROM leader_election.leases WHERE name = 'hourly'
			  AND holder LIKE 'task-runner:%' AND expires_at > now()}) eq '1';
	}), "$what: a new worker holds the lease");
	sleep(3);
	is($node->safe_psql('postgres', q{SELECT count(*) FROM public.ticks}), '1',
		"$what: and the task does not run again before its hour");
	return $pid;
}

my $pid = le_worker_pid($node, 'hourly');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$pid = new_worker_stays_quiet($pid, 'worker terminated');

$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.disable_task('hourly')});
ok(le_wait_until(sub { le_worker_pid($node, 'hourly') eq '' }), 'disabled: the worker is gone');
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.enable_task('hourly')});
$pid = new_worker_stays_quiet($pid, 'disabled and enabled');

$node->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'});
$pid = new_worker_stays_quiet($pid, 'launcher cancelled');

# A crash: every backend is killed and the server recovers.
kill 'KILL', $pid;
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leader_election launcher'}, '1', 60),
	'the server recovered from the crash');
$pid = new_worker_stays_quiet($pid, 'crash restart');

# A shorter schedule counts from the last start too: the task runs again.
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.alter_task('hourly', run_every => '2 seconds')});
ok(le_poll($node, q{SELECT count(*) >= 3 FROM public.ticks}), 'with run_every 2 s it runs again');
my $gap = $node->safe_psql('postgres', q{SELECT min(d) FROM (SELECT extract(epoch FROM
	at - lag(at) OVER (ORDER BY at)) AS d FROM public.ticks) s});
cmp_ok($gap, '>=', 1.9, "start to start at least run_every apart (shortest gap $gap s)");

$node->stop;
done_testing();
