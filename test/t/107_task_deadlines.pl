# 107_task_deadlines.pl: no run outlives its lease, and no run starts
# without enough lease left (task_runner.h, "Deadlines").
#
# 1. The launcher is frozen (SIGSTOP), so nobody renews during a run whose
#    procedure swallows cancels and commits a tick every 20 ms, while an
#    application campaigns for the name every 10 ms.  The worker's watchdog
#    must cancel the run before the lease expires and end the process
#    strictly before it: no tick of the old term commits at or after the
#    expiry, and the worker is gone when the application wins.
# 2. The worker is frozen with gdb right after it commits the transaction
#    that took the lease and recorded the run, for longer than the ttl,
#    while the application takes the lease (a commit stalled on synchronous
#    replication, I/O or swap looks the same).  The procedure must not run
#    in the old term.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Temp qw(tempdir);
use IPC::Run ();

my $node = le_node('deadlines', conf => "leader_election.database = 'postgres'\n");
le_task_role($node, 'app');
$node->safe_psql('postgres', q{
CREATE TABLE public.ticks (pid int, task text, term bigint, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.ticks TO app;
CREATE TABLE public.won (name text, at timestamptz, workers int);
GRANT INSERT ON public.won TO app;
CREATE PROCEDURE public.stubborn(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    INSERT INTO public.ticks (pid, task, term) VALUES (pg_backend_pid(), 'wd', term);
    COMMIT;
    BEGIN
      PERFORM pg_sleep(0.02);
    EXCEPTION WHEN query_canceled THEN
      NULL;
    END;
  END LOOP;
END $$;
CREATE PROCEDURE public.once(term bigint) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.ticks (pid, task, term) VALUES (pg_backend_pid(), 'late', term);
  COMMIT;
END $$;
-- The application: campaigns every 10 ms, notes when it won and how many
-- of the name's task workers were still alive then.
CREATE PROCEDURE public.campaign(name text) LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    IF try_acquire_leader(name, '1 minute', 'app-holder') THEN
      INSERT INTO public.won SELECT name, clock_timestamp(), count(*)
        FROM pg_stat_activity WHERE application_name = 'leader_election task ' || name;
      COMMIT;
      RETURN;
    END IF;
    COMMIT;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
ALTER PROCEDURE public.stubborn(bigint) OWNER TO app;
ALTER PROCEDURE public.once(bigint) OWNER TO app;
ALTER PROCEDURE public.campaign(text) OWNER TO app;
});

# --- 1. the launcher frozen during a stubborn run ---
$node->safe_psql('postgres', q{SET ROLE app;
	SELECT leader_election.register_task('wd', 'public.stubborn(bigint)', '1 hour', '6 seconds')});
ok(le_poll($node, q{SELECT count(*) >= 5 FROM public.ticks WHERE task = 'wd'}), 'the run ticks');
# Freeze the launcher just after it renewed the lease for the run, as it
# would be at any moment of a long run.
ok(le_poll($node, q{SELECT renewed_at > acquired_at + interval '1 s'
	FROM leader_election.leases WHERE name = 'wd'}), 'the launcher renewed the lease during the run');
my $worker = le_worker_pid($node, 'wd');
my $term = $node->safe_psql('postgres', q{SELECT max(term) FROM public.ticks WHERE task = 'wd'});
my $app = le_session($node);
$app->query_safe('SET ROLE app');
le_send($app, q{CALL public.campaign('wd')});
my $launcher = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'});
kill 'STOP', $launcher;
# The lease's expiry as it stands now that nobody renews it.
my $expires = $node->safe_psql('postgres', q{SELECT expires_at FROM leader_election.leases WHERE name = 'wd'});
my @won = le_collect($app, 60);
kill 'CONT', $launcher;
ok(@won, 'the application won the lease');
my ($last_ms, $won_ms, $alive, $how) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT round(extract(epoch FROM (SELECT max(at) FROM public.ticks WHERE task = 'wd' AND term = $term) - '$expires') * 1000, 1),
	       round(extract(epoch FROM w.at - '$expires') * 1000, 1), w.workers, h.end_reason
	  FROM leader_election.history h, public.won w
	 WHERE h.name = 'wd' AND h.term = $term AND w.name = 'wd'});
note("ttl 6 s, launcher frozen: the last tick of term $term committed $last_ms ms after its expiry "
	. "(negative: before); the application won $won_ms ms after it (the term ended: $how)");
cmp_ok($last_ms, '<', 0, 'nothing of the old term committed at or after its expiry');
is($alive, '0', 'the old run\'s worker was gone when the application won');
is($node->safe_psql('postgres', qq{SELECT status FROM leader_election.task_runs
	WHERE task_name = 'wd' AND term = $term}), 'cancelled', 'the run is recorded cancelled');
$node->safe_psql('postgres', q{SET ROLE app; SELECT leader_election.unregister_task('wd')});

# --- 2. the worker frozen between the commit that took the lease and the CALL ---
SKIP:
{
	skip 'gdb is not installed', 7 unless system('gdb --version >/dev/null 2>&1') == 0;
	# The application holds the name while the worker starts and campaigns.
	$node->safe_psql('postgres', q{SET ROLE app; SELECT try_acquire_leader('late', '1 minute', 'app-holder');
		SELECT leader_election.register_task('late', 'public.once(bigint)', '1 hour', '2 seconds')});
	ok(le_wait_until(sub { le_worker_pid($node, 'late') ne '' }), 'the worker campaigns');
	$worker = le_worker_pid($node, 'late');

	# gdb: stop at the first commit that writes an xid (the one that takes
	# the lease and records the run), let it finish (stop where
	# CommitTransactionCommand returns to), then hold the process for 6 s
	# (3 ttl) before letting it go.
	my $dir = tempdir(CLEANUP => 1);
	open my $fh, '>', "$dir/stall.py" or die;
	print $fh <<"EOF";
import gdb, time
gdb.execute('handle all nostop noprint pass')
ret = []
class Commit(gdb.Breakpoint):
    def stop(self):
        f = gdb.newest_frame()
        while f is not None and f.name() != 'CommitTransactionCommand':
            f = f.older()
        if f is None or f.older() is None:
            return False
        ret.append(f.older().pc())
        return True
b = Commit('SyncRepWaitForLSN')
open('$dir/ready', 'w').write('ready')
gdb.execute('continue')
b.delete()
gdb.execute('tbreak *%d' % ret[0])
gdb.execute('continue')
open('$dir/stalled', 'w').write('stalled')
time.sleep(6)
gdb.execute('detach')
EOF
	close $fh;
	my $gdb = IPC::Run::start(['gdb', '-q', '-batch', '-p', $worker, '-x', "$dir/stall.py"],
		'>', "$dir/gdb.out", '2>&1');
	ok(le_wait_until(sub { -e "$dir/ready" }), 'gdb is attached to the worker');
	# Let the worker have the lease; then campaign for it as the application.
	$node->safe_psql('postgres', q{SET ROLE app; SELECT release_leader('late', 'app-holder')});
	le_wait_until(sub { -e "$dir/stalled" }, 30);
	le_send($app, q{CALL public.campaign('late')});
	@won = le_collect($app, 60);
	ok(@won, 'the application took the lease while the worker was frozen');
	$gdb->finish;
	ok(-e "$dir/stalled", 'the worker was frozen right after its commit')
	  or diag(slurp_file("$dir/gdb.out"));
	my $runner_term = $node->safe_psql('postgres', q{SELECT max(term) FROM leader_election.history
		WHERE name = 'late' AND holder LIKE 'task-runner:%'});
	ok(le_poll($node, qq{SELECT count(*) FROM leader_election.task_runs
		WHERE task_name = 'late' AND term = $runner_term AND status <> 'running'}, '1'),
		'the frozen run is closed');
	is($node->safe_psql('postgres', qq{SELECT count(*) FROM public.ticks
		WHERE task = 'late' AND term = $runner_term}), '0',
		'the procedure did not run in the term that had expired');
	like($node->safe_psql('postgres', qq{SELECT status || ': ' || coalesce(error, '') FROM leader_election.task_runs
		WHERE task_name = 'late' AND term = $runner_term}), qr/^skipped: not started: less than half the ttl/,
		'it is recorded skipped, with the reason');
}

le_quit($app);
$node->stop;
done_testing();
