/*
 * leader_election 1.0 -> 1.1: upgrade script.
 *
 * There is no separate 1.1 install script: CREATE EXTENSION runs the 1.0
 * script and then this one, so a fresh install and an upgraded one are the
 * same by construction (test/t/253_hostile_install.pl checks the upgrade
 * path, every test exercises it).
 *
 * Same rules as the install script: every name and operator
 * schema-qualified, no CREATE OR REPLACE, no IF NOT EXISTS, EXECUTE revoked
 * from PUBLIC on everything that reads or changes a lease.  Each section
 * names the issue it belongs to.
 */

\echo Use "ALTER EXTENSION leader_election UPDATE TO '1.1'" to load this file. \quit

-- ===================================================================
-- Issue 17: task runner under faults
--
-- tasks.runner_state shows what the runner does with each task (README,
-- "Background tasks"); alter_task changes a task in place, so changing a
-- schedule no longer means unregister + register (which could start a
-- second run of the name beside the first).
-- ===================================================================

ALTER TABLE leader_election.tasks ADD COLUMN runner_state text;
COMMENT ON COLUMN leader_election.tasks.runner_state IS
    'What the task runner does with the task: worker started, waiting for a task worker slot, waiting for a background worker, or restarting after worker failures; NULL until the runner has seen it';

CREATE FUNCTION leader_election.alter_task(name text,
                                           procedure pg_catalog.regprocedure DEFAULT NULL,
                                           run_every interval DEFAULT NULL,
                                           ttl interval DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'alter_task'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.alter_task(text, pg_catalog.regprocedure, interval, interval) IS
    'Change a task''s procedure, run_every or ttl in place (NULL keeps a value), with the checks of register_task; false if there is no such task';
REVOKE ALL ON FUNCTION leader_election.alter_task(text, pg_catalog.regprocedure, interval, interval) FROM PUBLIC;
