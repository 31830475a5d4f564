# 003_postmaster_kill9.pl: SIGKILL of the postmaster, then a start with
# crash recovery.  Committed leases and terms come back from the WAL, an
# uncommitted acquisition does not, terms keep increasing (no reuse of a
# term after recovery), and session-bound leases of the dead sessions are
# free.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('kill9');

sub terms
{
	return { map { split /\|/ } split /\n/,
		  $node->safe_psql('postgres',
			'SELECT name, term FROM leader_election.leases ORDER BY name') };
}

# Committed state: 'named' reaches term 4 through releases and re-grants,
# 'sess' is held by a live session.
for my $i (1 .. 4)
{
	$node->safe_psql('postgres', qq{
		SELECT release_leader('named', holder)
		  FROM leader_election.leases WHERE name = 'named';
		SELECT try_acquire_leader('named', '1 hour', 'holder-$i');
	});
}
my $sess = le_session($node);
is($sess->query_safe(q{SELECT try_acquire_leader('sess', '1 hour')}),
	't', 'a session-bound holder takes sess');
my $before = terms();
is_deeply($before, { named => 4, sess => 5 },
	'committed terms before the kill (one counter per database)');

# Uncommitted when the postmaster dies: a release and re-grant of 'named'
# (a new term) and a new name.
my $open = le_session($node);
$open->query_safe('BEGIN');
is($open->query_safe(q{SELECT release_leader('named', 'holder-4')}),
	't', 'open transaction releases named');
is($open->query_safe(q{SELECT try_acquire_leader('named', '1 hour', 'u')}),
	't', 'and re-grants it (uncommitted new term)');
is($open->query_safe(q{SELECT try_acquire_leader('fresh', '1 hour', 'u')}),
	't', 'open transaction acquires a new name');

le_kill9($node);
le_quit($open, $sess);
$node->start;

is_deeply(terms(), $before, 'after recovery: committed terms are back, uncommitted gone');
is($node->safe_psql('postgres', q{SELECT am_leader('named', 'holder-4')}),
	't', 'holder-4 still leads named (the release was never committed)');
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('named', '1 hour', 'x')}),
	'f', 'a candidate still gets false for named');
is($node->safe_psql('postgres', q{SELECT valid FROM leader_election.leaders WHERE name = 'sess'}),
	'f', 'the session-bound lease of a dead session is invalid');
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('sess', '1 hour', 'y')}),
	't', 'and is taken over at once');

$node->safe_psql('postgres', q{
	SELECT release_leader('named', 'holder-4');
	SELECT try_acquire_leader('named', '1 hour', 'z');
});
my $after = terms();
cmp_ok($after->{named}, '>', $before->{named},
	"named: next grant's term ($after->{named}) above the committed $before->{named}");
cmp_ok($after->{sess}, '>', $before->{sess},
	"sess: takeover term ($after->{sess}) above the committed $before->{sess}");
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM leader_election.history WHERE name = 'named'}),
	'5', 'history of named: four committed terms plus the new one, no duplicates');

$node->stop;
done_testing();
