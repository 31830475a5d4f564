# 006_paused_holder.pl: a holder that stops (the "GC pause": its psql client
# gets SIGSTOP) while it holds a named lease with a short ttl.
#
# A. Paused inside a fenced transaction (BEGIN; assert_leader(name, term)):
#    the lease expires, but no candidate is elected while the fence is open;
#    the fenced write commits; then a candidate takes over with term + 1 and
#    the old holder's next fenced write, am_leader and renewal all fail.
# B. Paused outside a transaction: the lease expires and a candidate takes
#    over at expiry; after SIGCONT the old holder's fence fails with LE001.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('paused');
$node->safe_psql('postgres', 'CREATE TABLE effects (name text, term bigint)');

sub expired
{
	my ($name) = @_;
	return le_poll($node,
		"SELECT clock_timestamp() > expires_at FROM leader_election.leases WHERE name = '$name'");
}

# Run sql in a session and return its SQLSTATE ('' on success).
sub session_sqlstate
{
	my ($s, $sql) = @_;
	le_send($s, $sql);
	my ($out, $err) = le_collect($s);
	return 'timeout' unless defined $out;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : '';
}

# ---- A: paused inside a fenced transaction ----
my $old = le_session($node);
is($old->query_safe(q{SELECT try_acquire_leader('p', '1 hour', 'old')}),
	't', 'A: old acquires p');
# Shorten the lease to 2 s and fence at once, in one round trip, so that even
# a slow machine gets the fence in before the lease runs out.
my ($renewed, $term) = split /\n/, $old->query_safe(q{
	SELECT try_acquire_leader('p', '2s', 'old');
	BEGIN;
	SELECT assert_leader('p', NULL, 'old');});
is($renewed, 't', 'A: old renews with ttl 2s');
is($term, '1', 'A: and fences its transaction in term 1');
my $old_psql = le_psql_pid($old);
ok(kill('STOP', $old_psql), 'A: old holder client paused inside the transaction');

ok(expired('p'), 'A: the lease has expired');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('p', '1 hour', 'new'),
		         clock_timestamp() - statement_timestamp() < interval '10 s'}),
	'f|t', 'A: candidate gets false at once while the fence is open');
is($node->safe_psql('postgres', q{SELECT am_leader('p', 'new')}),
	'f', 'A: the candidate is not leader');

ok(kill('CONT', $old_psql), 'A: old holder resumes');
$old->query_safe("INSERT INTO effects VALUES ('p', $term)");
is(session_sqlstate($old, 'COMMIT'), '', 'A: the fenced write commits');

is($node->safe_psql('postgres', q{SELECT try_acquire_leader('p', '1 hour', 'new')}),
	't', 'A: once the fence is gone, the candidate takes over');
is($node->safe_psql('postgres', q{SELECT leader_term('p', 'new')}),
	$term + 1, 'A: with term + 1');

$old->query_safe('BEGIN');
is(session_sqlstate($old, "SELECT assert_leader('p', $term, 'old')"),
	'LE001', "A: old holder's fence with its old term fails with LE001");
$old->query_safe('ROLLBACK');
is(session_sqlstate($old, "SELECT assert_leader('p', NULL, 'old')"),
	'LE001', "A: old holder's fence without a term fails with LE001 too");
is($old->query_safe(q{SELECT am_leader('p', 'old')}), 'f',
	'A: old holder: am_leader false');
is($old->query_safe(q{SELECT try_acquire_leader('p', '1s', 'old')}), 'f',
	'A: old holder: renewal false');
is($node->safe_psql('postgres', q{SELECT string_agg(term::text, ',') FROM effects}),
	$term, 'A: only the fenced write of the valid term happened');

# ---- B: paused outside a transaction ----
my $old2 = le_session($node);
is($old2->query_safe(q{SELECT try_acquire_leader('q', '1s', 'old2')}),
	't', 'B: old2 acquires q with ttl 1s');
my $term2 = $node->safe_psql('postgres',
	q{SELECT term FROM leader_election.leases WHERE name = 'q'});
my $old2_psql = le_psql_pid($old2);
ok(kill('STOP', $old2_psql), 'B: old2 holder client paused');

ok(le_poll($node, q{SELECT try_acquire_leader('q', '1 hour', 'new2')}),
	'B: a candidate takes over');
is($node->safe_psql('postgres', q{
		SELECT acquired_at >= (SELECT ended_at FROM leader_election.history
		                        WHERE name = 'q' AND term = h.term - 1)
		  FROM leader_election.history h
		 WHERE name = 'q' AND holder = 'new2'}),
	't', 'B: not before the old lease expired (history ended_at = its expiry)');
is($node->safe_psql('postgres', q{SELECT leader_term('q', 'new2')}),
	$term2 + 1, 'B: with term + 1');
is($node->safe_psql('postgres',
		"SELECT end_reason FROM leader_election.history WHERE name = 'q' AND term = $term2"),
	'expired', 'B: history records the old term as expired');

ok(kill('CONT', $old2_psql), 'B: old2 holder resumes');
$old2->query_safe('BEGIN');
is(session_sqlstate($old2, "SELECT assert_leader('q', $term2, 'old2')"),
	'LE001', 'B: the resumed holder\'s fence fails with LE001');
$old2->query_safe('ROLLBACK');
is($old2->query_safe(q{SELECT am_leader('q', 'old2')}), 'f',
	'B: resumed holder: am_leader false');
is($old2->query_safe(q{SELECT try_acquire_leader('q', '1s', 'old2')}), 'f',
	'B: resumed holder: renewal false');

le_quit($old, $old2);
$node->stop;
done_testing();
