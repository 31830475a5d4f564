# 011_wait_without_preload.pl: wait_for_leadership() on a server WITHOUT
# leader_election in shared_preload_libraries.  There is no shared memory
# for wakeups, so waiters fall back to re-checking on a short period; they
# must still acquire on release, holder termination and expiry, and
# leaders.waiting_candidates is NULL (unknown) rather than a wrong count.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('nopreload', preload => 0);
my %latency;

is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), '',
	'the library is not preloaded');

sub wait_result
{
	my ($s) = @_;
	my ($out, $err) = le_collect($s);
	diag("wait failed: $err") if defined $err && $err ne '';
	return $out;
}

# ---- release ----
{
	my $h = le_session($node);
	is($h->query_safe(q{SELECT try_acquire_leader('rel', '1 hour')}), 't',
		'rel: holder acquires (ttl 1 hour)');
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('rel', '1 hour')}),
		'rel: waiter blocks in wait_for_leadership');
	is($node->safe_psql('postgres',
			q{SELECT waiting_candidates IS NULL FROM leader_election.leaders WHERE name = 'rel'}),
		't', 'rel: waiting_candidates is NULL without preloading');
	is($h->query_safe(q{SELECT release_leader('rel')}), 't', 'rel: holder releases');
	is(wait_result($w), 't', 'rel: the waiter acquires');
	is($w->query_safe(q{SELECT leader_term('rel')}), '2', 'rel: with term 2');
	$latency{release} = le_wake_ms($node, 'rel',
		$node->safe_psql('postgres',
			q{SELECT ended_at FROM leader_election.history WHERE name = 'rel' ORDER BY term LIMIT 1}));
	le_quit($h, $w);
}

# ---- holder backend terminated ----
{
	my $h = le_session($node);
	is($h->query_safe(q{SELECT try_acquire_leader('term', '1 hour')}), 't',
		'term: holder acquires (ttl 1 hour)');
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('term', '1 hour')}),
		'term: waiter blocks');
	my ($t0) = split /\|/, $node->safe_psql('postgres',
		"SELECT clock_timestamp(), pg_terminate_backend($h->{le_pid})");
	is(wait_result($w), 't', 'term: the waiter acquires after pg_terminate_backend');
	is($node->safe_psql('postgres',
			q{SELECT end_reason FROM leader_election.history WHERE name = 'term' ORDER BY term LIMIT 1}),
		'session_ended', 'term: old term ended as session_ended');
	$latency{terminate} = le_wake_ms($node, 'term', $t0);
	le_quit($h, $w);
}

# ---- expiry of a named lease ----
# Shortened to 1 s only once the waiter sleeps (see 010).
{
	$node->safe_psql('postgres', q{SELECT try_acquire_leader('exp', '1 hour', 'h')});
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('exp', '1 hour', NULL, 'w')}),
		'exp: waiter blocks on a named lease');
	is($node->safe_psql('postgres', q{SELECT try_acquire_leader('exp', '1s', 'h')}),
		't', 'exp: the holder renews with ttl 1s, then stops renewing');
	is(wait_result($w), 't', 'exp: the waiter acquires once the lease expired');
	$latency{expiry} = le_wake_ms($node, 'exp',
		$node->safe_psql('postgres',
			q{SELECT ended_at FROM leader_election.history WHERE name = 'exp' ORDER BY term LIMIT 1}));
	cmp_ok($latency{expiry}, '>=', 0, 'exp: not before the expiry');
	le_quit($w);
}

# ---- cancel still works while polling ----
{
	my $h = le_session($node);
	$h->query_safe(q{SELECT try_acquire_leader('busy', '1 hour')});
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('busy', '1 hour')}),
		'cancel: waiter blocks');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w->{le_pid})");
	my ($out, $err) = le_collect($w);
	like($err // 'timeout', qr/ERROR:\s+57014/, 'cancel: interrupted with 57014');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_locks WHERE pid = $w->{le_pid} AND locktype = 'advisory'"),
		'0', 'cancel: no advisory lock left');
	le_quit($h, $w);
}

diag(sprintf('wake-up latency without preload %-10s %8.1f ms', $_, $latency{$_}))
  for sort keys %latency;

$node->stop;
done_testing();
