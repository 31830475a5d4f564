# 019_walsender_waiters.pl: waiters that are walsenders.
#
# A replication=database connection is served by a walsender, which runs
# SQL, wait_for_leadership() included, but is not counted in
# max_connections.  Every waiter must still get its entry among the ranked
# waiters (waiters.c): one without an entry is not ranked (it may take a
# lease a higher-priority waiter should have) and not counted by
# waiting_candidates().  The table had max_connections +
# max_worker_processes entries; here 4 + 2, with 7 waiters that are
# walsenders.
use strict;
use warnings;
use lib 'test/t';
use IPC::Run;
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $waiters = 7;
my $node = le_node('walsender_waiters', allows_streaming => 1,
	conf => "max_connections = 4\nmax_worker_processes = 2\nmax_wal_senders = 10\n");

my $holder = le_session($node);
is($holder->query_safe(q{SELECT try_acquire_leader('q', '1 hour')}),
	't', 'a session holds q');

my $replication = $node->connstr('postgres') . ' replication=database';
my @runs;
for my $i (1 .. $waiters)
{
	my ($out, $err) = ('', '');
	push @runs,
	  IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $replication, '-c',
			"SELECT wait_for_leadership('q', '1 hour', '5 minutes', 'w$i')" ],
		'>', \$out, '2>', \$err);
}
ok( le_poll($node,
		qq{SELECT count(*) = $waiters FROM pg_stat_activity
		    WHERE backend_type = 'walsender' AND wait_event_type = 'Extension'}),
	"$waiters walsenders sleep in wait_for_leadership");
is($node->safe_psql('postgres', q{SELECT leader_election.waiting_candidates('q')}),
	$waiters, 'waiting_candidates counts every one of them');

$holder->query_safe(q{SELECT release_leader('q')});
ok( le_poll($node,
		q{SELECT holder LIKE 'w%' FROM leader_election.leases WHERE name = 'q'}),
	'one of them takes the lease when it frees');
$node->safe_psql('postgres',
	q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'walsender'});
$_->finish for @runs;
le_quit($holder);
$node->stop;
done_testing();
