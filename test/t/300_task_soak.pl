# 300_task_soak.pl: the task runner under a long storm of faults, with a
# checker (task_runner.h).  Not part of the default suite: it runs only with
# LE_SOAK=1 (LE_SOAK_SECONDS, default 1150, sets its length).
#
# Nine tasks whose procedures commit a tick (name, pid, term, time) every
# 50 ms: some end quickly, some swallow cancels, some clean up for a while
# after a cancel, some outlive their ttl.  Meanwhile, at random: worker
# terminated, worker frozen (SIGSTOP) for 0.3 s, launcher frozen for 3-8 s
# (longer than the ttls), task re-registered under its name, task altered,
# disable/enable storms, an application taking a task's name for a second,
# and two crash restarts early on.  Then the checker proves on the server
# clock that
#   - no two runs of one name overlap (runner or application), and
#   - no tick of a term was made before it began or after it ended
#     (history: released, expired or taken over),
# and a negative control shows the checker catches an overlap.  A memory
# probe task, spared by the faults after the crashes, measures its worker's
# memory over 1,000 runs.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run ();

plan skip_all => 'soak test: set LE_SOAK=1 to run it' unless $ENV{LE_SOAK};
my $seconds = $ENV{LE_SOAK_SECONDS} // 1150;

my $node = le_node('soak', conf => "leader_election.database = 'postgres'\n"
	. "leader_election.max_task_workers = 16\nmax_worker_processes = 24\n"
	. "leader_election.history_max_terms = 1000000\nrestart_after_crash = on\n");
le_task_role($node, 'app');
$node->safe_psql('postgres', q{
CREATE SCHEMA soak;
GRANT USAGE ON SCHEMA soak TO app;
CREATE TABLE soak.ticks (name text, pid int, term bigint, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON soak.ticks TO app;
-- A run: ticks for ms; mode quick (one tick), stubborn (swallows cancels),
-- tidy (after a cancel, cleans up for 0.3 s, ticks once more, ends).
CREATE PROCEDURE soak.work(term bigint, name text, ms int, mode text) LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := clock_timestamp();
BEGIN
  LOOP
    INSERT INTO soak.ticks (name, pid, term) VALUES (name, pg_backend_pid(), term);
    COMMIT;
    EXIT WHEN mode = 'quick' OR clock_timestamp() > t0 + ms * interval '1 ms';
    BEGIN
      PERFORM pg_sleep(0.05);
    EXCEPTION WHEN query_canceled THEN
      IF mode = 'tidy' THEN
        PERFORM pg_sleep(0.3);
        INSERT INTO soak.ticks (name, pid, term) VALUES (name, pg_backend_pid(), term);
        RETURN;
      END IF;
    END;
  END LOOP;
END $$;
-- The application: takes the name when it can, ticks for 1 s, releases.
CREATE PROCEDURE soak.app(name text) LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := clock_timestamp();
  term bigint;
BEGIN
  LOOP
    EXIT WHEN clock_timestamp() > t0 + interval '8 s';
    IF try_acquire_leader(name, '3 seconds', 'app') THEN
      term := leader_term(name, 'app');
      COMMIT;
      FOR i IN 1 .. 20 LOOP
        INSERT INTO soak.ticks (name, pid, term) VALUES (name, pg_backend_pid(), term);
        COMMIT;
        PERFORM pg_sleep(0.05);
      END LOOP;
      PERFORM release_leader(name, 'app');
      COMMIT;
      RETURN;
    END IF;
    COMMIT;
    PERFORM pg_sleep(0.02);
  END LOOP;
END $$;
CREATE PROCEDURE soak.noop(term bigint) LANGUAGE plpgsql AS $$ BEGIN PERFORM term; COMMIT; END $$;
ALTER PROCEDURE soak.work(bigint, text, int, text) OWNER TO app;
ALTER PROCEDURE soak.app(text) OWNER TO app;
ALTER PROCEDURE soak.noop(bigint) OWNER TO app;
});

my %tasks = (
	t1 => ['quick', 0, 2], t2 => ['stubborn', 3000, 3], t3 => ['tidy', 2000, 2],
	t4 => ['stubborn', 8000, 3], t5 => ['quick', 0, 4], t6 => ['tidy', 5000, 3],
	t7 => ['stubborn', 1500, 2], t8 => ['quick', 0, 3], t9 => ['stubborn', 6000, 4]);
for my $t (sort keys %tasks)
{
	my ($mode, $ms) = @{ $tasks{$t} };
	$node->safe_psql('postgres', qq{
CREATE PROCEDURE soak.$t(term bigint) LANGUAGE plpgsql AS \$\$ BEGIN CALL soak.work(term, '$t', $ms, '$mode'); END \$\$;
ALTER PROCEDURE soak.$t(bigint) OWNER TO app;});
}

sub register
{
	my ($t, $ttl) = @_;
	$ttl //= $tasks{$t}[2];
	$node->psql('postgres', qq{SET ROLE app;
		SELECT leader_election.register_task('$t', 'soak.$t(bigint)', '1 second', '$ttl seconds')});
}
register($_) for sort keys %tasks;
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('mem', 'soak.noop(bigint)', '1 second', '5 seconds')});

sub sql { my ($rc, $out) = $node->psql('postgres', $_[0]); return $rc == 0 ? $out : ''; }
sub workers
{
	return grep { /^\d+$/ } split /\n/, sql(q{SELECT pid FROM pg_stat_activity
		WHERE backend_type = 'leader_election task' AND application_name <> 'leader_election task mem'});
}
sub launcher { return sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'leader_election launcher'}); }

sub top_used
{
	my ($pid) = @_;
	my $at = -s $node->logfile;
	$node->safe_psql('postgres', qq{SELECT pg_log_backend_memory_contexts($pid)});
	my ($top, $total);
	le_wait_until(sub {
		my $log = slurp_file($node->logfile, $at);
		($top) = $log =~ /level: 0; TopMemoryContext: \d+ total in \d+ blocks; \d+ free \(\d+ chunks\); (\d+) used/;
		($total) = $log =~ /Grand total: \d+ bytes in \d+ blocks; \d+ free \(\d+ chunks\); (\d+) used/;
		return defined $total;
	}, 30);
	return ($top // -1, $total // -1);
}
sub mem_worker
{
	my $pid = sql(q{SELECT pid FROM pg_stat_activity WHERE application_name = 'leader_election task mem'});
	return ($pid, $pid ? sql(qq{SELECT count(*) FROM leader_election.task_runs WHERE task_name = 'mem' AND pid = $pid}) : 0);
}
my @mem1;

my %faults;
my $crashes = 0;
my $t0 = time();
my @names = sort keys %tasks;
while (time() - $t0 < $seconds)
{
	usleep(int(1_000_000 + rand(2_000_000)));
	my $r = rand();
	my $elapsed = time() - $t0;
	if ($crashes < 2 && $elapsed > $seconds * 0.05 * ($crashes + 1))
	{
		my @w = workers();
		next unless @w;
		kill 'KILL', $w[0];
		$crashes++;
		$faults{crash}++;
		le_wait_until(sub { launcher() ne '' }, 120);
	}
	elsif ($r < 0.2)
	{
		my @w = workers();
		next unless @w;
		sql('SELECT pg_terminate_backend(' . $w[int(rand(@w))] . ')');
		$faults{terminate}++;
	}
	elsif ($r < 0.35)
	{
		my @w = workers();
		next unless @w;
		my $p = $w[int(rand(@w))];
		kill 'STOP', $p;
		usleep(300_000);
		kill 'CONT', $p;
		$faults{worker_sigstop}++;
	}
	elsif ($r < 0.45)
	{
		# The launcher frozen past the ttls, while the application campaigns
		# for a task's name: it gets it once the run is ended and released.
		my $l = launcher();
		next unless $l;
		my $t = $names[int(rand(@names))];
		my $app = IPC::Run::start(['psql', '-XAtq', '-d', $node->connstr('postgres'),
			'-c', 'SET ROLE app', '-c', "CALL soak.app('$t')"], '>', \my $o, '2>', \my $e);
		kill 'STOP', $l;
		usleep(int(3_000_000 + rand(5_000_000)));
		kill 'CONT', $l;
		$app->finish;
		$faults{launcher_sigstop_with_application}++;
	}
	elsif ($r < 0.6)
	{
		my $t = $names[int(rand(@names))];
		$node->psql('postgres', qq{SET ROLE app; SELECT leader_election.unregister_task('$t')});
		register($t, 2 + int(rand(3)));
		$faults{reregister}++;
	}
	elsif ($r < 0.7)
	{
		my $t = $names[int(rand(@names))];
		my $ttl = 2 + int(rand(3));
		my $every = 1 + int(rand(2));
		sql(qq{SET ROLE app; SELECT leader_election.alter_task('$t', ttl => '$ttl s', run_every => '$every s')});
		$faults{alter}++;
	}
	elsif ($r < 0.85)
	{
		for (1 .. 5)
		{
			my $t = $names[int(rand(@names))];
			sql(qq{SET ROLE app; SELECT leader_election.disable_task('$t')});
			usleep(100_000);
			sql(qq{SET ROLE app; SELECT leader_election.enable_task('$t')});
		}
		$faults{disable_storm}++;
	}
	else
	{
		my $t = $names[int(rand(@names))];
		sql(qq{SET ROLE app; CALL soak.app('$t')});
		$faults{application}++;
	}
	# The memory probe: first measured once the crashes are over.
	if ($crashes == 2 && !@mem1 && $elapsed > $seconds * 0.14)
	{
		my ($pid, $runs) = mem_worker();
		@mem1 = ($pid, $runs, top_used($pid)) if $pid && $runs >= 20;
	}
}
my $duration = time() - $t0;

# Settle: stop everything, so that every term has ended.
$node->safe_psql('postgres', q{UPDATE leader_election.tasks SET enabled = false WHERE name <> 'mem'});
ok(le_poll($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leader_election task'
	AND application_name <> 'leader_election task mem'}, '0', 60), 'all task workers stopped');
ok(le_poll($node, q{SELECT count(*) FROM leader_election.leases WHERE name <> 'mem' AND holder IS NOT NULL
	AND expires_at > now()}, '0', 60), 'every lease released or expired');

# The checker, over a table of ticks.
sub check
{
	my ($table) = @_;
	my $overlaps = $node->safe_psql('postgres', qq{
		WITH runs AS (SELECT name, pid, term, min(at) AS s, max(at) AS e FROM $table GROUP BY name, pid, term)
		SELECT count(*) FROM runs a JOIN runs b ON a.name = b.name
		  AND (a.pid, a.term) < (b.pid, b.term) AND a.s <= b.e AND b.s <= a.e});
	my $outside = $node->safe_psql('postgres', qq{
		SELECT count(*) FROM $table k LEFT JOIN leader_election.history h ON h.name = k.name AND h.term = k.term
		 WHERE h.term IS NULL OR k.at < h.acquired_at OR k.at >= coalesce(h.ended_at, 'infinity')});
	return ($overlaps, $outside);
}
my ($overlaps, $outside) = check('soak.ticks');
my $stats = $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM soak.ticks) || ' ticks, ' ||
	       (SELECT count(DISTINCT (name, term)) FROM soak.ticks) || ' terms with ticks, ' ||
	       (SELECT string_agg(status || ' ' || n, ', ' ORDER BY status) FROM
	          (SELECT status, count(*) n FROM leader_election.task_runs WHERE task_name <> 'mem' GROUP BY status) s) || '; ' ||
	       'closest last tick before its term ended: ' ||
	       (SELECT round(min(extract(epoch FROM h.ended_at - k.last) * 1000)::numeric, 1) FROM
	          (SELECT name, term, max(at) AS last FROM soak.ticks GROUP BY name, term) k
	          JOIN leader_election.history h USING (name, term)) || ' ms; ' ||
	       (SELECT count(*) FROM leader_election.history WHERE name <> 'mem') || ' terms in all (' ||
	       (SELECT count(*) FROM leader_election.history WHERE name <> 'mem' AND holder = 'app') || ' of the application), ended: ' ||
	       (SELECT string_agg(end_reason || ' ' || n, ', ') FROM (SELECT end_reason, count(*) n FROM leader_election.history
	          WHERE name <> 'mem' GROUP BY 1) e)});
note(sprintf('soak: %.0f s; faults: %s', $duration,
	join(', ', map { "$_ $faults{$_}" } sort keys %faults)));
note("soak: $stats");
note('soak: why runs failed or were cancelled: ' . $node->safe_psql('postgres', q{
	SELECT string_agg(status || ' ' || n || 'x: ' || left(error, 90), '; ' ORDER BY n DESC)
	  FROM (SELECT status, error, count(*) n FROM leader_election.task_runs
	         WHERE status IN ('failed', 'cancelled', 'skipped') AND task_name <> 'mem' GROUP BY 1, 2) s}));
note("soak checker: $overlaps overlapping runs of one name, $outside ticks outside their term");
is($overlaps, '0', 'no two runs of one name overlapped');
is($outside, '0', 'no run outlived its lease (no tick outside its term)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM leader_election.task_runs WHERE status = 'running'
	AND task_name <> 'mem'}), '0', 'no run left running');

# Negative control: the checker sees an overlap and a tick after its term.
$node->safe_psql('postgres', q{
	CREATE TABLE soak.bad AS SELECT * FROM soak.ticks;
	INSERT INTO soak.bad SELECT name, pid + 1, term, at FROM soak.ticks WHERE name = 't2' LIMIT 1;
	INSERT INTO soak.bad SELECT k.name, k.pid, k.term, h.ended_at + interval '1 ms'
	  FROM soak.ticks k JOIN leader_election.history h USING (name, term) WHERE k.name = 't3' LIMIT 1;});
my ($bad_overlaps, $bad_outside) = check('soak.bad');
cmp_ok($bad_overlaps, '>=', 1, "negative control: the checker finds the overlap ($bad_overlaps)");
cmp_ok($bad_outside, '>=', 1, "negative control: the checker finds the late tick ($bad_outside)");

# Memory of the probe's worker, alive since the last crash.
my ($pid, $runs) = mem_worker();
my ($top, $total) = top_used($pid);
is($pid, $mem1[0], 'the memory probe\'s worker lived through the soak after the crashes');
note(sprintf('soak: memory probe worker %s: TopMemoryContext %d bytes used after %d runs, %d after %d; '
	. 'all contexts %d -> %d', $pid, $mem1[2], $mem1[1], $top, $runs, $mem1[3], $total));
cmp_ok($runs, '>=', 1000, 'a worker of 1,000 runs') if $seconds >= 1150;
cmp_ok($top - $mem1[2], '<=', 1024, 'its TopMemoryContext stayed flat');
cmp_ok($total - $mem1[3], '<=', 65536, 'and so did its memory as a whole');
done_testing();
