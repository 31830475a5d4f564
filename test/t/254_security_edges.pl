# 254_security_edges.pl: the attacks of issue 12 that need databases of
# their own (the others are in sql/security.sql).  The attacker is a role
# with no rights on the extension, or with exactly the README's grants.
#
#  (1) Escalation by shadowing the API.  Databases created before
#      PostgreSQL 15 (and clusters upgraded or restored from them) let
#      PUBLIC create in schema public.  There an attacker adds
#      public.try_acquire_leader(name text, ttl text, holder text), which
#      the README's own call with untyped literals prefers, and whoever
#      calls it runs the attacker's code: a superuser made it superuser.  The
#      install (and the update from 1.0) must refuse a schema in which a role
#      other than superusers and the database owner may create objects.
#  (2) Bad bytes in single-byte encodings: in LATIN1 the C1 controls
#      0x80-0x9F (0x9B is the 8-bit CSI of terminals) must be refused, as in
#      UTF8; in SQL_ASCII names and holders are checked as UTF-8.  In
#      WIN1252 the bytes without a character (0x81, 0x8D, 0x8F, 0x90, 0x9D)
#      must be refused in names, holders and info: PostgreSQL cannot convert
#      them for a UTF-8 client, so one such name of one role made the
#      superuser's (and postgres_exporter's) read of the leaders view fail.
#  (3) pg_dump keeps registered tasks, with their owner by name (a restore
#      into a cluster where role OIDs differ must not hand a task to
#      another role) and the id sequence.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('edges');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 30\n");
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');

# SQLSTATE of sql in db as user (default: the superuser), '' on success.
sub sqlstate
{
	my ($db, $sql, $user) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, "\\set VERBOSITY verbose\n$sql",
		stdout => \$out, stderr => \$err,
		extra_params => [ '-U', $user // $su ]);
	return $1 if $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return '';
}

sub installed
{
	my ($db) = @_;
	return $node->safe_psql($db, q{
		SELECT count(*) FROM pg_extension WHERE extname = 'leader_election'});
}

# ==== (1) shadowing the API in a schema others may create in ====
$node->safe_psql('postgres', q{
	CREATE ROLE attacker LOGIN;
	CREATE ROLE app LOGIN;
	CREATE ROLE dbowner LOGIN;
	CREATE ROLE creators;
	CREATE DATABASE legacy;
	CREATE DATABASE owned OWNER dbowner;
});
# What PostgreSQL 14 and older gave every database.
$node->safe_psql('legacy', 'GRANT CREATE ON SCHEMA public TO PUBLIC');

my $state = sqlstate('legacy', 'CREATE EXTENSION leader_election');
is($state, '42501',
	'CREATE EXTENSION refuses schema public where PUBLIC may create');
if ($state eq '')
{
	# 1.0 installed: show what the attacker can do with it.
	$node->safe_psql('legacy', 'GRANT EXECUTE ON FUNCTION
		public.try_acquire_leader(text, interval, text) TO app');
	$node->safe_psql('legacy', q{
		CREATE FUNCTION public.try_acquire_leader(name text, ttl text, holder text DEFAULT NULL)
		RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN
			IF pg_catalog.current_setting('is_superuser')::boolean THEN
				EXECUTE 'ALTER ROLE attacker SUPERUSER';
			END IF;
			RETURN true;
		END $$;}, extra_params => [ '-U', 'attacker' ]);
	$node->safe_psql('legacy',
		q{SELECT try_acquire_leader('nightly-report', '2 minutes', 'host-a')});
}
is($node->safe_psql('postgres',
		q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}),
	'f', 'the attacker did not become superuser');
$node->safe_psql('legacy', 'DROP EXTENSION IF EXISTS leader_election CASCADE');
$node->safe_psql('legacy',
	'DROP FUNCTION IF EXISTS public.try_acquire_leader(text, text, text)');

# A 1.0 installation there: the update to 1.1 refuses too, until the
# administrator revokes the right.
is(sqlstate('legacy', q{CREATE EXTENSION leader_election VERSION '1.0'}),
	'', '(1.0 alone installs there, as it did)');
is(sqlstate('legacy', 'ALTER EXTENSION leader_election UPDATE'),
	'42501', 'ALTER EXTENSION UPDATE refuses while PUBLIC may create in the schema');
is($node->safe_psql('legacy',
		q{SELECT extversion FROM pg_extension WHERE extname = 'leader_election'}),
	'1.0', 'and leaves 1.0 in place');
my ($out, $err) = ('', '');
$node->psql('legacy', 'ALTER EXTENSION leader_election UPDATE',
	stdout => \$out, stderr => \$err);
like($err, qr/HINT:.*REVOKE CREATE ON SCHEMA public FROM PUBLIC/s,
	'the error says how to fix it');
$node->safe_psql('legacy', 'REVOKE CREATE ON SCHEMA public FROM PUBLIC');
is(sqlstate('legacy', 'ALTER EXTENSION leader_election UPDATE'),
	'', 'after REVOKE CREATE ... FROM PUBLIC the update succeeds');
$node->safe_psql('legacy', 'DROP EXTENSION leader_election');

# CREATE granted to one ordinary role, directly or through a group.
$node->safe_psql('legacy', 'GRANT CREATE ON SCHEMA public TO attacker');
is(sqlstate('legacy', 'CREATE EXTENSION leader_election'),
	'42501', 'refused when an ordinary role may create in the schema');
$node->safe_psql('legacy', q{
	REVOKE CREATE ON SCHEMA public FROM attacker;
	GRANT creators TO attacker;
	GRANT CREATE ON SCHEMA public TO creators;});
is(sqlstate('legacy', 'CREATE EXTENSION leader_election'),
	'42501', 'refused when a group role may create in the schema');
$node->safe_psql('legacy', 'REVOKE CREATE ON SCHEMA public FROM creators');
is(installed('legacy'), '0', 'nothing was installed by the refused attempts');

# A schema the superuser made and opened to everyone, named explicitly.
$node->safe_psql('legacy', q{
	CREATE SCHEMA shared;
	GRANT USAGE, CREATE ON SCHEMA shared TO PUBLIC;});
is(sqlstate('legacy', 'CREATE EXTENSION leader_election SCHEMA shared'),
	'42501', 'refused in an explicitly named schema open to PUBLIC');
is(installed('legacy'), '0', 'and nothing installed');

# Trusted schemas: only superusers and the database owner may create.
is(sqlstate('legacy', 'CREATE EXTENSION leader_election'),
	'', 'installs into public once only trusted roles may create there');
$node->safe_psql('owned', 'GRANT CREATE ON SCHEMA public TO dbowner');
is(sqlstate('owned', 'CREATE EXTENSION leader_election'),
	'', 'installs where the database owner may create');

# The README's schema-qualified call works for a privileged caller whose
# search_path starts with a schema the attacker owns.
$node->safe_psql('legacy', q{
	CREATE SCHEMA trap AUTHORIZATION attacker;
	GRANT USAGE ON SCHEMA trap TO PUBLIC;});
$node->safe_psql('legacy', q{
	CREATE FUNCTION trap.try_acquire_leader(name text, ttl text, holder text DEFAULT NULL)
	RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		EXECUTE 'ALTER ROLE attacker SUPERUSER';
		RETURN true;
	END $$;}, extra_params => [ '-U', 'attacker' ]);
is($node->safe_psql('legacy', q{
	SET search_path = trap, public;
	SELECT public.try_acquire_leader('nightly-report', '2 minutes', 'host-a');}),
	't', 'the schema-qualified call reaches the extension');
is($node->safe_psql('postgres',
		q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}),
	'f', 'and not the attacker\'s function');

# ==== (2) single-byte encodings and SQL_ASCII ====
$node->safe_psql('postgres', q{
	CREATE DATABASE latin1 ENCODING 'LATIN1' LOCALE 'C' TEMPLATE template0;
	CREATE DATABASE win1252 ENCODING 'WIN1252' LOCALE 'C' TEMPLATE template0;
	CREATE DATABASE sqlascii ENCODING 'SQL_ASCII' LOCALE 'C' TEMPLATE template0;});
for my $db (qw(latin1 win1252 sqlascii))
{
	$node->safe_psql($db, 'CREATE EXTENSION leader_election');
}

# [database, label, expression giving the name, expected SQLSTATE]
my @cases = (
	[ 'latin1', 'NEL 0x85', q{'a' || chr(133) || 'b'}, '22023' ],
	[ 'latin1', 'CSI 0x9B', q{'a' || chr(155) || '[2J'}, '22023' ],
	[ 'latin1', '0x80', q{'a' || chr(128)}, '22023' ],
	[ 'latin1', '0x9F', q{chr(159) || 'b'}, '22023' ],
	[ 'latin1', 'e-acute 0xE9', q{'caf' || chr(233)}, '' ],
	[ 'latin1', 'NBSP 0xA0', q{'a' || chr(160) || 'b'}, '' ],
	[ 'win1252', 'euro sign 0x80', q{'a' || chr(128)}, '' ],
	[ 'win1252', 'ellipsis 0x85', q{'a' || chr(133)}, '' ],
	[ 'win1252', 'undefined 0x81', q{'squat' || chr(129)}, '22023' ],
	[ 'win1252', 'undefined 0x9D', q{chr(157) || 'x'}, '22023' ],
	[ 'sqlascii', 'lone 0x9B', q{E'a\\x9b[2J'}, '22023' ],
	[ 'sqlascii', 'NEL as UTF-8', q{E'a\\xc2\\x85b'}, '22023' ],
	[ 'sqlascii', 'RLO as UTF-8', q{E'a\\xe2\\x80\\xaeb'}, '22023' ],
	[ 'sqlascii', 'truncated UTF-8', q{E'a\\xe2\\x80'}, '22023' ],
	[ 'sqlascii', 'e-acute as UTF-8', q{E'caf\\xc3\\xa9'}, '' ],
	[ 'sqlascii', 'ASCII', q{'plain-name'}, '' ],
);
for my $c (@cases)
{
	my ($db, $label, $expr, $want) = @$c;
	is(sqlstate($db, "SELECT try_acquire_leader($expr, '1 minute', 'h')"),
		$want, "$db: name with $label " . ($want ? 'refused' : 'accepted'));
	is(sqlstate($db, "SELECT try_acquire_leader('holder-test', '1 minute', $expr)"),
		$want, "$db: holder with $label " . ($want ? 'refused' : 'accepted'));
}
is($node->safe_psql('latin1', q{
	SELECT count(*) FROM leader_election.leases
	 WHERE name ~ ('[' || chr(128) || '-' || chr(159) || ']')}),
	'0', 'latin1: no lease name holds a C1 byte');
is(sqlstate('win1252', q{
	SELECT try_acquire_leader('info-test', '1 minute', 'h');
	SELECT set_leader_info('info-test', jsonb_build_object('url', 'a' || chr(129)), 'h')}),
	'22023', 'win1252: info with an undefined byte refused');
is(sqlstate('win1252', q{
	SELECT release_leader('holder-test', 'a' || chr(128), 'next' || chr(129))}),
	'22023', 'win1252: successor with an undefined byte refused (the lease stays: below)');
is($node->safe_psql('win1252', q{
	SET client_encoding = 'UTF8';
	SELECT string_agg(name || '/' || coalesce(holder, '') || '/' || coalesce(info::text, ''), ','
	                  ORDER BY name)
	  FROM leader_election.leaders}),
	# (psql prints UTF-8 octets: the euro sign, the ellipsis)
	"a\xe2\x82\xac/h/,a\xe2\x80\xa6/h/,holder-test/a\xe2\x82\xac/,info-test/h/",
	'win1252: a UTF-8 client reads every lease of the leaders view');

# ==== (3) pg_dump keeps the tasks, owners by name ====
$node->safe_psql('postgres', q{
	CREATE ROLE filler1;
	CREATE ROLE filler2;
	CREATE ROLE tasker LOGIN;
	CREATE DATABASE tasks;
	GRANT CONNECT ON DATABASE tasks TO tasker;});
$node->safe_psql('tasks', q{
	CREATE EXTENSION leader_election;
	CREATE SCHEMA app AUTHORIZATION tasker;
	GRANT EXECUTE ON FUNCTION leader_election.register_task(text, regprocedure, interval, interval)
	   TO tasker;});
$node->safe_psql('tasks', q{
	CREATE PROCEDURE app.sweep(term bigint) LANGUAGE sql AS 'SELECT 1';
	SELECT leader_election.register_task('sweeper', 'app.sweep(bigint)', '10 seconds', '30 seconds');
	SELECT leader_election.register_task('sweeper-2', 'app.sweep(bigint)', '10 seconds', '30 seconds');
}, extra_params => [ '-U', 'tasker' ]);
my $dump = $node->basedir . '/tasks.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('tasks'), '-f', $dump ],
	'pg_dump of a database with tasks');

my $new = PostgreSQL::Test::Cluster->new('edges_restore');
$new->init;
$new->start;
# Other roles first, so that every role gets another OID than before.
$new->safe_psql('postgres', q{
	CREATE ROLE other1; CREATE ROLE other2; CREATE ROLE other3;
	CREATE ROLE tasker LOGIN;});
$new->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		'-d', $new->connstr('postgres'), '-f', $dump ],
	'restore succeeds');
is($new->safe_psql('postgres', q{
	SELECT string_agg(name || ':' || pg_catalog.pg_get_userbyid(owner::oid), ',' ORDER BY id)
	  FROM leader_election.tasks}),
	'sweeper:tasker,sweeper-2:tasker', 'tasks restored, owned by the same role by name');
$new->safe_psql('postgres', q{
	GRANT EXECUTE ON FUNCTION leader_election.register_task(text, regprocedure, interval, interval)
	   TO tasker;});
my ($id_out, $id_err) = ('', '');
$new->psql('postgres', q{
	SELECT leader_election.register_task('sweeper-3', 'app.sweep(bigint)', '10 seconds', '30 seconds')
	     > (SELECT max(id) FROM leader_election.tasks WHERE name <> 'sweeper-3')},
	stdout => \$id_out, stderr => \$id_err, extra_params => [ '-U', 'tasker' ]);
is($id_out, 't', 'a task registered after the restore gets a new id')
  or diag($id_err);

$new->stop;
$node->stop;
done_testing();
