# Terms survive pg_dump and restore into a fresh cluster: the lease table is
# an extension configuration table (pg_extension_config_dump), so the next
# grant after a restore continues the term sequence instead of restarting at
# 1, which would let a fenced resource accept a stale leader's writes again.
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
cmp_ok($new->safe_psql('postgres',
		q{SELECT term FROM leader_election.leases WHERE name = 'job'}),
	'>', $term_before, 'term after restore is larger than every term before');

$new->stop;
done_testing();
