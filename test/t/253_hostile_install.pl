# 253_hostile_install.pl: installing (and upgrading) leader_election in a
# database where an unprivileged role has prepared traps.
#
# The attacker is an ordinary role with CREATE on the database and on schema
# public (PostgreSQL 15 no longer grants the latter by default; many
# databases still do).  The install refuses a schema the attacker may create
# in (issue 12), so the attacker loses that right before (b), keeping what it
# made there.  It tries:
#
#  (a) a schema named leader_election made in advance, or one of our API
#      functions made in advance: CREATE EXTENSION must fail and leave
#      nothing of ours behind (the script never adopts an existing object);
#  (b) functions, operators, an aggregate and tables named like the ones the
#      install script and the C code's SPI statements use, in its own schema
#      and in public, with the same or more specific argument types, and a
#      search_path that puts them first (even before pg_catalog where a
#      session may do so): every one of them records its calls, and none may
#      be called during install or while the API, the view and the history
#      are used, by a superuser, an application role or the attacker itself.
#      The stored view and policy expressions must depend only on
#      pg_catalog's objects;
#  (c) the same during ALTER EXTENSION UPDATE, for every update path from 1.0
#      the installed scripts offer (none yet: then this part is skipped);
#  (d) a schema named after the installing superuser: "$user" comes first in
#      the default search_path, so a plain CREATE EXTENSION would create the
#      API in the attacker's schema.  The install must refuse a target schema
#      owned by a role that is neither a superuser nor the database owner.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('hostile');
$node->init;
$node->append_conf('postgresql.conf', qq{
max_connections = 30
shared_preload_libraries = 'leader_election'
});
$node->start;

my $su = $node->safe_psql('postgres', 'SELECT current_user');
$node->safe_psql('postgres', q{
	CREATE ROLE attacker LOGIN;
	CREATE ROLE app LOGIN;
	GRANT CREATE ON DATABASE postgres TO attacker;
	GRANT CREATE ON SCHEMA public TO attacker;
});

# sql as the attacker, connected as it (not SET ROLE).
sub attacker
{
	my ($sql, $db) = @_;
	return $node->safe_psql($db // 'postgres', $sql,
		extra_params => [ '-U', 'attacker' ]);
}

# SQLSTATE of sql run as user (default: the superuser), '' on success.
sub sqlstate_as
{
	my ($user, $sql, $db) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db // 'postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$out, stderr => \$err,
		extra_params => [ '-U', $user // $su ]);
	return $1 if $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return '';
}

my $our_functions = q{('try_acquire_leader', 'am_leader', 'release_leader',
	'wait_for_leadership', 'leader_term', 'assert_leader', 'current_leader',
	'lease_is_valid', 'waiting_candidates')};

# Nothing of ours is in the database.
sub nothing_installed
{
	my ($db) = @_;
	return $node->safe_psql($db // 'postgres', qq{
		SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'leader_election')
		     + (SELECT count(*) FROM pg_proc WHERE proname IN $our_functions
		          AND proowner <> 'attacker'::regrole)
		     + (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		         WHERE n.nspname = 'leader_election')});
}

# ==== (a) pre-created schema or function: the install refuses ====
attacker('CREATE SCHEMA leader_election');
is(sqlstate_as($su, 'CREATE EXTENSION leader_election'),
	'42P06', 'CREATE EXTENSION fails on an attacker-owned schema leader_election');
is(nothing_installed(), 0, 'and installs nothing');
attacker('DROP SCHEMA leader_election');

attacker(q{CREATE FUNCTION public.try_acquire_leader(text, interval, text)
	RETURNS boolean LANGUAGE sql AS 'SELECT true'});
is(sqlstate_as($su, 'CREATE EXTENSION leader_election SCHEMA public'),
	'42723', 'CREATE EXTENSION fails on a pre-created try_acquire_leader');
is(nothing_installed(), 0, 'and installs nothing');
attacker('DROP FUNCTION public.try_acquire_leader(text, interval, text)');

# ==== (b) shadowing objects ====
# Every trap records (role, name) in evil.calls, which anybody may insert
# into, and then behaves like the real thing so that nothing else breaks.
my $traps = q{
	CREATE SCHEMA evil;
	GRANT USAGE ON SCHEMA evil TO PUBLIC;
	CREATE TABLE evil.calls (who name DEFAULT current_user, what text,
		query text DEFAULT pg_catalog.current_query());
	GRANT INSERT, SELECT ON evil.calls TO PUBLIC;
	CREATE TABLE evil.leases (name text);
	CREATE TABLE evil.history (name text);
	CREATE TABLE public.leases (name text);
	CREATE TABLE public.history (name text);
};
for my $s ('evil', 'public')
{
	# Functions: (signature, return type, the real call on args $1, $2).
	my @fns = (
		[ 'pg_has_role(oid, text)', 'boolean', 'pg_catalog.pg_has_role($1, $2)' ],
		[ 'pg_has_role(oid, character varying)', 'boolean', 'pg_catalog.pg_has_role($1, $2)' ],
		[ 'octet_length(text)', 'integer', 'pg_catalog.octet_length($1)' ],
		[ 'octet_length(character varying)', 'integer', 'pg_catalog.octet_length($1)' ],
		[ 'clock_timestamp()', 'timestamptz', 'pg_catalog.clock_timestamp()' ],
		[ 'now()', 'timestamptz', 'pg_catalog.now()' ],
		[ 'date_part(text, interval)', 'double precision', 'pg_catalog.date_part($1, $2)' ],
		[ 'date_part(character varying, interval)', 'double precision', 'pg_catalog.date_part($1, $2)' ],
		[ 'date_part(text, timestamptz)', 'double precision', 'pg_catalog.date_part($1, $2)' ],
		[ 'texteq(text, text)', 'boolean', 'pg_catalog.texteq($1, $2)' ],
		[ 'int8eq(bigint, bigint)', 'boolean', 'pg_catalog.int8eq($1, $2)' ],
		[ 'int8le(bigint, bigint)', 'boolean', 'pg_catalog.int8le($1, $2)' ],
		[ 'int4le(integer, integer)', 'boolean', 'pg_catalog.int4le($1, $2)' ],
		[ 'oideq(oid, oid)', 'boolean', 'pg_catalog.oideq($1, $2)' ],
		[ 'timestamptz_mi(timestamptz, timestamptz)', 'interval', 'pg_catalog.timestamptz_mi($1, $2)' ],
		[ 'inet_client_addr()', 'inet', 'pg_catalog.inet_client_addr()' ],
		[ 'count_step(bigint)', 'bigint', '$1 + 1' ],
	);
	for my $f (@fns)
	{
		my ($sig, $ret, $real) = @$f;
		$traps .= qq{
	CREATE FUNCTION $s.$sig RETURNS $ret LANGUAGE plpgsql AS \$f\$
	BEGIN
		INSERT INTO evil.calls (what) VALUES ('$s.$sig');
		RETURN $real;
	END \$f\$;
	GRANT EXECUTE ON FUNCTION $s.$sig TO PUBLIC;};
	}
	# Operators on exactly the types the script and the SPI statements use,
	# and on more specific ones.
	my @ops = (
		[ '=', 'text', 'text', 'texteq' ],
		[ '=', 'bigint', 'bigint', 'int8eq' ],
		[ '<=', 'bigint', 'bigint', 'int8le' ],
		[ '<=', 'integer', 'integer', 'int4le' ],
		[ '=', 'oid', 'oid', 'oideq' ],
		[ '-', 'timestamptz', 'timestamptz', 'timestamptz_mi' ],
	);
	for my $o (@ops)
	{
		my ($op, $l, $r, $fn) = @$o;
		$traps .= qq{
	CREATE OPERATOR $s.$op (LEFTARG = $l, RIGHTARG = $r, FUNCTION = $s.$fn);};
	}
	$traps .= qq{
	CREATE AGGREGATE $s.count(*) (SFUNC = $s.count_step, STYPE = bigint, INITCOND = '0');};
}
attacker($traps);

# The attacker's objects, for the dependency checks below.
my $attacker_objects = q{
	SELECT 'pg_proc'::regclass AS refclassid, oid AS refobjid FROM pg_proc
	 WHERE proowner = 'attacker'::regrole
	UNION ALL SELECT 'pg_operator'::regclass, oid FROM pg_operator
	 WHERE oprowner = 'attacker'::regrole
	UNION ALL SELECT 'pg_class'::regclass, oid FROM pg_class
	 WHERE relowner = 'attacker'::regrole};

# Our objects and the expressions stored for them: extension members, view
# rules, policies and constraints on our tables, column defaults.
my $our_objects = q{
	SELECT classid, objid FROM pg_depend
	 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
	   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leader_election')
	UNION ALL SELECT 'pg_rewrite'::regclass, r.oid FROM pg_rewrite r
	  JOIN pg_class c ON c.oid = r.ev_class
	 WHERE c.relnamespace = 'leader_election'::regnamespace
	UNION ALL SELECT 'pg_policy'::regclass, p.oid FROM pg_policy p
	  JOIN pg_class c ON c.oid = p.polrelid
	 WHERE c.relnamespace = 'leader_election'::regnamespace
	UNION ALL SELECT 'pg_constraint'::regclass, k.oid FROM pg_constraint k
	  JOIN pg_class c ON c.oid = k.conrelid
	 WHERE c.relnamespace = 'leader_election'::regnamespace
	UNION ALL SELECT 'pg_attrdef'::regclass, d.oid FROM pg_attrdef d
	  JOIN pg_class c ON c.oid = d.adrelid
	 WHERE c.relnamespace = 'leader_election'::regnamespace};

sub calls
{
	return $node->safe_psql('postgres',
		q{SELECT count(*) || coalesce(': ' || string_agg(DISTINCT who || ' ' || what, ', '), '')
		    FROM evil.calls});
}

sub check_clean
{
	my ($when) = @_;
	is(calls(), '0', "no trap was called $when")
	  or diag($node->safe_psql('postgres',
		  'SELECT DISTINCT who, what, query FROM evil.calls'));
	is($node->safe_psql('postgres', qq{
		WITH ours AS ($our_objects), theirs AS ($attacker_objects)
		SELECT count(*) FROM pg_depend d
		  JOIN ours o ON o.classid = d.classid AND o.objid = d.objid
		  JOIN theirs t ON t.refclassid = d.refclassid AND t.refobjid = d.refobjid}),
		'0', "nothing of ours depends on an attacker's object $when");
	# Positive control: the same join does see the view's dependency on our
	# own function (dependencies on pg_catalog's built-in objects are never
	# recorded: they are pinned), so a zero above means something.
	cmp_ok($node->safe_psql('postgres', qq{
		WITH ours AS ($our_objects)
		SELECT count(*) FROM pg_depend d
		  JOIN ours o ON o.classid = d.classid AND o.objid = d.objid
		 WHERE d.refclassid = 'pg_proc'::regclass
		   AND d.refobjid = 'leader_election.lease_is_valid'::regproc}),
		'>', 0, "(the check sees the view's dependency on our function $when)");
}

# While the attacker may still create in public, the install refuses it
# (it could add overloads there after the install: 254_security_edges.pl).
is(sqlstate_as($su, 'CREATE EXTENSION leader_election SCHEMA public'),
	'42501', 'CREATE EXTENSION refuses public while the attacker may create there');
is(nothing_installed(), 0, 'and installs nothing');
$node->safe_psql('postgres', 'REVOKE CREATE ON SCHEMA public FROM attacker');

# Install as the superuser, with the attacker's schemas first and its
# objects already in public.
$node->safe_psql('postgres', q{
	SET search_path = evil, public, pg_temp;
	CREATE EXTENSION leader_election SCHEMA public;
});
is($node->safe_psql('postgres',
		q{SELECT extversion = default_version FROM pg_extension
		    JOIN pg_available_extensions ON name = extname
		   WHERE extname = 'leader_election'}),
	't', 'CREATE EXTENSION succeeds with the traps first on search_path');
check_clean('during CREATE EXTENSION');

# The stored expressions name pg_catalog's objects.  Deparsed with the traps
# ahead of pg_catalog, anything that is not the trap must be schema-qualified.
# These queries run with that search_path, so they qualify their own
# operators; and pg_get_viewdef() itself runs an SPI query with a bare "=" on
# oids (PostgreSQL's ruleutils.c), which the oid = oid trap catches: that is
# PostgreSQL's doing, not ours, so that call is rolled back.
my $viewdef = $node->safe_psql('postgres', q{
	BEGIN;
	SET LOCAL search_path = evil, pg_catalog;
	SELECT pg_get_viewdef('leader_election.leaders'::regclass);
	ROLLBACK;});
like($viewdef, qr/OPERATOR\(pg_catalog\.-\)/, 'view: OPERATOR(pg_catalog.-)');
like($viewdef, qr/pg_catalog\.pg_has_role\(/, 'view: pg_catalog.pg_has_role');
like($viewdef, qr/pg_catalog\.date_part\(/, 'view: pg_catalog.date_part');
like($viewdef, qr/pg_catalog\.clock_timestamp\(/, 'view: pg_catalog.clock_timestamp');
unlike($viewdef, qr/evil\./, 'view: no reference to the attacker\'s schema');
my $policy = $node->safe_psql('postgres', q{
	SET search_path = evil, pg_catalog;
	SELECT pg_get_expr(polqual, polrelid) FROM pg_policy
	 WHERE polrelid OPERATOR(pg_catalog.=) 'leader_election.history'::regclass});
like($policy, qr/pg_catalog\.pg_has_role\(/, 'policy: pg_catalog.pg_has_role');
my $checks = $node->safe_psql('postgres', q{
	SET search_path = evil, pg_catalog;
	SELECT string_agg(pg_get_constraintdef(oid), ' ') FROM pg_constraint
	 WHERE conrelid OPERATOR(pg_catalog.=) ANY
	       (ARRAY['leader_election.leases', 'leader_election.history']::pg_catalog.regclass[])
	   AND contype OPERATOR(pg_catalog.=) 'c'});
like($checks, qr/OPERATOR\(pg_catalog\.=\)/, 'check constraint: OPERATOR(pg_catalog.=)');

# Use everything as the superuser, an application role and the attacker,
# each with the traps first on search_path, pg_catalog explicitly last.
$node->safe_psql('postgres', q{
	GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text),
		am_leader(text, text), release_leader(text, text, text),
		wait_for_leadership(text, interval, interval, text, integer),
		leader_term(text, text), assert_leader(text, bigint, text),
		current_leader(text) TO app, attacker;
});
my $use = q{
	SET search_path = evil, public, pg_catalog;
	CREATE TEMP TABLE leases (name text);
	CREATE TEMP TABLE history (name text);
	SELECT public.try_acquire_leader('N', '1 minute', 'h1');
	SELECT public.try_acquire_leader('N', '1 minute', 'h1');
	SELECT public.am_leader('N', 'h1'), public.leader_term('N', 'h1');
	BEGIN;
	SELECT public.assert_leader('N', public.leader_term('N', 'h1'), 'h1');
	COMMIT;
	SELECT pg_catalog.count(*) FROM public.current_leader('N');
	SELECT public.try_acquire_leader('N', '1 minute', 'h2');
	SELECT public.release_leader('N', 'h1');
	SELECT public.wait_for_leadership('N', '1 minute', '10 seconds', 'h2');
	SELECT public.try_acquire_leader('N', '1 minute');
	SELECT public.try_acquire_leader('N-short', '100 milliseconds', 'h1');
	SELECT pg_catalog.pg_sleep(0.2);
	SELECT public.try_acquire_leader('N-short', '1 minute', 'h2');
	SELECT * FROM leader_election.leaders;
	SELECT * FROM leader_election.history;
};
for my $who ($su, 'app', 'attacker')
{
	my $sql = $use;
	$sql =~ s/'N/'$who-N/g;
	# The superuser also exercises the name quota, the history trimming and
	# the name administration functions.
	$sql = "SET leader_election.max_names_per_role = 1000;
		SET leader_election.history_max_terms = 1;\n$sql
		SELECT leader_election.assign_name('$who-reserved', 'app');
		SELECT leader_election.assign_name('$who-N', 'app');
		SELECT leader_election.release_name('$who-N-short');"
	  if $who eq $su;
	my ($out, $err) = ('', '');
	my $rc = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-U', $who, '-v', 'ON_ERROR_STOP=1' ]);
	is($rc, 0, "$who uses the API, view and history with the traps first")
	  or diag($err);
}
is($node->safe_psql('postgres',
		qq{SELECT string_agg(holder || ':' || (term > (SELECT min(h.term) FROM leader_election.history AS h
		                                                  WHERE h.name = l.name)), ',' ORDER BY name)
		     FROM leader_election.leases AS l WHERE name LIKE 'app-%'}),
	'h2:true,h2:true', 'the app\'s calls did what they should: h2 leads in the second term (sanity)');
check_clean('while the API was used');

# Negative control: the traps do fire on an unqualified call that they match
# better than pg_catalog does (a more specific argument type, or a
# search_path with pg_catalog after them), so their silence above is real.
$node->safe_psql('postgres', q{
	SET search_path = evil, public;
	SELECT octet_length('x'::character varying);
	SET search_path = evil, pg_catalog;
	SELECT 1::bigint = 2::bigint;
}, extra_params => [ '-U', 'app' ]);
like(calls(), qr/^2: app evil\.int8eq.*app evil\.octet_length\(character varying\)$/,
	'(negative control: unqualified calls as app do hit the traps)');
$node->safe_psql('postgres', 'TRUNCATE evil.calls');

# ==== (c) upgrade paths, under the same traps ====
my @targets = split /\n/, $node->safe_psql('postgres', q{
	SELECT target FROM pg_extension_update_paths('leader_election')
	 WHERE source = '1.0' AND path IS NOT NULL ORDER BY target});
SKIP:
{
	skip 'no update path from 1.0 is installed yet', 1 unless @targets;
	for my $target (@targets)
	{
		$node->safe_psql('postgres', q{
			DROP EXTENSION leader_election;
			SET search_path = evil, public, pg_temp;
			CREATE EXTENSION leader_election VERSION '1.0' SCHEMA public;});
		is(sqlstate_as($su, "SET search_path = evil, public, pg_temp;
				ALTER EXTENSION leader_election UPDATE TO '$target'"),
			'', "ALTER EXTENSION UPDATE from 1.0 to $target succeeds");
		check_clean("during the update to $target");
	}
}

# ==== (d) a schema named after the installing superuser ====
$node->safe_psql('postgres', q{
	CREATE DATABASE squat;
	GRANT CREATE ON DATABASE squat TO attacker;
});
attacker(qq{CREATE SCHEMA "$su"}, 'squat');
my $state = sqlstate_as($su, 'CREATE EXTENSION leader_election', 'squat');
my $api_schema_owner = $node->safe_psql('squat', q{
	SELECT pg_get_userbyid(n.nspowner) FROM pg_proc p
	  JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE p.proname = 'try_acquire_leader'});
note("plain CREATE EXTENSION with a schema \"$su\" owned by attacker: "
	  . ($state ? "failed with $state" : "API installed in a schema owned by $api_schema_owner"));
is($state, '42501', 'CREATE EXTENSION refuses a target schema the attacker owns');
is($api_schema_owner, '', 'and installs nothing there');

# Why it matters: owning the schema the API lives in, the attacker could add
# an overload that untyped literals prefer (text over interval), and a
# superuser's ordinary call would run the attacker's code.  Naming a trusted
# schema explicitly still works.
is(sqlstate_as($su, 'CREATE EXTENSION leader_election SCHEMA public', 'squat'),
	'', 'CREATE EXTENSION ... SCHEMA public succeeds in the same database');
$node->safe_psql('squat', 'DROP EXTENSION IF EXISTS leader_election');

$node->stop;
done_testing();
