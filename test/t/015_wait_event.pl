# 015_wait_event.pl: what pg_stat_activity shows for a session blocked in
# wait_for_leadership().
#
# On PostgreSQL 17 and later the extension registers a wait event of its
# own (compat.h, le_wait_event_for_leadership), so a monitoring query sees
# wait_event_type 'Extension' and wait_event 'LeaderElectionWaitForLeadership'
# and the event is listed in pg_wait_events; older servers show the
# generic 'Extension' / 'Extension'.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('wait_event');
my $version = $node->safe_psql('postgres', 'SHOW server_version_num');
my $expected = $version >= 170000 ? 'LeaderElectionWaitForLeadership' : 'Extension';

my $h = le_session($node);
is($h->query_safe(q{SELECT try_acquire_leader('we', '1 hour')}), 't', 'the holder acquires');
my $w = le_session($node);
ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('we', '1 hour')}),
	'the candidate blocks in wait_for_leadership');
is( $node->safe_psql('postgres',
		"SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $w->{le_pid}"),
	"Extension/$expected",
	"pg_stat_activity shows Extension/$expected (server_version_num $version)");
if ($version >= 170000)
{
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_wait_events WHERE type = 'Extension' AND name = '$expected'"),
		'1', 'pg_wait_events lists the named wait event');
}
is($h->query_safe(q{SELECT release_leader('we')}), 't', 'the holder releases');
my ($out) = le_collect($w);
is($out, 't', 'the candidate wakes and acquires');
le_quit($h, $w);
$node->stop;
done_testing();
