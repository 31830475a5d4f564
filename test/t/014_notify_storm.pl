# 014_notify_storm.pl: LISTENers on channel leader_election miss no change
# of leader while many happen at once, and hear each name's changes in term
# order (notify_queue.c, N1 and N2).
#
# The ground truth is leader_election.history (one row per term, kept in
# full here): for each term, in term order, an "elected" (reason: how the
# term before ended, "none" for the first) and, if the term was released, a
# "released".  A LISTEN client must hear exactly that sequence per name.
# The checker is shown able to fail (negative control): the same
# observations with one event dropped, and with two of a name's events
# swapped, are reported.
#
# Storms: 8 pgbench clients acquiring and releasing 12 names as fast as
# they can (thousands of changes), and one session holding 16 session-bound
# leases terminated while 16 candidates wait; a storm where every term
# publishes an info of 3,900 bytes; a hand-over and moves (their events and
# payload fields).  An administrator's change rolled back in a savepoint
# while events are queued (N3).  Fallbacks (N2): a transaction
# with more changes than the queue holds, beside a storm; the notifier
# terminated.  DROP DATABASE works while a notifier serves the database.  Run with the library
# preloaded (the notifier sends; checked: the sender is not the granting
# backend), with notify_delivery = in_transaction, and without preloading
# (NOTIFY in the granting transaction, as in 1.0).  No timing is asserted:
# latency is measured by bench/grants.py.
use strict;
use warnings;
use lib 'test/t';
use JSON::PP;
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# ---- the checker ----

# Expected events per name from the history: name => [ "event/term/reason", ... ].
sub expected_from_history
{
	my ($node, $prefix) = @_;
	my $rows = $node->safe_psql('postgres', qq{
		SELECT name, term, holder, coalesce(end_reason, '-')
		  FROM leader_election.history WHERE name LIKE '$prefix%'
		 ORDER BY name, term});
	my %want;
	my %prev;
	for my $line (split /\n/, $rows)
	{
		my ($name, $term, $holder, $end) = split /\|/, $line;
		my $reason = $prev{$name} // 'none';
		push @{ $want{$name} }, "elected/$term/$holder/$reason";
		push @{ $want{$name} }, "released/$term/$holder/released"
		  if $end eq 'released';
		$prev{$name} = $end;
	}
	return \%want;
}

# Problems with observed events (list of decoded payloads, in arrival
# order) against the expected sequences: missing, extra, out of order.
sub check_events
{
	my ($want, $seen, $prefix) = @_;
	my %got;
	for my $e (@$seen)
	{
		next unless index($e->{name}, $prefix) == 0;
		push @{ $got{ $e->{name} } },
		  "$e->{event}/$e->{term}/" . ($e->{holder} // 'null') . "/$e->{reason}";
	}
	my @problems;
	for my $name (sort keys %$want)
	{
		my $w = join ' ', @{ $want->{$name} };
		my $g = join ' ', @{ $got{$name} // [] };
		next if $w eq $g;
		my %in_got = map { $_ => 1 } @{ $got{$name} // [] };
		my @missing = grep { !$in_got{$_} } @{ $want->{$name} };
		push @problems,
		  @missing
		  ? "$name: missing @missing[0 .. ($#missing < 2 ? $#missing : 2)]"
		  : "$name: out of order or extra";
	}
	for my $name (sort keys %got)
	{
		push @problems, "$name: events for a name with no history"
		  unless $want->{$name};
	}
	return @problems;
}

# A listening session and what it has heard so far.
sub listener
{
	my ($node) = @_;
	my $s = le_session($node);
	$s->query_safe('LISTEN leader_election');
	return { session => $s, seen => [], pids => {} };
}

# Read what arrived: psql prints notifications after each command.
sub drain
{
	my ($l) = @_;
	for my $n (le_notifications($l->{session}->query_safe('SELECT 1')))
	{
		push @{ $l->{seen} }, $n->{payload};
		$l->{pids}{ $n->{pid} }++;
	}
}

# Wait until the listener heard every expected event (or the deadline).
sub hear_all
{
	my ($l, $want) = @_;
	my $n = 0;
	$n += scalar(@$_) for values %$want;
	le_wait_until(sub { drain($l); scalar(@{ $l->{seen} }) >= $n });
	drain($l);    # anything extra that was on its way
}

# ---- storms ----

# 8 clients acquire and release names px0..px11 as fast as they can.
sub churn
{
	my ($node, $prefix, $clients, $per_client, $extra_conf) = @_;
	$node->pgbench(
		"-n -c $clients -j 2 -t $per_client",
		0, [qr/processed: @{[ $clients * $per_client ]}\//], [qr{}],
		"churn $prefix",
		{
			"014_churn_$prefix" => qq{
\\set n random(0, 11)
$extra_conf
SELECT try_acquire_leader('$prefix' || :n, '1 minute', 'h' || :client_id) AS won \\gset
\\if :won
SELECT release_leader('$prefix' || :n, 'h' || :client_id);
\\endif
}
		});
}

# One session holds $n session-bound leases; $n candidates wait; it dies.
sub session_storm
{
	my ($node, $prefix, $n) = @_;
	my $holder = le_session($node);
	$holder->query_safe(
		"SELECT try_acquire_leader('$prefix' || i, '1 hour') FROM generate_series(1, $n) i");
	my @cands;
	for my $i (1 .. $n)
	{
		my $c = le_session($node);
		le_send($c, "SELECT wait_for_leadership('$prefix$i', '1 hour', '60 s', 'c$i')");
		push @cands, $c;
	}
	le_wait_sleeping($node, $_->{le_pid}) for @cands;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($holder->{le_pid}, 60000)");
	le_quit($holder);
	my $won = 0;
	for my $c (@cands)
	{
		my ($out) = le_collect($c);
		$won++ if defined $out && $out =~ /^t$/m;
		le_quit($c);
	}
	is($won, $n, "$prefix: all $n candidates won after the holder's session ended");
}

my %conf = (conf => "leader_election.history_max_terms = 1000000\nmax_connections = 60\n");

# ---- preloaded: the notifier sends ----
my $node = le_node('storm', %conf);
my $l = listener($node);
churn($node, 'px', 8, 300, '');
session_storm($node, 'ps', 16);
my $want = expected_from_history($node, 'p');
hear_all($l, $want);
my $changes = 0;
$changes += scalar(@$_) for values %$want;
cmp_ok($changes, '>', 500, "preloaded: the storms made $changes changes of leader");
my @problems = check_events($want, $l->{seen}, 'p');
is_deeply(\@problems, [], 'preloaded: every change heard once, in term order, per name')
  or diag(join("\n", @problems[0 .. ($#problems < 9 ? $#problems : 9)]));
is(scalar(grep { $_->{name} =~ /^ps/ && $_->{reason} eq 'session_ended' } @{ $l->{seen} }),
	16, 'preloaded: the session storm\'s 16 takeovers say session_ended');

# Sent by the notifier, not by the granting backends.
my $notifiers = $node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ',') FROM pg_stat_activity
	   WHERE backend_type = 'leader_election notifier'});
like($notifiers, qr/^\d+$/, 'preloaded: one notifier worker for the database');
ok(defined $l->{pids}{$notifiers}, 'preloaded: the notifier sent the notifications')
  or diag(explain($l->{pids}));

# Negative control: the checker sees a missing event and a swapped pair.
{
	my @seen = @{ $l->{seen} };
	my ($i) = grep { $seen[$_]{name} =~ /^px/ } 0 .. $#seen;
	my @dropped = @seen;
	splice(@dropped, $i, 1);
	ok(scalar(check_events($want, \@dropped, 'p')) > 0,
		'negative control: one event left out is reported');
	my $name = $seen[$i]{name};
	my @idx = grep { $seen[$_]{name} eq $name } 0 .. $#seen;
	my @swapped = @seen;
	@swapped[ $idx[0], $idx[1] ] = @swapped[ $idx[1], $idx[0] ];
	ok(scalar(check_events($want, \@swapped, 'p')) > 0,
		'negative control: two events of a name in the wrong order are reported');
}

# ---- N2: a transaction whose changes do not fit in the queue (256 kB,
# some 2,700 of these payloads) sends them itself, after what is queued,
# while others keep the notifier busy ----
$l->{seen} = [];
$l->{pids} = {};
my $bulk = le_session($node);
le_send($bulk, q{
	BEGIN;
	SELECT count(*) FILTER (WHERE try_acquire_leader('bx' || i, '1 minute', 'bulk'))
	  FROM generate_series(1, 3000) i;
	COMMIT;});
churn($node, 'bx', 4, 200, '');
le_collect($bulk);
le_quit($bulk);
$want = expected_from_history($node, 'bx');
hear_all($l, $want);
@problems = check_events($want, $l->{seen}, 'bx');
is_deeply(\@problems, [], 'a transaction of 3,000 changes beside a storm: every change heard, in term order')
  or diag(join("\n", @problems[0 .. ($#problems < 9 ? $#problems : 9)]));
ok(defined $l->{pids}{ $bulk->{le_pid} },
	'the transaction too large for the queue sent its notifications itself')
  or diag(explain($l->{pids}));

# ---- info, handed_over and moved go through the queue too ----
# A storm where every term publishes an info of about 3,900 bytes (so a
# queue holds some 60 of them and fills: N2 sends the rest) before it is
# released: per name and term, elected, then info, then released.
$l->{seen} = [];
$l->{pids} = {};
my $pad = 'x' x 3900;
$node->pgbench(
	"-n -c 6 -j 2 -t 60",
	0, [qr/processed: 360\//], [qr{}],
	"churn ix with info",
	{
		"014_churn_ix" => qq{
\\set n random(0, 7)
SELECT try_acquire_leader('ix' || :n, '1 minute', 'h' || :client_id) AS won \\gset
\\if :won
SELECT set_leader_info('ix' || :n, jsonb_build_object('pad', '$pad', 'by', 'h' || :client_id), 'h' || :client_id);
SELECT release_leader('ix' || :n, 'h' || :client_id);
\\endif
}
	});
$want = expected_from_history($node, 'ix');
for my $name (keys %$want)
{
	my @with_info;
	for my $e (@{ $want->{$name} })
	{
		push @with_info, $e;
		if ($e =~ m{^elected/(\d+)/([^/]+)/})
		{
			push @with_info, "info/$1/$2/none";
		}
	}
	$want->{$name} = \@with_info;
}
hear_all($l, $want);
@problems = check_events($want, $l->{seen}, 'ix');
is_deeply(\@problems, [], 'info events of 3,900 bytes in a storm: elected, info, released per term, in order')
  or diag(join("\n", @problems[0 .. ($#problems < 9 ? $#problems : 9)]));
my @infos = grep { $_->{event} eq 'info' } @{ $l->{seen} };
is(scalar(grep { length($_->{info}{pad} // '') == 3900 && $_->{info}{by} eq $_->{holder} } @infos),
	scalar(@infos), 'every info event carries its whole document');
is(scalar(grep { exists $_->{info} && !defined $_->{info} } grep { $_->{event} ne 'info' } @{ $l->{seen} }),
	scalar(grep { $_->{event} ne 'info' } @{ $l->{seen} }), 'the other events say "info": null');

# A hand-over and two moves, through the notifier, in order.
$l->{seen} = [];
$l->{pids} = {};
$node->safe_psql('postgres', q{
	SELECT try_acquire_leader('hv', '1 minute', 'a');
	SELECT set_leader_info('hv', '{"k": 1}', 'a');
	SELECT release_leader('hv', 'a', 'b');
	SELECT try_acquire_leader('hv', '1 minute', 'b');
	SELECT leader_election.move_leader('hv');
	SELECT try_acquire_leader('hv', '1 minute', 'c');
	SELECT leader_election.move_leader('hv', 'a');
	SELECT try_acquire_leader('hv', '1 minute', 'a');});
le_wait_until(sub { drain($l); scalar(@{ $l->{seen} }) >= 8 });
my @hv = map {
	join '/', $_->{event}, $_->{holder}, $_->{reason},
	  (exists $_->{successor} ? ($_->{successor} // 'null') : '-'),
	  (defined $_->{info} ? encode_json($_->{info}) : 'null')
} grep { $_->{name} eq 'hv' } @{ $l->{seen} };
is_deeply(\@hv, [
	'elected/a/none/-/null', 'info/a/none/-/{"k":1}', 'handed_over/a/released/b/null',
	'elected/b/released/-/null', 'moved/b/moved/null/null', 'elected/c/moved/-/null',
	'moved/c/moved/a/null', 'elected/a/moved/-/null'],
	'hand-over and moves: every event, in order, with successor and info');
my $notifier_now = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'leader_election notifier'});
is_deeply([ keys %{ $l->{pids} } ], [$notifier_now],
	'hand-over and moves: sent by the notifier');

# ---- N2: the notifier terminated; the next change starts another, and
# nothing queued is lost ----
$l->{seen} = [];
$notifiers = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'leader_election notifier'});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($notifiers, 60000)") if $notifiers;
churn($node, 'tx', 4, 100, '');
$want = expected_from_history($node, 'tx');
hear_all($l, $want);
@problems = check_events($want, $l->{seen}, 'tx');
is_deeply(\@problems, [], 'after the notifier was terminated: every change heard, in term order')
  or diag(join("\n", @problems[0 .. ($#problems < 9 ? $#problems : 9)]));

# ---- N3: an administrator's change rolled back in a savepoint, while
# events are queued, loses none of them (when the administrator's functions
# took the queued events into their own transaction to send them, a
# savepoint's rollback threw those NOTIFYs away) ----
$l->{seen} = [];
$node->safe_psql('postgres', q{SELECT try_acquire_leader('sv0', '1 minute', 'h')});
hear_all($l, expected_from_history($node, 'sv'));
my $np = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'leader_election notifier'});
like($np, qr/^\d+$/, 'N3: a notifier runs, idle (everything was heard)');
kill 'STOP', $np;    # keeps the next events queued
$node->safe_psql('postgres', q{
	SELECT try_acquire_leader('sv1', '1 minute', 'h');
	SELECT try_acquire_leader('sv2', '1 minute', 'h');
	BEGIN;
	SAVEPOINT s;
	SELECT leader_election.release_name('sv0');
	ROLLBACK TO s;
	COMMIT;
});
kill 'CONT', $np;
$want = expected_from_history($node, 'sv');
hear_all($l, $want);
@problems = check_events($want, $l->{seen}, 'sv');
is_deeply(\@problems, [],
	'N3: events queued before an admin change rolled back in a savepoint are still heard')
  or diag(join("\n", @problems));
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('sv3', '1 minute', 'h')}), 't',
	'N3: grants go on after it');

# ---- the notifier never keeps DROP DATABASE from working ----
$node->safe_psql('postgres', 'CREATE DATABASE le_drop');
$node->safe_psql('le_drop', 'CREATE EXTENSION leader_election');
$node->safe_psql('le_drop', q{SELECT try_acquire_leader('d', '1 minute', 'x')});
ok(le_poll($node, q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'leader_election notifier' AND datname = 'le_drop'}),
	'a notifier serves the second database');
$node->safe_psql('postgres', 'DROP DATABASE le_drop');
pass('DROP DATABASE succeeds while its notifier was running');

# ---- in_transaction, mixed with the notifier in one storm ----
$l->{seen} = [];
$l->{pids} = {};
churn($node, 'qx', 8, 200,
	"\\set mode random(0, 1)\n\\if :mode\nSET leader_election.notify_delivery = in_transaction;\n\\else\nRESET leader_election.notify_delivery;\n\\endif");
$want = expected_from_history($node, 'qx');
hear_all($l, $want);
@problems = check_events($want, $l->{seen}, 'qx');
is_deeply(\@problems, [],
	'sessions switching between in_transaction and background: every change heard, in term order')
  or diag(join("\n", @problems[0 .. ($#problems < 9 ? $#problems : 9)]));
cmp_ok(scalar(keys %{ $l->{pids} }), '>', 1,
	'in_transaction: granting backends sent some notifications themselves');

le_quit($l->{session});
$node->stop;

# ---- without preloading: NOTIFY in the granting transaction ----
my $plain = le_node('storm_plain', %conf, preload => 0);
$l = listener($plain);
churn($plain, 'nx', 8, 150, '');
$want = expected_from_history($plain, 'nx');
hear_all($l, $want);
@problems = check_events($want, $l->{seen}, 'nx');
is_deeply(\@problems, [], 'without preloading: every change heard, in term order')
  or diag(join("\n", @problems[0 .. ($#problems < 9 ? $#problems : 9)]));
is($plain->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leader_election notifier'}),
	'0', 'without preloading: no notifier worker');
cmp_ok(scalar(keys %{ $l->{pids} }), '>=', 8,
	'without preloading: the granting backends sent the notifications');
le_quit($l->{session});
$plain->stop;

done_testing();
