# 005_lost_commit.pl: asynchronous replication loses the primary's last
# commits, and the promoted standby must still never hand out a term the old
# primary already issued.  Deterministic loss: stop the standby, grant new
# terms on the primary, kill -9 the primary, promote the standby.  The
# standby never saw those terms; its next grant must still be larger (the
# first grant on the new timeline moves the term counter to a new 2^32 era,
# lease_store.c).
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = le_node('primary', allows_streaming => 1);
$primary->safe_psql('postgres', q{
	SELECT try_acquire_leader('job', '1 hour', 'h1');
	SELECT try_acquire_leader('sess', '1 hour', 'named-holder');
});
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres',
		q{SELECT string_agg(name || '=' || term, ',' ORDER BY name) FROM leader_election.leases}),
	'job=1,sess=2', 'standby in sync: job at term 1, sess at term 2');

$standby->stop;

# Grants the standby will never see: job changes hands four times (terms 3
# to 6); sess is taken over by a session-bound holder (term 7).
my @lost;
for my $i (2 .. 5)
{
	my $prev = $i - 1;
	push @lost, $primary->safe_psql('postgres', qq{
		SELECT release_leader('job', 'h$prev');
		SELECT try_acquire_leader('job', '1 hour', 'h$i');
		SELECT term FROM leader_election.leases WHERE name = 'job';
	}) =~ /(\d+)$/;
}
is_deeply(\@lost, [ 3, 4, 5, 6 ], 'primary issued terms 3..6 of job');
my $lost_sess = $primary->safe_psql('postgres', q{
	SELECT release_leader('sess', 'named-holder');
	SELECT try_acquire_leader('sess', '1 hour');
	SELECT term FROM leader_election.leases WHERE name = 'sess';
}) =~ /(\d+)$/ ? $1 : undef;
is($lost_sess, 7, 'primary issued term 7 of sess');

le_kill9($primary);

$standby->start;
is($standby->safe_psql('postgres',
		q{SELECT string_agg(name || '=' || term, ',' ORDER BY name) FROM leader_election.leases}),
	'job=1,sess=2', 'the standby lacks the lost commits');
$standby->promote;
ok(le_poll($standby, 'SELECT NOT pg_is_in_recovery()'), 'standby promoted');

# On the standby 'job' is still held by h1 (term 1); a client of the new
# primary that knows nothing of the lost terms releases and re-acquires.
is($standby->safe_psql('postgres', q{SELECT release_leader('job', 'h1')}),
	't', 'h1 releases job on the new primary');
is($standby->safe_psql('postgres', q{SELECT try_acquire_leader('job', '1 hour', 'h-new')}),
	't', 'h-new acquires job on the new primary');
my $new = $standby->safe_psql('postgres', q{SELECT leader_term('job', 'h-new')});
cmp_ok($new, '>', $lost[-1],
	"the new term of job ($new) is above the lost term $lost[-1]");

$standby->safe_psql('postgres', q{SELECT release_leader('sess', 'named-holder')});
is($standby->safe_psql('postgres', q{SELECT try_acquire_leader('sess', '1 hour')}),
	't', 'a session acquires sess on the new primary');
my $new_sess = $standby->safe_psql('postgres',
	q{SELECT term FROM leader_election.leases WHERE name = 'sess'});
cmp_ok($new_sess, '>', $lost_sess,
	"the new term of sess ($new_sess) is above the lost term $lost_sess");

# A name first used after the promotion is above every old term as well.
$standby->safe_psql('postgres', q{SELECT try_acquire_leader('fresh', '1 hour', 'f')});
my $fresh = $standby->safe_psql('postgres', q{SELECT leader_term('fresh', 'f')});
cmp_ok($fresh, '>', $lost[-1], "a new name's first term ($fresh) is above every old term");

$standby->stop;
done_testing();
