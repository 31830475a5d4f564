# 252_clock_steps.pl: what steps of the server's wall clock do to leases,
# with the postmaster running under libfaketime (Debian's faketime package).
#
# Every lease decision compares the server's wall clock (clock_timestamp())
# with expires_at, so stepping that clock moves every lease's end in real
# time.  What a jump does:
#
#   Forward by J: every lease ends J early in real time.  A lease whose
#   remaining time is less than J expires at once and a candidate can take
#   it over with the next term, while the old holder may still believe it
#   leads.  That is exactly the "paused holder" case and fencing covers it:
#   a transaction fenced by assert_leader() before the jump keeps the lease
#   row locked, so no takeover happens until it ends (its write is ordered
#   before the new term); after the takeover the old holder's fenced writes
#   with its old term fail with LE001, its renewals get false.  Safety holds;
#   only the real-time length of the lease shrank.
#
#   Backward by J: every lease lasts J longer in real time.  Nobody else is
#   granted the lease meanwhile (a candidate gets false): a loss of liveness
#   if the holder died, never a second holder.  A renewal sets expires_at to
#   the (earlier) now + ttl, so it may move expires_at back.  Terms never
#   decrease; only the timestamps recorded in history (acquired_at) may go
#   backwards from one term to the next.  A released lease, and a
#   session-bound lease whose holder backend ended, can be taken at once:
#   neither depends on the clock.
#
# The monotonic clock is left real (FAKETIME_DONT_FAKE_MONOTONIC), as after
# an NTP step, so PostgreSQL's timeouts and latch waits behave normally.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
plan skip_all => "libfaketime is not installed ($libfaketime)"
  unless -e $libfaketime;

# The clock offset the server sees is read from this file on every call.
my $clock_file = PostgreSQL::Test::Utils::tempdir . '/faketime';

sub set_offset
{
	my ($seconds) = @_;
	open my $fh, '>', "$clock_file.new" or die $!;
	printf $fh "%+d\n", $seconds;
	close $fh;
	rename "$clock_file.new", $clock_file or die $!;    # atomic for readers
	return;
}

# The server's clock minus the real clock (this Perl process is not faked).
sub server_offset
{
	my ($node) = @_;
	my $before = time();
	my $server = $node->safe_psql('postgres',
		'SELECT extract(epoch FROM clock_timestamp())');
	return $server - ($before + time()) / 2;
}

set_offset(0);
my $node = PostgreSQL::Test::Cluster->new('clock');
$node->init;
$node->append_conf('postgresql.conf', qq{
max_connections = 30
shared_preload_libraries = 'leader_election'
});
{
	# Only the postmaster (and pg_ctl) run under libfaketime; its children
	# inherit it.  The test process itself keeps the real clock.
	local $ENV{LD_PRELOAD} = $libfaketime;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $clock_file;
	local $ENV{FAKETIME_NO_CACHE} = '1';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->start;
}
$node->safe_psql('postgres', q{
	CREATE EXTENSION leader_election;
	CREATE TABLE effects (term bigint NOT NULL, holder text NOT NULL);
});

# The server really runs under libfaketime: step forward and see it.
set_offset(3600);
ok(le_wait_until(sub { abs(server_offset($node) - 3600) < 60 }),
	'the server clock follows the faketime file (one hour ahead)')
  or BAIL_OUT('libfaketime does not control the server clock');
set_offset(0);
ok(le_wait_until(sub { abs(server_offset($node)) < 60 }),
	'and back to real time');

sub term_of
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT term FROM leader_election.leases WHERE name = '$name'");
}

# ==== forward jump past the ttl ====
my $old = le_session($node);
is($old->query_safe(q{SELECT try_acquire_leader('job', '1 minute', 'old')}),
	't', 'old acquires job with a 1 minute ttl');
my $term = term_of('job');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('job', '1 minute', 'new')}),
	'f', 'before the jump the candidate gets false');

# old fences a transaction, then the clock jumps 5 minutes forward while the
# transaction is open.
$old->query_safe("BEGIN; SELECT assert_leader('job', $term, 'old')");
set_offset(300);
ok(le_wait_until(sub { abs(server_offset($node) - 300) < 60 }),
	'the server clock jumped 5 minutes forward');
is($node->safe_psql('postgres',
		q{SELECT valid FROM leader_election.leaders WHERE name = 'job'}),
	'f', 'the 1 minute lease has expired at once');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('job', '1 minute', 'new')}),
	'f', 'but the candidate gets false while old\'s fenced transaction is open');
$old->query_safe("INSERT INTO effects VALUES ($term, 'old'); COMMIT");

is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('job', '1 minute', 'new')}),
	't', 'after it commits the candidate takes over');
is(term_of('job'), $term + 1, 'with the next term');
$node->safe_psql('postgres',
	"BEGIN; SELECT assert_leader('job', @{[$term + 1]}, 'new');
	 INSERT INTO effects VALUES (@{[$term + 1]}, 'new'); COMMIT;");

# old, unaware, goes on: its fenced write is rejected, its renewal refused.
$old->{stderr} = '';
$old->query("BEGIN; SELECT assert_leader('job', $term, 'old')");
like($old->{stderr}, qr/LE001/, "old's fenced write with the old term gets LE001");
$old->query("INSERT INTO effects VALUES ($term, 'old stale'); COMMIT");
$old->{stderr} = '';    # BackgroundPsql keeps stderr across queries
is($old->query_safe(q{SELECT try_acquire_leader('job', '1 minute', 'old')}),
	'f', "old's renewal gets false");
is($old->query_safe(q{SELECT am_leader('job', 'old')}), 'f',
	'old is not the leader');
is($node->safe_psql('postgres',
		q{SELECT string_agg(term || ':' || holder, ',' ORDER BY ctid) FROM effects}),
	"$term:old," . ($term + 1) . ':new',
	'effects: old\'s fenced write before the takeover, the new term\'s after, no stale write');
is($node->safe_psql('postgres',
		"SELECT end_reason FROM leader_election.history
		  WHERE name = 'job' AND term = $term"),
	'expired', 'history: the old term expired');

# ==== backward jump ====
# new holds term + 1 with a 1 minute ttl; the clock steps 10 minutes back
# (from +5 to -5 minutes).
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('job', '1 minute', 'new')}),
	't', 'new renews before the backward jump');
my $expires_before = $node->safe_psql('postgres',
	q{SELECT expires_at FROM leader_election.leases WHERE name = 'job'});
set_offset(-300);
ok(le_wait_until(sub { abs(server_offset($node) + 300) < 60 }),
	'the server clock jumped 10 minutes back');
cmp_ok($node->safe_psql('postgres',
		q{SELECT seconds_left FROM leader_election.leaders WHERE name = 'job'}),
	'>', 600, 'the lease now has more than 10 minutes left: it lasts longer');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('job', '1 minute', 'third')}),
	'f', 'a candidate gets false: no second holder');
is($node->safe_psql('postgres', q{SELECT am_leader('job', 'new')}),
	't', 'new is still the leader');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('job', '1 minute', 'new')}),
	't', 'new renews');
is(term_of('job'), $term + 1, 'the renewal kept the term');
is($node->safe_psql('postgres',
		"SELECT expires_at < '$expires_before' FROM leader_election.leases WHERE name = 'job'"),
	't', 'the renewal moved expires_at back (now + ttl on the stepped clock)');

# Release does not depend on the clock; the next grant has a larger term even
# though its acquired_at is earlier than the previous term's.
is($node->safe_psql('postgres', q{SELECT release_leader('job', 'new')}),
	't', 'new releases');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('job', '1 minute', 'third')}),
	't', 'third acquires at once');
is(term_of('job'), $term + 2, 'terms never decrease: term + 2');
is($node->safe_psql('postgres',
		"SELECT (SELECT acquired_at FROM leader_election.history WHERE name = 'job' AND term = @{[$term + 2]})
		      < (SELECT acquired_at FROM leader_election.history WHERE name = 'job' AND term = @{[$term + 1]})"),
	't', 'history: the later term has the earlier acquired_at');

# A session-bound lease ends with its holder backend whatever the clock says.
my $s = le_session($node);
is($s->query_safe(q{SELECT try_acquire_leader('sess', '1 minute')}),
	't', 'a session acquires sess under its session identity');
le_quit($s);
ok(le_poll($node, q{SELECT try_acquire_leader('sess', '1 minute', 'other')}),
	'after the session ends another holder takes sess at once');

le_quit($old);
set_offset(0);
$node->stop;
done_testing();
