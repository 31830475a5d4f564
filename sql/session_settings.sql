--
-- session_settings: what a session can SET does not bend the guarantees
-- (issue 11).  Each block states the guarantee it attacks.
--
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

--
-- A grant that has expired by the time its transaction commits is not
-- committed (commit_rules.c R2): COMMIT fails with LE001 and nothing of the
-- transaction stays.
--
CREATE TABLE pg_temp.work (note text);
BEGIN;
SELECT try_acquire_leader('slow', '100 milliseconds', 'h1') AS acquired;
INSERT INTO pg_temp.work VALUES ('done as leader');
SELECT pg_temp.wait_until_expired('slow');
\set VERBOSITY terse
COMMIT;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT am_leader('slow', 'h1') AS h1_leads,
       (SELECT count(*) FROM leader_election.leases WHERE name = 'slow') AS rows,
       (SELECT count(*) FROM pg_temp.work) AS work_rows;
-- The same for a renewal; the earlier, committed term is untouched.
SELECT try_acquire_leader('slow', '1 hour', 'h1') AS acquired;
BEGIN;
SELECT try_acquire_leader('slow', '100 milliseconds', 'h1') AS renewed;
SELECT pg_temp.wait_until_expired('slow');
COMMIT;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT am_leader('slow', 'h1') AS still_h1_by_the_hour_lease;
-- Only the last write of a name counts: a short grant renewed for longer,
-- or released, in the same transaction commits.
BEGIN;
SELECT try_acquire_leader('slow3', '100 milliseconds', 'h1') AS acquired;
SELECT pg_temp.wait_until_expired('slow3');
SELECT try_acquire_leader('slow3', '1 hour', 'h1') AS renewed_for_an_hour;
COMMIT;
SELECT am_leader('slow3', 'h1') AS h1_leads;
BEGIN;
SELECT try_acquire_leader('slow4', '100 milliseconds', 'h1') AS acquired;
SELECT pg_temp.wait_until_expired('slow4');
SELECT release_leader('slow4', 'h1') AS released;
COMMIT;
SELECT count(*) AS slow4_rows FROM leader_election.leases WHERE name = 'slow4';
-- Rolled back to a savepoint, an expired grant does not count.
BEGIN;
SAVEPOINT s;
SELECT try_acquire_leader('slow2', '100 milliseconds', 'h1') AS acquired;
SELECT pg_temp.wait_until_expired('slow2');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT count(*) AS slow2_rows FROM leader_election.leases WHERE name = 'slow2';

--
-- synchronous_commit: a transaction that wrote a lease commits at least
-- with 'on' (commit_rules.c R1); the session's own setting is as it left it.
--
SET synchronous_commit = off;
BEGIN;
SELECT try_acquire_leader('sc', '1 hour', 'h1') AS acquired;
SET LOCAL synchronous_commit = off;
COMMIT;
SHOW synchronous_commit;
RESET synchronous_commit;

--
-- Isolation levels: the same answers and the same decisions.
--
SET default_transaction_isolation = 'serializable';
SELECT try_acquire_leader('iso', '1 hour', 'h1') AS h1_acquires,
       try_acquire_leader('iso', '1 hour', 'h2') AS h2_refused;
SELECT am_leader('iso', 'h1') AS h1, am_leader('iso', 'h2') AS h2, leader_term('iso', 'h1') AS term;
SELECT leader_term('iso', 'h1') AS term \gset
BEGIN;
SELECT assert_leader('iso', :term, 'h1') = :term AS fenced_in_its_term;
COMMIT;
SELECT release_leader('iso', 'h1') AS released, try_acquire_leader('iso', '1 hour', 'h2') AS h2_acquires;
SET default_transaction_isolation = 'repeatable read';
SELECT am_leader('iso', 'h1') AS h1, am_leader('iso', 'h2') AS h2, leader_term('iso', 'h2') AS term;
RESET default_transaction_isolation;

--
-- lock_timeout and statement_timeout: a losing try never waits, so neither
-- fires; a wait that is cut off holds nothing.
--
SET lock_timeout = '1ms';
SELECT try_acquire_leader('iso', '1 hour', 'h1') AS h1_refused_without_waiting;
RESET lock_timeout;
SET statement_timeout = '200ms';
SELECT wait_for_leadership('iso', '1 hour', NULL, 'h1') AS cut_off;
RESET statement_timeout;
SELECT am_leader('iso', 'h1') AS h1_holds_nothing, am_leader('iso', 'h2') AS h2_still_leads;

--
-- session_replication_role = replica (superuser): writes and the lease
-- cache work as usual (its triggers fire ALWAYS).
--
SET session_replication_role = replica;
SELECT release_leader('iso', 'h2') AS released, try_acquire_leader('iso', '1 hour', 'h1') AS h1_acquires;
RESET session_replication_role;
SELECT am_leader('iso', 'h1') AS h1, am_leader('iso', 'h2') AS h2;

--
-- search_path: look-alike operators and functions first on the path change
-- nothing (every name the extension uses is schema-qualified).
--
CREATE SCHEMA evil;
CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
CREATE FUNCTION evil.count(anyelement) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT 'infinity'::timestamptz$$;
SET search_path = evil, pg_catalog, public;
SELECT try_acquire_leader('iso', '1 hour', 'h2') AS h2_refused,
       am_leader('iso', 'h1') AS h1, am_leader('iso', 'h2') AS h2;
SELECT try_acquire_leader('evil', '1 hour', 'h2') AS new_name,
       release_leader('evil', 'h2') AS released,
       try_acquire_leader('evil', '1 hour', 'h1') AS taken_again,
       leader_term('evil', 'h1') AS term;
RESET search_path;
DROP SCHEMA evil CASCADE;
