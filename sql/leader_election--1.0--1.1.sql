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
 * finds itself on another (a promoted standby, a restored backup, an upgraded
 * or restored cluster), the counter first jumps to the next multiple of
 * 2^32: above every term the previous server could have issued from the same
 * counter, even commits that never reached this one.
 */
CREATE TABLE leader_election.term_era (
    system_identifier bigint NOT NULL,
    timeline          integer NOT NULL
);
COMMENT ON TABLE leader_election.term_era IS
    'One row: the server (system identifier) and timeline that last drew from leader_election.terms; a grant elsewhere first moves the counter to a new 2^32 era';
REVOKE ALL ON TABLE leader_election.term_era FROM PUBLIC;
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
INSERT INTO leader_election.term_era (system_identifier, timeline)
SELECT s.system_identifier, s.timeline FROM leader_election.server_identity() AS s;
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

/*
 * leader_election.max_names_per_role counts a role's names through this
 * index instead of reading the whole table.  The renewal fast path
 * (src/lease_store.c) maintains it and the primary key, and is used only
 * while these two are the table's only indexes.
 */
CREATE INDEX leases_owner_idx ON leader_election.leases (owner);
COMMENT ON INDEX leader_election.leases_owner_idx IS
    'Names per owning role, for leader_election.max_names_per_role';

-- ===================================================================
-- Issue 12 (items 3 and 4, in the lease protocol): writer locks keyed by a
-- secret
-- ===================================================================

/*
 * The names' writer locks are keyed by HMAC-SHA256 of the name under this
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
