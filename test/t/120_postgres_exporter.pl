# 120_postgres_exporter.pl: the queries file for Prometheus' postgres_exporter
# (test/metrics/postgres_exporter.yml, README "Metrics") against Debian's
# prometheus-postgres-exporter and a throwaway cluster on 127.0.0.1.
#
# A session-bound holder leads "svc"; a candidate waits for it.  The scrape
# shows the holder, its term and valid = 1, and the stats counters.  The
# holder's backend is terminated: the waiter takes over at once, and the
# next scrapes show the new holder and term, and grants,
# takeovers_session_ended, waits and wakeups moving.  A release leaves the
# name with valid = 0 and no holder series: what the README's "no leader"
# alert looks at.  Last, without preloading, the view is empty.
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use HTTP::Tiny;
use IPC::Run;
use File::Basename qw(dirname);
use Cwd qw(abs_path);

my $exporter = '/usr/bin/prometheus-postgres-exporter';
plan skip_all => "$exporter is not installed (apt-get install prometheus-postgres-exporter)"
  unless -x $exporter;

my $queries = abs_path(dirname(__FILE__) . '/../metrics/postgres_exporter.yml');
ok(-r $queries, "queries file $queries");

my $node = le_node('exporter', conf => "listen_addresses = '127.0.0.1'\n");
my $user = $node->safe_psql('postgres', 'SELECT current_user');
my $http_port = PostgreSQL::Test::Cluster::get_free_port();

my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[ $exporter, "--web.listen-address=127.0.0.1:$http_port",
	  "--extend.query-path=$queries", '--disable-default-metrics',
	  '--disable-settings-metrics', '--no-collector.database', '--no-collector.bgwriter' ],
	'>', \$out, '2>', \$err,
	init => sub {
		$ENV{DATA_SOURCE_NAME} =
		  'postgresql://' . $user . '@127.0.0.1:' . $node->port . '/postgres?sslmode=disable';
	});

# However the test ends (a failed safe_psql dies), the exporter goes too.
END { $h->kill_kill if $h && $h->pumpable; }

my $http = HTTP::Tiny->new(timeout => 10);

# The /metrics text, or '' if the exporter does not answer.
sub scrape
{
	my $r = $http->get("http://127.0.0.1:$http_port/metrics");
	return $r->{success} ? $r->{content} : '';
}

# The value of the sample of metric whose labels include all of %want, or
# undef.  (The exporter adds labels of its own, such as server.)
sub sample
{
	my ($text, $metric, %want) = @_;
	for my $line (split /\n/, $text)
	{
		next unless $line =~ /^\Q$metric\E\{(.*)\}\s+(\S+)$/;
		my ($labels, $value) = ($1, $2);
		my %have = $labels =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
		return $value
		  unless grep { !defined $have{$_} || $have{$_} ne $want{$_} } keys %want;
	}
	return undef;
}

# Scrape until check(text) is true; returns the last text.
sub scrape_until
{
	my ($check) = @_;
	my $text = '';
	le_wait_until(sub { $text = scrape(); return $check->($text); });
	return $text;
}

sub counter
{
	my ($text, $counter) = @_;
	return sample($text, "leader_election_stats_$counter", datname => 'postgres');
}

$node->safe_psql('postgres', 'SELECT leader_election.stats_reset()');
my $a = le_session($node);
is($a->query_safe(q{SELECT try_acquire_leader('svc', '1 hour')}), 't', 'A leads svc');
my $a_holder = $node->safe_psql('postgres', q{SELECT holder FROM leader_election.leases WHERE name = 'svc'});
my $term1 = $node->safe_psql('postgres', q{SELECT term FROM leader_election.leases WHERE name = 'svc'});

my $b = le_session($node);
le_start_wait($node, $b, q{SELECT wait_for_leadership('svc', '1 hour', '60 s')});

sub holder_info
{
	my ($text, $holder, $term) = @_;
	return sample($text, 'leader_election_holder_info', datname => 'postgres',
		name => 'svc', holder => $holder, term => $term);
}

sub lease
{
	my ($text, $what) = @_;
	return sample($text, "leader_election_lease_$what", datname => 'postgres', name => 'svc');
}

my $text = scrape_until(sub { defined holder_info($_[0], $a_holder, $term1) });
is(holder_info($text, $a_holder, $term1), '1', "the scrape shows A ($a_holder) in term $term1")
  or diag("exporter stderr: $err\nscrape:\n$text");
is(lease($text, 'term'), $term1, 'lease_term');
is(lease($text, 'valid'), '1', 'lease_valid 1');
is(lease($text, 'waiting_candidates'), '1',
	'one waiting candidate');
is(counter($text, 'grants'), '1', 'stats: one grant');
is(counter($text, 'waits'), '1', 'stats: one wait');
is(counter($text, 'takeovers_session_ended'), '0', 'stats: no takeover yet');

# Takeover: A's backend ends, B wins at once.
$node->safe_psql('postgres', "SELECT pg_terminate_backend($a->{le_pid}, 60000)");
my ($b_out) = le_collect($b);
like($b_out // '', qr/^t$/m, 'the waiter B took over');
my $b_holder = $node->safe_psql('postgres', q{SELECT holder FROM leader_election.leases WHERE name = 'svc'});
my $term2 = $node->safe_psql('postgres', q{SELECT term FROM leader_election.leases WHERE name = 'svc'});
cmp_ok($term2, '>', $term1, "new term $term2");

$text = scrape_until(sub { defined holder_info($_[0], $b_holder, $term2) });
is(holder_info($text, $b_holder, $term2), '1', "after the takeover the scrape shows B ($b_holder) in term $term2");
is(holder_info($text, $a_holder, $term1), undef, 'and A no longer');
is(lease($text, 'term'), $term2, 'lease_term moved');
is(counter($text, 'grants'), '2', 'stats: grants moved');
is(counter($text, 'takeovers_session_ended'), '1', 'stats: a takeover after the session ended');
cmp_ok(counter($text, 'wakeups'), '>=', 1, 'stats: the waiter was woken');

# No leader: valid 0, no holder series.
is($b->query_safe(q{SELECT release_leader('svc')}), 't', 'B releases');
$text = scrape_until(sub { (lease($_[0], 'valid') // '') eq '0' });
is(lease($text, 'valid'), '0', 'released: valid 0');
is(sample($text, 'leader_election_holder_info', name => 'svc'), undef, 'released: no holder series');
is(counter($text, 'releases'), '1', 'stats: one release');

le_quit($a, $b);
$h->kill_kill;

# The README's alerts: test/metrics/alerts.yml, shown verbatim in the
# README, fire when they should (promtool's unit tests, alerts_test.yml).
my $metrics_dir = dirname($queries);
my $alerts = slurp_file("$metrics_dir/alerts.yml");
my $readme = slurp_file(dirname(__FILE__) . '/../../README.md');
ok(index($readme, "```yaml\n$alerts```") >= 0, 'the README shows test/metrics/alerts.yml as it is');
SKIP:
{
	skip 'promtool is not installed (apt-get install prometheus)', 1 unless -x '/usr/bin/promtool';
	my ($pout, $perr) = ('', '');
	my $ok = IPC::Run::run([ '/usr/bin/promtool', 'test', 'rules', 'alerts_test.yml' ],
		'>', \$pout, '2>', \$perr, init => sub { chdir $metrics_dir or die $!; });
	ok($ok, 'promtool test rules alerts_test.yml: the alerts fire when they should') or diag("$pout\n$perr");
}

# Without preloading nothing is counted: the view is empty, stats_reset()
# does nothing, and leases work as before.
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
is($node->safe_psql('postgres', q{SELECT try_acquire_leader('np', '1 minute', 'h')
	FROM leader_election.stats_reset()}), 't', 'without preloading: leases work, stats_reset() does nothing');
is($node->safe_psql('postgres', 'SELECT count(*) FROM leader_election.stats'), '0',
	'without preloading: the view is empty');
$node->stop;
done_testing();
