--
-- hostile_role: a role with the README's grants cannot block another role's
-- names through the names it chooses, nor lock another role's lease row by
-- calls that are refused (issue 12, items 3 and 4; lease.c I8).
--
-- Roles are cluster-wide: all are created and dropped here.
--
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;
CREATE EXTENSION pageinspect;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

CREATE ROLE regress_le_victim;
CREATE ROLE regress_le_attacker;
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), wait_for_leadership(text, interval, interval, text, integer),
      leader_term(text, text), assert_leader(text, bigint, text), current_leader(text)
   TO regress_le_victim, regress_le_attacker;
GRANT USAGE ON SCHEMA leader_election TO regress_le_victim, regress_le_attacker;

SET ROLE regress_le_victim;
SELECT try_acquire_leader('billing', '1 hour', 'v1') AS victim_leads;
RESET ROLE;

--
-- The writer lock's key cannot be computed from the name: it is not the
-- unkeyed lookup3 hash (hashtextextended(name, 0)), which anyone can invert
-- to forge a colliding name.  Seen while the victim renews in an open
-- transaction (which holds the writer lock until it ends).
--
BEGIN;
SET LOCAL ROLE regress_le_victim;
SELECT try_acquire_leader('billing', '1 hour', 'v1') AS renewed;
RESET ROLE;
SELECT count(*) AS writer_locks,
       bool_or(l.classid::bigint = ((hashtextextended('billing', 0) >> 32) & 4294967295)
               AND l.objid::bigint = (hashtextextended('billing', 0) & 4294967295))
           AS key_is_the_unkeyed_hash
  FROM pg_locks AS l
 WHERE l.locktype = 'advisory' AND l.objsubid = 19525 AND l.pid = pg_backend_pid();
COMMIT;
-- The secret it is keyed with is not readable by ordinary roles.
SET ROLE regress_le_attacker;
SELECT pg_temp.try($$SELECT count(*) FROM leader_election.lock_key$$) AS read_key;
RESET ROLE;
-- Nor can it be changed, even by a superuser, while the extension is installed.
SELECT pg_temp.try($$UPDATE leader_election.lock_key SET key = leader_election.new_lock_key()$$) AS change_key;

--
-- A refused call locks nothing: the attacker's assert_leader on the
-- victim's name gets 42501 before the row is locked.  A row lock would show
-- as a new xmax on the lease's tuple (even once released).
--
CREATE FUNCTION pg_temp.billing_xmax() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(t_xmax::text, ',' ORDER BY lp)
      FROM heap_page_items(get_raw_page('leader_election.leases', 0))
     WHERE t_data IS NOT NULL
$$;
SELECT pg_temp.billing_xmax() AS xmax_before \gset
SET ROLE regress_le_attacker;
SELECT pg_temp.try($$SELECT assert_leader('billing', NULL, 'v1')$$) AS refused_fence;
SELECT pg_temp.try($$SELECT release_leader('billing', 'v1')$$) AS refused_release;
SELECT pg_temp.try($$SELECT try_acquire_leader('billing', '1 hour', 'x')$$) AS refused_try;
RESET ROLE;
SELECT pg_temp.billing_xmax() = :'xmax_before' AS no_tuple_was_locked;
SET ROLE regress_le_victim;
SELECT am_leader('billing', 'v1') AS victim_still_leads;
RESET ROLE;

-- Clean up.
TRUNCATE leader_election.leases, leader_election.history;
REVOKE ALL ON SCHEMA leader_election FROM regress_le_victim, regress_le_attacker;
REVOKE ALL ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), wait_for_leadership(text, interval, interval, text, integer),
      leader_term(text, text), assert_leader(text, bigint, text), current_leader(text)
   FROM regress_le_victim, regress_le_attacker;
DROP ROLE regress_le_victim, regress_le_attacker;
DROP EXTENSION pageinspect;
