# 002_crash_restart.pl: a backend killed with SIGKILL makes the postmaster
# reset shared memory and run crash recovery (restart_after_crash = on).
# Committed leases and terms survive; an acquisition that was not committed
# is gone; the next grant's term is larger than every committed term; and
# session-bound leases of sessions that died in the crash are free.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('crash', conf => "restart_after_crash = on\n");

# Committed history: 'named' changes hands twice (terms 1, 2, 3), 'rel' is
# held and released (term 4), 'sess' is held by a live session (term 5):
# terms come from one counter per database.
for my $h (qw(a b c))
{
	$node->safe_psql('postgres', qq{
		SELECT release_leader('named', holder)
		  FROM leader_election.leases WHERE name = 'named';
		SELECT try_acquire_leader('named', '1 hour', 'holder-$h');
	});
}
$node->safe_psql('postgres', q{
	SELECT try_acquire_leader('rel', '1 hour', 'r');
	SELECT release_leader('rel', 'r');
});
my $sess = le_session($node);
is($sess->query_safe(q{SELECT try_acquire_leader('sess', '1 hour')}),
	't', 'a session-bound holder takes sess');

my %before = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres',
	'SELECT name, term FROM leader_election.leases ORDER BY name');
is_deeply(\%before, { named => 3, rel => 4, sess => 5 },
	'committed terms before the crash');

# A waiter blocked on 'named' when the crash comes (it dies with the rest).
my $waiter = le_session($node);
ok(le_start_wait($node, $waiter, q{SELECT wait_for_leadership('named', '1 hour', NULL, 'w')}),
	'a waiter blocks on named');

# An open transaction: a brand-new name and a takeover of 'rel', both
# uncommitted when the crash comes.
my $open = le_session($node);
$open->query_safe('BEGIN');
is($open->query_safe(q{SELECT try_acquire_leader('uncommitted', '1 hour', 'u')}),
	't', 'open transaction acquires a new name');
is($open->query_safe(q{SELECT try_acquire_leader('rel', '1 hour', 'u')}),
	't', 'open transaction takes over rel');

# SIGKILL one backend: the postmaster kills every other backend too.
my $log_offset = -s $node->logfile;
ok(kill('KILL', $open->{le_pid}), 'SIGKILL sent to a backend');
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
ok(le_poll($node, 'SELECT NOT pg_is_in_recovery()'),
	'server accepts connections again after the crash cycle');
le_quit($open, $sess, $waiter);

my %after = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres',
	'SELECT name, term FROM leader_election.leases ORDER BY name');
is_deeply(\%after, \%before,
	'committed leases and terms survived; the uncommitted ones are gone');
is($node->safe_psql('postgres',
		q{SELECT holder IS NULL FROM leader_election.leases WHERE name = 'rel'}),
	't', 'rel is still released (its takeover was never committed)');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM leader_election.history WHERE name = 'uncommitted'}),
	'0', 'no history for the uncommitted name');

is($node->safe_psql('postgres', q{SELECT am_leader('named', 'holder-c')}),
	't', 'the named lease is still held by its committed holder');
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('named', '1 hour', 'x')}),
	'f', 'and a candidate still gets false for it');

# The session that held 'sess' died in the crash: its lease is free now.
is($node->safe_psql('postgres', q{SELECT valid FROM leader_election.leaders WHERE name = 'sess'}),
	'f', 'session-bound lease of a session killed in the crash is invalid');
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('sess', '1 hour', 'y')}),
	't', 'and can be taken over at once (ttl is an hour)');

# New grants get terms above every committed one.
$node->safe_psql('postgres', q{
	SELECT release_leader('named', 'holder-c');
	SELECT try_acquire_leader('named', '1 hour', 'z');
	SELECT try_acquire_leader('rel', '1 hour', 'z');
	SELECT try_acquire_leader('uncommitted', '1 hour', 'z');
});
my %new = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres',
	'SELECT name, term FROM leader_election.leases ORDER BY name');
for my $name (sort keys %before)
{
	cmp_ok($new{$name}, '>', $before{$name},
		"$name: the next grant's term ($new{$name}) is above the committed one ($before{$name})");
}
cmp_ok($new{uncommitted}, '>', 5,
	'the never-committed name gets a term above every committed one (none is reused, not even an uncommitted one)');

# Shared memory was rebuilt: no waiter counted from before the crash, and
# wakeups work again.
is($node->safe_psql('postgres',
		q{SELECT waiting_candidates FROM leader_election.leaders WHERE name = 'named'}),
	'0', 'waiting_candidates after the crash: the dead waiter is not counted');
my $holder = le_session($node);
is($holder->query_safe(q{SELECT try_acquire_leader('post', '1 hour')}), 't',
	'after the crash: a session takes post');
$waiter = le_session($node);
ok(le_start_wait($node, $waiter, q{SELECT wait_for_leadership('post', '1 hour')}),
	'after the crash: a waiter blocks on post');
$holder->query_safe(q{SELECT release_leader('post')});
my ($out) = le_collect($waiter);
is($out, 't', 'after the crash: the waiter is woken by the release');
le_quit($holder, $waiter);

$node->stop;
done_testing();
