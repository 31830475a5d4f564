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

/*
 * The update runs while the extension is in use (test/t/061_live_upgrade.pl).
 * It first takes every lock it needs, on all of the extension's tables and
 * the view, all at once or none: an attempt that cannot get one of them
 * gives up every lock it took and the update tries again 10 ms later.  For
 * 2 seconds it does not even queue (NOWAIT), so no session notices it;
 * then each attempt queues for at most 50 ms (lock_timeout), so that it
 * also gets its turn under constant load, while sessions wait behind it
 * for no longer than that.  Waiting in the queues without a limit would
 * deadlock with sessions that take the same tables in another order (a
 * task worker reads its task, writes its run, touches the lease, then
 * updates its task), and would make every session's next call queue
 * behind the update for as long as any transaction on the tables lasts.
 * Sessions asleep in wait_for_leadership() hold no lock (src/lease.c).
 */
DO $le_lock_all$
DECLARE
    saved_lock_timeout text := pg_catalog.current_setting('lock_timeout');
    queue_from timestamptz := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) interval '2 seconds';
BEGIN
    LOOP
        BEGIN
            IF pg_catalog.clock_timestamp() OPERATOR(pg_catalog.<) queue_from THEN
                LOCK TABLE leader_election.tasks, leader_election.task_runs,
                    leader_election.leases, leader_election.history,
                    leader_election.leaders IN ACCESS EXCLUSIVE MODE NOWAIT;
            ELSE
                PERFORM pg_catalog.set_config('lock_timeout', '50ms', true);
                LOCK TABLE leader_election.tasks, leader_election.task_runs,
                    leader_election.leases, leader_election.history,
                    leader_election.leaders IN ACCESS EXCLUSIVE MODE;
            END IF;
            PERFORM pg_catalog.set_config('lock_timeout', saved_lock_timeout, true);
            RETURN;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            PERFORM pg_catalog.set_config('lock_timeout', saved_lock_timeout, true);
            PERFORM pg_catalog.pg_sleep(0.01);
        END;
    END LOOP;
END
$le_lock_all$;

-- ===================================================================
-- Issue 11: safety at the edges
-- ===================================================================

/*
 * Terms come from one counter per database (src/lease_store.c, I2 in
 * src/lease.c).  A name's terms are therefore never reused, whatever rows
 * of leases or history were deleted or truncated: only DROP EXTENSION (which
 * drops this sequence) starts terms again.  Dumped with the data, so terms
 * continue after a restore.  NO CYCLE: at the bigint limit nextval fails
 * (2200H) rather than wrap.
 */
CREATE SEQUENCE leader_election.terms AS bigint MINVALUE 1 NO CYCLE;
COMMENT ON SEQUENCE leader_election.terms IS
    'Source of lease terms: every change of leader in this database takes the next value';
REVOKE ALL ON SEQUENCE leader_election.terms FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('leader_election.terms', '');

/*
 * The server and timeline the term counter was last used on.  When a grant
 * finds itself on another (a promoted standby, a backup recovered onto a new
 * timeline, an upgraded or restored cluster), the counter first jumps to a
 * later multiple of 2^32: above every term the previous server could have
 * issued from the same counter, even commits that never reached this one.
 * first_term is where that server's era began: the jump goes to an era
 * after it, so grants that race to make the jump agree on where it lands.
 * Only the rows with the highest first_term count: the era is this
 * server's if they all name this server and timeline and the counter is
 * not below their first_term (a restore adds the dumped rows beside the one
 * CREATE EXTENSION made and sets the counter back to the dumped value:
 * another server).  Every transaction that draws the first
 * term of an era it does not see recorded inserts a row of its own (no
 * grant waits for another's), and rows of earlier eras are removed as new
 * ones are recorded.  Row-level security with no policy: only its owner
 * sees it (not pg_read_all_data).
 */
CREATE TABLE leader_election.term_era (
    system_identifier bigint NOT NULL,
    timeline          integer NOT NULL,
    first_term        bigint NOT NULL
);
COMMENT ON TABLE leader_election.term_era IS
    'The server (system identifier) and timeline that last drew from leader_election.terms, and the term its era began at (the rows with the highest first_term count); a grant elsewhere first moves the counter to a later 2^32 era';
REVOKE ALL ON TABLE leader_election.term_era FROM PUBLIC;
ALTER TABLE leader_election.term_era ENABLE ROW LEVEL SECURITY;
SELECT pg_catalog.pg_extension_config_dump('leader_election.term_era', '');

CREATE FUNCTION leader_election.server_identity(OUT system_identifier bigint, OUT timeline integer)
    AS 'MODULE_PATHNAME', 'le_server_identity'
    LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION leader_election.server_identity() IS
    'This server''s system identifier and the timeline it writes WAL on (what leader_election.term_era records)';
REVOKE ALL ON FUNCTION leader_election.server_identity() FROM PUBLIC;

/*
 * Carry 1.0's terms over: the counter starts above every term in the tables
 * and above 1.0's floor for this timeline, (timeline - 1) * 2^32.
 */
SELECT pg_catalog.setval('leader_election.terms',
           GREATEST(
               (SELECT pg_catalog.max(l.term) FROM leader_election.leases AS l),
               (SELECT pg_catalog.max(h.term) FROM leader_election.history AS h),
               ((SELECT s.timeline FROM leader_election.server_identity() AS s)::bigint OPERATOR(pg_catalog.-) 1)
                   OPERATOR(pg_catalog.*) 4294967296,
               1),
           (SELECT pg_catalog.count(*) FROM leader_election.leases) OPERATOR(pg_catalog.>) 0
           OR (SELECT pg_catalog.count(*) FROM leader_election.history) OPERATOR(pg_catalog.>) 0
           OR (SELECT s.timeline FROM leader_election.server_identity() AS s) OPERATOR(pg_catalog.>) 1);
INSERT INTO leader_election.term_era (system_identifier, timeline, first_term)
SELECT s.system_identifier, s.timeline, t.last_value
  FROM leader_election.server_identity() AS s, leader_election.terms AS t;
-- Its rows of earlier eras are deleted as new ones are recorded, also where
-- a publication publishes deletes of every table.
ALTER TABLE leader_election.term_era REPLICA IDENTITY FULL;

-- ===================================================================
-- Issue 12 (items 3 and 4, in the lease protocol): writer locks keyed by a
-- secret
-- ===================================================================

/*
 * The names' writer locks are keyed by SipHash-2-4 of the name under this
 * secret (src/lease.c), so no role that cannot read it can pick a name whose
 * writer lock collides with another role's name.  Only the extension's
 * owner reads it.  It is not dumped: CREATE EXTENSION in a restored database
 * makes a new one, and any key works as long as all backends of a database
 * share it.
 */
CREATE FUNCTION leader_election.new_lock_key()
    RETURNS bytea
    AS 'MODULE_PATHNAME', 'le_new_lock_key'
    LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION leader_election.new_lock_key() IS
    'A new random key for leader_election.lock_key (32 bytes from the server''s strong random source)';
REVOKE ALL ON FUNCTION leader_election.new_lock_key() FROM PUBLIC;

CREATE TABLE leader_election.lock_key (
    key bytea NOT NULL
);
COMMENT ON TABLE leader_election.lock_key IS
    'One row: the secret key of the names'' writer locks; readable only by the extension''s owner';
REVOKE ALL ON TABLE leader_election.lock_key FROM PUBLIC;
-- Row-level security with no policy: not even pg_read_all_data reads it.
ALTER TABLE leader_election.lock_key ENABLE ROW LEVEL SECURITY;
INSERT INTO leader_election.lock_key SELECT leader_election.new_lock_key();
/*
 * Backends keep the key once read: if it changed under them, two of them
 * could take different locks for one name.  So it never changes while the
 * extension is installed.
 */
CREATE FUNCTION leader_election.lock_key_is_fixed()
    RETURNS trigger
    LANGUAGE plpgsql
    AS $lock_key_is_fixed$
BEGIN
    RAISE EXCEPTION 'leader_election.lock_key cannot be changed'
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'Every session keeps the key it read; a new key would give two sessions different writer locks for one name.';
END
$lock_key_is_fixed$;
COMMENT ON FUNCTION leader_election.lock_key_is_fixed() IS
    'Trigger: refuses every change of leader_election.lock_key';
REVOKE ALL ON FUNCTION leader_election.lock_key_is_fixed() FROM PUBLIC;
CREATE TRIGGER lock_key_is_fixed
    BEFORE UPDATE OR DELETE OR TRUNCATE ON leader_election.lock_key
    FOR EACH STATEMENT EXECUTE FUNCTION leader_election.lock_key_is_fixed();
ALTER TABLE leader_election.lock_key ENABLE ALWAYS TRIGGER lock_key_is_fixed;

-- ===================================================================
-- Issue 12: security
--
-- What a role with the README's grants (EXECUTE on the API, USAGE on the
-- schema) can and cannot do to other roles: README, "Threat model".
-- ===================================================================

/*
 * Refuse a target schema in which a role other than a superuser or the
 * database owner may create objects.  Such a role could add an overload of
 * an API function that an ordinary call prefers (untyped literals pick
 * text over interval) and run its code as whoever calls it.  The 1.0
 * script checks only the schema's owner; schema public of a database made
 * before PostgreSQL 15 lets PUBLIC create.  Here, because CREATE EXTENSION
 * runs this script after the 1.0 one, the check guards fresh installs and
 * updates alike, and its error aborts either.  The schema is the
 * extension's, read from pg_extension: current_schema() is not it during
 * ALTER EXTENSION UPDATE with a hostile search_path.
 */
DO $le_check_api_schema$
DECLARE
    api_schema name;
    creators text;
BEGIN
    SELECT n.nspname,
           pg_catalog.string_agg(DISTINCT
               CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname) END, ', ')
      INTO api_schema, creators
      FROM pg_catalog.pg_extension AS e
      JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
      JOIN pg_catalog.pg_database AS d
        ON d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
     CROSS JOIN LATERAL pg_catalog.aclexplode(
               COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) AS a
      LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE e.extname OPERATOR(pg_catalog.=) 'leader_election'
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND a.grantee OPERATOR(pg_catalog.<>) d.datdba
       AND a.grantee OPERATOR(pg_catalog.<>)
           'pg_database_owner'::pg_catalog.regrole::pg_catalog.oid
       AND NOT COALESCE(r.rolsuper, false)
     GROUP BY n.nspname;
    IF creators IS NOT NULL THEN
        RAISE EXCEPTION 'leader_election must not be installed into schema "%"', api_schema
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Roles other than superusers and the database owner may create objects in it (%s), and so could shadow the extension''s functions.', creators),
                  HINT = pg_catalog.format('REVOKE CREATE ON SCHEMA %s FROM %s; or install into a schema only trusted roles may create in.',
                                           pg_catalog.quote_ident(api_schema), creators);
    END IF;
END
$le_check_api_schema$;

/*
 * The leaders view filters rows by role: a function in a caller's WHERE
 * clause must not see the other rows first.  (history, tasks and task_runs
 * filter with row-level security, which already keeps such functions
 * behind the policy.)
 */
ALTER VIEW leader_election.leaders SET (security_barrier = true);

/*
 * Leases: members of pg_read_all_data (or roles granted SELECT) see only the
 * names of roles they are members of, as in the view.  The extension reads
 * the table through its index and writes it as the table owner, whom the
 * policy does not bind; superusers are not bound either.
 */
ALTER TABLE leader_election.leases ENABLE ROW LEVEL SECURITY;
CREATE POLICY leases_visible_to_owner ON leader_election.leases
    FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));

/*
 * Registered tasks survive pg_dump and restore, as leases do: the table and
 * its id sequence are configuration.  The owner becomes a regrole so a dump
 * names the role instead of an OID, which in the restored cluster may
 * belong to another role (oid and regrole are binary compatible: no
 * rewrite, and the task runner reads the same values).  Runs are history
 * and are not dumped.
 */
DROP POLICY tasks_visible_to_owner ON leader_election.tasks;
ALTER TABLE leader_election.tasks ALTER COLUMN owner TYPE pg_catalog.regrole;
CREATE POLICY tasks_visible_to_owner ON leader_election.tasks
    FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));
SELECT pg_catalog.pg_extension_config_dump('leader_election.tasks', '');
SELECT pg_catalog.pg_extension_config_dump('leader_election.tasks_id_seq', '');

/*
 * The administrator's functions for names: take a name back from a role
 * that squats it, hand it to another role, or reserve it before anyone
 * uses it.  SECURITY DEFINER, owned by the installing superuser: EXECUTE
 * is revoked from PUBLIC, so superusers may call them, and so may a role
 * the administrator grants EXECUTE to (README, "Security and GRANTs").
 * Each row is locked before it changes; admin_change_begin (name_admin.c)
 * checks the name, refuses read-only transactions and wakes waiters at
 * commit.  (Forgetting a name, deleting its row, needs terms that are never
 * reused once a row is gone: with terms counted per row, the next
 * acquisition would issue term 1 again.)
 */
CREATE FUNCTION leader_election.admin_change_begin(name text)
    RETURNS text
    AS 'MODULE_PATHNAME', 'le_admin_change_begin'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.admin_change_begin(text) IS
    'For the name administration functions: check the name, refuse read-only transactions, wake waiters on the name at commit; returns the name';
REVOKE ALL ON FUNCTION leader_election.admin_change_begin(text) FROM PUBLIC;

CREATE FUNCTION leader_election.admin_note_released(name text, holder text, term bigint)
    RETURNS void
    AS 'MODULE_PATHNAME', 'le_admin_note_released'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.admin_note_released(text, text, bigint) IS
    'For the name administration functions: send the released event of the term just ended, as every change of leader sends its event; needs the name''s writer lock';
REVOKE ALL ON FUNCTION leader_election.admin_note_released(text, text, bigint) FROM PUBLIC;

CREATE FUNCTION leader_election.admin_lock_owner(owner pg_catalog.regrole)
    RETURNS void
    AS 'MODULE_PATHNAME', 'le_admin_lock_owner'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.admin_lock_owner(pg_catalog.regrole) IS
    'For the name administration functions: lock the role a name is given to, as DROP ROLE does, so that a drop in progress sees the name; 42704 if it was dropped';
REVOKE ALL ON FUNCTION leader_election.admin_lock_owner(pg_catalog.regrole) FROM PUBLIC;

-- End the current lease of a locked row, as release_leader() would.
-- The name administration functions below keep no variable of the table's
-- row type: PL/pgSQL resolves such a type when it compiles the function,
-- before the function's statements run, and a compilation that waited
-- behind a DROP EXTENSION then failed with an internal error (XX000).
-- Without one, the first statement, admin_change_begin, is what waits,
-- and it reports the DROP with 55000.
CREATE FUNCTION leader_election.admin_end_lease(lease_name text, lease_holder text, lease_term bigint)
    RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    SET standard_conforming_strings = on
    AS $le_admin_end_lease$
DECLARE
    ended timestamptz := pg_catalog.clock_timestamp();
BEGIN
    UPDATE leader_election.history AS h
       SET ended_at = ended, end_reason = 'released'
     WHERE h.name OPERATOR(pg_catalog.=) lease_name
       AND h.term OPERATOR(pg_catalog.=) lease_term
       AND h.ended_at IS NULL;
    UPDATE leader_election.leases AS l
       SET holder = NULL, expires_at = ended, session_pid = NULL, session_start = NULL
     WHERE l.name OPERATOR(pg_catalog.=) lease_name;
    PERFORM leader_election.admin_note_released(lease_name, lease_holder, lease_term);
END
$le_admin_end_lease$;
COMMENT ON FUNCTION leader_election.admin_end_lease(text, text, bigint) IS
    'For the name administration functions: end the lease of this (locked) row as a release does';
REVOKE ALL ON FUNCTION leader_election.admin_end_lease(text, text, bigint) FROM PUBLIC;

CREATE FUNCTION leader_election.assign_name(name text, owner pg_catalog.regrole)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET standard_conforming_strings = on
    AS $le_assign_name$
DECLARE
    lease_name text := leader_election.admin_change_begin(name);
    new_owner pg_catalog.regrole := owner;
    lease_owner pg_catalog.oid;
    lease_holder text;
    lease_term bigint;
BEGIN
    IF new_owner IS NULL THEN
        RAISE EXCEPTION 'owner must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM leader_election.admin_lock_owner(new_owner);
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                    WHERE r.oid OPERATOR(pg_catalog.=) new_owner) THEN
        RAISE EXCEPTION 'role with OID % does not exist', new_owner::pg_catalog.oid
            USING ERRCODE = 'undefined_object';
    END IF;
    -- A reserved name has no holder and term 0: the first acquisition takes
    -- it over like a released lease.
    INSERT INTO leader_election.leases AS l (name, owner, term)
    VALUES (lease_name, new_owner, 0)
    ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT l.owner, l.holder, l.term INTO lease_owner, lease_holder, lease_term
      FROM leader_election.leases AS l
     WHERE l.name OPERATOR(pg_catalog.=) lease_name FOR UPDATE;
    IF lease_owner OPERATOR(pg_catalog.=) new_owner::pg_catalog.oid THEN
        RETURN false;
    END IF;
    IF lease_holder IS NOT NULL THEN
        PERFORM leader_election.admin_end_lease(lease_name, lease_holder, lease_term);
    END IF;
    UPDATE leader_election.leases AS l SET owner = new_owner
     WHERE l.name OPERATOR(pg_catalog.=) lease_name;
    RETURN true;
END
$le_assign_name$;
COMMENT ON FUNCTION leader_election.assign_name(text, pg_catalog.regrole) IS
    'Administrators: give the name to a role; reserves an unused name, or transfers a used one, ending its current lease; false if the role already owns it';
REVOKE ALL ON FUNCTION leader_election.assign_name(text, pg_catalog.regrole) FROM PUBLIC;

CREATE FUNCTION leader_election.release_name(name text)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET standard_conforming_strings = on
    AS $le_release_name$
DECLARE
    lease_name text := leader_election.admin_change_begin(name);
    lease_holder text;
    lease_term bigint;
BEGIN
    SELECT l.holder, l.term INTO lease_holder, lease_term
      FROM leader_election.leases AS l
     WHERE l.name OPERATOR(pg_catalog.=) lease_name FOR UPDATE;
    IF NOT FOUND OR lease_holder IS NULL THEN
        RETURN false;
    END IF;
    PERFORM leader_election.admin_end_lease(lease_name, lease_holder, lease_term);
    RETURN true;
END
$le_release_name$;
COMMENT ON FUNCTION leader_election.release_name(text) IS
    'Administrators: end the current lease of the name, whoever holds it (the owner and the term stay); false if nobody held it';
REVOKE ALL ON FUNCTION leader_election.release_name(text) FROM PUBLIC;

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

-- ===================================================================
-- Issue 15: leader info, hand-over, moving a leader, priorities
--
-- README, "API reference" and "Hand-over, moving a leader, priorities".
-- Functions whose arguments or result columns change (release_leader,
-- wait_for_leadership, current_leader) are renamed out of the way, created
-- anew, given the EXECUTE grants the old ones had, and then dropped: a
-- function's signature cannot be changed in place.
-- ===================================================================

/*
 * What the leader of a term published (set_leader_info).  One row per name;
 * it belongs to the term `term` (begun at acquired_at) only: once the lease
 * has another term or no holder, the row is stale and nothing shows it
 * (current_leader and the leaders view join on the lease's current term and
 * its start, so a term number used again after the term counter was moved
 * back does not bring old info back).  So any change of holder clears the
 * info without a write.  Row-level security with no policy:
 * only the table owner reads it; everyone else sees a name's info through
 * current_leader and the view, with their checks.
 */
CREATE TABLE leader_election.leader_info (
    name       text COLLATE "C" NOT NULL,
    term       bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    info       jsonb NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT leader_info_pkey PRIMARY KEY (name)
);
COMMENT ON TABLE leader_election.leader_info IS
    'The document the holder of term "term" of a name published with set_leader_info; stale (shown nowhere) once the lease has another term or no holder';
REVOKE ALL ON TABLE leader_election.leader_info FROM PUBLIC;
ALTER TABLE leader_election.leader_info ENABLE ROW LEVEL SECURITY;

/*
 * Reservations made by a hand-over (release_leader with a successor) or a
 * move (move_leader): while the lease still has the ended term `term`, no
 * holder, the expiry ended_at the end gave it, and reserved_until has not
 * passed, only `successor` may take it, or, without a successor (a move),
 * anyone but `previous_holder`.  A later term makes the row stale.  Not
 * dumped: it lasts one ttl.
 */
CREATE TABLE leader_election.handovers (
    name            text COLLATE "C" NOT NULL,
    term            bigint NOT NULL,
    previous_holder text COLLATE "C" NOT NULL,
    ended_at        timestamptz NOT NULL,
    successor       text COLLATE "C",
    reason          text NOT NULL,
    reserved_until  timestamptz NOT NULL,
    CONSTRAINT handovers_pkey PRIMARY KEY (name),
    CONSTRAINT handovers_reason CHECK
        (reason OPERATOR(pg_catalog.=) ANY (ARRAY['handed_over', 'moved']::pg_catalog.text[]))
);
COMMENT ON TABLE leader_election.handovers IS
    'Hand-overs and moves: while the lease is still in the ended term, without holder, before reserved_until, only successor may take it (without successor: anyone but previous_holder)';
REVOKE ALL ON TABLE leader_election.handovers FROM PUBLIC;
ALTER TABLE leader_election.handovers ENABLE ROW LEVEL SECURITY;

-- A term ended by move_leader says so in history.
ALTER TABLE leader_election.history DROP CONSTRAINT history_end_reason;
ALTER TABLE leader_election.history ADD CONSTRAINT history_end_reason CHECK
    (end_reason OPERATOR(pg_catalog.=) ANY (ARRAY['released', 'expired', 'session_ended', 'moved']::pg_catalog.text[]));
COMMENT ON TABLE leader_election.history IS
    'One row per term: who held it, when it began and how it ended (released, expired, session_ended, moved); ended_at is NULL while the term is current or until the next takeover notices its end';
-- Every history row is updated exactly once, when its term ends, and grows
-- then (ended_at, end_reason): half of each page is kept free for that
-- update, so it is HOT, stays on the row's page and adds no index entry.
-- When a holder of many names goes, its rows share a few pages and end
-- together; with full pages their new versions went wherever the free
-- space map pointed, each such page logged whole after a checkpoint.
ALTER TABLE leader_election.history SET (fillfactor = 50);

CREATE FUNCTION @extschema@.set_leader_info(name text, info jsonb, holder text DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'set_leader_info'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.set_leader_info(text, jsonb, text) IS
    'The valid holder publishes a small JSON document (address, version, ...) shown by current_leader and leader_election.leaders until the holder changes; NULL clears it; false if the caller does not validly hold the lease';
REVOKE ALL ON FUNCTION @extschema@.set_leader_info(text, jsonb, text) FROM PUBLIC;

CREATE FUNCTION leader_election.move_leader(name text, successor text DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'move_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.move_leader(text, text) IS
    'The name''s owner (or a superuser) ends the current holder''s term (end reason moved) and reserves the lease for one ttl: for successor, or without one for anyone but the moved holder; false if nobody holds it';
REVOKE ALL ON FUNCTION leader_election.move_leader(text, text) FROM PUBLIC;

ALTER FUNCTION @extschema@.release_leader(text, text)
    RENAME TO le_1_0_release_leader;
CREATE FUNCTION @extschema@.release_leader(name text, holder text DEFAULT NULL,
                                          successor text DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'release_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.release_leader(text, text, text) IS
    'Give up the caller''s lease (valid or not), keeping the row and its term; with a successor, reserve it for that holder for one ttl; true if something was released';
REVOKE ALL ON FUNCTION @extschema@.release_leader(text, text, text) FROM PUBLIC;

ALTER FUNCTION @extschema@.wait_for_leadership(text, interval, interval, text)
    RENAME TO le_1_0_wait_for_leadership;
CREATE FUNCTION @extschema@.wait_for_leadership(name text, ttl interval,
                                               timeout interval DEFAULT NULL,
                                               holder text DEFAULT NULL,
                                               priority integer DEFAULT 0)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'wait_for_leadership'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.wait_for_leadership(text, interval, interval, text, integer) IS
    'Block until the lease is acquired (true) or the timeout passes (false); wakes the moment the lease frees up; among waiters the highest priority, then the longest waiting, wins';
REVOKE ALL ON FUNCTION @extschema@.wait_for_leadership(text, interval, interval, text, integer) FROM PUBLIC;

ALTER FUNCTION @extschema@.current_leader(text)
    RENAME TO le_1_0_current_leader;
CREATE FUNCTION @extschema@.current_leader(name text)
    RETURNS TABLE (holder text, term bigint, acquired_at timestamptz,
                   renewed_at timestamptz, expires_at timestamptz,
                   session_bound boolean, pid integer, role name,
                   application_name text, client_addr inet, info jsonb)
    AS 'MODULE_PATHNAME', 'current_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;
COMMENT ON FUNCTION @extschema@.current_leader(text) IS
    'Who validly holds the lease now, and what it published (info); no row if nobody does';
REVOKE ALL ON FUNCTION @extschema@.current_leader(text) FROM PUBLIC;

/*
 * The new functions get the EXECUTE grants of the ones they replace (roles
 * the administrator granted them to keep working after the update), then
 * the old ones go.  A role's own objects that depend on an old function
 * (a SQL-standard function body calling it) make the DROP, and so the
 * update, fail with a message naming them.
 */
DO $le_carry_grants$
DECLARE
    ext_schema oid;
    old_fn record;
    new_fn pg_catalog.regprocedure;
    grantee text;
BEGIN
    SELECT e.extnamespace INTO ext_schema
      FROM pg_catalog.pg_extension AS e
     WHERE e.extname OPERATOR(pg_catalog.=) 'leader_election';
    FOR old_fn IN
        SELECT p.oid, p.proacl, p.proowner,
               pg_catalog.substr(p.proname, 8) AS new_name
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) ext_schema
           AND p.proname OPERATOR(pg_catalog.=) ANY
               (ARRAY['le_1_0_release_leader', 'le_1_0_wait_for_leadership',
                      'le_1_0_current_leader']::pg_catalog.name[])
    LOOP
        SELECT p.oid::pg_catalog.regprocedure INTO new_fn
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) ext_schema
           AND p.proname OPERATOR(pg_catalog.=) old_fn.new_name;
        FOR grantee IN
            SELECT DISTINCT pg_catalog.quote_ident(r.rolname)
              FROM pg_catalog.aclexplode(old_fn.proacl) AS a
              JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) old_fn.proowner
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s',
                                      new_fn::pg_catalog.text, grantee);
        END LOOP;
        EXECUTE pg_catalog.format('DROP FUNCTION %s',
                                  old_fn.oid::pg_catalog.regprocedure::pg_catalog.text);
    END LOOP;
END
$le_carry_grants$;

/*
 * The leaders view gains info (its last column, so SELECTs naming columns
 * keep working).  Dropped and created again with the 1.1 settings above.
 */
DROP VIEW leader_election.leaders;
CREATE VIEW leader_election.leaders WITH (security_barrier = true) AS
SELECT l.name,
       l.holder,
       l.term,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       v.valid,
       (l.session_pid IS NOT NULL) AS session_bound,
       l.holder_pid,
       l.holder_role,
       l.application_name,
       l.client_addr,
       CASE WHEN v.valid
            THEN pg_catalog.date_part('epoch', l.expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
       END AS seconds_left,
       leader_election.waiting_candidates(l.name) AS waiting_candidates,
       l.owner,
       i.info
  FROM leader_election.leases AS l
 CROSS JOIN LATERAL (SELECT leader_election.lease_is_valid(l.holder, l.expires_at,
                                                          l.session_pid, l.session_start) AS valid) AS v
  LEFT JOIN leader_election.leader_info AS i
         ON i.name OPERATOR(pg_catalog.=) l.name
        AND i.term OPERATOR(pg_catalog.=) l.term
        AND i.acquired_at OPERATOR(pg_catalog.=) l.acquired_at
        AND l.holder IS NOT NULL
 WHERE pg_catalog.pg_has_role(l.owner, 'USAGE');
COMMENT ON VIEW leader_election.leaders IS
    'One row per lease name owned by the caller''s roles: holder, term, times, validity now, who holds it, seconds left, waiting candidates, what the holder published (info)';
GRANT SELECT ON leader_election.leaders TO PUBLIC;

-- ===================================================================
-- Issue 15: counters (leader_election.stats)
--
-- Counters per database since the last reset, kept in shared memory
-- (src/stats.c says what is counted and when).  Without
-- shared_preload_libraries nothing is counted and the view is empty.
-- Readable by superusers and pg_monitor (the counters sum every role's
-- names, so they are not for PUBLIC); stats_reset() by superusers and roles
-- granted EXECUTE on it.
-- ===================================================================

CREATE FUNCTION leader_election.stats_read(
        OUT datid pg_catalog.oid,
        OUT grants bigint, OUT renewals bigint, OUT releases bigint,
        OUT takeovers_expired bigint, OUT takeovers_session_ended bigint,
        OUT moves bigint, OUT losing_tries bigint, OUT fence_rejections bigint,
        OUT waits bigint, OUT wakeups bigint,
        OUT stats_reset timestamptz)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'le_stats_read'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.stats_read() IS
    'The counters of every existing database that counted something since the server started or the database was created (the view leader_election.stats)';
REVOKE ALL ON FUNCTION leader_election.stats_read() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION leader_election.stats_read() TO pg_monitor;

CREATE VIEW leader_election.stats WITH (security_barrier) AS
    SELECT s.datid, d.datname, s.grants, s.renewals, s.releases,
           s.takeovers_expired, s.takeovers_session_ended, s.moves,
           s.losing_tries, s.fence_rejections, s.waits, s.wakeups,
           s.stats_reset
      FROM leader_election.stats_read() AS s
      LEFT JOIN pg_catalog.pg_database AS d
        ON d.oid OPERATOR(pg_catalog.=) s.datid;
COMMENT ON VIEW leader_election.stats IS
    'Counters of leader election per database since the last reset (outcomes counted at commit, events when they happen); empty without shared_preload_libraries';
REVOKE ALL ON leader_election.stats FROM PUBLIC;
GRANT SELECT ON leader_election.stats TO pg_monitor;

CREATE FUNCTION leader_election.stats_reset()
    RETURNS void
    AS 'MODULE_PATHNAME', 'le_stats_reset'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.stats_reset() IS
    'Zero the current database''s counters in leader_election.stats';
REVOKE ALL ON FUNCTION leader_election.stats_reset() FROM PUBLIC;

-- ===================================================================
-- Issue 16: release 1.1
-- ===================================================================

/*
 * tasks.procedure becomes the procedure's signature as text, its schema
 * and argument types qualified (app.rollup(bigint)); register_task and
 * alter_task still take a regprocedure.  pg_upgrade refuses any table with
 * a regprocedure column (it does not keep the OIDs of functions), so a
 * database with 1.0's column could not be upgraded to a new major.  The
 * conversion writes each signature as register_task does (schema and name
 * quoted, the argument types as format_type prints them); a procedure
 * dropped since keeps its OID, which resolves to nothing, and its task is
 * disabled with the reason.
 */
ALTER TABLE leader_election.tasks ALTER COLUMN procedure TYPE pg_catalog.text
    USING procedure::pg_catalog.oid::pg_catalog.text;
UPDATE leader_election.tasks AS t
   SET procedure = pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.'
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(p.proname)
                   OPERATOR(pg_catalog.||) '(' OPERATOR(pg_catalog.||)
                   pg_catalog.oidvectortypes(p.proargtypes) OPERATOR(pg_catalog.||) ')'
  FROM pg_catalog.pg_proc AS p, pg_catalog.pg_namespace AS n
 WHERE p.oid OPERATOR(pg_catalog.=) t.procedure::pg_catalog.oid
   AND n.oid OPERATOR(pg_catalog.=) p.pronamespace;
COMMENT ON COLUMN leader_election.tasks.procedure IS
    'The procedure the runner CALLs: its signature, schema and argument types qualified; resolved at every scan, so renaming or dropping it disables the task';
