--
-- read_only: in a read-only transaction the write functions refuse with
-- 25006 and change nothing; the read functions and the views keep working
-- (DESIGN.md section 4; anchors-reliability.md B.1.5).
--
-- try_acquire_leader, release_leader, wait_for_leadership and assert_leader
-- are write functions (assert_leader locks the lease row); am_leader,
-- leader_term, current_leader, leaders and history only read.
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

-- The calls to make, on a lease 'ro' held by 'h' and a free name 'ro-new'.
CREATE TEMP TABLE ro_cases (id serial, call text, sql text);
INSERT INTO ro_cases (call, sql) VALUES
    ('try_acquire_leader (renew)',   $$SELECT try_acquire_leader('ro', '1 minute', 'h')$$),
    ('try_acquire_leader (new)',     $$SELECT try_acquire_leader('ro-new', '1 minute', 'h')$$),
    ('try_acquire_leader (session)', $$SELECT try_acquire_leader('ro-new', '1 minute')$$),
    ('try_acquire_leader (refused)', $$SELECT try_acquire_leader('ro', '1 minute', 'other')$$),
    ('release_leader',               $$SELECT release_leader('ro', 'h')$$),
    ('release_leader (not holder)',  $$SELECT release_leader('ro', 'other')$$),
    ('wait_for_leadership',          $$SELECT wait_for_leadership('ro-new', '1 minute', '0', 'h')$$),
    ('wait_for_leadership (no timeout)', $$SELECT wait_for_leadership('ro-new', '1 minute', NULL, 'h')$$),
    ('assert_leader',                $$SELECT assert_leader('ro', 1, 'h')$$),
    ('am_leader',                    $$SELECT am_leader('ro', 'h')$$),
    ('am_leader (session)',          $$SELECT am_leader('ro')$$),
    ('leader_term',                  $$SELECT leader_term('ro', 'h')$$),
    ('current_leader',               $$SELECT holder || ' term ' || term FROM current_leader('ro')$$),
    ('leaders view',                 $$SELECT string_agg(name || '=' || holder, ',') FROM leader_election.leaders$$),
    ('history',                      $$SELECT string_agg(name || ':' || term, ',') FROM leader_election.history$$);

SELECT try_acquire_leader('ro', '1 minute', 'h') AS acquired;

-- default_transaction_read_only
SET default_transaction_read_only = on;
SELECT call, pg_temp.try(sql) AS result FROM ro_cases ORDER BY id;
-- the error as psql shows it
SELECT try_acquire_leader('ro', '1 minute', 'h');
RESET default_transaction_read_only;

-- BEGIN READ ONLY
BEGIN READ ONLY;
SELECT call, pg_temp.try(sql) AS result FROM ro_cases ORDER BY id;
COMMIT;

-- SET TRANSACTION READ ONLY, under each isolation level
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET TRANSACTION READ ONLY;
SELECT pg_temp.try($$SELECT try_acquire_leader('ro', '1 minute', 'h')$$) AS try_acquire_rr,
       pg_temp.try($$SELECT am_leader('ro', 'h')$$) AS am_leader_rr;
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE;
SELECT pg_temp.try($$SELECT assert_leader('ro', 1, 'h')$$) AS assert_serializable,
       pg_temp.try($$SELECT leader_term('ro', 'h')$$) AS leader_term_serializable;
COMMIT;

-- Nothing changed: 'ro' still held by h in term 1, no 'ro-new', no locks.
SELECT name, holder, term FROM leader_election.leases ORDER BY name;
SELECT name, term, holder, end_reason FROM leader_election.history ORDER BY name;
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();

-- Back in a read-write transaction everything works again.
SELECT release_leader('ro', 'h') AS released,
       try_acquire_leader('ro-new', '1 minute', 'h') AS acquired;

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
