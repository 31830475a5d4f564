# 103_task_standby.pl: a hot standby runs nothing; after promotion the runner
# starts by itself, under a new identity (the new timeline), in a term above
# every term of the old primary (task_launcher.c; lease.c I2).
use strict;
use warnings;
use lib 'test/t';
use LeaderElectionTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = le_node('primary', allows_streaming => 1,
	conf => "leader_election.database = 'postgres'\n");
$primary->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA leader_election TO app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leader_election TO app;
CREATE PROCEDURE public.noop() LANGUAGE sql AS 'SELECT 1';
ALTER PROCEDURE public.noop() OWNER TO app;
SET ROLE app;
SELECT leader_election.register_task('t', 'public.noop()', '1 second', '2 seconds');
});
ok(le_poll($primary, q{SELECT count(*) > 0 FROM leader_election.task_runs WHERE status = 'succeeded'}),
	'the task runs on the primary');

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

# The launcher starts only once recovery has finished: a standby has none.
is($standby->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type LIKE 'leader_election%'}), '0', 'no launcher or worker on the standby');

$primary->stop('immediate');
my $old_max = $standby->safe_psql('postgres', q{SELECT max(term) FROM leader_election.history WHERE name = 't'});
$standby->promote;
ok(le_poll($standby, q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'leader_election launcher'}, '1'), 'after promotion the launcher starts');
ok(le_poll($standby, qq{SELECT count(*) > 0 FROM leader_election.task_runs
	WHERE status = 'succeeded' AND term > $old_max AND holder LIKE 'task-runner:%:2'}),
	'the promoted server runs the task, as a new holder, in a higher term');
is($standby->safe_psql('postgres', qq{SELECT min(term) >= (1::bigint << 32) + 1
	FROM leader_election.task_runs WHERE term > $old_max}), 't', 'terms of the new timeline');

$standby->stop;
done_testing();
