# 400_patroni.pl: leader_election under a real failover manager: etcd and
# three Patroni-managed PostgreSQL nodes, each preloading the library, with
# failovers, a split brain and an etcd restart (issue 14).
#
# Load, through every fault: two stress drivers (test/stress/le_stress), one
# with named holders and one with session-bound leases, whose clients
# connect with multi-host strings and target_session_attrs=read-write (the
# hosts in three different orders, and sessions dropped now and then, so
# that during a split brain some clients reach the old primary and some the
# new one); and a registered task that logs each run's start and end in the
# server log of the node it runs on.
#
# Faults (test/stress/LePatroni.pm): patronictl switchover; kill -9 of the
# primary's postmaster; loss of the primary node (agent and postmaster
# killed, then the agent restarted: the old primary rejoins through
# pg_rewind); SIGSTOP of the primary's Patroni agent until a standby is
# promoted while the old primary still serves, then SIGCONT (the agent
# demotes and rewinds it); an etcd restart.  Once per mode by default; with
# LE_PATRONI_LONG=1, shuffled rounds for LE_PATRONI_SECONDS (default 300) per
# mode.
#
# Two modes, one after the other on the same cluster:
#   async   asynchronous replication (Patroni's default).  What must hold:
#           the surviving history (audit, history, effects on the final
#           primary) passes C1-C4, and liveness C6.  What asynchronous
#           replication loses is measured and printed, not asserted:
#           acknowledged grants, renewals and effects missing from the
#           final primary (C5, C7, C1 on the client log), overlap of
#           acknowledged leases (C8), task runs on two nodes at once (C9).
#   strict  synchronous_mode + synchronous_mode_strict: C1-C7 over the whole
#           history, no two holders' acknowledged leases overlap (C8), the
#           task never runs on two nodes at once (C9): all zero.
# In both: after every fault the task runs on the new primary.
#
# Then a negative control: unfenced check-then-act clients under a
# switchover must make C4 fire; and C8, C9 must flag synthetic overlaps.
#
# Each mode prints `<mode>: N failovers, M grants, K fenced effects, V
# violations`, and per fault the time from the fault to the first
# acknowledged lease operation after it and the longest stretch without one.
use strict;
use warnings;

use lib 'test/t';
use lib 'test/stress';
use IPC::Run;
use List::Util qw(shuffle max sum);
use LeaderElectionTest;
use LeHaCheck qw(ack_overlaps task_overlaps leader_gaps);
use LePatroni;
use LeStressCheck qw(load_dir check report);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# Part of every run (about 4 minutes); LE_PATRONI=0 leaves it out.
plan skip_all => 'LE_PATRONI=0: the Patroni test is left out'
  if ($ENV{LE_PATRONI} // '1') eq '0';
my ($pg_major) = `pg_config --version` =~ /PostgreSQL (\d+)/;
plan skip_all => "the Patroni test runs on Debian 12's PostgreSQL 15 (this is $pg_major)"
  unless ($pg_major // 0) == 15;

for my $tool (qw(patroni patronictl etcd))
{
	plan skip_all => "$tool is not installed (test/all.sh installs patroni, etcd-server)"
	  unless grep { -x "$_/$tool" } split /:/, $ENV{PATH};
}

my $long = $ENV{LE_PATRONI_LONG} // 0;
my $mode_seconds = $ENV{LE_PATRONI_SECONDS} // ($long ? 300 : 0);
my $seed = $ENV{LE_STRESS_SEED} // (time() % 1_000_000);
srand($seed);
my $ttl_ms = 2000;
my $retry_ms = 250;
# Recovery after a heal takes a reconnect through the multi-host string and
# a ttl on a busy machine: generous.
my $slack_ms = 20000;
my $bound_s = ($ttl_ms + 1.5 * $retry_ms + $slack_ms) / 1000;
my $task_ttl_s = 3;
diag("patroni test: seed $seed (LE_STRESS_SEED), "
	  . ($mode_seconds ? "$mode_seconds s of faults per mode" : 'one round of faults per mode'));

{
	local %ENV = %ENV;
	delete @ENV{qw(MAKEFLAGS MAKELEVEL MFLAGS)};
	my $out = `make -s stress-driver 2>&1`;
	BAIL_OUT("cannot build test/stress/le_stress:\n$out") if $?;
}
my $driver = 'test/stress/le_stress';
my $bin = `pg_config --bindir`;
chomp $bin;

my $dir = PostgreSQL::Test::Utils::tempdir('patroni');
my $c = LePatroni->new(dir => $dir, bin => $bin, log => sub { diag(@_) });
# Drivers still running (a run that died): killed before the cluster stops.
my %running;
my $cleanup = sub {
	for my $h (values %running)
	{
		eval { $h->kill_kill; 1 };
	}
	eval { $c->stop; 1 } or diag("stopping the cluster: $@");
};
# A test killed with SIGTERM or SIGINT still stops what it started.
$SIG{TERM} = $SIG{INT} = sub { exit 1 };
END
{
	local $?;
	$cleanup->() if $cleanup;
	undef $cleanup;
}

sub show_logs
{
	for my $nd ($c->nodes)
	{
		for my $f ("$nd->{dir}/patroni.log", "$nd->{dir}/log/postgresql.log")
		{
			next unless -e $f;
			my @l = `tail -n 30 '$f'`;
			diag("--- $f\n", @l);
		}
	}
}

my $ok = eval { $c->start; 1 };
if (!$ok)
{
	my $why = $@;
	show_logs();
	BAIL_OUT("the Patroni cluster did not start: $why");
}
ok(1, 'etcd and three Patroni nodes: one primary, two running replicas');
is($c->sql($c->connstr, 'SHOW shared_preload_libraries'), 'leader_election',
	'the nodes preload leader_election (Patroni postgresql.parameters)');

# The task: logs its start and end (epoch seconds) in the node's server log.
$c->sql($c->connstr, q{
CREATE EXTENSION leader_election;
CREATE PROCEDURE public.le_ha_task(term bigint) LANGUAGE plpgsql AS $$
BEGIN
    RAISE LOG 'le_ha_task start % term %', extract(epoch FROM clock_timestamp()), term;
    PERFORM pg_sleep(0.3);
    RAISE LOG 'le_ha_task end % term %', extract(epoch FROM clock_timestamp()), term;
END $$;
SELECT leader_election.register_task('ha_task', 'public.le_ha_task(bigint)', '1 second', '3 seconds');
}) // BAIL_OUT('cannot set up the extension and the task');

# Task runs from every node's log: [ { node, start, end, term } ]; a run
# whose end is not logged (its node died) is taken to last its whole ttl.
sub task_runs
{
	my ($from, $to) = @_;
	my @runs;
	for my $nd ($c->nodes)
	{
		open my $fh, '<', "$nd->{dir}/log/postgresql.log" or next;
		my %open;
		while (<$fh>)
		{
			next unless /le_ha_task (start|end) ([0-9.]+) term (\d+)/;
			my ($what, $t, $term) = ($1, $2, $3);
			if ($what eq 'start')
			{
				$open{$term} = { node => $nd->{name}, start => $t, end => $t + $task_ttl_s, term => $term };
				push @runs, $open{$term};
			}
			elsif ($open{$term})
			{
				$open{$term}{end} = $t;
				delete $open{$term};
			}
		}
		close $fh;
	}
	return [ grep { $_->{start} >= $from && $_->{start} <= $to } @runs ];
}

# The clients' connection strings: all three nodes, in three orders.
my @orders = ([qw(n1 n2 n3)], [qw(n2 n3 n1)], [qw(n3 n1 n2)]);

# Read new lines of a driver's client log; returns the completion time of
# the newest "ok" lease acknowledgement seen so far.
sub newest_ack
{
	my ($d) = @_;
	open my $fh, '<', "$d->{dir}/client.log" or return 0;
	seek $fh, $d->{off} // 0, 0;
	while (my $line = <$fh>)
	{
		last unless $line =~ /\n$/;
		$d->{off} = tell $fh;
		my @f = split ' ', $line;
		$d->{ack} = $f[3] if $f[1] =~ /^(acquire|wait|renew)$/ && $f[4] eq 'ok' && $f[3] > ($d->{ack} // 0);
	}
	close $fh;
	return $d->{ack} // 0;
}

# Grants acknowledged so far in a driver's client log.
sub grants_seen
{
	my ($d) = @_;
	open my $fh, '<', "$d->{dir}/client.log" or return 0;
	my $n = grep { my @f = split ' '; @f > 4 && $f[1] =~ /^(acquire|wait)$/ && $f[4] eq 'ok' } <$fh>;
	close $fh;
	return $n;
}

my (%times, @summary);

# run_mode(label, sync, kinds => [...], args => [...], what): drivers +
# faults + checks; returns the checker results.
sub run_mode
{
	my (%o) = @_;
	my $t0 = time();
	my $stop = "$dir/$o{label}.stop";
	my @drivers;
	for my $kind (@{ $o{drivers} || [ 'named', 'session' ] })
	{
		my $d = { kind => $kind, dir => "$dir/$o{label}_$kind" };
		mkdir $d->{dir} or die $!;
		my @cmd = (
			$driver, '--conninfo', $c->connstr,
			(map { ('--client-conninfo', $c->connstr(@$_)) } @orders),
			'--out', $d->{dir}, '--seconds', 7200, '--seed', $seed,
			'--ttl-ms', $ttl_ms, '--retry-ms', $retry_ms,
			'--prefix', "$o{label}_${kind}_", '--stop-file', $stop,
			'--reconnect-prob', '0.02',
			($kind eq 'session' ? ('--session-identity', '--clients', 4) : ('--clients', 6, '--waiters', 1)),
			@{ $o{args} || [] });
		$d->{err} = '';
		$d->{h} = IPC::Run::start(\@cmd, '<', \undef, '>', \my $out, '2>', \$d->{err});
		$running{"$o{label} $kind"} = $d->{h};
		push @drivers, $d;
		# One driver's setup (CREATE SCHEMA IF NOT EXISTS ...) at a time:
		# concurrent ones can collide on the catalog's unique index.
		le_wait_until(sub { -e "$d->{dir}/pids" || !$d->{h}->pumpable }, 120)
		  or die "$o{label} $kind: le_stress did not start";
	}
	my $r = eval { drive_mode(\%o, \@drivers, $stop, $t0) };
	my $why = $@;
	for my $d (@drivers)
	{
		eval { $d->{h}->kill_kill; 1 } if !$r;
		delete $running{"$o{label} $d->{kind}"};
	}
	die $why unless $r;
	return $r;
}

# The faults of one run_mode, then its checks.
sub drive_mode
{
	my ($o, $drivers, $stop, $t0) = @_;
	my %o = %$o;
	my @drivers = @$drivers;
	le_wait_until(sub { !grep { newest_ack($_) == 0 } @drivers }, 120)
	  or die "$o{label}: the drivers never got a lease: " . join(' ', map { $_->{err} } @drivers);

	my @faults;
	my @kinds = @{ $o{kinds} || [@LePatroni::FAULTS] };
	my $f_t0 = time();
	while (1)
	{
		my @round = $mode_seconds && !$o{kinds} ? shuffle(@kinds) : @kinds;
		for my $k (@round)
		{
			my $f = $c->fault($k, $o{sync});
			push @faults, $f;
			for my $d (@drivers)
			{
				open my $fh, '>>', "$d->{dir}/nemesis.log" or die $!;
				print $fh LePatroni::nemesis_line($f);
				close $fh;
			}
			# Until every driver has a leader again (C6 judges the bound).
			my $healed = le_wait_until(sub { !grep { newest_ack($_) < $f->{heal} } @drivers }, $bound_s);
			diag("$o{label}: no leader within $bound_s s after $k") unless $healed;
			usleep(1_000_000);
		}
		last unless $mode_seconds && !$o{kinds} && time() - $f_t0 < $mode_seconds;
	}
	# A mode may ask for more load after its faults: until the drivers'
	# clients have made this many grants between them (the negative
	# control needs takeovers for its stale writes to follow).
	if ($o{min_grants})
	{
		le_wait_until(sub { sum(map { grants_seen($_) } @drivers) >= $o{min_grants} }, 120)
		  or diag("$o{label}: fewer than $o{min_grants} grants after 120 s");
	}
	open my $sfh, '>', $stop or die $!;
	close $sfh;
	for my $d (@drivers)
	{
		my $fin = eval { $d->{h}->finish; 1 };
		die "$o{label} $d->{kind}: le_stress failed ($?): $d->{err}" unless $fin && $? == 0;
	}
	my $t1 = time();

	my %r = (faults => \@faults, t0 => $t0, t1 => $t1);
	for my $d (@drivers)
	{
		my $data = load_dir($d->{dir});
		my $full = check($data, slack_ms => $slack_ms);
		my $server = check({ %$data, ops => [], faults => [] }, slack_ms => $slack_ms);
		my $ov = ack_overlaps($data->{ops}, $ttl_ms, $d->{kind} eq 'session');
		my $gaps = leader_gaps($data->{ops}, [ map { { %$_ } } @faults ]);
		diag("== $o{label}, $d->{kind} holders: " . ($o{what} // ''));
		diag($_) for report($full);
		diag(sprintf('C8 acknowledged leases of two holders overlapping: %d%s', scalar @$ov,
			@$ov ? sprintf(', worst %.3f s (%s term %s by %s and term %s by %s)', $ov->[0][2] / 1e9,
				$ov->[0][0]{name}, $ov->[0][0]{term}, $ov->[0][0]{holder},
				$ov->[0][1]{term}, $ov->[0][1]{holder}) : ''));
		for my $i (0 .. $#faults)
		{
			my ($f, $g) = ($faults[$i], $gaps->[$i]);
			my $line = sprintf('%s %s %s: primary %s -> %s; promoted %s s; first acknowledged lease op after %s s; longest stretch without one %.1f s',
				$o{label}, $d->{kind}, $f->{kind}, $f->{old}, $f->{new},
				defined $f->{promoted} ? sprintf('%.1f', ($f->{promoted} - $f->{start}) / 1e9) : '-',
				defined $g->{first_ns} ? sprintf('%.1f', $g->{first_ns} / 1e9) : '-',
				$g->{gap_ns} / 1e9);
			diag("failover time: $line");
			push @{ $times{"$o{label} $d->{kind} $f->{kind}"} }, $g;
		}
		# Which fault each client-visible violation (a lost acknowledgement)
		# belongs to: the last fault that started before its operation ended.
		my %op_by = map { ("$_->{client} $_->{seq}" => $_) } @{ $data->{ops} };
		my %lost_by;
		for my $v (@{ $full->{violations} })
		{
			next unless $v->[1] =~ /client (\d+) seq (\d+)/;
			my $op = $op_by{"$1 $2"} or next;
			my ($f) = grep { $_->{start} <= $op->{complete} } reverse @faults;
			$lost_by{ $f ? $f->{kind} : 'before any fault' }++;
		}
		diag("$o{label} $d->{kind}: client-visible violations by fault: "
			  . (join(', ', map { "$_ $lost_by{$_}" } sort keys %lost_by) || 'none'));
		$r{ $d->{kind} } = { full => $full, server => $server, overlaps => $ov, data => $data };
	}
	my $runs = task_runs($t0 - 1, $t1);
	$r{task_runs} = $runs;
	$r{task_overlaps} = task_overlaps($runs);
	diag(sprintf('%s task: %d runs on %s; C9 runs on two nodes at once: %d', $o{label},
		scalar @$runs, join(',', sort keys %{ { map { $_->{node} => 1 } @$runs } }),
		scalar @{ $r{task_overlaps} }));
	return \%r;
}

sub task_follows_primary
{
	my ($label, $r) = @_;
	for my $f (@{ $r->{faults} })
	{
		my @on = grep {
			$_->{node} eq $f->{new}
			  && $_->{start} >= $f->{start_epoch}
			  && $_->{start} <= $f->{heal_epoch} + 60
		} @{ $r->{task_runs} };
		ok(scalar @on, "$label: after the $f->{kind} fault the task runs on the new primary $f->{new}");
	}
	return;
}

sub summary
{
	my ($label, $r, $violations, $extra) = @_;
	my $failovers = grep { $_->{old} ne $_->{new} } @{ $r->{faults} };
	my $grants = sum(map { $r->{$_}{full}{figures}{grants} // 0 } qw(named session));
	my $effects = sum(map { $r->{$_}{full}{figures}{effects} // 0 } qw(named session));
	my $line = "$label: $failovers failovers, $grants grants, $effects fenced effects, $violations violations"
	  . ($extra // '');
	diag("$label: harness repairs so far: replicas re-initialised " . ($c->{reinits} // 0)
		  . ", stale /sync keys deleted " . ($c->{sync_key_resets} // 0));
	diag($line);
	push @summary, $line;
	return;
}

my $failed;
for my $mode (
	{ label => 'async', sync => 0, what => 'asynchronous replication' },
	{ label => 'strict', sync => 1, what => 'synchronous_mode_strict' })
{
	my $r = eval {
		$c->set_sync($mode->{sync}) if $mode->{sync};
		run_mode(%$mode);
	};
	if (!$r)
	{
		$failed = $@;
		fail("$mode->{label}: the run completed: $failed");
		show_logs();
		last;
	}
	my $l = $mode->{label};
	if ($mode->{sync})
	{
		my $v = 0;
		for my $k (qw(named session))
		{
			is($r->{$k}{full}{figures}{violations}, 0, "$l, $k holders: C1-C7 find no violation across the failovers");
			is(scalar @{ $r->{$k}{overlaps} }, 0, "$l, $k holders: no two holders' acknowledged leases overlap (C8)");
			cmp_ok($r->{$k}{full}{figures}{grants}, '>=', 2, "$l, $k holders: the lease changed hands");
			$v += $r->{$k}{full}{figures}{violations} + @{ $r->{$k}{overlaps} };
		}
		is(scalar @{ $r->{task_overlaps} }, 0, "$l: the task never ran on two nodes at once (C9)");
		$v += @{ $r->{task_overlaps} };
		task_follows_primary($l, $r);
		summary($l, $r, $v);
	}
	else
	{
		my ($v, $lost, $maxov) = (0, 0, 0);
		for my $k (qw(named session))
		{
			my $s = $r->{$k}{server}{figures};
			is($s->{violations}, 0, "$l, $k holders: the surviving history passes C1-C4");
			is($r->{$k}{full}{figures}{violations_C6} // 0, 0, "$l, $k holders: a leader within the bound after every fault (C6)");
			diag("VIOLATION (server side) $_->[0]: $_->[1]") for @{ $r->{$k}{server}{violations} };
			$v += $s->{violations} + ($r->{$k}{full}{figures}{violations_C6} // 0);
			$lost += $r->{$k}{full}{figures}{violations} - ($r->{$k}{full}{figures}{violations_C6} // 0);
			$maxov = max($maxov, map { $_->[2] / 1e9 } @{ $r->{$k}{overlaps} });
		}
		task_follows_primary($l, $r);
		summary($l, $r, $v,
			sprintf(' (server side; lost to asynchronous replication: %d client-visible violations,'
				  . ' acknowledged leases overlapping up to %.3f s, %d task runs on two nodes at once)',
				$lost, $maxov, scalar @{ $r->{task_overlaps} }));
	}
}

# Negative control 1: unfenced check-then-act under a switchover, with
# leaders pausing 3 x ttl between the check and the write, and the load kept
# on until the lease has changed hands a few times (asynchronous
# replication): C4 must fire.
if (!$failed)
{
	my $r = eval {
		# Back to asynchronous replication: the control needs takeovers,
		# not durability, and commits that wait for a standby on a loaded
		# machine left too few of them.
		$c->set_sync(0);
		run_mode(
			label   => 'unfenced',
			sync    => 0,
			drivers => ['named'],
			kinds   => ['switchover'],
			min_grants => 8,
			what    => 'NEGATIVE CONTROL: unfenced check-then-act',
			args    => [ '--unfenced', '--stall-prob', '0.3', '--stall-ms', 3 * $ttl_ms ]);
	};
	if ($r)
	{
		cmp_ok($r->{named}{full}{figures}{violations_C4} // 0, '>', 0,
			'negative control: C4 reports the stale writes of unfenced clients');
	}
	else
	{
		fail("negative control ran: $@");
		show_logs();
	}
}

# Negative control 2: C8 and C9 flag what they must (synthetic histories).
{
	my $ns = 1e9;
	my @ops = (
		{ client => 0, op => 'acquire', invoke => 1 * $ns, complete => 1.1 * $ns, result => 'ok', term => 1, name => 'x', holder => 'a' },
		{ client => 0, op => 'renew', invoke => 2 * $ns, complete => 2.1 * $ns, result => 'ok', term => 1, name => 'x', holder => 'a' },
		{ client => 1, op => 'acquire', invoke => 3 * $ns, complete => 3.1 * $ns, result => 'ok', term => 1, name => 'x', holder => 'b' });
	my $ov = ack_overlaps(\@ops, 2000, 0);
	is(scalar @$ov, 1, 'C8 flags a grant made while another holder\'s renewal was still acknowledged');
	$ops[2]{invoke} = 4.1 * $ns;
	$ops[2]{complete} = 4.2 * $ns;
	is(scalar @{ ack_overlaps(\@ops, 2000, 0) }, 0, 'C8 accepts the same grant after the ttl');
	push @ops, { client => 0, op => 'connect', invoke => 2.5 * $ns, complete => 2.6 * $ns, result => 'ok', term => '-', name => 'x', holder => '-' };
	$ops[2]{invoke} = 3 * $ns;
	$ops[2]{complete} = 3.1 * $ns;
	is(scalar @{ ack_overlaps(\@ops, 2000, 1) }, 0, 'C8: a session-bound lease ends with its session');
	is(scalar @{ task_overlaps([ { node => 'n1', start => 1, end => 3 }, { node => 'n2', start => 2, end => 4 } ]) },
		1, 'C9 flags runs on two nodes at once');
	is(scalar @{ task_overlaps([ { node => 'n1', start => 1, end => 2 }, { node => 'n2', start => 2, end => 4 } ]) },
		0, 'C9 accepts runs one after the other');
}

diag('== summary');
diag($_) for @summary;
diag('== failover times (s): fault -> first acknowledged lease op / longest stretch without one');
for my $k (sort keys %times)
{
	my @g = @{ $times{$k} };
	my @first = grep { defined } map { $_->{first_ns} } @g;
	diag(sprintf('%-32s n=%d first: max %.1f mean %.1f; gap: max %.1f mean %.1f', $k, scalar @g,
		(@first ? max(@first) / 1e9 : 0), (@first ? sum(@first) / @first / 1e9 : 0),
		max(map { $_->{gap_ns} } @g) / 1e9, sum(map { $_->{gap_ns} } @g) / @g / 1e9));
}

done_testing();
