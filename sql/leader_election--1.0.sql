/*
 * leader_election 1.0: install script.
 *
 * Security rules followed throughout (research/anchors-reliability.md (c)):
 * - State lives in the schema leader_election, created here, so a schema of
 *   that name made beforehand by anyone makes the install fail instead of
 *   adopting it.
 * - No CREATE OR REPLACE and no IF NOT EXISTS.
 * - Every name is schema-qualified, operators too; @extschema@ never appears
 *   inside a quoted string.
 * - Ordinary roles get no rights on the tables; EXECUTE is revoked from
 *   PUBLIC on every function that reads or changes a lease.
 */

\echo Use "CREATE EXTENSION leader_election" to load this file. \quit

/*
 * Refuse to put the API into a schema an untrusted role owns: its owner could
 * add look-alike overloads there that a superuser's ordinary call would pick.
 * "$user" comes first in the default search_path, so a role that creates a
 * schema named after the installing superuser would otherwise receive it.
 * During CREATE EXTENSION, current_schema() is the target schema.
 */
DO $check_target_schema$
BEGIN
    IF NOT EXISTS (
        SELECT 1
          FROM pg_catalog.pg_namespace AS n
          JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
         WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
           AND (r.rolsuper
                OR r.rolname OPERATOR(pg_catalog.=) 'pg_database_owner'
                OR n.nspowner OPERATOR(pg_catalog.=)
                   (SELECT d.datdba FROM pg_catalog.pg_database AS d
                     WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())))
    THEN
        RAISE EXCEPTION 'leader_election must not be installed into schema "%"', pg_catalog.current_schema()
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The schema is owned by a role that is neither a superuser nor the database owner.',
                  HINT = 'Use CREATE EXTENSION leader_election SCHEMA public (or another trusted schema).';
    END IF;
END
$check_target_schema$;

CREATE SCHEMA leader_election;
COMMENT ON SCHEMA leader_election IS
    'State of the leader_election extension: leases, history, views';
-- Everyone may look inside (the views filter by role); nobody but the
-- owner may create objects here.
GRANT USAGE ON SCHEMA leader_election TO PUBLIC;

/*
 * One row per election name: the lease.  Rows are never deleted by the
 * extension (release keeps the row and its term).  Only the primary key is
 * indexed and it never changes, so every renewal is a HOT update; the low
 * fillfactor leaves room on the page for it.  Names are checked in C
 * (input.c) before they get here; a CHECK constraint would be evaluated on
 * every renewal for nothing.
 *
 * No autoanalyze: every read goes through the primary key and nothing needs
 * column statistics (autovacuum's VACUUM still keeps the row count
 * current), while an ANALYZE holds a snapshot that stops HOT pruning on
 * this small, hot table for its duration: at thousands of renewals a second
 * that is enough to push a renewal onto a second page.
 */
CREATE TABLE leader_election.leases (
    name             text COLLATE "C" NOT NULL,
    owner            pg_catalog.regrole NOT NULL,
    holder           text COLLATE "C",
    term             bigint NOT NULL,
    acquired_at      timestamptz,
    renewed_at       timestamptz,
    expires_at       timestamptz,
    session_pid      integer,
    session_start    timestamptz,
    holder_pid       integer,
    holder_role      pg_catalog.regrole,
    application_name text,
    client_addr      inet,
    CONSTRAINT leases_pkey PRIMARY KEY (name)
) WITH (fillfactor = 50, autovacuum_analyze_threshold = 2147483647);
COMMENT ON TABLE leader_election.leases IS
    'One row per lease name; written only by the extension''s functions';
REVOKE ALL ON TABLE leader_election.leases FROM PUBLIC;
-- Dumped with the database, so terms continue after a dump and restore
-- instead of starting again at 1 (roles are dumped by name, hence regrole).
SELECT pg_catalog.pg_extension_config_dump('leader_election.leases', '');

/*
 * The lease cache in shared memory (src/lease_cache.c) learns of the
 * extension's own writes directly; these triggers tell it of any other change
 * of the table (a superuser's DML, TRUNCATE, COPY, logical replication, whose
 * apply worker fires row triggers only), which empties the cache when that
 * transaction ends.  ENABLE ALWAYS: they fire under
 * session_replication_role = replica too.  A backend that finds either
 * missing or not ENABLE ALWAYS stops using the cache.
 */
CREATE FUNCTION leader_election.leases_cache_invalidate()
    RETURNS trigger
    AS 'MODULE_PATHNAME', 'le_leases_cache_invalidate'
    LANGUAGE C;
COMMENT ON FUNCTION leader_election.leases_cache_invalidate() IS
    'Trigger: a change of leader_election.leases made other than by the extension''s functions empties the lease cache at the end of its transaction';
REVOKE ALL ON FUNCTION leader_election.leases_cache_invalidate() FROM PUBLIC;
CREATE TRIGGER leases_cache_invalidate_rows
    AFTER INSERT OR UPDATE OR DELETE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION leader_election.leases_cache_invalidate();
CREATE TRIGGER leases_cache_invalidate_truncate
    AFTER TRUNCATE ON leader_election.leases
    FOR EACH STATEMENT EXECUTE FUNCTION leader_election.leases_cache_invalidate();
ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_rows;
ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_truncate;

/* One row per term, bounded by leader_election.history_max_terms per name. */
CREATE TABLE leader_election.history (
    name          text COLLATE "C" NOT NULL,
    term          bigint NOT NULL,
    holder        text COLLATE "C" NOT NULL,
    owner         pg_catalog.regrole NOT NULL,
    session_bound boolean NOT NULL,
    holder_pid    integer,
    acquired_at   timestamptz NOT NULL,
    ended_at      timestamptz,
    end_reason    text,
    CONSTRAINT history_pkey PRIMARY KEY (name, term),
    CONSTRAINT history_end_reason CHECK
        (end_reason OPERATOR(pg_catalog.=) ANY (ARRAY['released', 'expired', 'session_ended']::pg_catalog.text[]))
);
COMMENT ON TABLE leader_election.history IS
    'One row per term: who held it, when it began and how it ended (released, expired, session_ended); ended_at is NULL while the term is current or until the next takeover notices its end';
REVOKE ALL ON TABLE leader_election.history FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('leader_election.history', '');
ALTER TABLE leader_election.history ENABLE ROW LEVEL SECURITY;
CREATE POLICY history_visible_to_owner ON leader_election.history
    FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));
GRANT SELECT ON TABLE leader_election.history TO PUBLIC;

/* Functions of the state schema. */

CREATE FUNCTION leader_election.lease_is_valid(holder text, expires_at timestamptz,
                                               session_pid integer, session_start timestamptz)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'le_lease_is_valid'
    LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION leader_election.lease_is_valid(text, timestamptz, integer, timestamptz) IS
    'Whether a lease with these values is valid now: a holder, not expired, and a session-bound holder''s backend still alive';
-- Reveals only whether a given backend is alive; the leaders view needs it.
GRANT EXECUTE ON FUNCTION leader_election.lease_is_valid(text, timestamptz, integer, timestamptz) TO PUBLIC;

CREATE FUNCTION leader_election.waiting_candidates(name text)
    RETURNS integer
    AS 'MODULE_PATHNAME', 'le_waiting_candidates_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION leader_election.waiting_candidates(text) IS
    'Sessions blocked in wait_for_leadership() for this name (names sharing a wakeup slot count together); NULL unless the library is preloaded';
-- A count of sleeping backends; the leaders view needs it.
GRANT EXECUTE ON FUNCTION leader_election.waiting_candidates(text) TO PUBLIC;

/* Monitoring: one row per name the caller's roles own. */
CREATE VIEW leader_election.leaders AS
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
       l.owner
  FROM leader_election.leases AS l
 CROSS JOIN LATERAL (SELECT leader_election.lease_is_valid(l.holder, l.expires_at,
                                                          l.session_pid, l.session_start) AS valid) AS v
 WHERE pg_catalog.pg_has_role(l.owner, 'USAGE');
COMMENT ON VIEW leader_election.leaders IS
    'One row per lease name owned by the caller''s roles: holder, term, times, validity now, who holds it, seconds left, waiting candidates';
GRANT SELECT ON leader_election.leaders TO PUBLIC;

/*
 * The API, in the schema CREATE EXTENSION installs into.  None is STRICT:
 * a NULL name or ttl gets a clear error (22004) instead of a silent NULL.
 * All take locks or write, so all are VOLATILE and PARALLEL UNSAFE.
 * EXECUTE is revoked from PUBLIC: the administrator grants it to the roles
 * that take part in elections (README, "Security").
 */

CREATE FUNCTION @extschema@.try_acquire_leader(name text, ttl interval, holder text DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'try_acquire_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.try_acquire_leader(text, interval, text) IS
    'Acquire the lease (new term) if nobody validly holds it, or renew it (same term) if the caller holds it; false otherwise, without waiting';
REVOKE ALL ON FUNCTION @extschema@.try_acquire_leader(text, interval, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.am_leader(name text, holder text DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'am_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.am_leader(text, text) IS
    'Whether the caller holds a valid lease on the name now; reads only';
REVOKE ALL ON FUNCTION @extschema@.am_leader(text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.release_leader(name text, holder text DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'release_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.release_leader(text, text) IS
    'Give up the caller''s lease (valid or not), keeping the row and its term; true if something was released';
REVOKE ALL ON FUNCTION @extschema@.release_leader(text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.wait_for_leadership(name text, ttl interval,
                                               timeout interval DEFAULT NULL,
                                               holder text DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'wait_for_leadership'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.wait_for_leadership(text, interval, interval, text) IS
    'Block until the lease is acquired (true) or the timeout passes (false); wakes the moment the lease frees up';
REVOKE ALL ON FUNCTION @extschema@.wait_for_leadership(text, interval, interval, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.leader_term(name text, holder text DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'leader_term'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.leader_term(text, text) IS
    'The term of the caller''s valid lease, else NULL';
REVOKE ALL ON FUNCTION @extschema@.leader_term(text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.assert_leader(name text, term bigint DEFAULT NULL, holder text DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'assert_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.assert_leader(text, bigint, text) IS
    'Fence the current transaction: SQLSTATE LE001 unless the caller validly holds the lease (in that term); then no takeover until this transaction ends';
REVOKE ALL ON FUNCTION @extschema@.assert_leader(text, bigint, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.current_leader(name text)
    RETURNS TABLE (holder text, term bigint, acquired_at timestamptz,
                   renewed_at timestamptz, expires_at timestamptz,
                   session_bound boolean, pid integer, role name,
                   application_name text, client_addr inet)
    AS 'MODULE_PATHNAME', 'current_leader'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;
COMMENT ON FUNCTION @extschema@.current_leader(text) IS
    'Who validly holds the lease now; no row if nobody does';
REVOKE ALL ON FUNCTION @extschema@.current_leader(text) FROM PUBLIC;

-- ===================================================================
-- Task runner (src/task_runner.h; task_registry.c, task_launcher.c, task_worker.c)
--
-- Registered procedures that a background worker CALLs every run_every
-- while it holds the lease of the task's name (README, "Background
-- tasks").  Rows are written only by the functions below and by the
-- runner, with the table owner's rights; users see their own tasks and
-- runs (row-level security, as pg_cron does).
-- ===================================================================

CREATE TABLE leader_election.tasks (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    name             text COLLATE "C" NOT NULL,
    owner            oid NOT NULL,
    procedure        pg_catalog.regprocedure NOT NULL,
    run_every        interval NOT NULL,
    ttl              interval NOT NULL,
    enabled          boolean NOT NULL DEFAULT true,
    disabled_reason  text,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_started_at  timestamptz,
    last_finished_at timestamptz,
    last_status      text,
    CONSTRAINT tasks_pkey PRIMARY KEY (id),
    CONSTRAINT tasks_name_key UNIQUE (name)
);
COMMENT ON TABLE leader_election.tasks IS
    'Registered tasks: the procedure the task runner CALLs every run_every, as the owner role, while it holds the lease "name" (ttl); disabled_reason says why the runner disabled a task';
REVOKE ALL ON TABLE leader_election.tasks FROM PUBLIC;
ALTER TABLE leader_election.tasks ENABLE ROW LEVEL SECURITY;
CREATE POLICY tasks_visible_to_owner ON leader_election.tasks
    FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));
GRANT SELECT ON TABLE leader_election.tasks TO PUBLIC;

CREATE TABLE leader_election.task_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    task_id     bigint NOT NULL,
    task_name   text COLLATE "C" NOT NULL,
    owner       oid NOT NULL,
    term        bigint,
    holder      text,
    pid         integer,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    status      text NOT NULL,
    error       text,
    CONSTRAINT task_runs_pkey PRIMARY KEY (id),
    CONSTRAINT task_runs_status CHECK
        (status OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'succeeded', 'failed', 'cancelled', 'skipped']::pg_catalog.text[]))
);
CREATE INDEX task_runs_task_id_idx ON leader_election.task_runs (task_id, id);
COMMENT ON SEQUENCE leader_election.tasks_id_seq IS
    'Ids of leader_election.tasks';
COMMENT ON SEQUENCE leader_election.task_runs_id_seq IS
    'Ids of leader_election.task_runs';
COMMENT ON INDEX leader_election.task_runs_task_id_idx IS
    'Runs of one task in order: retention trims the oldest';
COMMENT ON TABLE leader_election.task_runs IS
    'One row per task run (or skipped run): the term it ran in, when, and how it ended (running, succeeded, failed, cancelled, skipped) with the error text; the newest leader_election.task_runs_max rows per task are kept';
REVOKE ALL ON TABLE leader_election.task_runs FROM PUBLIC;
ALTER TABLE leader_election.task_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY task_runs_visible_to_owner ON leader_election.task_runs
    FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));
GRANT SELECT ON TABLE leader_election.task_runs TO PUBLIC;

/*
 * Registration functions.  They act for the calling role (the task's
 * owner) and write with the table owner's rights, so they are C functions
 * rather than SECURITY DEFINER ones, which would lose the caller.  EXECUTE
 * is revoked from PUBLIC: the administrator decides who may run background
 * tasks.
 */

CREATE FUNCTION leader_election.register_task(name text, procedure pg_catalog.regprocedure,
                                              run_every interval, ttl interval)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'register_task'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.register_task(text, pg_catalog.regprocedure, interval, interval) IS
    'Register a task: CALL procedure (no arguments, or the term as one bigint) every run_every, as the calling role, while the runner holds the lease "name" with this ttl; returns the task id';
REVOKE ALL ON FUNCTION leader_election.register_task(text, pg_catalog.regprocedure, interval, interval) FROM PUBLIC;

CREATE FUNCTION leader_election.unregister_task(name text)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'unregister_task'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.unregister_task(text) IS
    'Remove a task (its runs stay in task_runs); a run in progress is cancelled; false if there was no such task';
REVOKE ALL ON FUNCTION leader_election.unregister_task(text) FROM PUBLIC;

CREATE FUNCTION leader_election.enable_task(name text)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'enable_task'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.enable_task(text) IS
    'Enable a task (also one the runner disabled, clearing disabled_reason); false if there is no such task';
REVOKE ALL ON FUNCTION leader_election.enable_task(text) FROM PUBLIC;

CREATE FUNCTION leader_election.disable_task(name text)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'disable_task'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION leader_election.disable_task(text) IS
    'Disable a task: its worker stops (cancelling a run in progress) and releases the lease; false if there is no such task';
REVOKE ALL ON FUNCTION leader_election.disable_task(text) FROM PUBLIC;
