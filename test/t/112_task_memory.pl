# 112_task_memory.pl: a task worker's memory stays flat from run to run
# (task_worker.c: every run's allocations live in the tick's context).
#
# TopMemoryContext of the worker is measured with
# pg_log_backend_memory_contexts() after 4 runs and again after 24; it must
# not grow by more than a block between them (1.0 grew by 2 kB per run).
# LE_MEM_RUNS=1000 measures over 1,000 runs instead of 20 (17 minutes).
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $more = $ENV{LE_MEM_RUNS} // 20;
my $node = le_node('memory', conf => "leader_election.database = 'postgres'\n");
le_task_role($node, 'app');
$node->safe_psql('postgres', q{
CREATE PROCEDURE public.noop(term bigint) LANGUAGE plpgsql AS $$ BEGIN PERFORM term; COMMIT; END $$;
ALTER PROCEDURE public.noop(bigint) OWNER TO app;
SET ROLE app;
SELECT leader_election.register_task('mem', 'public.noop(bigint)', '1 second', '5 seconds');
RESET ROLE;
ALTER SYSTEM SET leader_election.task_runs_max = 5000;
SELECT pg_reload_conf();
});

# Bytes used by the worker's TopMemoryContext itself, and the grand total.
sub worker_memory
{
	my ($pid) = @_;
	my $at = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	my ($top, $total);
	le_wait_until(sub {
		my $log = slurp_file($node->logfile, $at);
		($top) = $log =~ /\[$pid\][^\n]*level: 0; TopMemoryContext: \d+ total in \d+ blocks; \d+ free \(\d+ chunks\); (\d+) used/;
		($top) = $log =~ /level: 0; TopMemoryContext: \d+ total in \d+ blocks; \d+ free \(\d+ chunks\); (\d+) used/
		  unless defined $top;
		($total) = $log =~ /Grand total: \d+ bytes in \d+ blocks; \d+ free \(\d+ chunks\); (\d+) used/;
		return defined $top && defined $total;
	}, 30);
	return ($top, $total);
}

sub runs
{
	return $node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs
		WHERE task_name = 'mem' AND status = 'succeeded'});
}

ok(le_poll($node, q{SELECT count(*) >= 4 FROM leader_election.task_runs
	WHERE task_name = 'mem' AND status = 'succeeded'}), 'four runs');
my $pid = le_worker_pid($node, 'mem');
my $n1 = runs();
my ($top1, $total1) = worker_memory($pid);
ok(le_poll($node, qq{SELECT count(*) >= $n1 + $more FROM leader_election.task_runs
	WHERE task_name = 'mem' AND status = 'succeeded'}, 't', $more * 1.5 + 60), "$more more runs");
my $n2 = runs();
my ($top2, $total2) = worker_memory($pid);
is(le_worker_pid($node, 'mem'), $pid, 'all by the same worker');
my $per_run = ($top2 - $top1) / ($n2 - $n1);
note(sprintf('worker TopMemoryContext: %d bytes used after %d runs, %d after %d (%.0f bytes per run); '
	. 'all contexts: %d -> %d', $top1, $n1, $top2, $n2, $per_run, $total1, $total2));
cmp_ok($top2 - $top1, '<=', 1024, 'TopMemoryContext does not grow from run to run');
cmp_ok($total2 - $total1, '<=', 8192, 'nor does the worker\'s memory as a whole');
$node->stop;
done_testing();
