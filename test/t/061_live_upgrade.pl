# 061_live_upgrade.pl: upgrading a live 1.0 installation to 1.1.
#
# The way users upgrade: install the new package (the 1.1 library replaces
# the 1.0 one and is preloaded at the next restart), then, whenever they get
# to it, ALTER EXTENSION leader_election UPDATE in each database.  So:
#
#  (a) The 1.1 library, preloaded, serves the 1.0 SQL objects correctly in
#      the window before the update: grants, renewals in the same term,
#      session-bound leases with instant takeover, a waiter woken at once,
#      assert_leader fencing, and the task runner.
#  (b) ALTER EXTENSION UPDATE runs while a session holds a session-bound
#      lease, a candidate waits for it, a named holder renews and a task
#      runs; none of them loses anything: the holder keeps its term, the
#      waiter takes over the moment the holder's session ends, terms stay
#      strictly increasing per name and above every earlier term.
#  (c) The objects after the update are exactly those of a fresh 1.1
#      install: members, definitions, columns, indexes, constraints,
#      triggers, policies, rights, comments and the dump configuration.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $node = PostgreSQL::Test::Cluster->new('live_upgrade');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'leader_election'
leader_election.database = 'postgres'
max_connections = 40
max_worker_processes = 16
});
$node->start;

my $default = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'leader_election'});
plan skip_all => "default_version is $default, not an upgrade from 1.0" if $default eq '1.0';

# A 1.0 installation, with the application's role set up the README's way.
$node->safe_psql('postgres', q{
CREATE EXTENSION leader_election VERSION '1.0';
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO app;
CREATE TABLE public.effects (name text, term bigint, at timestamptz DEFAULT clock_timestamp());
GRANT ALL ON public.effects TO app;
CREATE TABLE public.ticks (term bigint, at timestamptz DEFAULT clock_timestamp());
GRANT ALL ON public.ticks TO app;
CREATE PROCEDURE public.tick(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM assert_leader('ticker', term);
  INSERT INTO public.ticks (term) VALUES (term);
  PERFORM pg_sleep(0.5);   -- a run in flight when the update comes
END $$;
ALTER PROCEDURE public.tick(bigint) OWNER TO app;
});
is($node->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'leader_election'}),
	'1.0', 'the database has the 1.0 objects');

# Every term ever issued, per name, in the order the test saw them.
my %terms;
sub saw_term
{
	my ($name, $term) = @_;
	push @{ $terms{$name} }, $term;
}

# ---- (a) the 1.1 library serving the 1.0 objects -------------------------

my $t = $node->safe_psql('postgres', q{SET ROLE app;
	SELECT (try_acquire_leader('named', '1 hour', 'n1')) AND am_leader('named', 'n1');
	SELECT leader_term('named', 'n1')});
my ($ok, $named_term) = split /\n/, $t;
is($ok, 't', '1.0 objects: a named grant');
saw_term('named', $named_term);
is($node->safe_psql('postgres', q{SET ROLE app;
	SELECT try_acquire_leader('named', '1 hour', 'n1'), leader_term('named', 'n1')}),
	"t|$named_term", '1.0 objects: a renewal keeps the term');
is($node->safe_psql('postgres', q{SET ROLE app;
	SELECT try_acquire_leader('named', '1 hour', 'n2')}),
	'f', '1.0 objects: another holder loses');
is(le_sqlstate($node, qq{SET ROLE app; BEGIN;
	SELECT assert_leader('named', $named_term, 'n2'); COMMIT;}),
	'LE001', '1.0 objects: assert_leader fences another holder');
is($node->safe_psql('postgres', qq{SET ROLE app; BEGIN;
	SELECT FROM assert_leader('named', $named_term, 'n1');
	INSERT INTO public.effects VALUES ('named', $named_term); COMMIT;
	SELECT count(*) FROM public.effects}), '1',
	'1.0 objects: a fenced write by the holder commits');

# Session-bound lease with a waiter woken the moment the holder ends.
my $h1 = le_session($node);
$h1->query_safe('SET ROLE app');
is($h1->query_safe(q{SELECT try_acquire_leader('svc', '1 hour')}), 't',
	'1.0 objects: a session-bound grant');
my $svc_term = $h1->query_safe(q{SELECT leader_term('svc')});
saw_term('svc', $svc_term);
my $w1 = le_session($node);
$w1->query_safe('SET ROLE app');
le_start_wait($node, $w1,
	q{SELECT wait_for_leadership('svc', '1 hour', '60 s', 'w1'), leader_term('svc', 'w1')});
my $since = le_now($node);
$h1->quit;
my ($out) = le_collect($w1, 60);
ok(defined $out && $out =~ /^t\|(\d+)$/, '1.0 objects: the waiter takes over when the holder ends')
  or diag($out // 'no answer');
saw_term('svc', $1) if defined $out && $out =~ /^t\|(\d+)$/;
cmp_ok(le_wake_ms($node, 'svc', $since), '<', 5000, '... at once, not after the ttl');

# The task runner over the 1.0 tasks table.
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('ticker', 'public.tick(bigint)', '1 second', '10 s')});
ok(le_poll($node, q{SELECT count(DISTINCT at) >= 2 FROM public.ticks}),
	'1.0 objects: the task runs, fenced by its term');

# ---- (b) ALTER EXTENSION UPDATE while everything is in use ---------------

# A session-bound holder (kept open across the update) and a waiter.
my $h2 = le_session($node);
$h2->query_safe('SET ROLE app');
is($h2->query_safe(q{SELECT try_acquire_leader('svc2', '1 hour')}), 't',
	'before the update: session-bound holder of svc2');
my $svc2_term = $h2->query_safe(q{SELECT leader_term('svc2')});
saw_term('svc2', $svc2_term);
my $w2 = le_session($node);
$w2->query_safe('SET ROLE app');
le_start_wait($node, $w2,
	q{SELECT wait_for_leadership('svc2', '1 hour', '120 s', 'w2'), leader_term('svc2', 'w2')});
my $ticks_before = $node->safe_psql('postgres', 'SELECT count(*) FROM public.ticks');

# A transaction that read the leaders view stays open across the start of
# the update (anyone may read the view; a monitoring session idle in
# transaction does).  The update cannot lock the view until it ends; until
# then it must neither deadlock with the task's runs nor make other
# sessions' calls queue behind it.
my $reader = le_session($node);
$reader->query_safe('BEGIN');
$reader->query_safe('SELECT count(*) FROM leader_election.leaders');
ok(le_poll($node, q{SELECT count(*) > 0 FROM leader_election.task_runs WHERE status = 'running'}),
	'a task run is in flight');
my $updater = le_session($node);
le_send($updater, 'ALTER EXTENSION leader_election UPDATE');
my $stalls = 0;
for my $i (1 .. 8)
{
	my $t = time();
	my $state = le_sqlstate($node, q{SET statement_timeout = '1s'; SET ROLE app;
		SELECT try_acquire_leader('named', '1 hour', 'n1')});
	$stalls++ if $state ne '';
	diag("renewal $i during the pending update: " . ($state eq '' ? 'ok' : $state))
	  if $state ne '';
	Time::HiRes::usleep(400_000);
}
is($stalls, 0, 'while the update waits for the open transaction, renewals do not queue behind it');
ok(!le_finished($updater), 'the update waits for the open transaction');
$reader->query_safe('COMMIT');
my ($upd_out, $upd_err) = le_collect($updater, 60);
is($upd_err // 'no answer', '', 'ALTER EXTENSION UPDATE succeeds once the transaction ends');
$reader->quit;
$updater->quit;
is($node->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'leader_election'}),
	$default, "updated to $default");

# The holder still leads in the same term; the waiter is still waiting.
is($h2->query_safe(q{SELECT am_leader('svc2'), try_acquire_leader('svc2', '1 hour'), leader_term('svc2')}),
	"t|t|$svc2_term", 'after the update: the session-bound holder keeps its lease and term');
ok(!le_finished($w2), 'after the update: the waiter still waits');
is($node->safe_psql('postgres', q{SET ROLE app;
	SELECT try_acquire_leader('named', '1 hour', 'n1'), leader_term('named', 'n1')}),
	"t|$named_term", 'after the update: the named holder renews in the same term');
is(le_sqlstate($node, qq{SET ROLE app; BEGIN;
	SELECT assert_leader('named', $named_term, 'n2'); COMMIT;}),
	'LE001', 'after the update: fencing still holds');

# The holder's session ends: the waiter takes over at once, in a new term.
$since = le_now($node);
$h2->quit;
($out) = le_collect($w2, 60);
ok(defined $out && $out =~ /^t\|(\d+)$/, 'after the update: the waiter takes over')
  or diag($out // 'no answer');
saw_term('svc2', $1) if defined $out && $out =~ /^t\|(\d+)$/;
cmp_ok(le_wake_ms($node, 'svc2', $since), '<', 5000, '... at once');
$w1->quit;
$w2->quit;

# A takeover of the named lease after the update gets a larger term.
$node->safe_psql('postgres', q{SET ROLE app; SELECT release_leader('named', 'n1')});
is($node->safe_psql('postgres', q{SET ROLE app;
	SELECT try_acquire_leader('named', '1 hour', 'n3')}), 't', 'a new holder after the update');
saw_term('named', $node->safe_psql('postgres', q{SET ROLE app; SELECT leader_term('named', 'n3')}));

# The task goes on running, fenced, after the update.
ok(le_poll($node, qq{SELECT count(*) > $ticks_before + 1 FROM public.ticks
	WHERE at > (SELECT max(at) FROM public.ticks) - interval '1 hour'}),
	'after the update: the task keeps running');
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs
	WHERE status NOT IN ('succeeded', 'running')}), '0',
	'no run of the task failed or was cancelled across the update (no deadlock)');
# The column the update added says what the runner does with the task (on
# the code before it stayed NULL: the runner took its state as written
# while the 1.0 table had no such column).
ok(le_poll($node, q{SELECT runner_state FROM leader_election.tasks WHERE name = 'ticker'},
		'worker started'),
	'after the update: tasks.runner_state says the task has a worker');
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.ticks k
	WHERE NOT EXISTS (SELECT FROM leader_election.history h
	                   WHERE h.name = 'ticker' AND h.term = k.term)}),
	'0', 'every tick carries a term the runner held');

# Terms per name strictly increase, and every term after the update is
# above every term issued before it (the 1.0 counter carried over).
for my $name (sort keys %terms)
{
	my @seq = @{ $terms{$name} };
	my $increasing = 1;
	$increasing &&= $seq[$_] > $seq[ $_ - 1 ] for 1 .. $#seq;
	ok($increasing, "terms of $name strictly increase: @seq");
}
is($node->safe_psql('postgres', qq{SELECT count(*) FROM leader_election.history
	WHERE name = 'named' AND term > $named_term}), '1',
	'history has the new term of named');
my $max_before = $node->safe_psql('postgres',
	qq{SELECT max(t) FROM unnest(ARRAY[$named_term, $svc_term, $svc2_term]) t});
$node->safe_psql('postgres', q{SET ROLE app; SELECT try_acquire_leader('fresh-name', '1 hour', 'f1')});
cmp_ok($node->safe_psql('postgres', q{SET ROLE app; SELECT leader_term('fresh-name', 'f1')}),
	'>', $max_before, 'a name first used after the update gets a term above every earlier one');

# ---- (c) the same objects as a fresh install -----------------------------

# One line per fact about every member object and what hangs off it.
my $describe = q{
WITH ext AS (SELECT oid, extconfig, extcondition FROM pg_extension WHERE extname = 'leader_election'),
members AS (
  SELECT classid, objid, objsubid FROM pg_depend, ext
   WHERE refclassid = 'pg_extension'::regclass AND refobjid = ext.oid AND deptype = 'e'),
rels AS (SELECT objid AS oid FROM members WHERE classid = 'pg_class'::regclass)
SELECT line FROM (
  -- members (row types of tables differ between majors: left out)
  SELECT 'member ' || pg_describe_object(classid, objid, objsubid) AS line FROM members
   WHERE NOT (classid = 'pg_type'::regclass AND EXISTS
              (SELECT FROM pg_type t WHERE t.oid = objid
                  AND (t.typrelid <> 0 OR EXISTS (SELECT FROM pg_type e
                       WHERE e.oid = t.typelem AND e.typrelid <> 0))))
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure || ' ' || pg_get_functiondef(p.oid)
         || ' acl ' || coalesce(p.proacl::text, 'default')
         || ' comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '-')
    FROM pg_proc p JOIN members m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid
   WHERE p.prokind <> 'a'
  UNION ALL
  SELECT 'relation ' || c.oid::regclass || ' kind ' || c.relkind::text
         || ' persistence ' || c.relpersistence::text || ' rls ' || c.relrowsecurity::text
         || ' force ' || c.relforcerowsecurity::text || ' owner ' || c.relowner::regrole
         || ' acl ' || coalesce(c.relacl::text, 'default')
         || ' options ' || coalesce(c.reloptions::text, '-')
         || ' comment ' || coalesce(obj_description(c.oid, 'pg_class'), '-')
         || ' view ' || coalesce(pg_get_viewdef(c.oid), '-')
    FROM pg_class c JOIN rels r USING (oid)
  UNION ALL
  SELECT 'column ' || a.attrelid::regclass || '.' || a.attname || ' #' || a.attnum
         || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' notnull ' || a.attnotnull || ' collation ' || a.attcollation
         || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
         || ' identity ' || a.attidentity::text || ' generated ' || a.attgenerated::text
         || ' acl ' || coalesce(a.attacl::text, 'default')
         || ' comment ' || coalesce(col_description(a.attrelid, a.attnum), '-')
    FROM pg_attribute a JOIN rels r ON r.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
         || ' comment ' || coalesce(obj_description(i.indexrelid, 'pg_class'), '-')
    FROM pg_index i JOIN rels r ON r.oid = i.indrelid
  UNION ALL
  SELECT 'constraint ' || co.conrelid::regclass || ' ' || co.conname || ' '
         || pg_get_constraintdef(co.oid)
    FROM pg_constraint co JOIN rels r ON r.oid = co.conrelid
  UNION ALL
  SELECT 'trigger ' || pg_get_triggerdef(tg.oid) || ' enabled ' || tg.tgenabled::text
    FROM pg_trigger tg JOIN rels r ON r.oid = tg.tgrelid
  UNION ALL
  SELECT 'policy ' || po.polrelid::regclass || ' ' || po.polname || ' ' || po.polcmd::text
         || ' ' || coalesce(pg_get_expr(po.polqual, po.polrelid), '-')
         || ' ' || coalesce(pg_get_expr(po.polwithcheck, po.polrelid), '-')
    FROM pg_policy po JOIN rels r ON r.oid = po.polrelid
  UNION ALL
  SELECT 'sequence ' || s.seqrelid::regclass || ' ' || format_type(s.seqtypid, NULL)
         || ' ' || s.seqstart || ' ' || s.seqincrement || ' ' || s.seqmax || ' '
         || s.seqmin || ' ' || s.seqcache || ' ' || s.seqcycle
    FROM pg_sequence s JOIN rels r ON r.oid = s.seqrelid
  UNION ALL
  SELECT 'dumped ' || cfg::regclass || ' where ' || coalesce(cond, '-')
    FROM ext, unnest(ext.extconfig, ext.extcondition) AS u(cfg, cond)
  UNION ALL
  SELECT 'schema ' || n.nspname || ' owner ' || n.nspowner::regrole
         || ' acl ' || coalesce(n.nspacl::text, 'default')
         || ' comment ' || coalesce(obj_description(n.oid, 'pg_namespace'), '-')
    FROM pg_namespace n WHERE n.nspname = 'leader_election'
  UNION ALL
  SELECT 'default acl ' || d.defaclrole::regrole || ' ' || d.defaclobjtype::text || ' '
         || d.defaclacl::text
    FROM pg_default_acl d JOIN pg_namespace n ON n.oid = d.defaclnamespace
   WHERE n.nspname = 'leader_election'
) facts ORDER BY line};

# The application's grants (given with GRANT ... ON ALL FUNCTIONS before the
# update) are the user's, not the extension's: compare without them.  (They
# do not extend to functions the update adds; the README says to grant again
# after an update.)
my $strip = q{REVOKE ALL ON ALL FUNCTIONS IN SCHEMA leader_election, public FROM app;
	REVOKE ALL ON SCHEMA leader_election FROM app;};

$node->safe_psql('postgres', q{CREATE DATABASE fresh});
$node->safe_psql('fresh', q{CREATE EXTENSION leader_election});
my $fresh = $node->safe_psql('fresh', $describe);
$node->safe_psql('postgres', $strip);
my $upgraded = $node->safe_psql('postgres', $describe);
my @f = split /\n/, $fresh;
my @u = split /\n/, $upgraded;
my %in_f = map { $_ => 1 } @f;
my %in_u = map { $_ => 1 } @u;
my @missing = grep { !$in_u{$_} } @f;
my @extra = grep { !$in_f{$_} } @u;
cmp_ok(scalar(@f), '>', 50, 'the description of a fresh install is not empty');
is(scalar(@missing) + scalar(@extra), 0,
	'the objects after ALTER EXTENSION UPDATE are those of a fresh install')
  or diag("only in the fresh install:\n  " . join("\n  ", @missing)
	  . "\nonly after the update:\n  " . join("\n  ", @extra));

# Negative control: the comparison sees a difference in a definition.
$node->safe_psql('fresh', q{COMMENT ON TABLE leader_election.history IS 'changed'});
isnt($node->safe_psql('fresh', $describe), $fresh, 'the comparison notices a changed comment');

$node->stop;
done_testing();
