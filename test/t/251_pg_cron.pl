# 251_pg_cron.pl: a pg_cron job gated by try_acquire_leader() under a named
# holder runs its work only while the lease is free or already its own.
#
# pg_cron (Debian's postgresql-15-cron) is preloaded next to leader_election
# and runs jobs in background workers (cron.use_background_workers), so no
# libpq connection settings are needed.  The packaged pg_cron is 1.4, whose
# finest schedule is once a minute ('N seconds' schedules arrive in 1.5), so
# this test takes two to three minutes; every wait is bounded.
#
# The job and the application run as the same role, app: a lease name
# belongs to the role that first used it, so a job must run as (a member of)
# the role whose application workers compete for the name.
#
#   1. The application holds 'nightly' as 'host-a': the job runs (pg_cron
#      records succeeded runs) but does nothing.
#   2. The application releases: the next run takes the lease as 'pg_cron'
#      (a new term) and does its work.
#   3. The run after that renews its own lease (same term) and works again;
#      meanwhile the application gets false.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Look in the installation under test: Debian 12 packages pg_cron for
# PostgreSQL 15 only, so on a major built from source it is absent.
my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
my $major = `pg_config --version` =~ /(\d+)/ ? $1 : '?';
plan skip_all => "pg_cron is not installed for PostgreSQL $major ($sharedir)"
  unless -e "$sharedir/extension/pg_cron.control";

my $node = le_node(
	'cron', conf => q{
shared_preload_libraries = 'pg_cron,leader_election'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 16
});
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pg_cron;
	CREATE ROLE app LOGIN;
	GRANT USAGE ON SCHEMA cron TO app;
	GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text),
		release_leader(text, text, text), leader_term(text, text) TO app;
	CREATE TABLE public.cron_effects (at timestamptz NOT NULL);
	ALTER TABLE public.cron_effects OWNER TO app;
});

# Everything the application does, as role app.
sub app
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', "SET ROLE app; $sql");
}

sub effects
{
	return $node->safe_psql('postgres', 'SELECT count(*) FROM cron_effects');
}

# 1. The application holds the lease; then the job is scheduled.
is(app(q{SELECT try_acquire_leader('nightly', '10 minutes', 'host-a')}),
	't', 'the application holds nightly as host-a');
my $app_term = app(q{SELECT leader_term('nightly', 'host-a')});

app(q{SELECT cron.schedule('nightly', '* * * * *',
	$$INSERT INTO public.cron_effects SELECT clock_timestamp()
	   WHERE try_acquire_leader('nightly', '10 minutes', 'pg_cron')$$)});

ok( $node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM cron.job_run_details
		   WHERE status IN ('succeeded', 'failed')}),
	'the job ran once (pg_cron schedules by the minute)');
is($node->safe_psql('postgres',
		q{SELECT string_agg(status || ': ' || coalesce(return_message, ''), '; ')
		   FROM cron.job_run_details WHERE status <> 'succeeded'}),
	'', 'no run failed');
is(effects(), 0, 'while the application holds the lease the job did nothing');
is($node->safe_psql('postgres',
		q{SELECT holder || ' ' || term FROM leader_election.leases WHERE name = 'nightly'}),
	"host-a $app_term", 'and the lease is still host-a\'s, same term');

# 2. The application releases; the next run takes over.
is(app(q{SELECT release_leader('nightly', 'host-a')}),
	't', 'the application releases nightly');
ok($node->poll_query_until('postgres',
		'SELECT count(*) > 0 FROM cron_effects'),
	'a later run of the job does its work');
is($node->safe_psql('postgres',
		q{SELECT holder || ' ' || term FROM leader_election.leases WHERE name = 'nightly'}),
	'pg_cron ' . ($app_term + 1), 'the lease is held by pg_cron in the next term');
is(app(q{SELECT try_acquire_leader('nightly', '10 minutes', 'host-a')}),
	'f', 'now the application gets false');

# 3. The next run is a renewal of pg_cron's own lease and works again.
ok($node->poll_query_until('postgres',
		'SELECT count(*) >= 2 FROM cron_effects'),
	'the next run, holding its own lease, did its work again');
is($node->safe_psql('postgres',
		q{SELECT term FROM leader_election.leases WHERE name = 'nightly'}),
	$app_term + 1, 'a renewal: the term did not change');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM cron.job_run_details WHERE status <> 'succeeded'}),
	0, 'no run failed');

app(q{SELECT cron.unschedule('nightly')});
$node->stop;
done_testing();
