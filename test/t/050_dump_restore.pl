# Terms survive pg_dump and restore into a fresh cluster: the lease table,
# the term counter and its era are extension configuration objects
# (pg_extension_config_dump), so the next grant after a restore continues
# above every earlier term instead of restarting at 1, which would let a
# fenced resource accept a stale leader's writes again.  The restored
# cluster is another server, so its first grant starts a new 2^32 era: above
# even the terms the old server issued after the dump was taken.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old = PostgreSQL::Test::Cluster->new('dump_source');
$old->init;
$old->start;
$old->safe_psql('postgres', 'CREATE EXTENSION leader_election');

# Three changes of leader, then a named lease left held.
for my $holder (qw(a b c))
{
	$old->safe_psql('postgres',
		qq{SELECT try_acquire_leader('job', '1 hour', '$holder');
		   SELECT release_leader('job', '$holder');});
}
is($old->safe_psql('postgres', q{SELECT try_acquire_leader('job', '1 hour', 'd')}),
	't', 'fourth holder acquires');
my $term_before = $old->safe_psql('postgres',
	q{SELECT term FROM leader_election.leases WHERE name = 'job'});
is($term_before, '4', 'four terms issued before the dump');

my $dump = $old->basedir . '/dump.sql';
$old->command_ok([ 'pg_dump', '-d', $old->connstr('postgres'), '-f', $dump ],
	'pg_dump succeeds');
# The old server goes on after the dump: terms the dump does not know.
my $term_after_dump = $old->safe_psql('postgres', q{
	SELECT release_leader('job', 'd');
	SELECT try_acquire_leader('job', '1 hour', 'x');
	SELECT release_leader('job', 'x');
	SELECT try_acquire_leader('job', '1 hour', 'd');
	SELECT leader_term('job', 'd');
});
$term_after_dump = (split /\n/, $term_after_dump)[-1];
cmp_ok($term_after_dump, '>', $term_before, 'the old server issued more terms after the dump');
$old->stop;

my $new = PostgreSQL::Test::Cluster->new('dump_target');
$new->init;
$new->start;
$new->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		'-d', $new->connstr('postgres'), '-f', $dump ],
	'restore succeeds');

is($new->safe_psql('postgres',
		q{SELECT holder || ' ' || term FROM leader_election.leases WHERE name = 'job'}),
	"d $term_before", 'lease row and term restored');
is($new->safe_psql('postgres',
		q{SELECT count(*) FROM leader_election.history WHERE name = 'job'}),
	'4', 'history restored');

# The restored named lease is still held by d; after its release the next
# holder gets a term larger than any issued before the dump.
$new->safe_psql('postgres', q{SELECT release_leader('job', 'd')});
is($new->safe_psql('postgres', q{SELECT try_acquire_leader('job', '1 hour', 'e')}),
	't', 'a new holder acquires after restore');
my $term_restored = $new->safe_psql('postgres',
	q{SELECT term FROM leader_election.leases WHERE name = 'job'});
cmp_ok($term_restored, '>', $term_after_dump,
	'term after restore is larger than every term the old server issued, even after the dump');
cmp_ok($term_restored, '>', 4294967296, 'the restored cluster drew it from a new era');

$new->stop;
done_testing();
