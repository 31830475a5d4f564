--
-- history_storage: where history rows go on disk.
--
-- A term's history row is inserted when the term begins and updated once,
-- when it ends.  The table keeps half of each page free (fillfactor 50), so
-- that update is HOT: it stays on the row's page and adds no index entry.
-- Even when every row of a page ends at once (a holder of many names going
-- away, nothing pruned in between) at least four in five are; only the
-- rows that end last on a page of short rows may not fit.  And grants made by different sessions put their rows on the
-- page the previous grant used (an insert page hint in shared memory, with
-- the library preloaded), not on the different pages the free space map
-- hands each new session: a storm of takeovers right after a checkpoint
-- then logs a few pages whole instead of one per winner.
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

SELECT reloptions FROM pg_class WHERE oid = 'leader_election.history'::regclass;

--
-- Ends of terms are HOT updates: 200 names (several pages of history rows)
-- acquired, then all released in one transaction.
--
SELECT count(*) FILTER (WHERE try_acquire_leader('nightly-report-' || i, '1 hour',
                                                 'replica-a.example.internal')) AS acquired
  FROM generate_series(1, 200) AS i;
SELECT count(DISTINCT (ctid::text::point)[0]) > 1 AS on_several_pages
  FROM leader_election.history WHERE name LIKE 'nightly-report-%';
BEGIN;
SELECT count(*) FILTER (WHERE release_leader('nightly-report-' || i,
                                             'replica-a.example.internal')) AS released
  FROM generate_series(1, 200) AS i;
SELECT pg_stat_get_xact_tuples_updated('leader_election.history'::regclass) AS ends,
       pg_stat_get_xact_tuples_hot_updated('leader_election.history'::regclass) * 5
         >= pg_stat_get_xact_tuples_updated('leader_election.history'::regclass) * 4
         AS four_in_five_hot;
COMMIT;

--
-- First grants from new sessions share a page.  First give the free space
-- map many free pages: fill some pages, delete every row but those of the
-- last page (so VACUUM does not cut the table short), and VACUUM.
--
SELECT count(*) FILTER (WHERE try_acquire_leader('fill' || i, '1 hour', 'h')) AS acquired
  FROM generate_series(1, 400) AS i;
DELETE FROM leader_election.history
 WHERE (ctid::text::point)[0] < (SELECT max((ctid::text::point)[0]) FROM leader_election.history);
VACUUM leader_election.history;
-- Five new sessions, one first grant each.
\c
SELECT try_acquire_leader('hint1', '1 hour', 'h');
\c
SELECT try_acquire_leader('hint2', '1 hour', 'h');
\c
SELECT try_acquire_leader('hint3', '1 hour', 'h');
\c
SELECT try_acquire_leader('hint4', '1 hour', 'h');
\c
SELECT try_acquire_leader('hint5', '1 hour', 'h');
-- Without the hint each would be on a page of its own.
SELECT count(DISTINCT (ctid::text::point)[0]) <= 2 AS few_pages
  FROM leader_election.history WHERE name LIKE 'hint%';

TRUNCATE leader_election.leases, leader_election.history;
