# 022_fresh_answers.pl: every answer is the state committed at an instant
# inside the call, however long the calling statement has been running
# (lease.c I5) -- with the library preloaded (answers from the lease cache)
# and without (answers from the table), and under every isolation level.
#
# The statement under test blocks on an advisory lock the test holds before
# it calls am_leader(); meanwhile the lease is released and taken over; the
# test then lets the statement go on.  An answer from the statement's own
# snapshot, taken when it started, would still say the first holder leads.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

for my $preload (1, 0)
{
	my $label = $preload ? 'preloaded' : 'not preloaded';
	my $node = le_node($preload ? 'fresh_cache' : 'fresh_table', preload => $preload);

	for my $iso ('read committed', 'repeatable read', 'serializable')
	{
		$node->safe_psql('postgres', q{
			SELECT release_leader('f', holder) FROM leader_election.leases WHERE name = 'f';
			SELECT try_acquire_leader('f', '1 hour', 'h1');
		});
		my $gate = le_session($node);
		$gate->query_safe('SELECT pg_advisory_lock(4242)');

		my $asker = le_session($node);
		$asker->query_safe("SET default_transaction_isolation = '$iso'");
		# The first column blocks; the others are computed after it returns.
		le_send($asker, q{SELECT pg_advisory_lock(4242) IS NULL AS gate,
			am_leader('f', 'h1') AS h1, am_leader('f', 'h2') AS h2,
			coalesce(leader_term('f', 'h2'), 0) AS h2_term,
			(SELECT count(*) FROM current_leader('f') WHERE holder = 'h2') AS current_h2});
		ok( le_poll($node,
				qq{SELECT wait_event_type FROM pg_stat_activity WHERE pid = $asker->{le_pid}},
				'Lock'),
			"$label, $iso: the asking statement is running and blocked");

		# Released and taken over while the statement runs.
		my $term = $node->safe_psql('postgres', q{
			SELECT release_leader('f', 'h1');
			SELECT try_acquire_leader('f', '1 hour', 'h2');
			SELECT leader_term('f', 'h2');
		});
		$term = (split /\n/, $term)[-1];
		$gate->query_safe('SELECT pg_advisory_unlock(4242)');
		my ($out) = le_collect($asker);
		is($out, "f|f|t|$term|1",
			"$label, $iso: the answers inside the old statement show the takeover");
		le_quit($gate, $asker);
	}
	$node->stop;
}
done_testing();
