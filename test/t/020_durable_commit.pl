# 020_durable_commit.pl: a grant, renewal or release that returned true (and
# whose COMMIT returned) survives a crash, whatever the session's
# synchronous_commit; with synchronous replication configured the commit
# waits for the synchronous standby however the session sets
# synchronous_commit (commit_rules.c R1).
#
# The crash is an immediate shutdown right after the commit; the WAL writer
# is slowed to its maximum delay (10 s), so an asynchronous commit would not
# have reached the disk.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('durable', conf => "wal_writer_delay = 10000ms\n");

# History: h-a acquires and releases async-job (one term).
$node->safe_psql('postgres', q{
	SELECT try_acquire_leader('async-job', '1 hour', 'h-a');
	SELECT release_leader('async-job', 'h-a');
	SELECT try_acquire_leader('renewed', '1 minute', 'h-r');
	SELECT try_acquire_leader('released', '1 hour', 'h-x');
	CHECKPOINT;
});

# One session, synchronous_commit = off, as any user may set: a grant, a
# renewal to a much later expiry, and a release, each committed.
my $out = $node->safe_psql('postgres', q{
	SET synchronous_commit = off;
	SELECT try_acquire_leader('async-job', '1 hour', 'host-b');
	SELECT leader_term('async-job', 'host-b');
	SELECT try_acquire_leader('renewed', '5 days', 'h-r');
	SELECT expires_at FROM leader_election.leases WHERE name = 'renewed';
	SELECT release_leader('released', 'h-x');
	SHOW synchronous_commit;
});
my ($granted, $term, $renewed, $expiry, $released, $setting) = split /\n/, $out;
is($granted, 't', 'host-b acquires async-job with synchronous_commit = off');
is($renewed, 't', 'h-r renews for 5 days with synchronous_commit = off');
is($released, 't', 'h-x releases with synchronous_commit = off');
is($setting, 'off', 'the session\'s own setting is left as it set it');

$node->stop('immediate');
$node->start;

is($node->safe_psql('postgres',
		q{SELECT holder || ' ' || term FROM leader_election.leases WHERE name = 'async-job'}),
	"host-b $term", 'after the crash: async-job is still host-b\'s, same term');
is($node->safe_psql('postgres',
		q{SELECT expires_at FROM leader_election.leases WHERE name = 'renewed'}),
	$expiry, 'after the crash: the renewal\'s expiry is the one h-r was told');
is($node->safe_psql('postgres',
		q{SELECT coalesce(holder, 'nobody') FROM leader_election.leases WHERE name = 'released'}),
	'nobody', 'after the crash: the release stands');
is($node->safe_psql('postgres', q{
		SELECT release_leader('async-job', 'host-b');
		SELECT try_acquire_leader('async-job', '1 hour', 'host-c');
		SELECT leader_term('async-job', 'host-c') > } . $term),
	"t\nt\nt", 'the next holder gets a term above host-b\'s, not host-b\'s again');

# Synchronous replication: a standby that is configured but not connected.
# Every lease write must wait for it, even from a session that turned
# synchronous_commit down; a read or a losing try waits for nothing.
my $primary = PostgreSQL::Test::Cluster->new('sync_primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'leader_election'
max_connections = 30
});
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION leader_election;
	SELECT try_acquire_leader('held', '1 hour', 'other');
	ALTER SYSTEM SET synchronous_standby_names = 'absent_standby';
	SELECT pg_reload_conf();
});
ok(le_poll($primary, q{SHOW synchronous_standby_names}, 'absent_standby'),
	'synchronous_standby_names is in effect');

for my $level (qw(off local remote_write))
{
	my $s = le_session($primary);
	$s->query_safe("SET synchronous_commit = $level");
	le_send($s, q{SELECT try_acquire_leader('sync-' || current_setting('synchronous_commit'), '1 hour', 'h')});
	ok( le_poll($primary,
			qq{SELECT wait_event FROM pg_stat_activity WHERE pid = $s->{le_pid}},
			'SyncRep'),
		"synchronous_commit = $level: the grant's commit waits for the synchronous standby");
	# Cancel the wait: the commit is then local only, with a warning.
	$primary->safe_psql('postgres', "SELECT pg_cancel_backend($s->{le_pid})");
	my ($o, $e) = le_collect($s);
	like($e, qr/canceling wait for synchronous replication/,
		"synchronous_commit = $level: cancelling the wait says so");
	le_quit($s);
}

# What writes nothing does not wait.
is($primary->safe_psql('postgres', q{
	SET synchronous_commit = local;
	SELECT try_acquire_leader('held', '1 hour', 'h');
	SELECT am_leader('held', 'other');
}), "f\nt", 'a losing try and a read do not wait for the standby');

$primary->safe_psql('postgres', q{
	ALTER SYSTEM RESET synchronous_standby_names;
	SELECT pg_reload_conf();
});
$primary->stop;
$node->stop;
done_testing();
