# 108_task_other_roles.pl: one role's locks never stall the runner for the
# others (task_runner.h, "Locks").
#
# Role a holds a row lock on its own task (an enable_task() in a
# transaction left open) while its procedure is dropped, so the runner
# wants to disable that task and cannot write its row.  Meanwhile role b's
# run, ten times longer than its ttl, must keep its lease (renewals never
# wait behind the scan), and a task registered by role c meanwhile must be
# picked up and run.  Then a holds the writer lock of its own running task's
# lease in an open transaction: the launcher renews without waiting for it.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = le_node('roles', conf => "leader_election.database = 'postgres'\n");
le_task_role($node, $_) for qw(a b c);
$node->safe_psql('postgres', q{
CREATE TABLE public.ticks (who text, term bigint, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.ticks TO PUBLIC;
CREATE PROCEDURE public.pa() LANGUAGE sql AS $$ INSERT INTO public.ticks (who) VALUES ('a') $$;
CREATE PROCEDURE public.pb(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. 300 LOOP
    INSERT INTO public.ticks (who, term) VALUES ('b', term);
    COMMIT;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
CREATE PROCEDURE public.pc() LANGUAGE sql AS $$ INSERT INTO public.ticks (who) VALUES ('c') $$;
ALTER PROCEDURE public.pa() OWNER TO a;
ALTER PROCEDURE public.pb(bigint) OWNER TO b;
ALTER PROCEDURE public.pc() OWNER TO c;
});
$node->safe_psql('postgres', q{SET ROLE a;
	SELECT leader_election.register_task('ta', 'public.pa()', '1 hour', '3 seconds')});
$node->safe_psql('postgres', q{SET ROLE b;
	SELECT leader_election.register_task('tb', 'public.pb(bigint)', '1 hour', '3 seconds')});
ok(le_poll($node, q{SELECT count(*) >= 3 FROM public.ticks WHERE who = 'b'}), 'b\'s long run is going');
ok(le_poll($node, q{SELECT count(*) FROM public.ticks WHERE who = 'a'}, '1'), 'a\'s task ran');
my $term = $node->safe_psql('postgres', q{SELECT max(term) FROM public.ticks WHERE who = 'b'});

# a locks its own task row and leaves the transaction open; its procedure goes.
my $sa = le_session($node);
$sa->query_safe(q{SET ROLE a});
$sa->query_safe(q{BEGIN});
$sa->query_safe(q{SELECT leader_election.enable_task('ta')});
$node->safe_psql('postgres', q{DROP PROCEDURE public.pa()});
sleep(1);
$node->safe_psql('postgres', q{SET ROLE c;
	SELECT leader_election.register_task('tc', 'public.pc()', '1 hour', '3 seconds')});
ok(le_poll($node, q{SELECT count(*) FROM public.ticks WHERE who = 'c'}, '1', 20),
	'c\'s new task is picked up and runs while a holds its lock');
# 4 ttl of b's run under a's lock.
sleep(12);
is($node->safe_psql('postgres', q{SELECT status FROM leader_election.task_runs
	WHERE task_name = 'tb' ORDER BY id DESC LIMIT 1}), 'running', 'b\'s run is still going');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT term) || ' ' || max(term) FROM public.ticks WHERE who = 'b'}),
	"1 $term", 'in its first term: its lease was renewed all along');
ok($node->safe_psql('postgres', q{SELECT max(at) > clock_timestamp() - interval '1 s'
	FROM public.ticks WHERE who = 'b'}) eq 't', 'and it still ticks');
is($node->safe_psql('postgres', q{SELECT enabled FROM leader_election.tasks WHERE name = 'ta'}),
	't', 'a\'s task row could not be written yet');
$sa->query_safe(q{COMMIT});
ok(le_poll($node, q{SELECT NOT enabled AND disabled_reason LIKE '%no longer exists%'
	FROM leader_election.tasks WHERE name = 'ta'}, 't', 20),
	'once a lets go, its task is disabled with the reason');
le_quit($sa);

# a holds the writer lock of its own running task's lease: it renews that
# lease under the runner's holder name (public: leader_election.leaders
# shows it) in a transaction it leaves open.  The launcher must not wait
# for that lock when it renews a's task (it tries again later, and a's run
# is a's problem); on the code before it waited up to 200 ms per renewal,
# and with a few such tasks one role made the launcher too late for other
# roles' renewals.  Sampled: the launcher never has a lock it waits for.
$node->safe_psql('postgres', q{
CREATE PROCEDURE public.pa2() LANGUAGE plpgsql AS $$
BEGIN LOOP PERFORM pg_sleep(0.1); END LOOP; END $$;
ALTER PROCEDURE public.pa2() OWNER TO a;
SET ROLE a;
SELECT leader_election.register_task('te', 'public.pa2()', '1 hour', '1 second');
});
ok(le_poll($node, q{SELECT count(*) FROM leader_election.task_runs
	WHERE task_name = 'te' AND status = 'running'}, '1'), 'a\'s endless task runs');
my $runner = $node->safe_psql('postgres', q{SELECT holder FROM leader_election.leaders WHERE name = 'te'});
my $sl = le_session($node);
$sl->query_safe(q{SET ROLE a});
$sl->query_safe(q{BEGIN});
is($sl->query_safe(qq{SELECT try_acquire_leader('te', '1 second', '$runner')}), 't',
	'a renews its task\'s lease under the runner\'s name and keeps the transaction open');
my $waits = 0;
for (1 .. 60)
{
	$waits += $node->safe_psql('postgres', q{SELECT count(*) FROM pg_locks AS l
		JOIN pg_stat_activity AS s ON s.pid = l.pid
		WHERE s.backend_type = 'leader_election launcher' AND NOT l.granted});
	usleep(50_000);
}
is($waits, 0, 'the launcher never waited for a lock (60 samples over 3 s)');
$sl->query_safe(q{ROLLBACK});
le_quit($sl);
$node->stop;
done_testing();
