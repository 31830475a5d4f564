# 012_notify.pl: the NOTIFY on channel leader_election, seen by a real
# LISTEN client (psql).  Payload: JSON {"name","event","holder","term",
# "reason"}.  Checked: "elected" with reason "none" on a first acquisition,
# "released" on release, "elected" with reason "session_ended" after the
# holder's backend was terminated and a candidate took over, "elected" with
# reason "expired" after an expiry takeover; a rolled-back acquisition sends
# nothing; a payload repeated thousands of times in one transaction still
# commits, every copy heard.  With the library preloaded (le_node), the first LISTEN starts
# the database's notifier before any change, so that the first change is
# sent by a worker already running; a LISTEN in a database without the
# extension starts none.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('notify');

my $listener = le_session($node);
$listener->query_safe('LISTEN leader_election');
my @seen;    # every payload received so far, decoded, in order
my @sender;  # the sending backend's pid of each
my %taken;   # indexes into @seen already matched by next_event

# ---- the LISTEN starts the notifier ----
# Before any change in the database: no event is queued, so only the LISTEN
# can have started it.  (Before 1.1's keep-ready rule the first change
# started it, and found it not yet running: that change sent its event
# itself, and the changes right after waited for the worker to come up.)
my $notifier = '';
ok( le_wait_until(
		sub {
			# Waiting in its loop (wait event type Extension): it has
			# marked itself running, so changes queue for it.
			$notifier = $node->safe_psql('postgres',
				q{SELECT pid FROM pg_stat_activity
				   WHERE backend_type = 'leader_election notifier' AND wait_event_type = 'Extension'});
			$notifier ne '';
		}),
	'the first LISTEN starts a notifier before any change');
is($node->safe_psql('postgres', 'SELECT count(*) FROM leader_election.history'),
	'0', 'no change was made yet');

# psql prints notifications that arrived after each command, so run a
# trivial command until an event matching `want` shows up (or the deadline
# passes); returns it, or undef.
sub next_event
{
	my ($want) = @_;
	my $found;
	le_wait_until(
		sub {
			for my $n (le_notifications($listener->query_safe('SELECT 1')))
			{
				push @seen,   $n->{payload};
				push @sender, $n->{pid};
			}
			for my $i (0 .. $#seen)
			{
				next if $taken{$i} || !$want->($seen[$i]);
				$taken{$i} = 1;
				$found = $seen[$i];
				return 1;
			}
			return 0;
		});
	return $found;
}

sub event_is
{
	my ($name, $event, $expected, $what) = @_;
	my $e = next_event(sub { $_[0]{name} eq $name && $_[0]{event} eq $event });
	ok(defined $e, "$what: a notification arrives") or return;
	for my $k (sort keys %$expected)
	{
		if (ref $expected->{$k} eq 'Regexp')
		{
			like($e->{$k}, $expected->{$k}, "$what: $k");
		}
		else
		{
			is($e->{$k}, $expected->{$k}, "$what: $k");
		}
	}
	is_deeply([ sort keys %$e ], [qw(event holder info name reason term)],
		"$what: payload has exactly name, event, holder, term, reason, info");
}

# ---- first acquisition, release, re-acquisition ----
my $holder = le_session($node);
$holder->query_safe(q{SELECT try_acquire_leader('n', '1 hour')});
event_is('n', 'elected',
	{ holder => qr/^session:$holder->{le_pid}:\d+\@\d+\.\d+$/, term => 1, reason => 'none' },
	'first acquisition');
is($sender[0], $notifier, 'the first change was sent by the notifier the LISTEN started');
$holder->query_safe(q{SELECT release_leader('n')});
event_is('n', 'released',
	{ holder => qr/^session:$holder->{le_pid}:/, term => 1, reason => 'released' },
	'release');
$holder->query_safe(q{SELECT try_acquire_leader('n', '1 hour')});
event_is('n', 'elected', { term => 2, reason => 'released' },
	'acquisition after a release');

# ---- holder backend terminated, candidate takes over ----
$node->safe_psql('postgres', "SELECT pg_terminate_backend($holder->{le_pid}, 60000)");
le_quit($holder);
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('n', '1 hour', 'cand')}),
	't', 'candidate takes over from the terminated holder');
event_is('n', 'elected', { holder => 'cand', term => 3, reason => 'session_ended' },
	'takeover after session end');

# ---- expiry takeover ----
# (Terms come from one counter per database: n had 1 to 3, x gets 4.)
$node->safe_psql('postgres', q{SELECT try_acquire_leader('x', '1s', 'h1')});
event_is('x', 'elected', { holder => 'h1', term => 4, reason => 'none' },
	'named acquisition with ttl 1s');
ok(le_poll($node, q{SELECT try_acquire_leader('x', '1 hour', 'h2')}),
	'h2 takes x over after expiry');
event_is('x', 'elected', { holder => 'h2', term => 5, reason => 'expired' },
	'takeover after expiry');

# ---- a rolled-back acquisition sends nothing ----
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT try_acquire_leader('rb', '1 hour', 'r');
	SELECT release_leader('x', 'h2');
	ROLLBACK;
});
# Notifications arrive in commit order: once this later one is here, any
# from the rolled-back transaction would be too.  (The rolled-back grant
# drew term 6, which stays unused.)
$node->safe_psql('postgres', q{SELECT try_acquire_leader('after', '1 hour', 'z')});
event_is('after', 'elected', { holder => 'z', term => 7, reason => 'none' },
	'a committed acquisition after the rollback');
is(scalar(grep { $_->{name} eq 'rb' } @seen), 0,
	'nothing was sent for the rolled-back acquisition');
is(scalar(grep { $_->{name} eq 'x' && $_->{event} eq 'released' } @seen), 0,
	'nothing was sent for the rolled-back release');
is(scalar(@seen), 7, 'seven notifications in all, one per committed change');
is_deeply([ grep { $_ ne $notifier } @sender ], [], 'all were sent by that notifier');

# ---- an info equal to an earlier one of the same batch is heard ----
# PostgreSQL drops a NOTIFY equal to one its transaction already sent, and
# the notifier sends many transactions' events in one transaction.  With
# the notifier stopped, three transactions publish A, B, then A again;
# continued, it sends all three in one batch.  A listener that keeps the
# latest info must end with A.
$node->safe_psql('postgres', q{SELECT try_acquire_leader('inf', '1 hour', 'h')});
event_is('inf', 'elected', { holder => 'h', reason => 'none' }, 'a holder publishes info');
kill 'STOP', $notifier or die "cannot stop the notifier $notifier: $!";
for my $v (qw(A B A))
{
	$node->safe_psql('postgres', qq{SELECT set_leader_info('inf', '{"v": "$v"}', 'h')});
}
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leader_election notifier'}),
	'1', 'the three changes were queued for the one (stopped) notifier');
kill 'CONT', $notifier;
for my $v (qw(A B A))
{
	my $e = next_event(sub { $_[0]{name} eq 'inf' && $_[0]{event} eq 'info' });
	is($e ? $e->{info}{v} : undef, $v, "info $v heard, in order");
}

# ---- a copy sent with NOTIFY does not displace a queued event ----
# Anyone may NOTIFY leader_election with any payload.  A transaction that
# sends the queued events itself (here: notify_delivery = in_transaction)
# would have PostgreSQL drop a queued event equal to a copy its caller
# sent before: the listener would hear it once, at the copy's place.  With
# the notifier stopped, an info of 'cp' is queued; another session sends
# a copy, then makes a change of its own with in_transaction delivery,
# which sends the queued info too.
$node->safe_psql('postgres', q{SELECT try_acquire_leader('cp', '1 hour', 'h')});
event_is('cp', 'elected', { holder => 'h', reason => 'none' }, 'a holder of cp');
my $cp_term = $node->safe_psql('postgres', q{SELECT leader_term('cp', 'h')});
kill 'STOP', $notifier or die "cannot stop the notifier $notifier: $!";
$node->safe_psql('postgres', q{SELECT set_leader_info('cp', '{"v": "X"}', 'h')});
my $copy = qq({"name":"cp","event":"info","holder":"h","term":$cp_term,"reason":"none","info":{"v": "X"}});
$node->safe_psql('postgres', qq{
	SET leader_election.notify_delivery = in_transaction;
	BEGIN;
	NOTIFY leader_election, '$copy';
	SELECT try_acquire_leader('cp-other', '1 hour', 'o');
	COMMIT;
});
kill 'CONT', $notifier;
event_is('cp-other', 'elected', { holder => 'o', reason => 'none' }, 'the copying transaction\'s own change');
my @cp_info = grep { $_->{name} eq 'cp' && $_->{event} eq 'info' } @seen;
is(scalar(@cp_info), 2, 'both the copy and the queued info are heard');

# ---- no notifier for a database without the extension ----
# A LISTEN there, then one in a database with the extension.  A notifier
# the first had asked for would be started by the postmaster no later than
# the second's pass, so once the second's runs, the first's is watched for
# two more seconds: it must not appear.
$node->safe_psql('postgres', 'CREATE DATABASE no_extension');
$node->safe_psql('postgres', 'CREATE DATABASE with_extension');
$node->safe_psql('with_extension', 'CREATE EXTENSION leader_election');
my $plain = le_session($node, 'no_extension');
$plain->query_safe('LISTEN leader_election');
my $with = le_session($node, 'with_extension');
$with->query_safe('LISTEN leader_election');
ok( le_poll($node,
		q{SELECT count(*) = 1 FROM pg_stat_activity
		   WHERE backend_type = 'leader_election notifier' AND datname = 'with_extension'}),
	'control: a LISTEN in a database with the extension starts its notifier');
ok( !le_wait_until(
		sub {
			$node->safe_psql('postgres',
				q{SELECT count(*) FROM pg_stat_activity
				   WHERE backend_type = 'leader_election notifier' AND datname = 'no_extension'}) ne '0';
		},
		2),
	'a LISTEN in a database without the extension starts no notifier');
le_quit($plain, $with);

# ---- a payload repeated thousands of times in one transaction ----
# Each copy of a payload in a sending transaction ends with a mark of its
# own.  The mark was one space per earlier copy: after some 3,800 copies of
# the largest info the event outgrew NOTIFY's 8000 bytes and the COMMIT
# failed, only because someone in the cluster listened (here: $listener).
$node->safe_psql('with_extension', q{SELECT try_acquire_leader('big', '1 hour', 'h')});
my ($rc, $out, $err) = $node->psql('with_extension', q{
	SET leader_election.notify_delivery = in_transaction;
	BEGIN;
	SELECT count(*) FROM generate_series(1, 4000) g
	 WHERE set_leader_info('big', jsonb_build_object('pad', repeat('x', 4085)), 'h');
	COMMIT;});
is($err, '', 'a transaction that publishes the largest info 4,000 times commits');
is($node->safe_psql('with_extension', q{SELECT length(info::text) FROM current_leader('big')}),
	'4096', 'and the info is set (the largest allowed)');
# The marks keep copies distinct: every one of 40 is heard.
$node->safe_psql('postgres', q{
	SET leader_election.notify_delivery = in_transaction;
	BEGIN;
	SELECT count(*) FROM generate_series(1, 40) g WHERE set_leader_info('inf', '{"v": "R"}', 'h');
	COMMIT;});
my $heard = 0;
for (1 .. 40)
{
	$heard++
	  if next_event(sub { $_[0]{name} eq 'inf' && $_[0]{event} eq 'info' && $_[0]{info}{v} eq 'R' });
}
is($heard, 40, '40 equal events of one transaction are all heard');

le_quit($listener);
$node->stop;
done_testing();
