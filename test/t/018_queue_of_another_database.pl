# 018_queue_of_another_database.pl: a transaction that looked up its
# database's notification queue and then waited for the sender lock must not
# take the events of another database that claimed that queue meanwhile
# (notify_queue.c: a queue left idle may be claimed by any database).
#
# An administrator's name function (release_name) first moves the events
# queued for its database into its own transaction (N3): it finds the
# queue, then waits for the database's sender lock.  Here that wait is made
# long by a second release_name holding the lock in an open transaction;
# meanwhile database b's LISTEN claims the idle queue of database a (the
# first queue a change used, so the first one a claim looks at), and a
# change in b is queued there while b's own sender lock is held too, so b's
# notifier cannot send it yet.  When a's lock is given back, the waiting
# transaction must leave b's event alone:
#
#   - b's listener hears b's change (on the old code: never; the event was
#     taken and removed by a's transaction);
#   - a's listener does not (on the old code: it did, from a's transaction),
#     checked once a later change of a has reached it.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('queue_owner');
for my $db ('a', 'b')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION leader_election');
}

# Names a session heard as elected.
sub heard
{
	my ($s) = @_;
	my $out = $s->query_safe('SELECT 1');
	$s->{le_heard} .= $out;
	return [ map { $_->{payload}{name} }
		  grep { $_->{payload}{event} eq 'elected' } le_notifications($s->{le_heard}) ];
}

sub heard_name
{
	my ($s, $name) = @_;
	return scalar grep { $_ eq $name } @{ heard($s) };
}

# What a session's backend waits for ('' when running or idle).
sub wait_event_type
{
	my ($s) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $s->{le_pid}");
}

# Database a's first change claims a queue; nobody listens anywhere, so
# nothing is queued and no notifier starts: the queue is left idle.
is($node->safe_psql('a', q{SELECT try_acquire_leader('a0', '1 minute', 'h')}), 't',
	'a change in database a');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'leader_election notifier'}), '0',
	'nobody listens: no notifier runs');

# a: one release_name holds the sender lock; a second one looks up the
# queue and waits for that lock.
my $hold_a = le_session($node, 'a');
$hold_a->query_safe(q{BEGIN; SELECT leader_election.release_name('a0')});
my $wait_a = le_session($node, 'a');
le_send($wait_a, q{SELECT leader_election.release_name('a8')});
ok(le_wait_until(sub { wait_event_type($wait_a) eq 'Lock' }),
	'the second release_name in a waits for the sender lock');

# b: a listener claims the idle queue and starts b's notifier.
my $listen_b = le_session($node, 'b');
$listen_b->query_safe('LISTEN leader_election');
ok( le_poll($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'leader_election notifier' AND datname = 'b'
	  AND wait_event_type = 'Extension'}, '1'),
	'b\'s notifier runs');

# b's sender lock held, then a change in b: queued, not sent yet.
my $hold_b = le_session($node, 'b');
$hold_b->query_safe(q{BEGIN; SELECT leader_election.release_name('b8')});
is($node->safe_psql('b', q{SELECT try_acquire_leader('b1', '1 minute', 'h')}), 't',
	'a change in database b');
ok( le_poll($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'leader_election notifier' AND datname = 'b'
	  AND wait_event_type = 'Lock'}, '1'),
	'b\'s notifier waits for b\'s sender lock');

# a listener in a, then a's sender lock given back.
my $listen_a = le_session($node, 'a');
$listen_a->query_safe('LISTEN leader_election');
$hold_a->query_safe('COMMIT');
my ($out) = le_collect($wait_a);
like($out, qr/^f$/m, 'the waiting release_name in a finished');

# b's sender lock given back: b's notifier sends what is queued.
$hold_b->query_safe('COMMIT');
ok(le_wait_until(sub { heard_name($listen_b, 'b1') }),
	'b\'s listener hears b\'s change');

# A later change of a reaches a's listener after anything a's transaction sent.
is($node->safe_psql('a', q{SELECT try_acquire_leader('a2', '1 minute', 'h')}), 't',
	'a later change in database a');
ok(le_wait_until(sub { heard_name($listen_a, 'a2') }),
	'control: a\'s listener hears a\'s later change');
ok(!heard_name($listen_a, 'b1'), 'a\'s listener did not hear b\'s change');

le_quit($hold_a, $wait_a, $listen_b, $hold_b, $listen_a);
$node->stop;
done_testing();
