# 017_unheard_changes.pl: a change of leader that no session listens for
# queues and sends no notification (listeners.c, L1), and a session that
# starts to LISTEN leader_election while such a change commits still hears
# it: the change looks again once its commit is visible.
#
# Commits are held open with a synchronous standby that never connects
# (on a node that allows streaming: otherwise nothing waits for standbys):
# every lease write then waits in its commit (wait event SyncRep) after its
# PRE_COMMIT and before its commit becomes visible, and a cancel lets it
# finish (committed locally, with a warning).  A transaction that sent a
# NOTIFY holds PostgreSQL's cluster-wide NOTIFY lock while it waits there.
#
#   1. Nobody listens: a grant with notify_delivery = in_transaction does
#      not queue behind that lock; with a listener, the same grant does
#      (the control that shows the test sees the difference).
#   2. A LISTEN that runs while a grant nobody listened for is committing
#      hears that grant.  (Deciding at PRE_COMMIT only, the listener never
#      heard it, and its read right after LISTEN could not show it.)
#   3. The same LISTEN when no notifier can be started fails with 53000.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('unheard', allows_streaming => 1);
$node->safe_psql('postgres', q{
	CREATE TABLE other_application (x int);
	ALTER SYSTEM SET synchronous_standby_names = 'absent_standby';
	SELECT pg_reload_conf();
});
ok(le_poll($node, q{SHOW synchronous_standby_names}, 'absent_standby'),
	'synchronous_standby_names is in effect');

sub wait_event_of
{
	my ($s) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $s->{le_pid}");
}

# Wait until session $s's statement waits in its commit for the standby, or
# for a lock; returns which ('SyncRep', 'object', or '' on the deadline).
sub commit_or_lock
{
	my ($s) = @_;
	my $ev = '';
	le_wait_until(sub { $ev = wait_event_of($s); $ev eq 'SyncRep' || $ev eq 'object' });
	return $ev =~ /^(SyncRep|object)$/ ? $ev : '';
}

# Let session $s's commit finish (locally) and collect its output.
sub release_commit
{
	my ($s) = @_;
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($s->{le_pid})");
	return le_collect($s);
}

# Notifications a session printed.
sub heard
{
	my ($out) = @_;
	return [ map { $_->{payload}{name} } le_notifications($out) ];
}

# ---- 1. nobody listens: the grant takes no NOTIFY lock ----

my $blocker = le_session($node);
le_send($blocker, 'BEGIN; INSERT INTO other_application VALUES (1); NOTIFY other_application; COMMIT');
is(commit_or_lock($blocker), 'SyncRep',
	'another application\'s NOTIFY holds the NOTIFY lock while its commit waits');

my $g = le_session($node);
$g->query_safe('SET leader_election.notify_delivery = in_transaction');
le_send($g, q{SELECT try_acquire_leader('u1', '1 minute', 'g')});
is(commit_or_lock($g), 'SyncRep',
	'nobody listens: an in_transaction grant reaches its commit without the NOTIFY lock');
my ($out) = release_commit($g);
like($out, qr/^t$/m, 'nobody listens: the grant was made');

my $l = le_session($node);
$l->query_safe('LISTEN leader_election');
le_send($g, q{SELECT try_acquire_leader('u2', '1 minute', 'g')});
is(commit_or_lock($g), 'object',
	'control: with a listener, the same grant waits for the NOTIFY lock');
release_commit($blocker);
is(commit_or_lock($g), 'SyncRep', 'control: once the lock is free, the grant commits');
($out) = release_commit($g);
like($out, qr/^t$/m, 'control: the grant was made');
ok( le_wait_until(sub { grep { $_ eq 'u2' } @{ heard($l->query_safe('SELECT 1')) } }),
	'control: the listener heard it');
le_quit($l);
ok(le_poll($node, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $l->{le_pid}"),
	'the listener has left');

# ---- 2. a session starts to listen while an unheard grant commits ----

le_send($g, q{SELECT try_acquire_leader('u3', '1 minute', 'g3')});
is(commit_or_lock($g), 'SyncRep', 'a grant made while nobody listens waits in its commit');

my $l2 = le_session($node);
$l2->query_safe('LISTEN leader_election');
is($l2->query_safe(q{SELECT count(holder) FROM current_leader('u3')}), '0',
	'a new listener cannot read the grant yet');
($out) = release_commit($g);
like($out, qr/^t$/m, 'the grant was made');
ok( le_wait_until(sub { grep { $_ eq 'u3' } @{ heard($l2->query_safe('SELECT 1')) } }),
	'the new listener hears the grant');

$node->safe_psql('postgres', q{
	SET synchronous_commit = local;
	ALTER SYSTEM RESET synchronous_standby_names;
	SELECT pg_reload_conf();
});
ok(le_poll($node, q{SHOW synchronous_standby_names}, ''), 'no synchronous standby any more');
$node->safe_psql('postgres', q{SELECT try_acquire_leader('u4', '1 minute', 'g4')});
ok( le_wait_until(sub { grep { $_ eq 'u4' } @{ heard($l2->query_safe('SELECT 1')) } }),
	'the listener hears the next change');

le_quit($blocker, $g, $l2);

# ---- 3. the first listener while no notifier can be started ----
#
# With every worker slot taken (the task runner's launcher and the logical
# replication launcher fill max_worker_processes = 2), the grant below can
# no longer send its events itself once its commit is visible.  The LISTEN
# that would be owed them must not succeed deaf: it fails with 53000.
# (Before the LISTEN looked at the queue, it succeeded and the grant was
# not heard until some later change.)
$node->append_conf('postgresql.conf', "max_worker_processes = 2\n");
$node->restart;
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET synchronous_standby_names = 'absent_standby';
	SELECT pg_reload_conf();
});
ok(le_poll($node, q{SHOW synchronous_standby_names}, 'absent_standby'),
	'no worker slot: synchronous_standby_names is in effect again');
$g = le_session($node);
le_send($g, q{SELECT try_acquire_leader('u5', '1 minute', 'g5')});
is(commit_or_lock($g), 'SyncRep', 'no worker slot: a grant made while nobody listens waits in its commit');
my $l3 = le_session($node);
$l3->query('LISTEN leader_election');
like($l3->{stderr}, qr/ERROR:\s+53000: could not start the leader_election notifier/,
	'no worker slot: the LISTEN fails with 53000 instead of missing the grant');
release_commit($g);
le_quit($g, $l3);
$node->stop;
done_testing();
