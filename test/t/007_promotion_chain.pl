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
# In both, the last promoted server's first term must be above the terms
# the other promoted server issued (1.1 before this fix re-issued them:
# both servers entered "recorded era + 1").
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
$a->stop('immediate');

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

done_testing();
