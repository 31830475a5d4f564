# 102_task_checks.pl: what register_task refuses, and what the runner does
# when a task can no longer run (task_registry.c, le_task_problem).
#
# A dropped procedure, an owner made NOLOGIN, or EXECUTE revoked: the task
# is disabled with a 'skipped' run and a reason, and the runner (launcher and
# the other tasks) carries on.  Users see only their own tasks and runs.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('checks', conf => "leader_election.database = 'postgres'\nleader_election.max_task_workers = 8\nmax_worker_processes = 16\n");

$node->safe_psql('postgres', q{
CREATE TABLE public.hits (task text, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.hits TO PUBLIC;
});
for my $r (qw(a1 a2 a3 a4 a5))
{
	$node->safe_psql('postgres', qq{
CREATE ROLE $r LOGIN;
GRANT USAGE ON SCHEMA leader_election TO $r;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO $r;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO $r;
CREATE PROCEDURE public.p_$r() LANGUAGE sql AS \$\$ INSERT INTO public.hits (task) VALUES ('$r') \$\$;
ALTER PROCEDURE public.p_$r() OWNER TO $r;
});
}
$node->safe_psql('postgres', q{
CREATE FUNCTION public.f() RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE PROCEDURE public.p_text(x text) LANGUAGE sql AS 'SELECT 1';
CREATE PROCEDURE public.p_private() LANGUAGE sql AS 'SELECT 1';
REVOKE EXECUTE ON PROCEDURE public.p_private() FROM PUBLIC;
CREATE PROCEDURE public.p_shared() LANGUAGE sql AS $$ INSERT INTO public.hits (task) VALUES ('a4') $$;
REVOKE EXECUTE ON PROCEDURE public.p_shared() FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE public.p_shared() TO a4;
CREATE ROLE sharers;
GRANT sharers TO a4;
ALTER PROCEDURE public.p_shared() OWNER TO a4;
});

# Registration refuses bad input, one SQLSTATE each.
my %bad = (
	"NULL, 'public.p_a1()', '1s', '2s'" => '22004',
	"'x', NULL, '1s', '2s'" => '22004',
	"'', 'public.p_a1()', '1s', '2s'" => '22023',
	"'x', 'public.p_a1()', '1 month', '2s'" => '22023',
	"'x', 'public.p_a1()', '1s', '0.5s'" => '22023',
	"'x', 'public.f()', '1s', '2s'" => '42809',
	"'x', 'public.p_text(text)', '1s', '2s'" => '42P13',
	"'x', 'public.p_private()', '1s', '2s'" => '42501',);
for my $args (sort keys %bad)
{
	is(le_sqlstate($node, "SET ROLE a1; SELECT leader_election.register_task($args)"),
		$bad{$args}, "register_task($args) fails with $bad{$args}");
}
is(le_sqlstate($node, "SELECT leader_election.register_task('su', 'public.p_a1()', '1s', '2s')"),
	'42501', 'a superuser task is refused while allow_superuser_tasks is off');

for my $r (qw(a1 a2 a3 a5))
{
	$node->safe_psql('postgres', qq{SET ROLE $r;
		SELECT leader_election.register_task('t_$r', 'public.p_$r()', '1 second', '3 seconds')});
}
$node->safe_psql('postgres', q{SET ROLE a4;
	SELECT leader_election.register_task('t_a4', 'public.p_shared()', '1 second', '3 seconds')});
$node->safe_psql('postgres', q{SET ROLE a1; SELECT try_acquire_leader('a1_lease', '1 hour', 'someone')});
is(le_sqlstate($node, "SET ROLE a2; SELECT leader_election.register_task('a1_lease', 'public.p_a2()', '1s', '2s')"),
	'42501', 'a name whose lease belongs to another role is refused');
is(le_sqlstate($node, "SET ROLE a1; SELECT leader_election.register_task('t_a1', 'public.p_a1()', '1s', '2s')"),
	'42710', 'a duplicate name is refused');
is(le_sqlstate($node, "SET ROLE a2; SELECT leader_election.disable_task('t_a1')"),
	'42501', "another role's task cannot be disabled");

ok(le_poll($node, q{SELECT count(DISTINCT task) FROM public.hits}, '5'), 'all five tasks run');
is($node->safe_psql('postgres', q{SELECT procedure FROM leader_election.tasks WHERE name = 't_a5'}),
	'public.p_a5()', 'the task keeps the procedure as its qualified signature');
is($node->safe_psql('postgres', q{SET ROLE a1; SELECT string_agg(DISTINCT name, ',') FROM leader_election.tasks}),
	't_a1', 'a role sees only its own tasks');
is($node->safe_psql('postgres', q{SET ROLE a1; SELECT string_agg(DISTINCT task_name, ',') FROM leader_election.task_runs}),
	't_a1', 'a role sees only its own runs');
my $launcher = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'});

$node->safe_psql('postgres', q{DROP PROCEDURE public.p_a1()});
$node->safe_psql('postgres', q{ALTER ROLE a2 NOLOGIN});
$node->safe_psql('postgres', q{ALTER PROCEDURE public.p_a5() RENAME TO p_a5_renamed});
$node->safe_psql('postgres', q{REVOKE EXECUTE ON PROCEDURE public.p_shared() FROM a4, sharers});

my %why = (
	t_a1 => 'procedure public.p_a1() no longer exists (dropped, or renamed)',
	t_a2 => 'role "a2" cannot log in%',
	t_a4 => 'role "a4" lacks EXECUTE on procedure public.p_shared()%',
	t_a5 => 'procedure public.p_a5() no longer exists%');
for my $t (sort keys %why)
{
	ok(le_poll($node, qq{SELECT NOT enabled AND disabled_reason LIKE '$why{$t}'
		FROM leader_election.tasks WHERE name = '$t'}), "$t disabled with a clear reason");
	ok(le_poll($node, qq{SELECT count(*) > 0 FROM leader_election.task_runs
		WHERE task_name = '$t' AND status = 'skipped' AND error LIKE '$why{$t}'}),
		"$t has a 'skipped' run saying why");
	ok(le_poll($node, qq{SELECT count(*) FROM pg_stat_activity
		WHERE application_name = 'leader_election task $t'}, '0'), "$t has no worker any more");
}
# leader_election.task_runs_max holds for the 'skipped' rows of a task the
# runner disables too: enabling t_a1 again (its procedure is still gone) is
# disabled again at once, four times, and at most 2 rows are kept.  On the
# code before, only a run's end trimmed, and each enable added a row.
$node->safe_psql('postgres', q{ALTER SYSTEM SET leader_election.task_runs_max = 2});
$node->safe_psql('postgres', q{SELECT pg_reload_conf()});
ok(le_poll($node, q{SELECT current_setting('leader_election.task_runs_max')}, '2'),
	'task_runs_max = 2');
for my $round (1 .. 4)
{
	$node->safe_psql('postgres', q{SET ROLE a1; SELECT leader_election.enable_task('t_a1')});
	ok(le_poll($node, q{SELECT NOT enabled FROM leader_election.tasks WHERE name = 't_a1'}),
		"t_a1 enabled again is disabled again ($round)");
}
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 't_a1'}), '<=', 2, "t_a1 keeps at most task_runs_max rows");
$node->safe_psql('postgres', q{ALTER SYSTEM RESET leader_election.task_runs_max});
$node->safe_psql('postgres', q{SELECT pg_reload_conf()});

my $hits = $node->safe_psql('postgres', q{SELECT count(*) FROM public.hits WHERE task = 'a3'});
ok(le_poll($node, qq{SELECT count(*) > $hits FROM public.hits WHERE task = 'a3'}),
	'the healthy task keeps running');
is($node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'}), $launcher, 'the launcher is unaffected');
like(slurp_file($node->logfile), qr/task "t_a2" disabled: role "a2" cannot log in/,
	'the server log says why');

# Fixed and re-enabled, it runs again.
$node->safe_psql('postgres', q{ALTER ROLE a2 LOGIN});
$node->safe_psql('postgres', q{SET ROLE a2; SELECT leader_election.enable_task('t_a2')});
$hits = $node->safe_psql('postgres', q{SELECT count(*) FROM public.hits WHERE task = 'a2'});
ok(le_poll($node, qq{SELECT count(*) > $hits FROM public.hits WHERE task = 'a2'}),
	're-enabled task runs again');

$node->stop;
done_testing();
