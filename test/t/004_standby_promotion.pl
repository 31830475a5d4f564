# 004_standby_promotion.pl: on a hot standby the write functions refuse to
# run (25006) while the read-only ones answer from replicated state; after
# promotion, new grants get terms larger than any the old primary issued.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = le_node('primary', allows_streaming => 1);

# Some committed history: 'job' changed hands three times, 'gone' was
# released.
for my $h (qw(a b c))
{
	$primary->safe_psql('postgres', qq{
		SELECT release_leader('job', holder)
		  FROM leader_election.leases WHERE name = 'job';
		SELECT try_acquire_leader('job', '1 hour', 'holder-$h');
	});
}
$primary->safe_psql('postgres', q{
	SELECT try_acquire_leader('gone', '1 hour', 'g');
	SELECT release_leader('gone', 'g');
});

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# One more grant after the backup, so it has to arrive by streaming; and a
# session-bound lease whose holder session stays alive on the primary.
$primary->safe_psql('postgres', q{SELECT try_acquire_leader('late', '1 hour', 'l')});
my $sess = le_session($primary);
is($sess->query_safe(q{SELECT try_acquire_leader('sess', '1 hour')}),
	't', 'a live primary session holds sess');
is($sess->query_safe(q{SELECT try_acquire_leader('short', '3 s')}),
	't', 'and short, with a 3 s ttl');
$primary->wait_for_catchup($standby);
my $max_before = $primary->safe_psql('postgres',
	'SELECT max(term) FROM leader_election.leases');

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'standby is in recovery');

# Write functions: 25006 on the standby, whatever the lease's state.
my %writes = (
	'try_acquire_leader (new name)' => q{SELECT try_acquire_leader('x', '1 hour', 'h')},
	'try_acquire_leader (held name)' => q{SELECT try_acquire_leader('job', '1 hour', 'holder-c')},
	'release_leader' => q{SELECT release_leader('job', 'holder-c')},
	'assert_leader' => q{SELECT assert_leader('job', NULL, 'holder-c')},
	'wait_for_leadership' => q{SELECT wait_for_leadership('gone', '1 hour', '1s', 'h')},
);
for my $what (sort keys %writes)
{
	is(le_sqlstate($standby, $writes{$what}), '25006', "standby: $what -> 25006");
}

# Read-only functions and views answer from the replicated rows.
is($standby->safe_psql('postgres', q{SELECT am_leader('job', 'holder-c')}),
	't', 'standby: am_leader true for the replicated holder');
is($standby->safe_psql('postgres', q{SELECT am_leader('job', 'holder-a')}),
	'f', 'standby: am_leader false for an earlier holder');
# Terms come from one counter per database: job 1-3, gone 4, late 5, sess 6.
is($standby->safe_psql('postgres', q{SELECT leader_term('late', 'l')}),
	'5', 'standby: leader_term of the streamed grant');
is($standby->safe_psql('postgres', q{SELECT holder, term FROM current_leader('job')}),
	'holder-c|3', 'standby: current_leader');
is($standby->safe_psql('postgres',
		q{SELECT string_agg(name || ':' || regexp_replace(coalesce(holder, '-'), ':.*', ':*') || ':' || term || ':' || valid, ' ' ORDER BY name)
		    FROM leader_election.leaders WHERE name <> 'short'}),
	'gone:-:4:false job:holder-c:3:true late:l:5:true sess:session:*:6:true',
	'standby: leaders view');

# The standby cannot see the primary's sessions; the replicated lease of a
# session that lives on the primary is valid as far as the standby knows
# (DESIGN 2: valid iff not expired and the holder backend alive, which it is).
is($standby->safe_psql('postgres',
		q{SELECT count(*) FROM current_leader('sess')}),
	'1', 'standby: current_leader shows the live primary session as leader of sess');

# Promoted while the old primary is still up, its holder session with it
# (a partition, a manager's mistake, a slow fencing script).
$standby->promote;
ok(le_poll($standby, 'SELECT NOT pg_is_in_recovery()'), 'standby promoted');

# The first grants on the new timeline move the term counter to a new era;
# none of them waits for another's transaction (a role holding its first
# grant's transaction open must not hold up everybody's failover).
my $slow = le_session($standby);
$slow->query_safe('BEGIN');
is($slow->query_safe(q{SELECT try_acquire_leader('first-after', '1 hour', 'slow')}),
	't', 'a first grant after promotion, its transaction left open');
is(le_sqlstate($standby, q{SET statement_timeout = '10s';
		SELECT try_acquire_leader('second-after', '1 hour', 'quick')}),
	'', 'another grant meanwhile does not wait for it');
$slow->query_safe('COMMIT');
le_quit($slow);
my %era = map { split /\|/ } split /\n/, $standby->safe_psql('postgres',
	q{SELECT name, term >> 32 FROM leader_election.leases WHERE name IN ('first-after', 'second-after')});
is($era{'first-after'}, $era{'second-after'}, 'both drew from the same new era (one jump)');

# The new primary cannot see the old primary's sessions end: their leases
# keep their replicated expires_at, and the ttl decides, as on a standby.
is($standby->safe_psql('postgres', q{SELECT try_acquire_leader('sess', '1 hour', 'new')}),
	'f', 'after promotion: the old primary session\'s lease is not free while its ttl runs');
is($sess->query_safe(q{SELECT try_acquire_leader('sess', '1 hour')}),
	't', 'meanwhile its holder still renews on the old primary (one leader, not two)');

# Old primary out of the way, as a failover would do.
le_quit($sess);
$primary->stop;
is($standby->safe_psql('postgres', q{SELECT try_acquire_leader('sess', '1 hour', 'new')}),
	'f', 'after the old primary stopped: still its ttl that decides');
is($standby->safe_psql('postgres', q{SELECT wait_for_leadership('short', '1 hour', '60 s', 'new')}),
	't', 'the old session\'s short lease is taken over once it expires');
is($standby->safe_psql('postgres',
		q{SELECT end_reason FROM leader_election.history WHERE name = 'short' ORDER BY term LIMIT 1}),
	'expired', 'and its term ended as expired, not session_ended');

is($standby->safe_psql('postgres', q{SELECT try_acquire_leader('job', '1 hour', 'holder-c')}),
	't', 'after promotion: the holder renews its lease');
$standby->safe_psql('postgres', q{
	SELECT release_leader('job', 'holder-c');
	SELECT try_acquire_leader('job', '1 hour', 'new');
	SELECT try_acquire_leader('gone', '1 hour', 'new');
	SELECT try_acquire_leader('brand-new', '1 hour', 'new');
});
for my $name (qw(job gone brand-new short))
{
	my $t = $standby->safe_psql('postgres',
		"SELECT term FROM leader_election.leases WHERE name = '$name'");
	cmp_ok($t, '>', $max_before,
		"after promotion: new grant of $name has term $t, above every term issued before ($max_before)");
}
is(le_sqlstate($standby, q{SELECT try_acquire_leader('job', '1 hour', 'x')}), '',
	'write functions work on the promoted standby');

$standby->stop;
done_testing();
