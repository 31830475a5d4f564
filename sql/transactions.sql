--
-- transactions: acquisition, renewal and release are transactional
-- (DESIGN.md section 3 "Transactions"; lease.c invariant I4).
--
-- They take effect at commit and vanish on ROLLBACK or ROLLBACK TO
-- SAVEPOINT; PREPARE TRANSACTION of a transaction that acquired, renewed,
-- released or fenced a lease is refused (0A000), while one that only read,
-- or whose lease work was rolled back to a savepoint, may be prepared.
-- The cluster runs with max_prepared_transactions > 0.
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

-- Prints the SQLSTATE of the last error (psql sets :SQLSTATE).
\set show_sqlstate '\\echo SQLSTATE: :SQLSTATE'

--
-- ROLLBACK voids an acquisition: no row, no history (the term it drew is
-- left unused: terms have gaps, never repeats).
--
BEGIN;
SELECT try_acquire_leader('rb', '1 minute', 'h') AS acquired;
-- inside the transaction the caller sees its own acquisition
SELECT am_leader('rb', 'h') AS leads_inside, leader_term('rb', 'h') AS term_inside;
ROLLBACK;
SELECT am_leader('rb', 'h') AS leads_after_rollback;
SELECT (SELECT count(*) FROM leader_election.leases WHERE name = 'rb') AS lease_rows,
       (SELECT count(*) FROM leader_election.history WHERE name = 'rb') AS history_rows;
-- A session-bound acquisition rolled back, too.
BEGIN;
SELECT try_acquire_leader('rb-session', '1 minute') AS acquired;
ROLLBACK;
SELECT am_leader('rb-session') AS leads_after_rollback,
       (SELECT count(*) FROM leader_election.leases WHERE name = 'rb-session') AS lease_rows;
-- An error later in the transaction voids it as well.
BEGIN;
SELECT try_acquire_leader('rb', '1 minute', 'h') AS acquired;
SELECT 1 / 0;
COMMIT;
SELECT am_leader('rb', 'h') AS leads_after_failed_commit;
-- The writer lock went with the transaction: another holder gets the lease.
SELECT try_acquire_leader('rb', '1 minute', 'other') AS other_acquired, leader_term('rb', 'other') AS term;
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 19525 AND pid = pg_backend_pid();

--
-- ROLLBACK TO SAVEPOINT voids what was done after the savepoint.
--
BEGIN;
SAVEPOINT s1;
SELECT try_acquire_leader('sp', '1 minute', 'h') AS acquired;
ROLLBACK TO SAVEPOINT s1;
SELECT am_leader('sp', 'h') AS leads_after_rollback_to;
COMMIT;
SELECT count(*) AS lease_rows FROM leader_election.leases WHERE name = 'sp';
-- A takeover inside a savepoint, rolled back: the old holder keeps term 1.
SELECT try_acquire_leader('sp', '1 minute', 'h') AS acquired;
BEGIN;
SELECT release_leader('sp', 'h') AS released;
SAVEPOINT s2;
SELECT try_acquire_leader('sp', '1 minute', 'other') AS other_acquired;
ROLLBACK TO SAVEPOINT s2;
SELECT am_leader('sp', 'other') AS other_leads;
ROLLBACK;
SELECT holder, term FROM current_leader('sp');
-- Released savepoint: the work commits with the transaction.
BEGIN;
SAVEPOINT s3;
SELECT try_acquire_leader('sp-kept', '1 minute', 'h') AS acquired;
RELEASE SAVEPOINT s3;
COMMIT;
SELECT holder, term FROM current_leader('sp-kept');

--
-- A release rolled back keeps the lease.
--
SELECT try_acquire_leader('rel', '1 minute', 'h') AS acquired;
BEGIN;
SELECT release_leader('rel', 'h') AS released;
SELECT am_leader('rel', 'h') AS leads_inside;
ROLLBACK;
SELECT am_leader('rel', 'h') AS leads_after_rollback, leader_term('rel', 'h') AS term;
SELECT name, term, end_reason FROM leader_election.history WHERE name = 'rel';
-- A renewal rolled back keeps the old expiry.
SELECT expires_at AS old_expiry FROM leader_election.leases WHERE name = 'rel' \gset
BEGIN;
SELECT try_acquire_leader('rel', '2 minutes', 'h') AS renewed;
ROLLBACK;
SELECT expires_at = :'old_expiry' AS expiry_unchanged FROM leader_election.leases WHERE name = 'rel';

--
-- PREPARE TRANSACTION after touching a lease: 0A000, and the transaction
-- is rolled back.
--
BEGIN;
SELECT try_acquire_leader('prep', '1 minute', 'h') AS acquired;
PREPARE TRANSACTION 'le_regress_acquire';
:show_sqlstate
SELECT count(*) AS lease_rows FROM leader_election.leases WHERE name = 'prep';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'le_regress%';
-- renewal
SELECT try_acquire_leader('prep', '1 minute', 'h') AS acquired;
BEGIN;
SELECT try_acquire_leader('prep', '1 minute', 'h') AS renewed;
PREPARE TRANSACTION 'le_regress_renew';
:show_sqlstate
-- release
BEGIN;
SELECT release_leader('prep', 'h') AS released;
PREPARE TRANSACTION 'le_regress_release';
:show_sqlstate
SELECT am_leader('prep', 'h') AS still_leads;
-- fence
BEGIN;
SELECT assert_leader('prep', leader_term('prep', 'h'), 'h') = leader_term('prep', 'h') AS fenced;
PREPARE TRANSACTION 'le_regress_fence';
:show_sqlstate
-- wait_for_leadership that acquired
BEGIN;
SELECT wait_for_leadership('prep-wait', '1 minute', '0', 'h') AS acquired;
PREPARE TRANSACTION 'le_regress_wait';
:show_sqlstate
-- acquired in a savepoint that was released (so it belongs to the
-- transaction)
BEGIN;
SAVEPOINT s;
SELECT try_acquire_leader('prep-sp', '1 minute', 'h') AS acquired;
RELEASE SAVEPOINT s;
PREPARE TRANSACTION 'le_regress_released_sp';
:show_sqlstate
-- fenced in nested savepoints that were released, then a later savepoint
-- rolled back: the fence still belongs to the transaction
BEGIN;
SAVEPOINT a;
SAVEPOINT b;
SELECT assert_leader('prep', NULL, 'h') > 0 AS fenced;
RELEASE SAVEPOINT b;
RELEASE SAVEPOINT a;
SAVEPOINT c;
SAVEPOINT d;
ROLLBACK TO SAVEPOINT c;
PREPARE TRANSACTION 'le_regress_nested_sp';
:show_sqlstate
-- (had it been prepared, its lock would stall the rest of this file)
SELECT format('ROLLBACK PREPARED %L', gid) FROM pg_prepared_xacts
 WHERE gid = 'le_regress_nested_sp' \gexec
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'le_regress%';
SELECT name FROM leader_election.leases WHERE name LIKE 'prep%' ORDER BY name;

-- Allowed: work rolled back to a savepoint, read-only calls, and a "no".
BEGIN;
SAVEPOINT s;
SELECT try_acquire_leader('prep-rolled-back', '1 minute', 'h') AS acquired;
ROLLBACK TO SAVEPOINT s;
PREPARE TRANSACTION 'le_regress_rolled_back_sp';
ROLLBACK PREPARED 'le_regress_rolled_back_sp';
BEGIN;
SELECT am_leader('prep', 'h') AS leads, leader_term('prep', 'h') AS term,
       (SELECT holder FROM current_leader('prep')) AS holder;
PREPARE TRANSACTION 'le_regress_read_only';
COMMIT PREPARED 'le_regress_read_only';
BEGIN;
SELECT try_acquire_leader('prep', '1 minute', 'someone-else') AS refused;
SELECT release_leader('prep', 'someone-else') AS nothing_to_release;
PREPARE TRANSACTION 'le_regress_refused';
COMMIT PREPARED 'le_regress_refused';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'le_regress%';
SELECT count(*) AS rolled_back_rows FROM leader_election.leases WHERE name = 'prep-rolled-back';
SELECT holder, term FROM current_leader('prep');
-- After a refused PREPARE the session works normally.
SELECT try_acquire_leader('prep', '1 minute', 'h') AS renewed, leader_term('prep', 'h') AS term;

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
