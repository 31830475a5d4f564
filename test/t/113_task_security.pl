# 113_task_security.pl: the task runner against a hostile tenant (issue
# 12, item 5; README, "Threat model").  Each part failed on the runner
# before the fix:
#
#  (1) Slots: one role's idle tasks took every task worker slot, and
#      another role's task never ran.  With
#      leader_election.max_task_workers_per_role = 1 the other role gets a
#      slot, and the task beyond the quota says why it waits.  Without it,
#      a free slot goes to the role with the fewest workers.
#  (2) Names: register_task claims the task's lease name (no other role can
#      take it before the first run); a name handed to another role later
#      disables the task with the reason, instead of a worker that dies on
#      every campaign.
#  (3) allow_superuser_tasks = off: a member of a superuser role (SET ROLE
#      inside the procedure) may neither register nor run a task.
#  (4) The task's owner must have the privileges of the procedure's owner,
#      who could otherwise change what the task does.
#  (5) The procedure is called by its OID: an overload with defaults added
#      later does not make the call ambiguous.
#  (6) A role past its VALID UNTIL runs no task.
#  (7) The log's hint to enable a disabled task quotes the name as a
#      literal.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub count_log
{
	my ($node, $re) = @_;
	my $n = () = slurp_file($node->logfile) =~ /$re/g;
	return $n;
}

sub ticks_table
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
CREATE TABLE public.ticks (who text, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.ticks TO PUBLIC;});
	return;
}

# A procedure public.<proc>() that records a tick, owned by owner.
sub tick_proc
{
	my ($node, $proc, $owner) = @_;
	$node->safe_psql('postgres', qq{
CREATE PROCEDURE public.$proc() LANGUAGE sql AS \$\$ INSERT INTO public.ticks (who) VALUES ('$proc') \$\$;
ALTER PROCEDURE public.$proc() OWNER TO $owner;});
	return;
}

sub register
{
	my ($node, $role, $name, $proc, $every) = @_;
	return le_sqlstate($node, qq{SET ROLE $role;
		SELECT leader_election.register_task('$name', '$proc', '$every', '5 seconds')});
}

sub task_row
{
	my ($node, $name) = @_;
	return $node->safe_psql('postgres', qq{SELECT enabled || ' ' || coalesce(disabled_reason, '-')
		|| ' / ' || coalesce(runner_state, '-') FROM leader_election.tasks WHERE name = '$name'});
}

# ==== (1) one role cannot take every slot ====
my $fair = le_node('fair', conf => "leader_election.database = 'postgres'\n"
	. "leader_election.max_task_workers = 2\n"
	. "leader_election.max_task_workers_per_role = 1\n");
ticks_table($fair);
le_task_role($fair, $_) for qw(a b);
tick_proc($fair, 'pa', 'a');
tick_proc($fair, 'pb', 'b');
is(register($fair, 'a', "a$_", 'public.pa()', '1 hour'), '', "a registers a$_") for 1 .. 2;
ok(le_poll($fair, q{SELECT count(*) > 0 FROM public.ticks WHERE who = 'pa'}, 't', 20),
	'a\'s first task ran');
is(register($fair, 'b', 'b1', 'public.pb()', '1 hour'), '', 'b registers b1');
ok(le_poll($fair, q{SELECT count(*) FROM public.ticks WHERE who = 'pb'}, '1', 20),
	'b\'s task gets a slot beside a\'s idle tasks and runs');
ok(le_poll($fair, q{SELECT runner_state FROM leader_election.tasks WHERE name IN ('a1', 'a2')
	AND runner_state LIKE 'waiting%' ORDER BY name LIMIT 1},
	'waiting for a task worker slot (its role has leader_election.max_task_workers_per_role = 1 workers)', 20),
	'a\'s task beyond its quota shows that it waits');
$fair->stop;

# Without a quota, a free slot goes to the role with the fewest workers:
# a2 and b1 become enabled together, and b1 (no worker yet) gets the one
# free slot before a2 (whose role has one), though a2's id is lower.
my $fair0 = le_node('fair0', conf => "leader_election.database = 'postgres'\n"
	. "leader_election.max_task_workers = 2\n");
ticks_table($fair0);
le_task_role($fair0, $_) for qw(a b);
tick_proc($fair0, 'pa', 'a');
tick_proc($fair0, 'pb', 'b');
is(register($fair0, 'a', 'a1', 'public.pa()', '1 hour'), '', 'a registers a1');
ok(le_poll($fair0, q{SELECT count(*) FROM public.ticks WHERE who = 'pa'}, '1', 20), 'a1 ran');
$fair0->safe_psql('postgres', q{BEGIN;
	SET ROLE a; SELECT leader_election.register_task('a2', 'public.pa()', '1 hour', '5 seconds');
	SET ROLE b; SELECT leader_election.register_task('b1', 'public.pb()', '1 hour', '5 seconds');
	COMMIT;});
ok(le_poll($fair0, q{SELECT string_agg(name || ': ' || coalesce(runner_state, '-'), ', ' ORDER BY name)
	FROM leader_election.tasks},
	'a1: worker started, a2: waiting for a task worker slot (leader_election.max_task_workers = 2), b1: worker started', 20),
	'the free slot goes to the role without a worker');
$fair0->stop;

my $node = le_node('sec', conf => "leader_election.database = 'postgres'\n"
	. "leader_election.max_task_workers = 8\nmax_prepared_transactions = 2\n");
ticks_table($node);
le_task_role($node, $_) for qw(a b m p q v);

# ==== (2) register_task claims the name; a name taken later disables ====
tick_proc($node, 'pa', 'a');
is($node->safe_psql('postgres', q{BEGIN;
	SET ROLE a;
	SELECT leader_election.register_task('claimed', 'public.pa()', '1 hour', '5 seconds') > 0;
	RESET ROLE;
	SELECT owner::regrole FROM leader_election.leases WHERE name = 'claimed';
	COMMIT;}), "t\na", 'register_task makes the name its owner\'s before any run');
ok(le_poll($node, q{SELECT count(*) FROM public.ticks WHERE who = 'pa'}, '1', 20), 'the task ran');
is($node->safe_psql('postgres', q{SELECT leader_election.assign_name('claimed', 'b')}), 't',
	'the administrator hands the name to role b');
ok(le_poll($node, q{SELECT NOT enabled AND disabled_reason = 'the lease name "claimed" belongs to another role'
	FROM leader_election.tasks WHERE name = 'claimed'}, 't', 20),
	'the task is disabled with the reason') or diag(task_row($node, 'claimed'));
cmp_ok(count_log($node, qr/worker of task "claimed" exited on an error/), '<=', 1,
	'its worker did not die again and again');
is(le_sqlstate($node, q{SET ROLE a;
	SELECT leader_election.register_task('claimed2', 'public.pa()', '1 hour', '5 seconds');
	RESET ROLE; SELECT leader_election.assign_name('claimed3', 'b');
	SET ROLE a;
	SELECT leader_election.register_task('claimed3', 'public.pa()', '1 hour', '5 seconds')}), '42501',
	'register_task refuses a name another role owns');
# The claim holds the name's writer lock to the transaction's end: a
# prepared transaction would keep it (and the name's holder blocked) past
# the session, so PREPARE is refused as for every other write (0A000).
is(le_sqlstate($node, q{BEGIN; SET ROLE a;
	SELECT leader_election.register_task('prepared', 'public.pa()', '1 hour', '5 seconds');
	PREPARE TRANSACTION 'le_task_prepared'}), '0A000',
	'PREPARE TRANSACTION after register_task is refused');
is($node->safe_psql('postgres', q{SELECT (SELECT count(*) FROM pg_prepared_xacts)
	+ (SELECT count(*) FROM leader_election.tasks WHERE name = 'prepared')}), '0',
	'nothing of it is left: no prepared transaction, no task');
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'le_task_prepared'})
  if $node->safe_psql('postgres', q{SELECT count(*) FROM pg_prepared_xacts}) ne '0';

# ==== (3) members of superuser roles ====
$node->safe_psql('postgres', q{
CREATE ROLE admin_grp SUPERUSER NOLOGIN;
CREATE PROCEDURE public.pm() LANGUAGE plpgsql AS $$
BEGIN
  SET ROLE admin_grp;
  INSERT INTO public.ticks (who) VALUES (current_user);
  RESET ROLE;
END $$;
ALTER PROCEDURE public.pm() OWNER TO m;
GRANT admin_grp TO m;});
is(register($node, 'm', 'tm1', 'public.pm()', '1 second'), '42501',
	'a member of a superuser role cannot register a task');
$node->safe_psql('postgres', q{REVOKE admin_grp FROM m});
is(register($node, 'm', 'tm2', 'public.pm()', '1 second'), '', 'once it is not, it can');
$node->safe_psql('postgres', q{GRANT admin_grp TO m});
ok(le_poll($node, q{SELECT NOT enabled AND disabled_reason LIKE
	'role "m" is a member of superuser role "admin_grp"%' FROM leader_election.tasks WHERE name = 'tm2'},
	't', 20), 'made a member later, its task is disabled with the reason')
  or diag(task_row($node, 'tm2'));
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.ticks WHERE who = 'admin_grp'}), '0',
	'no run ever acted as the superuser role');

# ==== (4) the task's owner must have the procedure owner's privileges ====
tick_proc($node, 'pq', 'q');
is(register($node, 'p', 'tp1', 'public.pq()', '1 hour'), '42501',
	'a task on a procedure another role owns is refused');
tick_proc($node, 'pp', 'p');
is(register($node, 'p', 'tp2', 'public.pp()', '1 second'), '', 'on its own procedure it is accepted');
ok(le_poll($node, q{SELECT count(*) > 0 FROM public.ticks WHERE who = 'pp'}, 't', 20), 'and runs');
$node->safe_psql('postgres', q{ALTER PROCEDURE public.pp() OWNER TO q});
ok(le_poll($node, q{SELECT NOT enabled AND disabled_reason LIKE
	'procedure public.pp() is owned by role "q", which does not have the privileges of role "p"%'
	FROM leader_election.tasks WHERE name = 'tp2'}, 't', 20),
	'once another role owns the procedure, the task is disabled with the reason')
  or diag(task_row($node, 'tp2'));

# A procedure owned by a group the task owner belongs to: the owner has the
# group's privileges, but the group's other members could replace the body
# and run their code as the task owner (review of issue 12).
$node->safe_psql('postgres', q{CREATE ROLE pgrp NOLOGIN; GRANT pgrp TO p, q;});
tick_proc($node, 'pgroup', 'pgrp');
is(register($node, 'p', 'tpg', 'public.pgroup()', '1 hour'), '42501',
	"a task on a procedure owned by a group whose other members lack the owner's privileges is refused");

# ==== (5) called by OID: a later overload changes nothing ====
tick_proc($node, 'pover', 'a');
is(register($node, 'a', 'tover', 'public.pover()', '1 second'), '', 'a registers tover');
ok(le_poll($node, q{SELECT count(*) > 0 FROM public.ticks WHERE who = 'pover'}, 't', 20), 'it runs');
my $since = $node->safe_psql('postgres', q{
CREATE PROCEDURE public.pover(x int DEFAULT 1) LANGUAGE sql AS $$ INSERT INTO public.ticks (who) VALUES ('overload') $$;
ALTER PROCEDURE public.pover(int) OWNER TO a;
SELECT clock_timestamp();});
ok(le_poll($node, qq{SELECT count(*) >= 2 FROM leader_election.task_runs WHERE task_name = 'tover'
	AND status = 'succeeded' AND started_at > '$since'}, 't', 20),
	'after an overload with defaults appears, runs still succeed')
  or diag($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT status || ': ' || coalesce(error, '-'), '; ')
	FROM leader_election.task_runs WHERE task_name = 'tover'}));
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.ticks WHERE who = 'overload'}), '0',
	'and call the registered procedure, not the overload');
$node->safe_psql('postgres', q{SET ROLE a; SELECT leader_election.disable_task('tover')});

# ==== (6) VALID UNTIL ====
tick_proc($node, 'pv', 'v');
is(register($node, 'v', 'tv', 'public.pv()', '1 second'), '', 'v registers tv');
ok(le_poll($node, q{SELECT count(*) > 0 FROM public.ticks WHERE who = 'pv'}, 't', 20), 'it runs');
$node->safe_psql('postgres', q{ALTER ROLE v VALID UNTIL '2000-01-01 00:00:00+00'});
ok(le_poll($node, q{SELECT NOT enabled AND disabled_reason LIKE 'role "v" has expired (VALID UNTIL %'
	FROM leader_election.tasks WHERE name = 'tv'}, 't', 20),
	'once the role has expired, its task is disabled with the reason')
  or diag(task_row($node, 'tv'));
is(register($node, 'v', 'tv2', 'public.pv()', '1 second'), '42501', 'an expired role cannot register');

# ==== (7) the hint quotes the name ====
tick_proc($node, 'pquote', 'a');
$node->safe_psql('postgres', q{SET ROLE a;
	SELECT leader_election.register_task('it''s', 'public.pquote()', '1 hour', '5 seconds')});
ok(le_poll($node, q{SELECT count(*) FROM public.ticks WHERE who = 'pquote'}, '1', 20), 'the task ran');
$node->safe_psql('postgres', q{DROP PROCEDURE public.pquote()});
ok(le_poll($node, q{SELECT NOT enabled FROM leader_election.tasks WHERE name = 'it''s'}, 't', 20),
	'its procedure dropped, the task is disabled');
is(count_log($node, qr/HINT:.*enable_task\('it''s'\)\./), 1, 'with the name quoted as a literal')
  or diag(join "\n", grep { /enable_task/ } split /\n/, slurp_file($node->logfile));

$node->stop;
done_testing();
