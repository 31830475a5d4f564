# 106_task_stop.pl: a run that ignores cancels can still be stopped
# (task_runner.h, "Stopping").
#
# pg_terminate_backend, disable_task, unregister_task, a fast shutdown and
# DROP DATABASE ... WITH (FORCE) each end a run within the stop grace
# (1 s, then the worker is ended), whatever the procedure catches; the
# launcher stops renewing the moment it tells a worker to stop; the lease
# of the stopped run is released.  The runner's database here is not
# "postgres", so that it can be dropped; what the launcher does then (back
# off, say once what is wrong) is checked at the end.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = le_node('stop', conf => "leader_election.database = 'rdb'\n");
$node->safe_psql('postgres', 'CREATE DATABASE rdb');
$node->safe_psql('rdb', 'CREATE EXTENSION leader_election');
$node->safe_psql('rdb', q{
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO app;
CREATE TABLE public.ticks (pid int, term bigint, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.ticks TO app;
-- Ticks every 50 ms and swallows every cancel.
CREATE PROCEDURE public.stubborn(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    INSERT INTO public.ticks (pid, term) VALUES (pg_backend_pid(), term);
    COMMIT;
    BEGIN
      PERFORM pg_sleep(0.05);
    EXCEPTION WHEN query_canceled THEN
      NULL;
    END;
  END LOOP;
END $$;
ALTER PROCEDURE public.stubborn(bigint) OWNER TO app;
SET ROLE app;
SELECT leader_election.register_task('stop1', 'public.stubborn(bigint)', '1 second', '30 seconds');
});

sub rsql { return $node->safe_psql('rdb', $_[0]); }

sub rdb_poll
{
	my ($sql, $expected, $seconds) = @_;
	return le_wait_until(sub {
		my ($rc, $out) = $node->psql('rdb', $sql);
		return $rc == 0 && $out eq ($expected // 't');
	}, $seconds);
}

# Wait for a run of stop1 by a worker other than $not; returns its pid.
sub running_worker
{
	my ($not) = @_;
	$not //= 0;
	my $pid = '';
	le_wait_until(sub {
		$pid = rsql(qq{SELECT pid FROM public.ticks WHERE pid <> $not
			AND at > clock_timestamp() - interval '0.5 s' ORDER BY at DESC LIMIT 1});
		return $pid ne '';
	});
	return $pid;
}

# Seconds until process pid is gone (undef if still there after 30 s).
sub gone_after
{
	my ($pid, $t0) = @_;
	return le_wait_until(sub { !kill(0, $pid) }, 30) ? time() - $t0 : undef;
}

my $pid = running_worker();
ok($pid, "a run is going (worker $pid)");

# pg_terminate_backend
my $t0 = time();
rsql("SELECT pg_terminate_backend($pid)");
my $secs = gone_after($pid, $t0);
ok(defined $secs && $secs < 5, sprintf('pg_terminate_backend ends the run: %.2f s', $secs // -1));
my $term = rsql("SELECT max(term) FROM public.ticks WHERE pid = $pid");
is(rsql("SELECT end_reason FROM leader_election.history WHERE name = 'stop1' AND term = $term"),
	'released', 'and its lease is released');
is(rsql("SELECT status FROM leader_election.task_runs WHERE pid = $pid AND term = $term"),
	'cancelled', 'the run is recorded cancelled');

# disable_task
$pid = running_worker($pid);
ok($pid, "the task runs again (worker $pid)");
$t0 = time();
rsql(q{SET ROLE app; SELECT leader_election.disable_task('stop1')});
$secs = gone_after($pid, $t0);
ok(defined $secs && $secs < 5, sprintf('disable_task ends the run: %.2f s', $secs // -1));
ok(rdb_poll(q{SELECT holder IS NULL FROM leader_election.leases WHERE name = 'stop1'}),
	'and the lease is released');
$term = rsql("SELECT max(term) FROM public.ticks WHERE pid = $pid");
my $after = rsql(qq{SELECT count(*) FROM public.ticks WHERE pid = $pid AND at >
	(SELECT ended_at FROM leader_election.history WHERE name = 'stop1' AND term = $term)});
is($after, '0', 'nothing was committed after the release: renewals stopped');

# unregister_task
rsql(q{SET ROLE app; SELECT leader_election.enable_task('stop1')});
$pid = running_worker($pid);
ok($pid, "enabled again (worker $pid)");
$t0 = time();
rsql(q{SET ROLE app; SELECT leader_election.unregister_task('stop1')});
$secs = gone_after($pid, $t0);
ok(defined $secs && $secs < 5, sprintf('unregister_task ends the run: %.2f s', $secs // -1));
ok(rdb_poll(q{SELECT holder IS NULL FROM leader_election.leases WHERE name = 'stop1'}),
	'and the lease is released');

# fast shutdown
rsql(q{SET ROLE app;
	SELECT leader_election.register_task('stop1', 'public.stubborn(bigint)', '1 second', '30 seconds')});
$pid = running_worker($pid);
ok($pid, "registered again (worker $pid)");
$term = rsql("SELECT max(term) FROM public.ticks WHERE pid = $pid");
$t0 = time();
$node->stop('fast');
my $stop = time() - $t0;
note(sprintf('pg_ctl stop -m fast took %.2f s with a 30 s ttl', $stop));
cmp_ok($stop, '<', 5, 'a fast shutdown does not wait for the run');
$node->start;
is(rsql("SELECT end_reason FROM leader_election.history WHERE name = 'stop1' AND term = $term"),
	'released', 'the shut-down run\'s lease was released');

# DROP DATABASE ... WITH (FORCE)
$pid = running_worker();
ok($pid, "running after the restart (worker $pid)");
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE rdb WITH (FORCE)');
is($rc, 0, 'DROP DATABASE WITH (FORCE) succeeds while a stubborn run is going') or diag($err);

# The runner's database is gone: the launcher backs off and says so once.
my $log_at = -s $node->logfile;
sleep(12);
my $log = slurp_file($node->logfile, $log_at);
my $fatals = () = $log =~ /FATAL:  database "rdb" does not exist/g;
my $said = () = $log =~ /leader_election: the task runner cannot connect to database "rdb"/g;
note("in 12 s after the drop: $fatals failed launcher starts, $said explanations");
cmp_ok($fatals, '<=', 5, 'the launcher backs off');
is($said, 1, 'and says once what is wrong');

$node->stop;
done_testing();
