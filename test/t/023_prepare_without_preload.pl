# 023_prepare_without_preload.pl: a hand change of leader_election.leases
# cannot be prepared, with or without the library preloaded.  Otherwise a
# change prepared while the library is not preloaded could be committed
# (COMMIT PREPARED) after a restart with it preloaded, behind the lease
# cache's back, and the cache would go on answering from the old row.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('no_preload_prepare', preload => 0,
	conf => "max_prepared_transactions = 5\n");
$node->safe_psql('postgres', q{SELECT try_acquire_leader('pp', '1 hour', 'h')});

is( le_sqlstate(
		$node, q{
	BEGIN;
	UPDATE leader_election.leases SET holder = 'intruder' WHERE name = 'pp';
	PREPARE TRANSACTION 'hand_change';}),
	'0A000',
	'not preloaded: PREPARE of a transaction that changed leases by hand is refused');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_prepared_xacts}),
	'0', 'nothing was prepared');

# With the library preloaded, the cache answers; still no prepared change.
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'leader_election'\n");
$node->restart;
is($node->safe_psql('postgres', q{SELECT am_leader('pp', 'h')}), 't',
	'preloaded: h still leads');
is( le_sqlstate(
		$node, q{
	SET lock_timeout = '10s';    -- a change prepared above would block this
	BEGIN;
	DELETE FROM leader_election.leases WHERE name = 'pp';
	PREPARE TRANSACTION 'hand_change';}),
	'0A000',
	'preloaded: the same PREPARE is refused');

# A prepared transaction that only reads leases is fine.
is( le_sqlstate(
		$node, q{
	BEGIN;
	SELECT am_leader('pp', 'h');
	PREPARE TRANSACTION 'reader';
	COMMIT PREPARED 'reader';}),
	'', 'a transaction that only read a lease may be prepared');

$node->stop;
done_testing();
