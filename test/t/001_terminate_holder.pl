# 001_terminate_holder.pl: a session-bound lease ends the moment its holder's
# backend ends, by pg_terminate_backend() or by the client disconnecting; a
# lease under a named holder outlives its session.
#
# The ttl is one hour throughout, so a takeover within the test can only be
# explained by the holder-liveness check, never by expiry.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('terminate');

# The term and history of a name, as seen by a superuser.
sub term_of
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT term FROM leader_election.leases WHERE name = '$name'");
}

sub end_reason
{
	my ($name, $term) = @_;
	return $node->safe_psql('postgres',
		"SELECT end_reason FROM leader_election.history
		  WHERE name = '$name' AND term = $term");
}

# ---- pg_terminate_backend(holder) ----
my $holder = le_session($node);
is($holder->query_safe(q{SELECT try_acquire_leader('t1', '1 hour')}),
	't', 'holder acquires t1 under its session identity');
my $term = term_of('t1');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('t1', '1 hour')}),
	'f', 'while the holder lives, another session gets false');

$node->safe_psql('postgres',
	"SELECT pg_terminate_backend($holder->{le_pid}, 60000)");
ok( le_poll($node,
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $holder->{le_pid}"),
	'holder backend is gone');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('t1', '1 hour')}),
	't', 'after pg_terminate_backend another session acquires at once');
is(term_of('t1'), $term + 1, 'the takeover has term + 1');
is(end_reason('t1', $term), 'session_ended',
	'history records the old term as session_ended');
le_quit($holder);

# ---- the holder's client disconnects ----
$holder = le_session($node);
my $pid = $holder->{le_pid};
is($holder->query_safe(q{SELECT try_acquire_leader('t2', '1 hour')}),
	't', 'second holder acquires t2');
$term = term_of('t2');
is($node->safe_psql('postgres', q{SELECT valid FROM leader_election.leaders WHERE name = 't2'}),
	't', 'leaders view shows t2 valid');
$holder->quit;
ok(le_poll($node, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'holder backend exited after its client quit');
is($node->safe_psql('postgres', q{SELECT valid FROM leader_election.leaders WHERE name = 't2'}),
	'f', 'leaders view shows t2 invalid once the session ended');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('t2', '1 hour')}),
	't', 'after the client quit another session acquires at once');
is(term_of('t2'), $term + 1, 'the takeover has term + 1');
is(end_reason('t2', $term), 'session_ended',
	'history records the old term as session_ended');

# ---- a named holder's lease survives its session ----
$holder = le_session($node);
$pid = $holder->{le_pid};
is($holder->query_safe(q{SELECT try_acquire_leader('t3', '1 hour', 'worker-a')}),
	't', 'named holder worker-a acquires t3');
$term = term_of('t3');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid, 60000)");
ok(le_poll($node, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'named holder backend is gone');
le_quit($holder);
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('t3', '1 hour', 'worker-b')}),
	'f', 'another holder gets false: the named lease outlived its session');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('t3', '1 hour')}),
	'f', 'a session-bound candidate gets false too');
is($node->safe_psql('postgres',
		q{SELECT am_leader('t3', 'worker-a')}),
	't', 'worker-a is still the leader from a new session');
is($node->safe_psql('postgres',
		q{SELECT try_acquire_leader('t3', '1 hour', 'worker-a')}),
	't', 'worker-a renews from a new session');
is(term_of('t3'), $term, 'the renewal kept the term');

$node->stop;
done_testing();
