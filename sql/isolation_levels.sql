--
-- isolation_levels: the API under REPEATABLE READ and SERIALIZABLE, in one
-- session (DESIGN.md section 3 "Transactions"; lease.c invariant I5).
--
-- Answers reflect the latest committed state at call time, not the
-- transaction's snapshot: a lease that expires while the transaction is
-- open reads as expired.  Races with other sessions (40001) are in the
-- isolation specs.
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

--
-- The whole life of a lease inside one REPEATABLE READ transaction.
--
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS rows_in_snapshot FROM leader_election.leases;   -- takes the snapshot
SELECT try_acquire_leader('rr', '1 minute', 'h') AS acquired;
SELECT am_leader('rr', 'h') AS leads, leader_term('rr', 'h') AS term;
SELECT try_acquire_leader('rr', '1 minute', 'h') AS renewed;
SELECT assert_leader('rr', leader_term('rr', 'h'), 'h') = leader_term('rr', 'h') AS fenced;
SELECT holder, term FROM current_leader('rr');
SELECT release_leader('rr', 'h') AS released;
SELECT am_leader('rr', 'h') AS leads_after_release;
SELECT try_acquire_leader('rr', '1 minute', 'h2') AS reacquired, leader_term('rr', 'h2') AS term;
COMMIT;
SELECT holder, term FROM current_leader('rr');
SELECT term, holder, end_reason FROM leader_election.history WHERE name = 'rr' ORDER BY term;

--
-- The same under SERIALIZABLE.
--
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) AS rows_in_snapshot FROM leader_election.leases;
SELECT try_acquire_leader('ser', '1 minute', 'h') AS acquired;
SELECT am_leader('ser', 'h') AS leads, leader_term('ser', 'h') AS term;
SELECT try_acquire_leader('ser', '1 minute', 'h') AS renewed;
SELECT assert_leader('ser', leader_term('ser', 'h'), 'h') = leader_term('ser', 'h') AS fenced;
SELECT release_leader('ser', 'h') AS released;
SELECT try_acquire_leader('ser', '1 minute', 'h2') AS reacquired, leader_term('ser', 'h2') AS term;
COMMIT;
SELECT holder, term FROM current_leader('ser');

--
-- A lease committed before the transaction, renewed and released inside it.
--
SELECT try_acquire_leader('rr-old', '1 minute', 'h') AS acquired;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS rows_in_snapshot FROM leader_election.leases;
SELECT try_acquire_leader('rr-old', '2 minutes', 'h') AS renewed;
SELECT release_leader('rr-old', 'h') AS released;
COMMIT;
SELECT holder, term FROM leader_election.leases WHERE name = 'rr-old';

--
-- Expiry is judged on the clock at call time, never on the snapshot: a
-- 100 ms lease that lapses while a REPEATABLE READ transaction is open
-- reads as expired inside it, and a takeover there gets term 2.
--
SELECT try_acquire_leader('rr-expiry', '100ms', 'h') AS acquired;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT am_leader('rr-expiry', 'h') AS leads_at_start;   -- snapshot taken here
SELECT pg_temp.wait_until_expired('rr-expiry');
SELECT expires_at < clock_timestamp() AS expired_by_clock
  FROM leader_election.leases WHERE name = 'rr-expiry';
SELECT am_leader('rr-expiry', 'h') AS leads_after_expiry,
       leader_term('rr-expiry', 'h') AS term_after_expiry,
       (SELECT count(*) FROM current_leader('rr-expiry')) AS current_leader_rows;
SELECT try_acquire_leader('rr-expiry', '1 minute', 'h2') AS taken_over,
       leader_term('rr-expiry', 'h2') AS new_term;
COMMIT;
SELECT holder, term FROM current_leader('rr-expiry');
SELECT term, holder, end_reason FROM leader_election.history
 WHERE name = 'rr-expiry' ORDER BY term;

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
