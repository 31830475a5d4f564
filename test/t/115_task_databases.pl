# 115_task_databases.pl: the task runner in several databases (issue 15;
# task_runner.h, "Databases").
#
# leader_election.database lists four databases: two with the extension and
# tasks (db1, db2, each with a task of the same name, which are two
# different leases), one without the extension (noext) and one that does
# not exist (nodb).  Each database with the extension runs its own tasks
# under its own launcher; the missing database and the one without the
# extension are said once in the log and do not stop the others; the
# workers share leader_election.max_task_workers; a launcher or a worker
# ended with pg_terminate_backend comes back; a database that refuses
# connections for a while keeps its tasks enabled; a listed database dropped
# WITH (FORCE) leaves the other databases' tasks running and gives its
# task worker slots back (the launcher of the dropped database frees them
# while it waits to connect again); a bad list is
# refused with a clear warning.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('dbs', conf => qq{
leader_election.database = 'db1, db2,nodb , noext'
leader_election.max_task_workers = 3
max_worker_processes = 16
});

for my $db (qw(db1 db2 noext))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
}
$node->safe_psql('postgres', 'CREATE ROLE app LOGIN');

# A task that records where it runs, every second.
sub setup_db
{
	my ($db, @tasks) = @_;
	$node->safe_psql($db, q{
CREATE EXTENSION leader_election;
GRANT USAGE ON SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO app;
CREATE TABLE public.ticks (task text, db text DEFAULT current_database(), pid int DEFAULT pg_backend_pid(),
	at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.ticks TO app;
CREATE PROCEDURE public.tick(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.ticks (task) VALUES (current_setting('application_name'));
END $$;
ALTER PROCEDURE public.tick(bigint) OWNER TO app;
});
	for my $t (@tasks)
	{
		$node->safe_psql($db, qq{SET ROLE app;
			SELECT leader_election.register_task('$t', 'public.tick(bigint)', '1 second', '10 seconds')});
	}
	return;
}

# Ticks in db by a worker other than $not_pid, after now; returns that pid.
sub ticking_worker
{
	my ($db, $task, $not_pid) = @_;
	my $pid = '';
	my $since = $node->safe_psql($db, 'SELECT clock_timestamp()');
	le_wait_until(sub {
		$pid = $node->safe_psql($db, qq{SELECT pid FROM public.ticks
			WHERE task = 'leader_election task $task' AND at > '$since'
			  AND pid <> coalesce(${\ ($not_pid || 'NULL')}, 0)
			ORDER BY at DESC LIMIT 1});
		return $pid ne '';
	});
	return $pid;
}

my $log_at;
setup_db('db1', 'shared', 'only1');
setup_db('db2', 'shared');

my $w1 = ticking_worker('db1', 'shared');
my $w2 = ticking_worker('db2', 'shared');
ok($w1 && $w2, "the task 'shared' runs in db1 (worker $w1) and in db2 (worker $w2)");
isnt($w1, $w2, 'by two workers');
ok(ticking_worker('db1', 'only1'), "db1's other task runs too");
is($node->safe_psql('db2', q{SELECT count(*) FROM public.ticks WHERE db <> 'db2'}), '0',
	"db2's ticks are db2's");
is($node->safe_psql('db1', q{SELECT count(DISTINCT holder) FROM leader_election.history WHERE name = 'shared'}),
	'1', 'db1 has its own lease history for the name');

is($node->safe_psql('postgres', q{SELECT string_agg(datname, ',' ORDER BY datname)
	FROM pg_stat_activity WHERE backend_type = 'leader_election launcher'}),
	'db1,db2,noext', 'one launcher per database that exists');

ok(le_wait_until(sub {
	my $log = slurp_file($node->logfile);
	return $log =~ /database "noext" has no leader_election extension; its tasks are skipped/
	  && $log =~ /the task runner cannot connect to database "nodb"/;
}), 'the database without the extension and the missing one are reported in the log');

# The three workers fill max_task_workers: a task in a third database waits.
setup_db('noext', 'third');
ok(le_poll($node, q{SELECT 1}, '1'), 'noext got the extension');
my $state = '';
ok(le_wait_until(sub {
	$state = $node->safe_psql('noext', q{SELECT runner_state FROM leader_election.tasks WHERE name = 'third'});
	return $state =~ /waiting for a task worker slot/;
}), "the slots are shared: noext's task waits for one ($state)");
my $log = slurp_file($node->logfile);
my $said = () = $log =~ /database "noext" has no leader_election extension/g;
is($said, 1, 'the missing extension was said once');

# Free a slot in db1: noext's task gets it.
$node->safe_psql('db1', q{SET ROLE app; SELECT leader_election.unregister_task('only1')});
ok(ticking_worker('noext', 'third'), "with a slot free, noext's task runs");

# A launcher ended with pg_terminate_backend comes back; the other
# database's worker is not disturbed, and its own database's task runs on.
my $l1 = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher' AND datname = 'db1'});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($l1)");
ok(le_poll($node, qq{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leader_election launcher'
	AND datname = 'db1' AND pid <> $l1}, '1'), 'a terminated launcher comes back');
my $w1b = ticking_worker('db1', 'shared');
ok($w1b, "db1's task runs after its launcher came back (worker $w1b)");
is(ticking_worker('db2', 'shared'), $w2, "db2's worker ran on undisturbed");

# A worker ended with pg_terminate_backend comes back.
$node->safe_psql('postgres', "SELECT pg_terminate_backend($w2)");
my $w2b = ticking_worker('db2', 'shared', $w2);
ok($w2b && $w2b ne $w2, "a terminated worker comes back (worker $w2b)");

# A database that refuses connections for a while does not get its tasks
# disabled: every restart of its worker dies connecting, which is not the
# task's doing (task_runner.h, "Worker deaths"), and once the database takes
# connections again the task runs on.  On the code before, the task was
# disabled after the fifth death, and the sixth never came.
$log_at = -s $node->logfile;
$node->safe_psql('postgres', 'ALTER DATABASE db2 ALLOW_CONNECTIONS false');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($w2b)");
ok(le_wait_until(sub {
	slurp_file($node->logfile, $log_at) =~ /the worker of task "shared" exited on an error \(6 in a row\)/
}, 120), "db2's worker died six times in a row while db2 refused connections");
$node->safe_psql('postgres', 'ALTER DATABASE db2 ALLOW_CONNECTIONS true');
is($node->safe_psql('db2', q{SELECT enabled FROM leader_election.tasks WHERE name = 'shared'}),
	't', "db2's task is still enabled");
$w2b = ticking_worker('db2', 'shared', $w2b);
ok($w2b, "and runs again once db2 takes connections (worker $w2b)");

# A listed database dropped: the others run on, the log says so.
$log_at = -s $node->logfile;
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE db2 WITH (FORCE)');
is($rc, 0, 'DROP DATABASE db2 WITH (FORCE)') or diag($err);
ok(le_wait_until(sub {
	slurp_file($node->logfile, $log_at) =~ /the task runner cannot connect to database "db2"/
}), 'the dropped database is reported');
my $w1c = ticking_worker('db1', 'shared');
ok($w1c, "db1's task still runs (worker $w1c)");
ok(ticking_worker('noext', 'third'), "noext's task still runs");

# The dropped database's slot comes back: db2's launcher can never connect
# again, yet the slot its worker held is freed once that worker is gone, so
# a new task of db1 gets the third of the three slots.
$node->safe_psql('db1', q{SET ROLE app;
	SELECT leader_election.register_task('after_drop', 'public.tick(bigint)', '1 second', '10 seconds')});
ok(ticking_worker('db1', 'after_drop'),
	"the dropped database's task worker slot is reused by db1's new task");
is($node->safe_psql('db1', q{SELECT runner_state FROM leader_election.tasks WHERE name = 'after_drop'}),
	'worker started', 'it has a worker');

# Bad lists: as with any extension setting, the server warns and uses the
# default ('postgres').
$node->stop;
for my $bad (['db1, db1', 'names database "db1" twice'],
	['db1,,db2', 'is not a list of database names'],
	['my db', 'is not a list of database names'],
	['', 'must name at least one database'])
{
	$node->append_conf('postgresql.conf', "leader_election.database = '$bad->[0]'\n");
	$log_at = -s $node->logfile;
	$node->start;
	like(slurp_file($node->logfile, $log_at), qr/WARNING:  leader_election.database \Q$bad->[1]\E/,
		"'$bad->[0]' is refused: it $bad->[1]");
	ok(le_poll($node, q{SELECT string_agg(datname, ',') FROM pg_stat_activity
		WHERE backend_type = 'leader_election launcher'}, 'postgres'), 'the default is used');
	$node->stop;
}

done_testing();
