# 200_stress_history.pl: the history-checked stress test of leader_election
# (research/anchors-reliability.md §A.3, §B.4; issue 5).
#
# Runs test/stress/le_stress (8 libpq clients contending for a lease, each
# leader doing fenced effects) against a cluster with the library preloaded
# and restart_after_crash = on, while test/stress/LeNemesis.pm injects faults
# (terminate the holder's backend, SIGSTOP its client past the ttl, SIGKILL
# a backend, immediate stop + start, short timeouts).  Then the checkers of
# test/stress/LeStressCheck.pm must find no violation in the server-side
# history and the client log.
#
# Three runs on one cluster, each with its own lease-name prefix:
#   1. fenced, named holders, all faults         -> zero violations
#   2. fenced, session identity, all faults      -> zero violations
#   3. negative control: unfenced (am_leader, then write in another
#      transaction) with clients pausing between check and write past the
#      ttl, under the pause fault                 -> C4 MUST report stale writes
#
# LE_STRESS_SECONDS: seconds of faults in run 1 (default 20; the driver runs
# longer so the last fault's recovery can be judged).  LE_STRESS_SEED: the
# seed (default: from the clock, printed so a run can be repeated).
use strict;
use warnings;

use lib 'test/t';
use lib 'test/stress';
use IPC::Run;
use LeaderElectionTest;
use LeNemesis;
use LeStressCheck qw(load_dir check report);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use POSIX qw(ceil);
use Test::More;

my $fault_seconds = $ENV{LE_STRESS_SECONDS} // 20;
my $seed = $ENV{LE_STRESS_SEED} // (time() % 1_000_000);
my $ttl_ms = 1000;
my $retry_ms = 250;
my $slack_ms = 4000;
diag("stress seed $seed (repeat with LE_STRESS_SEED=$seed), $fault_seconds s of faults");

# Build the driver here: the default `make` does not.
{
	local %ENV = %ENV;
	delete @ENV{qw(MAKEFLAGS MAKELEVEL MFLAGS)};
	my $out = `make -s stress-driver 2>&1`;
	BAIL_OUT("cannot build test/stress/le_stress:\n$out") if $?;
}
my $driver = 'test/stress/le_stress';

my $node = le_node('stress',
	conf => "restart_after_crash = on\n"
	  . "leader_election.history_max_terms = 1000000\n"
	  . "log_min_messages = warning\n");

# One run of driver + nemesis; returns the checker's result and the faults.
sub stress_run
{
	my (%o) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir("stress_$o{label}");
	my $stall_ms = $o{stall_ms} // 0;
	my $bound_s = ($ttl_ms + 1.5 * $retry_ms + $stall_ms + $slack_ms) / 1000;
	# The driver outlives the faults by more than the liveness bound.
	my $seconds = $o{fault_seconds} + ceil($bound_s) + 2;
	my @cmd = (
		$driver, '--conninfo', $node->connstr('postgres'),
		'--out', $dir, '--seconds', $seconds,
		'--seed', $seed, '--ttl-ms', $ttl_ms,
		'--retry-ms', $retry_ms, '--prefix', "$o{label}_",
		'--stall-ms', $stall_ms, @{ $o{args} || [] });
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(\@cmd, '>', \$out, '2>', \$err,
		IPC::Run::timeout($seconds + 150));

	my $nemesis;
	my $ok = eval {
		le_wait_until(sub { -e "$dir/pids" }, 60)
		  or die "le_stress did not start: $err";
		$nemesis = LeNemesis->new(
			node   => $node,
			dir    => $dir,
			seed   => $seed,
			ttl_ms => $ttl_ms,
			prefix => "$o{label}_",
			# Bounded in count as well as in time.
			max_faults => 2 * $o{fault_seconds},
			kinds      => $o{kinds} || [@LeNemesis::KINDS]);
		$nemesis->run($o{fault_seconds});
		$nemesis->cleanup;
		$h->finish;
		1;
	};
	if (!$ok)
	{
		my $why = $@;
		$nemesis->cleanup if $nemesis;
		eval { $h->kill_kill; };
		die "stress run $o{label} failed: $why\nle_stress stderr: $err";
	}
	die "le_stress exited with $?: $err" if $? != 0;

	my $r = check(load_dir($dir), slack_ms => $slack_ms);
	diag("== $o{label}: " . ($o{what} // ''));
	diag($_) for report($r);
	return $r;
}

# 1. Fenced effects, named holders, every kind of fault.  Some effects stall
# for 2 x ttl with the fence held: that may only delay a takeover.  Two of
# the eight clients block in wait_for_leadership() instead of polling.
my $r = stress_run(
	label         => 'fenced',
	what          => 'fenced effects, named holders, all faults',
	fault_seconds => $fault_seconds,
	stall_ms      => 2 * $ttl_ms,
	args          => [ '--stall-prob', '0.03', '--waiters', '2' ]);
my $f = $r->{figures};
is($f->{violations}, 0, 'fenced run: no checker reports a violation');
cmp_ok($f->{grants}, '>=', 2, 'fenced run: the lease changed hands');
cmp_ok($f->{op_effect_ok} // 0, '>', 0, 'fenced run: fenced effects committed');
cmp_ok(($f->{op_wait_ok} // 0) + ($f->{op_wait_fail} // 0), '>', 0,
	'fenced run: clients waited in wait_for_leadership');
for my $kind (@LeNemesis::KINDS)
{
	cmp_ok($f->{"fault_$kind"} // 0, '>=', 1, "fenced run: fault $kind injected");
}

# 2. The same with session identities (holder NULL): a lease ends the moment
# its session does, so terminate/crash/restart hand it over at once.
$r = stress_run(
	label         => 'session',
	what          => 'fenced effects, session identities, all faults',
	fault_seconds => ceil($fault_seconds / 2),
	args          => [ '--session-identity', '--waiters', '2' ]);
$f = $r->{figures};
is($f->{violations}, 0, 'session-identity run: no checker reports a violation');
cmp_ok($f->{grants}, '>=', 2, 'session-identity run: the lease changed hands');

# 3. Negative control.  The checker must be able to fail: leaders check
# am_leader() and write in a later transaction, pausing in between for
# 3 x ttl now and then; the next leader writes meanwhile, then the stale
# one.  The lease itself stays safe: only the fencing checker may fire.
$r = stress_run(
	label         => 'unfenced',
	what          => 'NEGATIVE CONTROL: unfenced check-then-act under pauses',
	fault_seconds => 8,
	kinds         => ['pause'],
	stall_ms      => 3 * $ttl_ms,
	args          => [ '--unfenced', '--stall-prob', '0.3' ]);
$f = $r->{figures};
cmp_ok($f->{violations_C4} // 0, '>', 0,
	'negative control: the fencing checker C4 reports stale-term effects');
for my $c (qw(C1 C2 C3 C5))
{
	is($f->{"violations_$c"} // 0, 0, "negative control: the lease itself is still safe ($c)");
}

$node->stop;
done_testing();
