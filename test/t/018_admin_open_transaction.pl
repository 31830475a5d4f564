# 018_admin_open_transaction.pl: the administrator's name functions
# (release_name, assign_name) send their "released" event as every other
# change does (notify_queue.c, N3): queued at their commit, in term order
# among the name's events.  They used to send it in SQL and, to keep the
# order, took every event already queued for the database into their own
# transaction, holding the database's sender lock to its end: while an
# administrator's transaction stayed open, no listener in the database heard
# any change (on the old code the first check below fails).
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('admin_open');
my $listener = le_session($node);
$listener->query_safe('LISTEN leader_election');
my @seen;

# Wait until an event of this name and kind has arrived, with a term
# above `after` if given.
sub heard
{
	my ($name, $event, $after) = @_;
	return le_wait_until(
		sub {
			push @seen, map { $_->{payload} }
			  le_notifications($listener->query_safe('SELECT 1'));
			return scalar grep {
				$_->{name} eq $name && $_->{event} eq $event
				  && (!defined $after || $_->{term} > $after)
			} @seen;
		});
}

is($node->safe_psql('postgres', q{SELECT try_acquire_leader('x', '1 hour', 'h1')}), 't',
	'h1 leads x');
my $x_term = $node->safe_psql('postgres', q{SELECT leader_term('x', 'h1')});
ok(heard('x', 'elected'), 'x elected is heard');

# An administrator ends x's lease in a transaction left open.
my $admin = le_session($node);
$admin->query_safe(q{BEGIN; SELECT leader_election.release_name('x')});

# Meanwhile another change in the database is heard.
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('y', '1 hour', 'h2')}), 't',
	'h2 leads y');
ok(heard('y', 'elected'), 'a change is heard while an administrator\'s transaction is open');
ok(!grep({ $_->{name} eq 'x' && $_->{event} eq 'released' } @seen),
	'the open release of x is not heard before its commit');

# A savepoint rolled back takes its event with it.
$admin->query_safe(q{SAVEPOINT s; SELECT leader_election.assign_name('z', current_user::regrole);
	SELECT try_acquire_leader('z', '1 hour', 'h3'); SELECT leader_election.release_name('z');
	ROLLBACK TO s});
$admin->query_safe('COMMIT');
ok(heard('x', 'released'), 'x released is heard after the commit');

# Then a takeover of x: its elected comes after x's released.
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('x', '1 hour', 'h2')}), 't',
	'h2 takes x over');
ok(heard('x', 'elected', $x_term), 'x elected again is heard');
my @x = map { "$_->{event}/$_->{term}/$_->{reason}" } grep { $_->{name} eq 'x' } @seen;
is($x[1], "released/$x_term/released", 'x: released second');
like($x[2], qr{^elected/\d+/released$}, 'x: then the next term, after a release');
is(scalar(@x), 3, 'x: three events');
ok(!grep({ $_->{name} eq 'z' } @seen), 'nothing of the rolled-back savepoint is heard');

le_quit($admin, $listener);
$node->stop;
done_testing();
