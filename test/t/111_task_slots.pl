# 111_task_slots.pl: tasks that cannot get a worker say so, per task, and
# the log says it once (task_runner.h, "Slots").
#
# First node: max_worker_processes leaves room for one task worker only, so
# of three tasks two wait for a background worker.  Second node:
# max_task_workers = 1 and two tasks, so one waits for a task worker slot.
# Each task shows its state in leader_election.tasks.runner_state, and the
# log has one line per waiting task, not one a second.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub setup
{
	my ($node, @tasks) = @_;
	le_task_role($node, 'app');
	$node->safe_psql('postgres', q{
CREATE PROCEDURE public.idle() LANGUAGE sql AS 'SELECT 1';
ALTER PROCEDURE public.idle() OWNER TO app;});
	$node->safe_psql('postgres', qq{SET ROLE app;
		SELECT leader_election.register_task('$_', 'public.idle()', '1 hour', '5 seconds')})
	  for @tasks;
	return;
}

sub states
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{SELECT string_agg(name || ': ' || coalesce(runner_state, '-'), ', '
		ORDER BY name) FROM leader_election.tasks});
}

sub count_log
{
	my ($node, $re) = @_;
	my $n = () = slurp_file($node->logfile) =~ /$re/g;
	return $n;
}

# Background workers: the launcher, the logical replication launcher and
# one task worker.
my $node = le_node('bgw', conf => "leader_election.database = 'postgres'\n"
	. "max_worker_processes = 3\nmax_parallel_workers = 0\n");
setup($node, qw(s1 s2 s3));
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leader_election task'}, '1'),
	'one task worker runs');
my $want = 's1: worker started, s2: waiting for a background worker (max_worker_processes), '
  . 's3: waiting for a background worker (max_worker_processes)';
ok(le_poll($node, q{SELECT string_agg(name || ': ' || coalesce(runner_state, '-'), ', '
	ORDER BY name) FROM leader_election.tasks}, $want), 'each task shows its state')
  or diag(states($node));
sleep(5);
for my $t (qw(s2 s3))
{
	my $n = count_log($node, qr/task "$t" waits for a background worker/);
	is($n, 1, "the log says once that $t waits for a background worker");
}
my $tries = count_log($node, qr/could not start a worker/);
cmp_ok($tries, '<=', 1, "at most one failed start logged ($tries)");

# The worker slot frees up: the next task gets it.
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.unregister_task('s1')});
ok(le_poll($node, q{SELECT string_agg(name, ',') FROM leader_election.tasks
	WHERE runner_state = 'worker started'}, 's2'), 'the next task gets the worker');
$node->stop;

my $node2 = le_node('slots', conf => "leader_election.database = 'postgres'\n"
	. "leader_election.max_task_workers = 1\n");
setup($node2, qw(t1 t2));
ok(le_poll($node2, q{SELECT string_agg(name || ': ' || coalesce(runner_state, '-'), ', '
	ORDER BY name) FROM leader_election.tasks},
	't1: worker started, t2: waiting for a task worker slot (leader_election.max_task_workers = 1)'),
	'a task beyond max_task_workers shows that it waits') or diag(states($node2));
sleep(3);
is(count_log($node2, qr/task "t2" waits for a task worker slot/), 1, 'and the log says so once');
$node2->stop;
done_testing();
