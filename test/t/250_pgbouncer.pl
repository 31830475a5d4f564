# 250_pgbouncer.pl: leader_election behind pgbouncer in transaction pooling
# mode, and in session pooling mode with server_reset_query = DISCARD ALL
# (Debian's /usr/sbin/pgbouncer, started and stopped by this test).
#
# In transaction pooling a client owns a server connection only for the
# length of one transaction; its next transaction may run on another backend,
# and other clients' transactions run on "its" backend in between.  So:
#
#  - Named holders (the holder argument) work: the identity travels with every
#    call, whichever backend runs it.  Acquire, renew (same term, from another
#    backend), assert_leader + write in one transaction, and "no" / LE001 for
#    a client that is not the holder are checked from several clients.
#
#  - Session identity is unsafe: a holder-less acquisition binds the lease to
#    the *server* backend that happened to run it.  Every other client whose
#    transaction lands on that backend is then "the same holder": am_leader()
#    says true, try_acquire_leader() renews, assert_leader() lets its writes
#    through.  And the lease outlives the client that took it, because the
#    server connection stays open in the pool.  Shown deterministically on a
#    pool of exactly one server connection.
#
#  - leader_election.holder_id set with SET does not belong to the client:
#    it stays on the server backend (pgbouncer does not track it), so the
#    client's next transaction may not see it and another client's may.  A
#    startup option (options=-c ...) is refused by pgbouncer outright.
#
# Session pooling (issue 14): a client owns one server connection from
# connect to disconnect, so while it is connected a session-bound lease is
# its own, as on a direct connection.  When it disconnects, pgbouncer keeps
# the server connection and runs server_reset_query; DISCARD ALL drops the
# liveness lock, which ends the lease (session_ended) at once although the
# server session lives on; the next client on that server connection is a
# new holder, not the old one, and may take the lease over.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => "$pgbouncer is not installed" unless -x $pgbouncer;

# The server listens on loopback TCP too, for pgbouncer.
my $node = le_node('bouncer', conf => "listen_addresses = '127.0.0.1'\n");
$node->safe_psql(
	'postgres', q{
	CREATE ROLE app LOGIN;
	GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text),
		am_leader(text, text), release_leader(text, text, text),
		leader_term(text, text), assert_leader(text, bigint, text),
		current_leader(text) TO app;
	-- The protected resource a leader writes to, fenced by assert_leader.
	CREATE TABLE effects (term bigint, holder text, pid int);
	GRANT SELECT, INSERT ON effects TO app;
});

# ---- start pgbouncer ----
# Two pools on the same database: "pool2" shares 2 server connections among
# all clients (transactions of one client land on different backends), and
# "pool1" has exactly one, so every client's transactions run on the same
# backend: that makes the session-identity hazard deterministic.
my $dir = PostgreSQL::Test::Utils::tempdir;
my $bport = PostgreSQL::Test::Cluster::get_free_port();
my $pport = $node->port;
PostgreSQL::Test::Utils::append_to_file("$dir/userlist.txt",
	qq{"app" ""\n"postgres" ""\n});
PostgreSQL::Test::Utils::append_to_file(
	"$dir/pgbouncer.ini", qq{
[databases]
pool2 = host=127.0.0.1 port=$pport dbname=postgres pool_size=2
pool1 = host=127.0.0.1 port=$pport dbname=postgres pool_size=1
sess1 = host=127.0.0.1 port=$pport dbname=postgres pool_size=1 pool_mode=session

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
server_reset_query = DISCARD ALL
default_pool_size = 2
max_client_conn = 50
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
});
my ($bout, $berr) = ('', '');
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ],
	'>', \$bout, '2>', \$berr);

# Stop pgbouncer however the test ends.
END
{
	if ($bouncer && $bouncer->pumpable)
	{
		$bouncer->signal('TERM');
		eval { $bouncer->finish; 1 } or $bouncer->kill_kill;
	}
}

sub bconnstr
{
	my ($pool, $user, $extra) = @_;
	return "host=127.0.0.1 port=$bport dbname=$pool user=$user"
	  . ($extra ? " $extra" : '');
}

# One-shot query through pgbouncer: (stdout, SQLSTATE or '').
sub bpsql
{
	my ($pool, $sql, $extra) = @_;
	my ($out, $err) = ('', '');

	# While pgbouncer is still starting, psql may exit before IPC::Run has
	# written the query to it: a broken pipe, which must not end the test
	# (the caller's wait-until tries again).
	local $SIG{PIPE} = 'IGNORE';
	eval {
		$node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
			connstr => bconnstr($pool, 'app', $extra),
			stdout => \$out, stderr => \$err);
		1;
	} or return ('', '08006', "psql could not run: $@");
	return ($out, $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : '', $err);
}

ok( le_wait_until(
		sub { my ($o) = bpsql('pool2', 'SELECT 1'); $o eq '1' }),
	'pgbouncer accepts connections')
  or BAIL_OUT("pgbouncer did not start: $berr");

# A client of pgbouncer: a background psql connected as app.
sub client
{
	my ($pool) = @_;
	# A second -d overrides the node's own connection string.
	my $s = $node->background_psql('postgres',
		on_error_stop => 0,
		extra_params => [ '-d', bconnstr($pool, 'app') ]);
	$s->query_safe('\set VERBOSITY verbose');
	return $s;
}

# Run sql in a client: (stdout, SQLSTATE of its first error or '').
sub run
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';    # BackgroundPsql keeps stderr across queries
	my $out = $s->query($sql);
	my $state = $s->{stderr} =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : '';
	return ($out, $state);
}

# ==== named holders through a pool of two server connections ====
my $w1 = client('pool2');
my $w2 = client('pool2');
my $pinner = client('pool2');

my ($out) = run($w1,
	q{SELECT try_acquire_leader('svc', '5 minutes', 'worker-1')
	       || ' ' || leader_term('svc', 'worker-1') || ' ' || pg_backend_pid()});
like($out, qr/^true \d+ \d+$/, 'worker-1 acquires svc through pgbouncer');
my (undef, $term, $first_pid) = split / /, $out;

# Renew from other backends: pgbouncer hands the most recently used idle
# server to the next transaction, so a second client pinning a server in an
# open transaction sends worker-1's next transaction to the other one.  Try
# a few times; each renewal must keep the term whichever backend runs it.
my %w1_pids = ($first_pid => 1);
my $renewals_ok = 1;
for my $i (1 .. 5)
{
	my $pinned = $pinner->query_safe('BEGIN; SELECT pg_backend_pid()');
	($out) = run($w1,
		q{SELECT try_acquire_leader('svc', '5 minutes', 'worker-1')
		       || ' ' || leader_term('svc', 'worker-1') || ' ' || pg_backend_pid()});
	my ($ok, $t, $pid) = split / /, $out;
	$renewals_ok = 0 unless $ok eq 'true' && $t == $term && $pid != $pinned;
	$w1_pids{$pid} = 1;
	$pinner->query_safe('COMMIT');
	last if keys %w1_pids >= 2;
}
ok($renewals_ok, 'renewals through pgbouncer keep the term');
cmp_ok(scalar(keys %w1_pids), '>=', 2,
	"worker-1's transactions ran on different server backends ("
	  . join(',', sort keys %w1_pids) . ')');

# Another client, another holder name: false, whichever backend it runs on.
is((run($w2, q{SELECT try_acquire_leader('svc', '5 minutes', 'worker-2')}))[0],
	'f', 'worker-2 gets false while worker-1 holds svc');
is((run($w2, q{SELECT am_leader('svc', 'worker-2')}))[0],
	'f', 'am_leader is false for worker-2');
is((run($w2, q{SELECT am_leader('svc', 'worker-1')}))[0],
	't', 'am_leader for worker-1 is true from any client');

# Fenced write: assert_leader and the write in one transaction (a transaction
# stays on one backend in transaction pooling, so this always works).
my $state;
(undef, $state) = run($w1,
	"BEGIN; SELECT assert_leader('svc', $term, 'worker-1');
	 INSERT INTO effects VALUES ($term, 'worker-1', pg_backend_pid()); COMMIT;");
is($state, '', 'worker-1: assert_leader + write in one transaction commits');
(undef, $state) = run($w2,
	"BEGIN; SELECT assert_leader('svc', $term, 'worker-2');
	 INSERT INTO effects VALUES ($term, 'worker-2', pg_backend_pid()); COMMIT;");
is($state, 'LE001', 'worker-2: assert_leader raises LE001');
is($node->safe_psql('postgres', 'SELECT holder FROM effects'),
	'worker-1', 'only the holder\'s fenced write is in the table');

# Release from yet another backend, then worker-2 takes over with term + 1.
is((run($w1, q{SELECT release_leader('svc', 'worker-1')}))[0],
	't', 'worker-1 releases svc');
is((run($w2, q{SELECT try_acquire_leader('svc', '5 minutes', 'worker-2')}))[0],
	't', 'worker-2 acquires svc after the release');
is((run($w2, q{SELECT leader_term('svc', 'worker-2')}))[0],
	$term + 1, 'with the next term');
(undef, $state) = run($w1,
	"BEGIN; SELECT assert_leader('svc', $term, 'worker-1');
	 INSERT INTO effects VALUES ($term, 'worker-1 stale', 0); COMMIT;");
is($state, 'LE001', "worker-1's fenced write with the old term is rejected");

# ==== session identity through a single shared server connection ====
# UNSAFE, and this is why: clients A and B share pool1's only backend.  A
# acquires without a holder argument, so the lease is bound to that backend's
# session identity, not to A.  B's transactions run on the same backend, so B
# *is* that holder as far as the server can tell.
my $ca = client('pool1');
my $cb = client('pool1');
is((run($ca, q{SELECT try_acquire_leader('sess', '5 minutes')}))[0],
	't', 'client A acquires sess with the session identity through pool1');
my $sess_term = $node->safe_psql('postgres',
	q{SELECT term FROM leader_election.leases WHERE name = 'sess'});
is((run($cb, q{SELECT am_leader('sess')}))[0],
	't', 'HAZARD: client B, sharing the backend, is told it is the leader too');
is((run($cb, q{SELECT try_acquire_leader('sess', '5 minutes')}))[0],
	't', 'HAZARD: client B "renews" the lease A took');
is((run($cb, q{SELECT leader_term('sess')}))[0],
	$sess_term, '... in the same term: two clients lead one term');
(undef, $state) = run($cb,
	"BEGIN; SELECT assert_leader('sess', $sess_term);
	 INSERT INTO effects VALUES ($sess_term, 'B via session', 0); COMMIT;");
is($state, '', "HAZARD: client B's fenced write passes as the leader's");

# A quits, but the server connection stays in the pool: the "session-bound"
# lease does not end with its client.
le_quit($ca);
is($node->safe_psql('postgres',
		q{SELECT session_bound AND valid FROM leader_election.leaders WHERE name = 'sess'}),
	't', 'HAZARD: the session-bound lease outlives the client that took it');
is((run($cb, q{SELECT release_leader('sess')}))[0], 't',
	'client B can release it');

# The same pair with named holders on the same single backend: correct.
$ca = client('pool1');
is((run($ca, q{SELECT try_acquire_leader('named', '5 minutes', 'client-a')}))[0],
	't', 'client A acquires named as client-a through pool1');
is((run($cb, q{SELECT am_leader('named', 'client-b')}))[0],
	'f', 'client B (client-b) on the same backend is not the leader');
is((run($cb, q{SELECT try_acquire_leader('named', '5 minutes', 'client-b')}))[0],
	'f', 'client B gets false');
(undef, $state) = run($cb,
	"BEGIN; SELECT assert_leader('named', NULL, 'client-b'); COMMIT;");
is($state, 'LE001', 'client B gets LE001 from assert_leader');

# ==== leader_election.holder_id via SET or startup options ====
# SET runs on whichever backend the client's transaction got and stays there.
# On pool1 another client's transaction sees it: it leaks.
run($ca, q{SET leader_election.holder_id = 'holder-of-a'});
is((run($cb, q{SELECT current_setting('leader_election.holder_id', true)}))[0],
	'holder-of-a', "HAZARD: A's SET holder_id is visible to client B");
is((run($cb, q{SELECT try_acquire_leader('setting', '5 minutes')}))[0],
	't', '... and B acquires under the identity A set');
is($node->safe_psql('postgres',
		q{SELECT holder FROM leader_election.leases WHERE name = 'setting'}),
	'holder-of-a', 'the lease records A\'s holder_id for B\'s call');
run($cb, q{RESET leader_election.holder_id});

# On pool2: after a SET, another client pinning that backend sends the
# setter's next transaction to a backend without the setting.
my $set_pid = (run($w1,
	q{BEGIN; SET leader_election.holder_id = 'holder-of-w1';
	   SELECT pg_backend_pid(); COMMIT;}))[0];
my $lost = 0;
for my $i (1 .. 5)
{
	my $pinned = $pinner->query_safe('BEGIN; SELECT pg_backend_pid()');
	($out) = run($w1,
		q{SELECT pg_backend_pid() || ' ' || coalesce(nullif(current_setting('leader_election.holder_id', true), ''), '(none)')});
	my ($pid, $setting) = split / /, $out;
	$pinner->query_safe('COMMIT');
	if ($pid != $set_pid)
	{
		is($setting, '(none)',
			"w1's next transaction on another backend does not see its SET holder_id");
		$lost = 1;
		last;
	}
}
ok($lost, 'a transaction of w1 ran on a backend other than the one it SET on');

# Startup options never reach the server: pgbouncer refuses them.  (The
# query goes on psql's command line: refused at once, psql may exit before
# a query written to its input could reach it, and that broken pipe would
# hide its error.)
my (undef, $err) = run_command([
	'psql', '-X', '-d', bconnstr('pool2', 'app', q{options='-c leader_election.holder_id=x'}),
	'-c', 'SELECT 1' ]);
like($err, qr/unsupported startup parameter/,
	'pgbouncer refuses options=-c leader_election.holder_id=...');

le_quit($ca, $cb, $w1, $w2, $pinner);

# ==== session pooling, server_reset_query = DISCARD ALL ====
# sess1 has one server connection, so consecutive clients get the same one.
my $sa = client('sess1');
my $sa_pid = (run($sa, 'SELECT pg_backend_pid()'))[0];
is((run($sa, q{SELECT try_acquire_leader('smode', '5 minutes')}))[0],
	't', 'session mode: client A acquires smode with its session identity');
my ($sm_term, $sm_holder) = split /\|/, $node->safe_psql('postgres',
	q{SELECT term, holder FROM leader_election.leases WHERE name = 'smode'});
my $same = 1;
for my $i (1 .. 3)
{
	my ($o) = run($sa, q{SELECT am_leader('smode') || ' ' || pg_backend_pid()});
	$same = 0 unless $o eq "true $sa_pid";
}
ok($same, 'session mode: every transaction of A runs on its own server session and A leads');
is($node->safe_psql('postgres', q{SELECT holder_pid FROM leader_election.leaders WHERE name = 'smode'}),
	$sa_pid, 'the lease is bound to that server session');
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('smode', '5 minutes')}),
	'f', 'another session cannot take it while A is connected');

# A disconnects; pgbouncer keeps the server session and runs DISCARD ALL.
le_quit($sa);
ok(le_poll($node, q{SELECT NOT valid FROM leader_election.leaders WHERE name = 'smode'}),
	'session mode: the lease ends when A disconnects (DISCARD ALL), not after the ttl');
is($node->safe_psql('postgres',
		qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $sa_pid}),
	'1', '... while its server session lives on in the pool');

# The next client gets the same server session, but not the lease.
my $sb = client('sess1');
is((run($sb, 'SELECT pg_backend_pid()'))[0], $sa_pid,
	'session mode: client B gets the server session A used');
is((run($sb, q{SELECT am_leader('smode')}))[0], 'f',
	'B does not inherit the lease A took on that server session');
is((run($sb, q{SELECT try_acquire_leader('smode', '5 minutes')}))[0], 't',
	'B acquires smode');
is($node->safe_psql('postgres',
		qq{SELECT term > $sm_term AND holder <> '$sm_holder' FROM leader_election.leases WHERE name = 'smode'}),
	't', '... in a new term, under a new session identity');
is($node->safe_psql('postgres',
		qq{SELECT end_reason FROM leader_election.history WHERE name = 'smode' AND term = $sm_term}),
	'session_ended', 'the history records A\'s the end as session_ended');
le_quit($sb);
ok(le_poll($node, q{SELECT NOT valid FROM leader_election.leaders WHERE name = 'smode'}),
	"B's lease ends with B's disconnect too");

$bouncer->signal('TERM');
ok(eval { $bouncer->finish; 1 }, 'pgbouncer stops');
$node->stop;
done_testing();
