# LeaderElectionTest.pm: helpers shared by leader_election's TAP tests
# (test/t/0*.pl).
#
# The tests drive several sessions at once: a holder that keeps a lease, a
# candidate blocked in wait_for_leadership(), a LISTEN client.  The stock
# PostgreSQL::Test::BackgroundPsql can only run a statement and wait for its
# end; these helpers add "send a statement, collect its result later, with a
# deadline", SQLSTATE capture, bounded polling, and a quit that tolerates a
# psql whose backend was killed.  Every wait here has a deadline.
#
# Use from a test with:  use lib 'test/t';  use LeaderElectionTest;
package LeaderElectionTest;

use strict;
use warnings;

use Exporter 'import';
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(le_node le_sqlstate le_poll le_wait_until le_session
  le_send le_collect le_finished le_quit le_wait_sleeping le_psql_pid
  le_kill9 le_start_wait le_wake_ms le_now le_task_role le_worker_pid
  le_notifications);

# Seconds any single wait may take before the test gives up on it.  Generous:
# the machine may be busy with other test suites.
our $DEADLINE = 60;

# le_node(name, preload => 1, conf => '...', allows_streaming => 0)
# A started node with the extension created in database postgres.
sub le_node
{
	my ($name, %opt) = @_;
	my $preload = exists $opt{preload} ? $opt{preload} : 1;
	my $node = PostgreSQL::Test::Cluster->new($name);

	$node->init(allows_streaming => $opt{allows_streaming} ? 1 : 0);
	# init sets max_connections = 10 on non-streaming nodes; tests here run
	# a handful of background sessions plus one-shot psql calls.
	$node->append_conf('postgresql.conf', "max_connections = 30\n");
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'leader_election'\n")
	  if $preload;
	$node->append_conf('postgresql.conf', $opt{conf}) if $opt{conf};
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION leader_election');
	return $node;
}

# le_sqlstate(node, sql): run sql in a fresh session; the SQLSTATE of its
# first error, or '' if it succeeded.
sub le_sqlstate
{
	my ($node, $sql) = @_;
	my ($stdout, $stderr) = ('', '');

	$node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$stdout, stderr => \$stderr);
	return $1 if $stderr =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return '';
}

# le_wait_until(code, seconds): call code until it returns true or the
# deadline passes; returns whether it did.
sub le_wait_until
{
	my ($code, $seconds) = @_;
	my $deadline = time() + ($seconds // $DEADLINE);

	while (1)
	{
		return 1 if $code->();
		return 0 if time() > $deadline;
		usleep(20_000);
	}
}

# le_poll(node, sql, expected = 't', seconds): like poll_query_until, with
# our own (shorter) deadline and the last output in a diag on failure.
sub le_poll
{
	my ($node, $sql, $expected, $seconds) = @_;
	my $last = '';

	$expected = 't' unless defined $expected;
	my $ok = le_wait_until(
		sub {
			my ($rc, $out, $err);

			# A server in crash recovery refuses the connection, and psql
			# may exit before IPC::Run has written the query to it: that
			# broken pipe is one more failed try, not the test's end.
			local $SIG{PIPE} = 'IGNORE';
			unless (eval { ($rc, $out, $err) = $node->psql('postgres', $sql); 1 })
			{
				$last = "psql could not run: $@";
				return 0;
			}
			$last = "rc=$rc out=$out err=$err";
			return $rc == 0 && $out eq $expected;
		},
		$seconds);
	diag("le_poll gave up on: $sql\nexpected: $expected\nlast: $last")
	  unless $ok;
	return $ok;
}

# le_session(node [, dbname]): a background psql (in database postgres
# unless dbname is given) that survives SQL errors and prints SQLSTATEs; its
# backend pid is in ->{le_pid}.
sub le_session
{
	my ($node, $dbname) = @_;
	my $s = $node->background_psql($dbname // 'postgres', on_error_stop => 0);

	$s->query_safe("\\set VERBOSITY verbose");
	$s->{le_pid} = $s->query_safe('SELECT pg_backend_pid()');
	$s->{le_cnt} = 0;
	return $s;
}

# le_send(session, sql): start sql without waiting for it to finish.
sub le_send
{
	my ($s, $sql) = @_;
	my $n = ++$s->{le_cnt};

	$s->{le_banner} = "le_done_$n";
	$s->{stdin} .= "$sql\n;\n\\echo '$s->{le_banner}'\n\\warn '$s->{le_banner}'\n";
	$s->{run}->pump_nb;
	return;
}

# Has the statement started by le_send finished?  Never blocks.
sub le_finished
{
	my ($s) = @_;
	my $b = $s->{le_banner};

	eval { $s->{run}->pump_nb; };
	return $s->{stdout} =~ /$b\n/ && $s->{stderr} =~ /$b\n/;
}

# le_collect(session, seconds): wait for the statement started by le_send;
# returns (stdout, stderr) without the banner, or () if it did not finish
# in time (the statement is then still pending).
sub le_collect
{
	my ($s, $seconds) = @_;
	my $b = $s->{le_banner};

	return () unless le_wait_until(sub { le_finished($s) }, $seconds);
	my ($out, $err) = ($s->{stdout}, $s->{stderr});
	$out =~ s/\n?$b\n//;
	$err =~ s/\n?$b\n//;
	$s->{stdout} = '';
	$s->{stderr} = '';
	return ($out, $err);
}

# The process id of a session's psql client (not of its backend): the parent
# of a shell that psql starts.
sub le_psql_pid
{
	my ($s) = @_;
	my $pid = $s->query_safe('\! echo $PPID');
	chomp $pid;
	return $pid;
}

# le_wait_sleeping(node, pid): wait until backend pid is blocked inside
# wait_for_leadership() (wait event "Extension").
sub le_wait_sleeping
{
	my ($node, $pid) = @_;
	return le_poll($node,
		"SELECT wait_event_type = 'Extension' AND state = 'active'
		   FROM pg_stat_activity WHERE pid = $pid");
}

# Is process pid gone, or a zombie (which holds no shared memory)?
sub le_gone_or_zombie
{
	my ($pid) = @_;
	return 1 unless kill(0, $pid);
	my $stat = eval { PostgreSQL::Test::Utils::slurp_file("/proc/$pid/stat") };
	return defined $stat && $stat =~ /^\d+ \(.*\) Z/;
}

# le_kill9(node): SIGKILL the postmaster, then wait until its children have
# exited (they notice the postmaster's death) and the postmaster process is
# gone, so that the next start finds neither shared memory in use nor a
# postmaster.pid naming a process that still exists (an unreaped zombie
# counts as existing; some container init processes reap only every few
# seconds).
sub le_kill9
{
	my ($node) = @_;
	my ($pm) = PostgreSQL::Test::Utils::slurp_file(
		$node->data_dir . '/postmaster.pid') =~ /^(\d+)/;
	my @children;

	for my $stat (glob '/proc/[0-9]*/stat')
	{
		my $text = eval { PostgreSQL::Test::Utils::slurp_file($stat) };
		push @children, $1
		  if defined $text && $text =~ /^(\d+) \(.*\) \S+ $pm /;
	}
	$node->kill9;
	ok( le_wait_until(
			sub {
				!kill(0, $pm) && !grep { !le_gone_or_zombie($_) } @children;
			}),
		'the killed postmaster and its children have gone away');
	return;
}

# le_start_wait(node, session, sql): start a statement that blocks in
# wait_for_leadership() and return once the backend sleeps in it.
sub le_start_wait
{
	my ($node, $s, $sql) = @_;
	le_send($s, $sql);
	return le_wait_sleeping($node, $s->{le_pid});
}

# The server's clock now, as text.
sub le_now
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT clock_timestamp()');
}

# le_wake_ms(node, name, since): milliseconds from the server timestamp
# `since` to the start of the latest term of `name` (history.acquired_at),
# i.e. how long a woken waiter took to take the lease.
sub le_wake_ms
{
	my ($node, $name, $since) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT round(extract(epoch FROM acquired_at - '$since'::timestamptz) * 1000, 1)
		  FROM leader_election.history WHERE name = '$name'
		 ORDER BY term DESC LIMIT 1});
}

# le_notifications(text): the notifications on channel leader_election that
# psql printed in `text` (it prints those that arrived after each command),
# in order, each { payload => the decoded JSON payload, pid => the sending
# backend's pid }.  The one place the tests read psql's notification lines.
sub le_notifications
{
	my ($text) = @_;
	my @found;
	while ($text =~
		/^Asynchronous notification "leader_election" with payload "(.*)" received from server process with PID (\d+)\.$/mg
	  )
	{
		push @found, { payload => decode_json($1), pid => $2 };
	}
	return @found;
}

# le_task_role(node, role): a LOGIN role that may use leases and tasks.
sub le_task_role
{
	my ($node, $role) = @_;
	$node->safe_psql('postgres', qq{
CREATE ROLE $role LOGIN;
GRANT USAGE ON SCHEMA leader_election TO $role;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO $role;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO $role;
});
	return;
}

# le_worker_pid(node, task): pid of the task's worker, or '' if none.
sub le_worker_pid
{
	my ($node, $task) = @_;
	return $node->safe_psql('postgres', qq{SELECT string_agg(pid::text, ',')
		FROM pg_stat_activity WHERE backend_type = 'leader_election task'
		  AND application_name = 'leader_election task $task'});
}

# le_quit(session...): quit sessions whose psql or backend may already be
# dead; IPC::Run dies with "ack Broken pipe" on a dead pipe.
sub le_quit
{
	for my $s (@_)
	{
		next unless defined $s;
		eval { $s->quit; 1 } or eval { $s->{run}->kill_kill; 1 };
	}
	return;
}

1;
