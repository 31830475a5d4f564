# 007_promotion_chain.pl: terms stay unique when a server is promoted
# without having received the era another promoted server entered.
#
# 005 covers one promotion: the promoted standby enters the era after the
# one recorded in leader_election.term_era.  Here that record is stale:
#
#   1. A cascaded standby.  A is the primary, B and C its standbys.  B is
#      promoted (timeline 2) and C follows it, then C stops receiving (it
#      lags): B grants in its new era, which C never sees.  B is lost and C
#      is promoted (timeline 3).  C's record still names A's timeline 1.
#   2. A restored base backup.  A standby S of P is promoted (timeline 2)
#      and grants; then a base backup of P taken before all that is
#      restored with S's timeline history and ends recovery on timeline 3.
#
#   3. A counter carried beyond its recorded era by a row that arrived
#      without it (a history row with a term of a later era, as logical
#      replication of the table would bring): the promoted standby must
#      jump past the counter's era, not the recorded one.
#   4. A standby cloned from a restored cluster before the restored
#      cluster's first grant: both read the dumped era row (another
#      cluster's); the standby, promoted, must land above the restored
#      primary's era.
#   5. Many grants at once on a promoted node while the era's row is not
#      yet committed (each grant then enters the era and may move the
#      counter while others draw from it): every term distinct.
#   6-8. No term may be committed in an era that term_era does not show,
#      or a copy started later (a backup restored onto a new timeline, a
#      dump restored) jumps into an era its source already uses: the first
#      grant on a new timeline following a row into a later era; a session
#      whose era record was rolled back with its transaction, granting on;
#      a grant drawing from a later era while the transaction that moved
#      the counter there is still open, and then rolls back.
#   9. A dump restored into a cluster that is itself on timeline 2: the
#      restored copy is another server and must jump.
#  10. A session that granted before its database's extension was dropped
#      and a dump restored: it must not go on in the era it remembered.
#  11. An install on timeline 2 (its counter starts in era 1) whose standby
#      lost the primary's first grants, then promoted.
#  12. A publication of every table (deletes included): recording an era
#      still works.
#
# In 1-4, the last promoted server's first term must be above the terms the
# other server issued (1.1 before the fix re-issued them: each server
# entered "recorded era + 1", and a move could set the counter back under
# values drawn meanwhile).
use strict;
use warnings;
use lib 'test/t';
use File::Copy;
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub timeline
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT timeline FROM leader_election.server_identity()');
}

# A base backup of $src started with recovery.signal: archive recovery
# ends on a new timeline of the same cluster.
sub restored_copy
{
	my ($src, $name) = @_;
	$src->backup("${name}_b");
	my $copy = PostgreSQL::Test::Cluster->new($name);
	$copy->init_from_backup($src, "${name}_b");
	$copy->append_conf('postgresql.conf', "restore_command = 'false'\n");
	$copy->set_recovery_mode;
	$copy->start;
	le_poll($copy, 'SELECT NOT pg_is_in_recovery()') or die "$name did not end recovery";
	return $copy;
}

# A cluster preloading the library, without the extension.
sub preloaded_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $opt{allows_streaming} ? 1 : 0);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'leader_election'\nmax_connections = 30\n");
	$node->start;
	return $node;
}

# A plain-SQL dump restored into database $db of $node.
sub restore_dump
{
	my ($node, $db, $dump, $what) = @_;
	$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db), '-f', $dump ],
		$what);
	return;
}

# A streaming standby of $primary, caught up and then stopped: from here on
# it lags behind everything $primary commits.
sub lagging_standby
{
	my ($primary, $name) = @_;
	$primary->backup("${name}_b");
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, "${name}_b", has_streaming => 1);
	$standby->start;
	$primary->wait_for_catchup($standby);
	$standby->stop;
	return $standby;
}

# $primary is lost; its lagging standby is started and promoted.
sub promote_after_loss
{
	my ($primary, $standby) = @_;
	$primary->stop('immediate');
	$standby->start;
	$standby->promote;
	ok(le_poll($standby, 'SELECT NOT pg_is_in_recovery()'), $standby->name . ' promoted');
	return;
}

# The terms of 40 new names granted on $node: (lowest, highest).
sub forty_terms
{
	my ($node, $prefix) = @_;
	my $out = $node->safe_psql('postgres', qq{
		SELECT try_acquire_leader('$prefix' || g, '1 hour', 'h') FROM generate_series(1, 40) g;
		SELECT min(term) || '|' || max(term) FROM leader_election.leases WHERE starts_with(name, '$prefix');
	});
	my ($lo, $hi) = $out =~ /(\d+)\|(\d+)$/ or die "no terms in: $out";
	return ($lo, $hi);
}

sub far_row
{
	my ($node, $name) = @_;
	$node->safe_psql('postgres', qq{
		INSERT INTO leader_election.history (name, term, holder, owner, session_bound, acquired_at, ended_at, end_reason)
		VALUES ('$name', 5 * 4294967296::bigint + 100, 'from-elsewhere', 'postgres', false,
		        now() - interval '1 hour', now() - interval '59 minutes', 'expired')});
	return;
}

sub grant_term
{
	my ($node, $name, $holder) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT try_acquire_leader('$name', '1 second', '$holder');
		SELECT leader_term('$name', '$holder');
	}) =~ /(\d+)$/ ? $1 : undef;
}

# ---- 1. a cascaded standby promoted after the standby it followed ----
my $a = le_node('a', allows_streaming => 1);
my $a_term = grant_term($a, 'x_a', 'on-a');
$a->backup('ab');
my $b = PostgreSQL::Test::Cluster->new('b');
$b->init_from_backup($a, 'ab', has_streaming => 1);
$b->start;
my $c = PostgreSQL::Test::Cluster->new('c');
$c->init_from_backup($a, 'ab', has_streaming => 1);
$c->start;
$a->wait_for_catchup($b);
$a->wait_for_catchup($c);
# A stops cleanly (both standbys receive its shutdown checkpoint), so that
# no WAL of A's lies beyond the point where B's timeline forks off.
$a->stop;

$b->promote;
ok(le_poll($b, 'SELECT NOT pg_is_in_recovery()'), 'B promoted');
is(timeline($b), 2, 'B is on timeline 2');
# C follows B onto timeline 2 (the walreceiver fetches B's history file).
$c->enable_streaming($b);
$c->restart;
ok(le_poll($c, q{SELECT received_tli = 2 FROM pg_stat_wal_receiver}),
	'C streams from B on timeline 2');
$b->wait_for_catchup($c);
# C lags from here on.
$c->stop;

my $b_term = grant_term($b, 'x_b', 'on-b');
cmp_ok($b_term, '>', $a_term, "B's term ($b_term) is above A's ($a_term)");
$b->stop('immediate');

$c->append_conf('postgresql.conf', "primary_conninfo = ''\n");
$c->start;
$c->promote;
ok(le_poll($c, 'SELECT NOT pg_is_in_recovery()'), 'C promoted');
is(timeline($c), 3, 'C is on timeline 3');
my $c_term = grant_term($c, 'x_c', 'on-c');
cmp_ok($c_term, '>', $b_term,
	"C's first term ($c_term) is above every term B issued ($b_term)");
$c->stop;

# ---- 2. an older base backup restored after a promotion ----
my $p = le_node('p', allows_streaming => 1);
$p->backup('pb');
my $p_term = grant_term($p, 'y_p', 'on-p');
my $s = PostgreSQL::Test::Cluster->new('s');
$s->init_from_backup($p, 'pb', has_streaming => 1);
$s->start;
$p->wait_for_catchup($s);
$s->promote;
ok(le_poll($s, 'SELECT NOT pg_is_in_recovery()'), 'S promoted');
my $s_term = grant_term($s, 'y_s', 'on-s');
cmp_ok($s_term, '>', $p_term, "S's term ($s_term) is above P's ($p_term)");
$s->stop;

# The backup, restored with S's timeline history and the WAL P still has:
# archive recovery picks the timeline after every one it knows (3).
my $r = PostgreSQL::Test::Cluster->new('r');
$r->init_from_backup($p, 'pb');
copy($s->data_dir . '/pg_wal/00000002.history', $r->data_dir . '/pg_wal/00000002.history')
  or die "copying the history file: $!";
$p->stop;
opendir my $wal, $p->data_dir . '/pg_wal' or die $!;
for my $f (grep { /^[0-9A-F]{24}$/ } readdir $wal)
{
	copy($p->data_dir . "/pg_wal/$f", $r->data_dir . "/pg_wal/$f") or die "copying $f: $!";
}
closedir $wal;
$r->append_conf('postgresql.conf', "restore_command = 'false'\n");
$r->set_recovery_mode;
$r->start;
ok(le_poll($r, 'SELECT NOT pg_is_in_recovery()'), 'the restored backup ended recovery');
is(timeline($r), 3, 'the restored backup is on timeline 3');
my $r_term = grant_term($r, 'y_r', 'on-r');
cmp_ok($r_term, '>', $s_term,
	"the restored server's first term ($r_term) is above every term S issued ($s_term)");
$r->stop;

# ---- 3. a counter moved beyond its recorded era by a row ----
my $q = le_node('q', allows_streaming => 1);
$q->safe_psql('postgres', q{
	INSERT INTO leader_election.history (name, term, holder, owner, session_bound, acquired_at)
	VALUES ('z', 5 * 4294967296::bigint + 7, 'from-elsewhere', 'postgres', false, now());
});
my $q_first = grant_term($q, 'z', 'on-q');
cmp_ok($q_first, '>', 5 * 2**32 + 7, "q's grant follows the row into era 5 ($q_first)");
my $qs = lagging_standby($q, 'qs');
my (undef, $q_max) = forty_terms($q, 'z_');
promote_after_loss($q, $qs);
my $qs_term = grant_term($qs, 'zs', 'on-qs');
cmp_ok($qs_term, '>', $q_max,
	"the promoted standby's first term ($qs_term) is above every term q issued ($q_max)");
$qs->stop;

# ---- 4. a standby cloned from a restored cluster before its first grant ----
my $o = le_node('o');
grant_term($o, 'w', 'on-o');
my $dump = PostgreSQL::Test::Utils::tempdir() . '/o.sql';
$o->command_ok([ 'pg_dump', '-d', $o->connstr('postgres'), '-f', $dump ], 'pg_dump of o');
$o->stop;
my $n = preloaded_node('n', allows_streaming => 1);
restore_dump($n, 'postgres', $dump, 'o restored into n');
my $ns = lagging_standby($n, 'ns');
my (undef, $n_max) = forty_terms($n, 'w_');
promote_after_loss($n, $ns);
my $ns_term = grant_term($ns, 'ws', 'on-ns');
cmp_ok($ns_term, '>', $n_max,
	"the promoted standby's first term ($ns_term) is above every term n issued ($n_max)");

# ---- 5. first grants from many new connections at once, after a promotion ----
my $ns2 = PostgreSQL::Test::Cluster->new('ns2');
$ns->backup('nsb');
$ns2->init_from_backup($ns, 'nsb', has_streaming => 1);
$ns2->append_conf('postgresql.conf', "max_connections = 40\n");
$ns2->start;
$ns->wait_for_catchup($ns2);
$ns->stop('immediate');
$ns2->promote;
ok(le_poll($ns2, 'SELECT NOT pg_is_in_recovery()'), 'a standby of the promoted standby promoted');
# A first grant left open keeps the new era's row locked, so that every
# grant finds the era unrecorded and moves the counter while the others
# draw from it.
my $open = le_session($ns2);
$open->query_safe("BEGIN; SELECT try_acquire_leader('open', '10 min', 'o')");
my $script = PostgreSQL::Test::Utils::tempdir() . '/grant.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"\\set r random(1, 1000000000)\n"
	  . "SELECT try_acquire_leader('m' || :client_id || '_' || :r, '10 min', 'new');\n");
$ns2->command_ok([ 'pgbench', '-n', '-c', '30', '-j', '2', '-t', '200', '-f', $script,
		'-d', $ns2->connstr('postgres') ], '6000 grants of new names from 30 sessions');
is($ns2->safe_psql('postgres', q{
	SELECT count(*) || ' rows, ' || count(DISTINCT term) || ' distinct terms'
	  FROM leader_election.history WHERE name LIKE 'm%'}),
	'6000 rows, 6000 distinct terms', 'every grant drew a term of its own');
$open->query_safe('COMMIT');
le_quit($open);
$ns2->stop;

# ---- 6. the first grant on a new timeline follows a row into a later era ----
my $g = le_node('g', allows_streaming => 1);
my $g2 = restored_copy($g, 'g2');
far_row($g2, 'x');
grant_term($g2, 'x', 'on-g2');
$g2->safe_psql('postgres', 'CHECKPOINT');
my $g3 = restored_copy($g2, 'g3');
my (undef, $g2_hi) = forty_terms($g2, 'g2_');
my ($g3_lo) = forty_terms($g3, 'g3_');
cmp_ok($g3_lo, '>', $g2_hi,
	"a copy of it on the next timeline starts ($g3_lo) above its terms ($g2_hi)");
$_->stop for $g, $g2, $g3;

# ---- 7. a rolled-back era record, then grants that commit ----
my $h = le_node('h', allows_streaming => 1);
my $h2 = restored_copy($h, 'h2');
$h2->safe_psql('postgres', q{
	BEGIN;
	SELECT try_acquire_leader('t1', '1 hour', 'h');
	SELECT try_acquire_leader('t2', '1 hour', 'h');
	ROLLBACK;
	SELECT try_acquire_leader('s' || g, '1 hour', 'h') FROM generate_series(1, 10) g;
});
my $hdump = PostgreSQL::Test::Utils::tempdir() . '/h2.sql';
$h2->command_ok([ 'pg_dump', '-d', $h2->connstr('postgres'), '-f', $hdump ], 'pg_dump of h2');
my $h3 = preloaded_node('h3');
restore_dump($h3, 'postgres', $hdump, 'h2 restored into h3');
my (undef, $h2_hi) = forty_terms($h2, 'h2_');
my ($h3_lo) = forty_terms($h3, 'h3_');
cmp_ok($h3_lo, '>', $h2_hi, "the restored copy starts ($h3_lo) above its source's terms ($h2_hi)");
$_->stop for $h, $h2, $h3;

# ---- 8. a grant in a later era while the move's transaction is open ----
my $k = le_node('k', allows_streaming => 1);
far_row($k, 'x');
my $mover = le_session($k);
$mover->query_safe("BEGIN; SELECT try_acquire_leader('x', '1 hour', 'mover')");
my $k_y = grant_term($k, 'y', 'other');
cmp_ok($k_y, '>', 5 * 2**32, "another grant meanwhile draws from era 5 ($k_y)");
$mover->query_safe('ROLLBACK');
le_quit($mover);
$k->safe_psql('postgres', 'CHECKPOINT');
my $k2 = restored_copy($k, 'k2');
my (undef, $k_hi) = forty_terms($k, 'k_');
my ($k2_lo) = forty_terms($k2, 'k2_');
cmp_ok($k2_lo, '>', $k_hi, "a copy on the next timeline starts ($k2_lo) above its source's terms ($k_hi)");
$_->stop for $k, $k2;

# ---- 9. a dump restored into a cluster on timeline 2 ----
my $src = le_node('src');
grant_term($src, 'v', 'on-src');
my $sdump = PostgreSQL::Test::Utils::tempdir() . '/src.sql';
$src->command_ok([ 'pg_dump', '-d', $src->connstr('postgres'), '-f', $sdump ], 'pg_dump of src');
my $t0 = le_node('t0', allows_streaming => 1);
my $t2 = restored_copy($t0, 't2');
is(timeline($t2), 2, 'the target cluster is on timeline 2');
$t2->safe_psql('postgres', 'CREATE DATABASE t');
restore_dump($t2, 't', $sdump, 'src restored into database t of the target');
my (undef, $src_hi) = forty_terms($src, 'src_');
my ($t_lo) = $t2->safe_psql('t', q{
	SELECT try_acquire_leader('t_' || g, '1 hour', 'h') FROM generate_series(1, 40) g;
	SELECT min(term) FROM leader_election.leases WHERE name LIKE 't\_%';
}) =~ /(\d+)$/;
cmp_ok($t_lo, '>', $src_hi, "the restored copy starts ($t_lo) above its source's terms ($src_hi)");
$t0->stop;

# ---- 10. a session across DROP EXTENSION and a restore ----
my $keeper = le_session($t2);
$keeper->query_safe("SELECT try_acquire_leader('before', '1 hour', 'h')");
$t2->safe_psql('postgres', 'DROP EXTENSION leader_election CASCADE');
restore_dump($t2, 'postgres', $sdump, 'src restored over the dropped extension');
my (undef, $src_hi2) = forty_terms($src, 'src2_');
$keeper->query_safe("SELECT try_acquire_leader('after', '1 hour', 'h')");
my $after = $keeper->query_safe("SELECT leader_term('after', 'h')");
cmp_ok($after, '>', $src_hi2, "the session's next term ($after) is above the source's terms ($src_hi2)");
le_quit($keeper);
$_->stop for $src, $t2;

# ---- 11. an install on timeline 2, its standby promoted after losing grants ----
my $w0 = preloaded_node('w0', allows_streaming => 1);
my $w = restored_copy($w0, 'w');
$w0->stop;
$w->safe_psql('postgres', 'CREATE EXTENSION leader_election');
my $ws = lagging_standby($w, 'ws');
my (undef, $w_hi) = forty_terms($w, 'w_');
promote_after_loss($w, $ws);
my $ws_term = grant_term($ws, 'ws', 'on-ws');
cmp_ok($ws_term, '>', $w_hi, "its first term ($ws_term) is above every term w issued ($w_hi)");
$ws->stop;

# ---- 12. a publication of every table ----
my $pub = le_node('pub');
$pub->safe_psql('postgres', 'CREATE PUBLICATION every_table FOR ALL TABLES');
far_row($pub, 'x');
is(le_sqlstate($pub, q{SELECT try_acquire_leader('x', '1 hour', 'h')}), '',
	'a grant that records a later era succeeds under a publication of every table');
cmp_ok(grant_term($pub, 'y', 'h'), '>', 5 * 2**32, 'and the next grant draws from that era');
$pub->stop;

done_testing();
