--
-- security: what a hostile role with exactly the README's grants (EXECUTE
-- on the API, USAGE on the schema) can do to another role (issue 12; README
-- "Threat model").  Each attack below worked on 1.0.
--
--   leaky functions in a WHERE clause on the leaders view (item 2)
--   probing which role owns a name through the 42501 DETAIL (item 6)
--   squatting names, and the administrator's tools against it (item 6)
--   invisible and bidirectional characters in names and holders (item 7)
--   pg_read_all_data reading every role's leases; tasks lost by pg_dump;
--   DROP ROLE leaving names to a dangling OID (item 8)
--
-- The escalation by shadowing the API in a schema others may create in
-- (item 1) and single-byte encodings (item 7) need their own databases:
-- test/t/254_security_edges.pl.
--
-- Roles are cluster-wide: all are created and dropped here.
--

TRUNCATE leader_election.leases, leader_election.history;
RESET leader_election.holder_id;
RESET leader_election.max_names_per_role;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

CREATE ROLE regress_le_victim;
CREATE ROLE regress_le_mallory;
CREATE ROLE regress_le_name_admin;
CREATE ROLE regress_le_reader;
GRANT pg_read_all_data TO regress_le_reader;
-- Exactly the README's grants.
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), wait_for_leadership(text, interval, interval, text, integer),
      leader_term(text, text), assert_leader(text, bigint, text), current_leader(text)
   TO regress_le_victim, regress_le_mallory;
GRANT USAGE ON SCHEMA leader_election TO regress_le_victim, regress_le_mallory;

SET ROLE regress_le_victim;
SELECT try_acquire_leader('billing', '1 minute', 'victim-host') AS victim_leads;
RESET ROLE;

--
-- Item 2: a cheap leaky function in the WHERE clause must not see rows the
-- view filters out.  Every relation that filters by role is tried.
--
SET ROLE regress_le_mallory;
CREATE FUNCTION pg_temp.leak(VARIADIC v text[]) RETURNS boolean
    LANGUAGE plpgsql COST 0.0000001 AS $$
BEGIN
    RAISE NOTICE 'leaked: %', v;
    RETURN true;
END $$;
SELECT name FROM leader_election.leaders
 WHERE pg_temp.leak(name, holder, holder_pid::text, application_name, client_addr::text);
SELECT name FROM leader_election.history WHERE pg_temp.leak(name, holder);
-- (tasks and task_runs: below, once another role has a task)
-- The planner keeps the barrier even when asked to push the qual down hard.
SET enable_seqscan = off;
SELECT name FROM leader_election.leaders WHERE pg_temp.leak(name) AND name = 'billing';
RESET enable_seqscan;
RESET ROLE;
SELECT c.relname, c.reloptions
  FROM pg_class AS c
 WHERE c.relnamespace = 'leader_election'::regnamespace AND c.relkind = 'v'
 ORDER BY 1;

--
-- Item 6: the 42501 for another role's name does not say which role owns
-- it (an oracle for probing names).  Members of the owner get the same
-- answers as before.
--
SET ROLE regress_le_mallory;
SELECT pg_temp.try_with_detail($$SELECT am_leader('billing', 'x')$$) AS probe;
SELECT pg_temp.try_with_detail($$SELECT try_acquire_leader('billing', '1 minute', 'x')$$) AS probe;
SELECT pg_temp.try_with_detail($$SELECT count(*) FROM current_leader('billing')$$) AS probe;
RESET ROLE;

--
-- Item 6: squatting.  mallory grabs a name the victim will need, holds it
-- with a long ttl and keeps renewing.  The administrator's functions
-- (README "Security and GRANTs") take names back, hand them over, and
-- reserve names in advance.
--
SET ROLE regress_le_mallory;
SELECT try_acquire_leader('reports', '7 days', 'squatter') AS squatted;
-- Not mallory's to call.
SELECT pg_temp.try($$SELECT leader_election.assign_name('reports', 'regress_le_mallory')$$) AS assign;
SELECT pg_temp.try($$SELECT leader_election.release_name('billing')$$) AS release;
RESET ROLE;
-- Bad input is refused like everywhere else.
SELECT pg_temp.try($$SELECT leader_election.assign_name(NULL, 'regress_le_victim')$$) AS null_name;
SELECT pg_temp.try($$SELECT leader_election.assign_name('x', NULL)$$) AS null_owner;
SELECT pg_temp.try($$SELECT leader_election.assign_name(E'a\nb', 'regress_le_victim')$$) AS bad_name;
SELECT pg_temp.try($$SELECT leader_election.assign_name('x', 0)$$) AS no_such_role;
SELECT pg_temp.try($$SELECT leader_election.release_name('')$$) AS empty_name;
SELECT pg_temp.try($$SELECT leader_election.release_name(NULL)$$) AS null_name;
-- A superuser hands the squatted name to the victim: the squatter's lease
-- ends (released) and its renewals get 42501 from now on.
SELECT leader_election.assign_name('reports', 'regress_le_victim') AS transferred;
SELECT leader_election.assign_name('reports', 'regress_le_victim') AS again_no_change;
SELECT name, owner::regrole, holder, term FROM leader_election.leases WHERE name = 'reports';
SELECT name, term, holder, end_reason FROM leader_election.history WHERE name = 'reports';
SET ROLE regress_le_mallory;
SELECT pg_temp.try($$SELECT try_acquire_leader('reports', '7 days', 'squatter')$$) AS squatter_renews;
RESET ROLE;
-- (Sent by the notifier worker just after its commit, this takeover's
-- notification could reach the LISTEN below; in_transaction keeps this
-- file's output one way.)
SET leader_election.notify_delivery = in_transaction;
SET ROLE regress_le_victim;
SELECT try_acquire_leader('reports', '1 minute', 'victim-host') AS victim_takes_over,
       leader_term('reports', 'victim-host') AS term;
RESET ROLE;
-- The administrator's release is announced like any other (history_notify).
LISTEN leader_election;
\o | sed -e 's/server process with PID [0-9]*/server process with PID (pid)/'
SELECT leader_election.release_name('reports') AS released_with_notification;
\o
UNLISTEN leader_election;
-- Reserving names in advance: nobody else may take them, the owner may.
SELECT leader_election.assign_name('reserved', 'regress_le_victim') AS reserved;
SELECT name, owner::regrole, holder, term, expires_at FROM leader_election.leases WHERE name = 'reserved';
SET ROLE regress_le_mallory;
SELECT pg_temp.try($$SELECT try_acquire_leader('reserved', '1 minute', 'squatter')$$) AS squat_reserved;
RESET ROLE;
SET ROLE regress_le_victim;
SELECT try_acquire_leader('reserved', '1 minute', 'victim-host') AS victim_acquires,
       leader_term('reserved', 'victim-host') AS term;
SELECT name, owner::regrole FROM leader_election.leaders ORDER BY name;
RESET ROLE;
-- release_name ends whatever lease is current, keeping owner and term;
-- false when nothing is held.
SELECT leader_election.release_name('reserved') AS released;
SELECT leader_election.release_name('reserved') AS released_again;
SELECT leader_election.release_name('never-used') AS released_unknown;
SELECT name, owner::regrole, holder, term FROM leader_election.leases WHERE name = 'reserved';
SELECT name, term, end_reason FROM leader_election.history WHERE name = 'reserved';
-- A designated admin role: EXECUTE on the two functions, nothing else.
GRANT EXECUTE ON FUNCTION leader_election.assign_name(text, regrole),
      leader_election.release_name(text)
   TO regress_le_name_admin;
SET ROLE regress_le_name_admin;
SELECT leader_election.assign_name('billing', 'regress_le_mallory') AS admin_transfers;
SELECT leader_election.assign_name('billing', 'regress_le_victim') AS admin_transfers_back;
SET ROLE regress_le_victim;
SELECT try_acquire_leader('reports', '1 minute', 'victim-host') AS victim_leads_again;
SET ROLE regress_le_name_admin;
SELECT leader_election.release_name('reports') AS admin_releases;
SELECT pg_temp.try($$SELECT count(*) FROM leader_election.leases$$) AS admin_reads_table;
RESET ROLE;
SELECT name, owner::regrole, holder FROM leader_election.leases ORDER BY name;
-- In a read-only transaction: 25006.
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT leader_election.release_name('billing')$$) AS read_only;
ROLLBACK;
-- Their rights: SECURITY DEFINER with a fixed search_path, no PUBLIC EXECUTE.
SELECT p.oid::regprocedure AS function, p.prosecdef, p.proconfig,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc AS p
 WHERE p.pronamespace = 'leader_election'::regnamespace
   AND p.proname IN ('assign_name', 'release_name')
 ORDER BY 1;

--
-- Item 7: Unicode format characters (Cf) and line and paragraph separators
-- (Zl, Zp) are refused in names and holders (this database is UTF8);
-- printable text from any script is fine.
--
SELECT label, pg_temp.try(sql) AS result
  FROM (VALUES
    ('name with U+202E (RLO)',        $$SELECT try_acquire_leader(U&'bill\202Eing', '1 minute', 'h')$$),
    ('name with U+2066 (LRI)',        $$SELECT try_acquire_leader(U&'a\2066b', '1 minute', 'h')$$),
    ('name with U+200B (ZWSP)',       $$SELECT try_acquire_leader(U&'bill\200Bing', '1 minute', 'h')$$),
    ('name with U+200D (ZWJ)',        $$SELECT am_leader(U&'a\200Db', 'h')$$),
    ('name with U+2028 (LS, Zl)',     $$SELECT try_acquire_leader(U&'a\2028b', '1 minute', 'h')$$),
    ('name with U+2029 (PS, Zp)',     $$SELECT try_acquire_leader(U&'a\2029b', '1 minute', 'h')$$),
    ('name with U+FEFF (BOM)',        $$SELECT try_acquire_leader(U&'\FEFFbilling', '1 minute', 'h')$$),
    ('name with U+00AD (soft hyphen)', $$SELECT try_acquire_leader(U&'bill\00ADing', '1 minute', 'h')$$),
    ('name with U+061C (ALM)',        $$SELECT try_acquire_leader(U&'a\061Cb', '1 minute', 'h')$$),
    ('name with U+E0041 (tag)',       $$SELECT try_acquire_leader(U&'a\+0E0041b', '1 minute', 'h')$$),
    ('name with U+1D173 (music)',     $$SELECT try_acquire_leader(U&'a\+01D173b', '1 minute', 'h')$$),
    ('holder with U+202E (RLO)',      $$SELECT try_acquire_leader('ok-name', '1 minute', U&'h\202Ex')$$),
    ('holder with U+2029 (PS)',       $$SELECT try_acquire_leader('ok-name', '1 minute', U&'h\2029x')$$),
    ('holder with U+200B (ZWSP)',     $$SELECT release_leader('ok-name', U&'h\200Bx')$$),
    ('holder_id with U+202E',         $$SELECT set_config('leader_election.holder_id', U&'h\202Ex', false)$$),
    ('assign_name with U+202E',       $$SELECT leader_election.assign_name(U&'a\202Eb', 'regress_le_victim')$$),
    -- accepted
    ('name with é, 日本, emoji',       $$SELECT try_acquire_leader(U&'caf\00E9-日本-\+01F600', '1 minute', 'h')$$),
    ('name with U+00A0 (NBSP, Zs)',   $$SELECT try_acquire_leader(U&'a\00A0b', '1 minute', 'h')$$),
    ('name with U+2010 (hyphen)',    $$SELECT try_acquire_leader(U&'a\2010b', '1 minute', 'h')$$)
  ) AS cases (label, sql);
SELECT count(*) AS rows_with_format_characters FROM leader_election.leases
 WHERE name ~ U&'[\00AD\200B-\200F\2028-\202E\2060-\206F\FEFF]';

--
-- Item 8: pg_read_all_data does not widen what a role sees of the leases
-- (row-level security, as on the history and the tasks).
--
SET ROLE regress_le_reader;
SELECT count(*) AS leases_read_all_data FROM leader_election.leases;
SELECT count(*) AS history_read_all_data FROM leader_election.history;
RESET ROLE;
SET ROLE regress_le_mallory;
SELECT pg_temp.try($$SELECT count(*) FROM leader_election.leases$$) AS leases_plain_role;
RESET ROLE;
SELECT count(*) AS leases_superuser FROM leader_election.leases;

-- Item 8: pg_dump keeps the registered tasks and their id sequence (and,
-- as in 1.0, the leases and history).
SELECT c::regclass AS dumped
  FROM pg_extension AS e, unnest(e.extconfig) AS c
 WHERE e.extname = 'leader_election' ORDER BY c::regclass::text;

-- Item 8: DROP ROLE refuses a role that still owns names here (the library
-- is preloaded); once they are handed over, it succeeds.
CREATE ROLE regress_le_leaver;
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text) TO regress_le_leaver;
SET ROLE regress_le_leaver;
SELECT try_acquire_leader('leaver-name', '1 minute', 'h') AS leaver_acquired;
RESET ROLE;
REVOKE ALL ON FUNCTION try_acquire_leader(text, interval, text) FROM regress_le_leaver;
SELECT pg_temp.try_with_detail($$DROP ROLE regress_le_leaver$$) AS drop_owner;
SELECT count(*) AS leaver_still_exists FROM pg_roles WHERE rolname = 'regress_le_leaver';
SELECT leader_election.assign_name('leaver-name', 'regress_le_victim') AS handed_over;
DROP ROLE regress_le_leaver;
SELECT name, owner::regrole FROM leader_election.leases WHERE name = 'leaver-name';
-- The same for a role that owns a task (it would run as whichever role got
-- the OID).
CREATE ROLE regress_le_tasker LOGIN;
CREATE PROCEDURE public.regress_le_noop() LANGUAGE sql AS 'SELECT 1';
ALTER PROCEDURE public.regress_le_noop() OWNER TO regress_le_tasker;
GRANT EXECUTE ON FUNCTION leader_election.register_task(text, regprocedure, interval, interval),
      leader_election.unregister_task(text) TO regress_le_tasker;
SET ROLE regress_le_tasker;
SET client_min_messages = warning;
SELECT leader_election.register_task('leaver-task', 'public.regress_le_noop()', '1 minute', '1 minute') > 0
    AS registered;
RESET client_min_messages;
RESET ROLE;
INSERT INTO leader_election.task_runs (task_id, task_name, owner, term, holder, started_at, status)
SELECT id, name, owner, 1, 'runner', now(), 'succeeded' FROM leader_election.tasks
 WHERE name = 'leaver-task';
-- Item 2 again: the tasks and runs of another role stay hidden from a
-- leaky function (row-level security).
SET ROLE regress_le_mallory;
SELECT name FROM leader_election.tasks WHERE pg_temp.leak(name, procedure::text);
SELECT task_name FROM leader_election.task_runs WHERE pg_temp.leak(task_name, holder);
RESET ROLE;
SELECT count(*) AS tasks,
       (SELECT count(*) FROM leader_election.task_runs WHERE task_name = 'leaver-task') AS runs
  FROM leader_election.tasks WHERE name = 'leaver-task';
SELECT pg_temp.try_with_detail($$DROP ROLE regress_le_tasker$$) AS drop_task_owner;
SET ROLE regress_le_tasker;
SELECT leader_election.unregister_task('leaver-task') AS unregistered;
RESET ROLE;
REVOKE ALL ON FUNCTION leader_election.register_task(text, regprocedure, interval, interval),
      leader_election.unregister_task(text) FROM regress_le_tasker;
DELETE FROM leader_election.task_runs WHERE task_name = 'leaver-task';
-- register_task made the task's name the role's: hand it over too.
SELECT leader_election.assign_name('leaver-task', 'regress_le_victim') AS task_name_handed_over;
DROP PROCEDURE public.regress_le_noop();
DROP ROLE regress_le_tasker;

-- Clean up.
DROP FUNCTION pg_temp.leak(text[]);
TRUNCATE leader_election.leases, leader_election.history;
REVOKE ALL ON FUNCTION leader_election.assign_name(text, regrole),
      leader_election.release_name(text)
   FROM regress_le_name_admin;
REVOKE ALL ON SCHEMA leader_election FROM regress_le_victim, regress_le_mallory;
REVOKE ALL ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), wait_for_leadership(text, interval, interval, text, integer),
      leader_term(text, text), assert_leader(text, bigint, text), current_leader(text)
   FROM regress_le_victim, regress_le_mallory;
DROP ROLE regress_le_victim, regress_le_mallory, regress_le_name_admin, regress_le_reader;
