# 010_wait_for_leadership.pl: wait_for_leadership() with the library in
# shared_preload_libraries (wakeups through shared memory).
#
# A candidate blocked in wait_for_leadership() wakes and acquires when the
# lease frees: release, holder backend terminated, holder client quitting,
# the holder dropping its liveness lock (pg_advisory_unlock_all), expiry of
# a named lease, end of a fenced transaction.  A timeout returns false;
# cancel and statement_timeout interrupt it with 57014 and leave nothing
# behind, and a terminated waiter is no longer counted, nor counted for
# another name.  Of two waiters
# exactly one wins, the other keeps waiting.
#
# Holder ttls are an hour wherever the test is about a wakeup other than
# expiry, so expiry cannot explain the acquisition.  Wake-up latencies
# (server clock, from the event to the waiter's acquired_at) are printed
# with diag, not asserted: this is no benchmark.  A few milliseconds means a
# wakeup; about a second means the waiter only found the free lease on its
# periodic safety re-check.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('wait');
my %latency;

sub waiting_candidates
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT waiting_candidates FROM leader_election.leaders WHERE name = '$name'");
}

# The result ('t'/'f') of a session's pending wait, or undef on timeout.
sub wait_result
{
	my ($s) = @_;
	my ($out, $err) = le_collect($s);
	diag("wait failed: $err") if defined $err && $err ne '';
	return $out;
}

# A holder session with a session-bound lease on name (ttl one hour).
sub new_holder
{
	my ($name) = @_;
	my $h = le_session($node);
	is($h->query_safe("SELECT try_acquire_leader('$name', '1 hour')"),
		't', "$name: holder acquires (ttl 1 hour)");
	return $h;
}

# ---- release ----
{
	my $h = new_holder('rel');
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('rel', '1 hour')}),
		'rel: waiter blocks in wait_for_leadership');
	is(waiting_candidates('rel'), '1', 'rel: leaders.waiting_candidates = 1');
	# Waiters share 1024 wakeup slots with the names that hash alike; about
	# 10 of these 10,000 names share rel's, and showed its waiter as theirs
	# (another role's name among them).
	$node->safe_psql('postgres', q{
		DO $$ BEGIN
			FOR g IN 1 .. 10000 LOOP
				PERFORM try_acquire_leader('x' || g, '1 hour', 'x');
				IF g % 1000 = 0 THEN COMMIT; END IF;
			END LOOP;
		END $$});
	is($node->safe_psql('postgres', q{
			SELECT count(*) FILTER (WHERE waiting_candidates IS NULL) || ' null, '
			    || count(*) FILTER (WHERE waiting_candidates <> 0) || ' counting a waiter'
			  FROM leader_election.leaders WHERE name LIKE 'x%'}),
		'0 null, 0 counting a waiter', 'rel: no other name counts its waiter');
	is($node->safe_psql('postgres', q{SELECT leader_election.waiting_candidates('never-used')}),
		'', 'a name not in use: NULL (its first use may be another role\'s, uncommitted)');
	is($h->query_safe(q{SELECT release_leader('rel')}), 't', 'rel: holder releases');
	is(wait_result($w), 't', 'rel: the waiter wakes and acquires');
	is($w->query_safe(q{SELECT leader_term('rel') = (SELECT max(term) FROM leader_election.history)}),
		't', 'rel: with a new term');
	is(waiting_candidates('rel'), '0', 'rel: waiting_candidates back to 0');
	$latency{release} = le_wake_ms($node, 'rel',
		$node->safe_psql('postgres',
			q{SELECT ended_at FROM leader_election.history WHERE name = 'rel' ORDER BY term LIMIT 1}));
	le_quit($h, $w);
}

# ---- holder backend terminated ----
{
	my $h = new_holder('term');
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

# ---- holder client quits ----
{
	my $h = new_holder('quit');
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('quit', '1 hour')}),
		'quit: waiter blocks');
	my $t0 = le_now($node);
	$h->quit;
	is(wait_result($w), 't', 'quit: the waiter acquires after the holder client quit');
	$latency{client_quit} = le_wake_ms($node, 'quit', $t0);
	le_quit($w);
}

# ---- holder drops its liveness lock (pg_advisory_unlock_all) ----
# Documented: this ends the session's session-bound leases.  The waiter must
# acquire; the latency shows whether it was woken or found it on a re-check.
{
	my $h = new_holder('unlock');
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('unlock', '1 hour')}),
		'unlock: waiter blocks');
	my $t0 = le_now($node);
	$h->query_safe('SELECT pg_advisory_unlock_all()');
	is(wait_result($w), 't', 'unlock: the waiter acquires after pg_advisory_unlock_all in the holder');
	$latency{advisory_unlock_all} = le_wake_ms($node, 'unlock', $t0);
	le_quit($h, $w);
}

# ---- expiry of a named lease ----
# The holder shortens its lease to 1 s only once the waiter sleeps, so the
# waiter is sure to be waiting when the lease runs out; the renewal itself
# wakes it to learn the new expiry.
{
	$node->safe_psql('postgres', q{SELECT try_acquire_leader('exp', '1 hour', 'h')});
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('exp', '1 hour', NULL, 'w')}),
		'exp: waiter blocks on a named lease');
	is($node->safe_psql('postgres', q{SELECT try_acquire_leader('exp', '1s', 'h')}),
		't', 'exp: the holder renews with ttl 1s, then stops renewing');
	is(wait_result($w), 't', 'exp: the waiter acquires once the lease expired');
	my $ended = $node->safe_psql('postgres',
		q{SELECT ended_at FROM leader_election.history WHERE name = 'exp' ORDER BY term LIMIT 1});
	is($node->safe_psql('postgres',
			q{SELECT end_reason FROM leader_election.history WHERE name = 'exp' ORDER BY term LIMIT 1}),
		'expired', 'exp: old term ended as expired');
	$latency{expiry} = le_wake_ms($node, 'exp', $ended);
	cmp_ok($latency{expiry}, '>=', 0, 'exp: not before the expiry');
	le_quit($w);
}

# ---- end of a fenced transaction ----
{
	my $h = le_session($node);
	is($h->query_safe(q{SELECT try_acquire_leader('fence', '1 hour', 'h')}), 't',
		'fence: named holder acquires');
	# Shorten the lease and fence in one round trip (see 006).
	is($h->query_safe(q{
			SELECT try_acquire_leader('fence', '2s', 'h');
			BEGIN;
			SELECT assert_leader('fence', NULL, 'h') = leader_term('fence', 'h');}),
		"t\nt", 'fence: holder renews with ttl 2s and fences its transaction');
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('fence', '1 hour', NULL, 'w')}),
		'fence: waiter blocks');
	ok(le_poll($node,
			q{SELECT clock_timestamp() > expires_at FROM leader_election.leases WHERE name = 'fence'}),
		'fence: the lease expired while the fence is open');
	ok(!le_finished($w), 'fence: the waiter is still waiting');
	my $t0 = le_now($node);
	$h->query_safe('COMMIT');
	is(wait_result($w), 't', 'fence: the waiter acquires when the fenced transaction ends');
	$latency{fence_commit} = le_wake_ms($node, 'fence', $t0);
	le_quit($h, $w);
}

# ---- timeout ----
my $busy = new_holder('busy');
is($node->safe_psql('postgres', q{
		SELECT r, e >= interval '200 ms', e < interval '30 s'
		  FROM (SELECT wait_for_leadership('busy', '1 hour', '200ms') AS r,
		               clock_timestamp() - statement_timestamp() AS e) AS x}),
	'f|t|t', 'timeout: false after about 200 ms');

# ---- cancel and statement_timeout leave nothing behind ----
sub nothing_left
{
	my ($w, $what) = @_;
	my $pid = $w->{le_pid};
	is($node->safe_psql('postgres', qq{
			SELECT (SELECT count(*) FROM leader_election.leases
			         WHERE holder_pid = $pid OR session_pid = $pid),
			       (SELECT count(*) FROM pg_locks
			         WHERE pid = $pid AND locktype = 'advisory'),
			       (SELECT waiting_candidates FROM leader_election.leaders
			         WHERE name = 'busy')}),
		'0|0|0', "$what: no lease row, no advisory lock, no waiting candidate left");
	is($w->query_safe('SELECT 1'), '1', "$what: the session goes on");
}

{
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('busy', '1 hour')}),
		'cancel: waiter blocks');
	is(waiting_candidates('busy'), '1', 'cancel: waiting_candidates = 1');
	# Its first attempt read the tables and prepared a takeover (plans, the
	# term era): none of it may leave a lock behind while it sleeps, or DDL
	# (ALTER EXTENSION UPDATE) would queue behind the waiter.
	is($node->safe_psql('postgres', qq{
			SELECT count(*) FROM pg_locks
			 WHERE pid = $w->{le_pid} AND locktype = 'relation'}),
		'0', 'a sleeping waiter holds no relation lock');
	is($node->safe_psql('postgres', q{
			SET lock_timeout = '2s';
			BEGIN;
			LOCK TABLE leader_election.leases, leader_election.history,
			           leader_election.term_era IN ACCESS EXCLUSIVE MODE;
			COMMIT;
			SELECT 'locked'}),
		'locked', 'DDL locks on the tables are granted while the waiter sleeps');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w->{le_pid})");
	my ($out, $err) = le_collect($w);
	like($err // 'timeout', qr/ERROR:\s+57014: canceling statement due to user request/,
		'cancel: pg_cancel_backend interrupts the wait with 57014');
	nothing_left($w, 'cancel');

	$w->query_safe(q{SET statement_timeout = '300ms'});
	le_send($w, q{SELECT wait_for_leadership('busy', '1 hour')});
	($out, $err) = le_collect($w);
	like($err // 'timeout', qr/ERROR:\s+57014: canceling statement due to statement timeout/,
		'statement_timeout interrupts the wait with 57014');
	$w->query_safe('RESET statement_timeout');
	nothing_left($w, 'statement_timeout');
	le_quit($w);
}

# ---- two waiters: one wins, the other keeps waiting ----
{
	my @w = (le_session($node), le_session($node));
	for my $i (0, 1)
	{
		ok(le_start_wait($node, $w[$i], q{SELECT wait_for_leadership('busy', '1 hour')}),
			"two: waiter $i blocks");
	}
	is(waiting_candidates('busy'), '2', 'two: waiting_candidates = 2');
	my $t0 = le_now($node);
	is($busy->query_safe(q{SELECT release_leader('busy')}), 't', 'two: holder releases');
	ok(le_wait_until(sub { le_finished($w[0]) || le_finished($w[1]) }),
		'two: a waiter returns');
	my ($winner, $loser) = le_finished($w[0]) ? @w : reverse @w;
	is(wait_result($winner), 't', 'two: the first to return acquired');
	$latency{release_two_waiters} = le_wake_ms($node, 'busy', $t0);
	is($node->safe_psql('postgres',
			q{SELECT holder_pid FROM leader_election.leaders WHERE name = 'busy'}),
		$winner->{le_pid}, 'two: the lease is the winner\'s');
	ok(le_wait_sleeping($node, $loser->{le_pid}), 'two: the loser sleeps again');
	is(waiting_candidates('busy'), '1', 'two: waiting_candidates = 1');
	ok(!le_finished($loser), 'two: the loser has not returned');

	$t0 = le_now($node);
	is($winner->query_safe(q{SELECT release_leader('busy')}), 't', 'two: winner releases');
	is(wait_result($loser), 't', 'two: the loser wins now');
	$latency{release_second_waiter} = le_wake_ms($node, 'busy', $t0);
	is($node->safe_psql('postgres',
			q{SELECT (term = (SELECT max(h.term) FROM leader_election.history AS h WHERE h.name = 'busy'))
			         || ':' || (holder_pid = } . $loser->{le_pid} . q{) || ':' ||
			         (SELECT count(*) FROM leader_election.history AS h WHERE h.name = 'busy')
			    FROM leader_election.leaders WHERE name = 'busy'}),
		'true:true:3', 'two: the third term, the newest, belongs to the second waiter');
	le_quit(@w);
}
le_quit($busy);

# ---- a waiter whose backend is terminated is no longer counted ----
# Last, on a name of its own: a leaked count would otherwise spoil the
# counts checked above.
{
	my $h = new_holder('twait');
	my $w = le_session($node);
	ok(le_start_wait($node, $w, q{SELECT wait_for_leadership('twait', '1 hour')}),
		'terminated waiter: blocks');
	is(waiting_candidates('twait'), '1', 'terminated waiter: waiting_candidates = 1');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($w->{le_pid}, 60000)");
	le_quit($w);
	ok(le_poll($node,
			q{SELECT waiting_candidates = 0 FROM leader_election.leaders WHERE name = 'twait'},
			't', 5),
		'terminated waiter: waiting_candidates back to 0');
	le_quit($h);
}

diag(sprintf('wake-up latency %-22s %8.1f ms', $_, $latency{$_}))
  for sort keys %latency;

$node->stop;
done_testing();
