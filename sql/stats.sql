--
-- stats: the counters of leader_election.stats (src/stats.c): outcomes
-- count at commit and not after a rollback (of the transaction or of a
-- savepoint), events count when they happen, rollback or not;
-- stats_reset(); who may read and reset.  The dev and test clusters
-- preload the library.
--

TRUNCATE leader_election.leases, leader_election.history;
RESET leader_election.holder_id;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

CREATE TEMP VIEW my_stats AS
    SELECT grants, renewals, releases, takeovers_expired,
           takeovers_session_ended AS tk_session, moves, losing_tries AS losing,
           fence_rejections AS fences, waits, wakeups
      FROM leader_election.stats
     WHERE datname = current_database();

SELECT leader_election.stats_reset();
SELECT * FROM my_stats;
SELECT stats_reset > now() - interval '1 minute' AS reset_recently
  FROM leader_election.stats WHERE datname = current_database();

-- A grant, a renewal, a losing try, a release: each once.
SELECT try_acquire_leader('stats-a', '1 minute', 'h1');
SELECT try_acquire_leader('stats-a', '1 minute', 'h1');
SELECT try_acquire_leader('stats-a', '1 minute', 'h2');
SELECT release_leader('stats-a', 'h1');
SELECT * FROM my_stats;

-- Counted at commit: not visible inside the transaction, visible after.
BEGIN;
SELECT try_acquire_leader('stats-a', '1 minute', 'h1');
SELECT grants FROM my_stats;
COMMIT;
SELECT grants FROM my_stats;

-- A rolled-back grant and renewal do not count; the losing try in the
-- rolled-back transaction does (an event).
BEGIN;
SELECT try_acquire_leader('stats-b', '1 minute', 'h1');
SELECT try_acquire_leader('stats-a', '1 minute', 'h1');
SELECT try_acquire_leader('stats-a', '1 minute', 'h2');
ROLLBACK;
SELECT grants, renewals, losing FROM my_stats;

-- Savepoints: rolled back to, nothing; released, counted at commit.
BEGIN;
SAVEPOINT s1;
SELECT try_acquire_leader('stats-b', '1 minute', 'h1');
SAVEPOINT s2;
SELECT try_acquire_leader('stats-b', '1 minute', 'h1');
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s3;
SELECT try_acquire_leader('stats-c', '1 minute', 'h1');
SAVEPOINT s4;
SELECT try_acquire_leader('stats-c', '1 minute', 'h1');
RELEASE SAVEPOINT s3;
COMMIT;
SELECT grants, renewals FROM my_stats;
SELECT count(*) AS stats_b_rows FROM leader_election.leases WHERE name = 'stats-b';

-- A rejected fence counts, although its transaction always aborts.
SELECT pg_temp.try($$SELECT assert_leader('stats-a', NULL, 'h2')$$);
SELECT pg_temp.try($$SELECT assert_leader('stats-a', 999, 'h1')$$);
SELECT assert_leader('stats-a', NULL, 'h1') > 0 AS fenced;
SELECT fences FROM my_stats;

-- A takeover of an expired lease: a grant and a takeovers_expired.
SELECT try_acquire_leader('stats-d', '100 ms', 'h1');
SELECT pg_sleep(0.2);
SELECT try_acquire_leader('stats-d', '1 minute', 'h2');
SELECT grants, takeovers_expired, tk_session FROM my_stats;
-- Taking a released lease is a grant, not a takeover of anything.
SELECT release_leader('stats-d', 'h2');
SELECT try_acquire_leader('stats-d', '1 minute', 'h1');
SELECT grants, releases, takeovers_expired FROM my_stats;

-- A wait that times out: one wait, losing tries, no wakeup.
SELECT wait_for_leadership('stats-a', '1 minute', '50 ms', 'h2');
SELECT waits, losing >= 4 AS losing_counted, wakeups FROM my_stats;

-- The task runner's and the applications' database rows are apart: the
-- view has at most one row per database.
SELECT count(*) = count(DISTINCT datid) AS one_row_per_database FROM leader_election.stats;

-- Reset zeroes this database's counters.
SELECT leader_election.stats_reset();
SELECT * FROM my_stats;

--
-- Privileges: PUBLIC reads nothing and resets nothing; pg_monitor reads;
-- a role granted EXECUTE on stats_reset() resets.
--
CREATE ROLE regress_le_stats_nobody;
CREATE ROLE regress_le_stats_monitor IN ROLE pg_monitor;
CREATE ROLE regress_le_stats_resetter;
GRANT USAGE ON SCHEMA leader_election TO regress_le_stats_nobody,
      regress_le_stats_monitor, regress_le_stats_resetter;
GRANT EXECUTE ON FUNCTION leader_election.stats_reset() TO regress_le_stats_resetter;
SET ROLE regress_le_stats_nobody;
SELECT pg_temp.try($$SELECT count(*) FROM leader_election.stats$$);
SELECT pg_temp.try($$SELECT count(*) FROM leader_election.stats_read()$$);
SELECT pg_temp.try($$SELECT leader_election.stats_reset()$$);
RESET ROLE;
SET ROLE regress_le_stats_monitor;
SELECT count(*) >= 1 AS monitor_reads FROM leader_election.stats;
SELECT pg_temp.try($$SELECT leader_election.stats_reset()$$);
RESET ROLE;
SELECT try_acquire_leader('stats-e', '1 minute', 'h1');
SET ROLE regress_le_stats_resetter;
SELECT pg_temp.try($$SELECT leader_election.stats_reset()$$);
RESET ROLE;
SELECT grants FROM my_stats;

REVOKE USAGE ON SCHEMA leader_election FROM regress_le_stats_nobody,
       regress_le_stats_monitor, regress_le_stats_resetter;
REVOKE EXECUTE ON FUNCTION leader_election.stats_reset() FROM regress_le_stats_resetter;
DROP ROLE regress_le_stats_nobody, regress_le_stats_monitor, regress_le_stats_resetter;
TRUNCATE leader_election.leases, leader_election.history;
