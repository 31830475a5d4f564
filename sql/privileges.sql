--
-- privileges: who may call the API and use a name (DESIGN.md section 6;
-- anchors-reliability.md (c) items 5, 6, 8, 9, 17).
--
-- EXECUTE is revoked from PUBLIC; a name belongs to the role that first
-- used it and every other non-superuser role (that is not a member of it)
-- gets 42501 from every function; ordinary roles cannot write the tables;
-- the leaders view and history show only the caller's roles' names;
-- leader_election.max_names_per_role caps new names per role (53400).
--
-- Roles are cluster-wide: all are created and dropped here.
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;
RESET leader_election.max_names_per_role;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

CREATE ROLE regress_le_noexec;
CREATE ROLE regress_le_a;
CREATE ROLE regress_le_b;
CREATE ROLE regress_le_a_member IN ROLE regress_le_a;   -- inherits regress_le_a
-- What an administrator does (README): grant EXECUTE on the API, and USAGE
-- on the state schema for monitoring.
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), wait_for_leadership(text, interval, interval, text, integer),
      leader_term(text, text), assert_leader(text, bigint, text), current_leader(text)
   TO regress_le_a, regress_le_b, regress_le_a_member;
GRANT USAGE ON SCHEMA leader_election TO regress_le_a, regress_le_b, regress_le_a_member;

--
-- Without EXECUTE: 42501 for every function.
--
SET ROLE regress_le_noexec;
SELECT try_acquire_leader('noexec', '1 minute', 'h');
SELECT am_leader('noexec', 'h');
SELECT release_leader('noexec', 'h');
SELECT wait_for_leadership('noexec', '1 minute', '0', 'h');
SELECT leader_term('noexec', 'h');
SELECT assert_leader('noexec', NULL, 'h');
SELECT * FROM current_leader('noexec');
RESET ROLE;
SELECT count(*) AS lease_rows FROM leader_election.leases;

--
-- regress_le_a creates the name 'owned-by-a'.
--
SET ROLE regress_le_a;
SELECT try_acquire_leader('owned-by-a', '1 minute', 'a-1') AS a_acquired;
SELECT assert_leader('owned-by-a', leader_term('owned-by-a', 'a-1'), 'a-1') = leader_term('owned-by-a', 'a-1') AS a_fenced;
RESET ROLE;
SELECT name, owner::regrole, holder_role::regrole, holder, term
  FROM leader_election.leases WHERE name = 'owned-by-a';

-- regress_le_b: 42501 on that name from every function, whether the lease
-- is held or not, and whatever holder it names.
SET ROLE regress_le_b;
SELECT fn, pg_temp.try(sql) AS result
  FROM (VALUES
    ('try_acquire_leader',  $$SELECT try_acquire_leader('owned-by-a', '1 minute', 'b-1')$$),
    ('try_acquire_leader as a-1', $$SELECT try_acquire_leader('owned-by-a', '1 minute', 'a-1')$$),
    ('am_leader',           $$SELECT am_leader('owned-by-a', 'a-1')$$),
    ('release_leader',      $$SELECT release_leader('owned-by-a', 'a-1')$$),
    ('leader_term',         $$SELECT leader_term('owned-by-a', 'a-1')$$),
    ('assert_leader',       $$SELECT assert_leader('owned-by-a', 1, 'a-1')$$),
    ('current_leader',      $$SELECT holder FROM current_leader('owned-by-a')$$),
    ('wait_for_leadership', $$SELECT wait_for_leadership('owned-by-a', '1 minute', '0', 'b-1')$$)
  ) AS cases (fn, sql);
-- The same after the lease was released (the name still belongs to a).
RESET ROLE;
SELECT release_leader('owned-by-a', 'a-1') AS released_by_superuser;
SET ROLE regress_le_b;
SELECT fn, pg_temp.try(sql) AS result
  FROM (VALUES
    ('try_acquire_leader',  $$SELECT try_acquire_leader('owned-by-a', '1 minute', 'b-1')$$),
    ('am_leader',           $$SELECT am_leader('owned-by-a', 'b-1')$$),
    ('assert_leader',       $$SELECT assert_leader('owned-by-a', NULL, 'b-1')$$),
    ('wait_for_leadership', $$SELECT wait_for_leadership('owned-by-a', '1 minute', '0', 'b-1')$$)
  ) AS cases (fn, sql);
-- b's own names work, and b sees only them.
SELECT try_acquire_leader('owned-by-b', '1 minute', 'b-1') AS b_acquired;
SELECT name, holder, owner FROM leader_election.leaders ORDER BY name;
SELECT name, term, holder, owner::regrole FROM leader_election.history ORDER BY name;
-- Ordinary roles cannot touch the tables directly.
SELECT pg_temp.try($$SELECT count(*) FROM leader_election.leases$$) AS select_leases;
SELECT pg_temp.try($$INSERT INTO leader_election.leases (name, owner, term) VALUES ('x', 0, 1)$$) AS insert_leases;
SELECT pg_temp.try($$UPDATE leader_election.leases SET holder = 'b-1'$$) AS update_leases;
SELECT pg_temp.try($$DELETE FROM leader_election.leases$$) AS delete_leases;
SELECT pg_temp.try($$TRUNCATE leader_election.leases$$) AS truncate_leases;
SELECT pg_temp.try($$INSERT INTO leader_election.history (name, term, holder, owner, session_bound, acquired_at)
                     VALUES ('x', 1, 'h', 0, false, now())$$) AS insert_history;
SELECT pg_temp.try($$UPDATE leader_election.history SET holder = 'b-1'$$) AS update_history;
SELECT pg_temp.try($$DELETE FROM leader_election.history$$) AS delete_history;
SELECT pg_temp.try($$TRUNCATE leader_election.history$$) AS truncate_history;
-- nor the superuser-only settings
SELECT pg_temp.try($$SET leader_election.max_names_per_role = 0$$) AS set_max_names;
SELECT pg_temp.try($$SET leader_election.history_max_terms = 0$$) AS set_history_max;
RESET ROLE;
-- Nothing of b's attempts stuck.
SELECT name, owner::regrole, holder, term FROM leader_election.leases ORDER BY name;

--
-- A member of regress_le_a may use a's names; a sees only a's names.
--
SET ROLE regress_le_a_member;
SELECT try_acquire_leader('owned-by-a', '1 minute', 'member-1') AS member_acquired;
SELECT am_leader('owned-by-a', 'member-1') AS member_leads,
       leader_term('owned-by-a', 'member-1') AS term;
SELECT holder, term, role FROM current_leader('owned-by-a');
SELECT name, holder, owner, holder_role FROM leader_election.leaders ORDER BY name;
SELECT name, term, holder, owner::regrole, end_reason FROM leader_election.history ORDER BY name, term;
RESET ROLE;
SET ROLE regress_le_a;
SELECT name, holder, owner FROM leader_election.leaders ORDER BY name;
SELECT name, term, holder FROM leader_election.history ORDER BY name, term;
-- a itself is not a member of b: 42501 on b's name.
SELECT pg_temp.try($$SELECT am_leader('owned-by-b', 'b-1')$$) AS a_on_b_name;
RESET ROLE;
-- A name first used by the member belongs to the member, not to a.
SET ROLE regress_le_a_member;
SELECT try_acquire_leader('owned-by-member', '1 minute', 'member-1') AS member_acquired;
RESET ROLE;
SET ROLE regress_le_a;
SELECT pg_temp.try($$SELECT am_leader('owned-by-member', 'member-1')$$) AS a_on_member_name;
RESET ROLE;

--
-- The superuser may use every name.
--
SELECT am_leader('owned-by-a', 'member-1') AS su_sees_member_lead;
SELECT release_leader('owned-by-b', 'b-1') AS su_released_b;
SELECT try_acquire_leader('owned-by-b', '1 minute', 'admin') AS su_acquired_b_name;
SELECT name, owner::regrole, holder, term FROM leader_election.leases ORDER BY name;
SELECT count(*) AS visible_leaders FROM leader_election.leaders;

--
-- leader_election.max_names_per_role = 2: the third new name of a role
-- fails with 53400 and writes nothing; existing names keep working.
--
SET leader_election.max_names_per_role = 2;
SET ROLE regress_le_b;
-- b already has one name ('owned-by-b').
SELECT try_acquire_leader('b-second', '1 minute', 'b-1') AS second_name;
SELECT pg_temp.try($$SELECT try_acquire_leader('b-third', '1 minute', 'b-1')$$) AS third_name;
SELECT pg_temp.try($$SELECT wait_for_leadership('b-third', '1 minute', '0', 'b-1')$$) AS third_name_wait;
SELECT try_acquire_leader('b-second', '1 minute', 'b-1') AS renew_existing;
SELECT release_leader('b-second', 'b-1') AS release_existing;
SELECT try_acquire_leader('b-second', '1 minute', 'b-2') AS reacquire_existing;
RESET ROLE;
SELECT try_acquire_leader('owned-by-b', '1 minute', 'admin') AS su_renews_b_name;
SELECT (SELECT count(*) FROM leader_election.leases WHERE name = 'b-third') AS third_lease_rows,
       (SELECT count(*) FROM leader_election.history WHERE name = 'b-third') AS third_history_rows,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())
           AS advisory_locks;
SELECT owner::regrole, count(*) AS names FROM leader_election.leases
 GROUP BY owner ORDER BY owner::regrole::text;
-- Another role has its own quota.
SET ROLE regress_le_a;
SELECT try_acquire_leader('a-second', '1 minute', 'a-1') AS a_second_name;
SELECT pg_temp.try($$SELECT try_acquire_leader('a-third', '1 minute', 'a-1')$$) AS a_third_name;
RESET ROLE;
-- 0 means unlimited again.
SET leader_election.max_names_per_role = 0;
SET ROLE regress_le_b;
SELECT try_acquire_leader('b-third', '1 minute', 'b-1') AS third_name_unlimited;
RESET ROLE;
RESET leader_election.max_names_per_role;

-- Clean up: leases of the test roles, then the roles.
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
REVOKE ALL ON SCHEMA leader_election FROM regress_le_a, regress_le_b, regress_le_a_member;
REVOKE ALL ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), wait_for_leadership(text, interval, interval, text, integer),
      leader_term(text, text), assert_leader(text, bigint, text), current_leader(text)
   FROM regress_le_a, regress_le_b, regress_le_a_member;
DROP ROLE regress_le_a_member, regress_le_a, regress_le_b, regress_le_noexec;
