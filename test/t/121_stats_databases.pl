# 121_stats_databases.pl: leader_election.stats and dropped databases
# (src/stats.c, "SHARED MEMORY"; README "Counters").
#
# A database that counted something and is then dropped leaves the view
# (no row with datname NULL); one created again with the same OID starts
# from zero instead of inheriting the dropped one's counters; and after more
# create/count/drop cycles than there are slots (256), a new database still
# gets its row and stats_reset() works there.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('statsdb');

# A template with the extension, so that each database is quick to make.
$node->safe_psql('postgres', q{CREATE DATABASE tmpl});
$node->safe_psql('tmpl', q{CREATE EXTENSION leader_election});

# Count one grant in db.
sub count_grant
{
	my ($db) = @_;
	$node->safe_psql($db, q{SELECT try_acquire_leader('n', '1 minute', 'h')});
	return;
}

# The stats row of datid, as 'datname|grants', or '' if none.
sub row_of
{
	my ($oid) = @_;
	return $node->safe_psql('postgres', qq{SELECT coalesce(datname, '(null)') || '|' || grants
		FROM leader_election.stats WHERE datid = $oid});
}

$node->safe_psql('postgres', q{CREATE DATABASE gone TEMPLATE tmpl STRATEGY FILE_COPY});
my $oid = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'gone'});
count_grant('gone');
count_grant('gone');
is(row_of($oid), 'gone|1', 'a database that counted has its row');

$node->safe_psql('postgres', q{DROP DATABASE gone});
is(row_of($oid), '', 'a dropped database leaves the view');
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.stats WHERE datname IS NULL}),
	'0', 'no row without a database');

# The same OID again: counters start from zero.
$node->safe_psql('postgres', qq{CREATE DATABASE again TEMPLATE tmpl STRATEGY FILE_COPY OID $oid});
is(row_of($oid), '', 'a database created again with the same OID has no row yet');
count_grant('again');
is(row_of($oid), 'again|1', 'and counts from zero, not from the dropped database\'s counters');
$node->safe_psql('postgres', q{DROP DATABASE again});

# A DROP DATABASE that fails (someone is connected) keeps the counters.
$node->safe_psql('postgres', q{CREATE DATABASE kept TEMPLATE tmpl STRATEGY FILE_COPY});
my $kept = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'kept'});
count_grant('kept');
my $s = $node->background_psql('kept');
$s->query_safe('SELECT 1');
my ($rc, $out, $err) = $node->psql('postgres', q{DROP DATABASE kept});
isnt($rc, 0, 'DROP DATABASE with a session connected fails');
is(row_of($kept), 'kept|1', 'a failed DROP DATABASE keeps the counters');
le_quit($s);

# More cycles than slots (256): one psql run creates, uses and drops each.
my $script = '';
for my $i (1 .. 260)
{
	$script .= qq{CREATE DATABASE cycle TEMPLATE tmpl STRATEGY FILE_COPY;
\\c cycle
SELECT try_acquire_leader('n', '1 minute', 'h');
\\c postgres
DROP DATABASE cycle;
};
}
$node->safe_psql('postgres', $script);
$node->safe_psql('postgres', q{CREATE DATABASE fresh TEMPLATE tmpl STRATEGY FILE_COPY});
my $fresh = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'fresh'});
count_grant('fresh');
is(row_of($fresh), 'fresh|1', 'after 260 dropped databases a new one still gets its row');
$node->safe_psql('fresh', q{SELECT leader_election.stats_reset()});
is(row_of($fresh), 'fresh|0', 'and stats_reset() works there');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.stats}), '<=', 3,
	'only existing databases have rows');

done_testing();
